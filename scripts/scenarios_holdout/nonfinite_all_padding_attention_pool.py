"""Review classifier: embeddings -> hand-written masked attention pooling -> MLP.

Bug: padding positions are masked with `scores.masked_fill(pad, -inf)`
before the softmax. That is fine as long as every review has at least one
token, but the scraped data contains a few empty reviews (length 0, all
padding). For such a row every score is -inf, softmax gives 0/0 = NaN, the
AttentionPool module outputs NaN for that sample, and the NaN loss and
gradients wreck every weight at the first batch that contains an empty
review.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class AttentionPool(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.query = nn.Parameter(torch.randn(dim) / dim ** 0.5)
        self.key = nn.Linear(dim, dim)

    def forward(self, h, pad_mask):
        scores = self.key(h) @ self.query / h.shape[-1] ** 0.5  # (B, T)
        scores = scores.masked_fill(pad_mask, float("-inf"))
        weights = torch.softmax(scores, dim=1)
        return (weights.unsqueeze(-1) * h).sum(dim=1)


class ReviewClassifier(nn.Module):
    def __init__(self, vocab=500, dim=32, n_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pool = AttentionPool(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, n_classes))

    def forward(self, tokens):
        return self.mlp(self.pool(self.embed(tokens), tokens == PAD))


def make_reviews(n=3000, max_len=24, vocab=500):
    lengths = torch.randint(3, max_len + 1, (n,))
    lengths[torch.rand(n) < 0.002] = 0  # empty reviews from the scraper
    y = torch.randint(0, 2, (n,))
    tokens = torch.randint(10, vocab, (n, max_len))
    sentiment_words = torch.where(y[:, None] == 1, torch.randint(1, 5, (n, max_len)), torch.randint(5, 10, (n, max_len)))
    use = torch.rand(n, max_len) < 0.3
    tokens = torch.where(use, sentiment_words, tokens)
    positions = torch.arange(max_len)[None, :]
    tokens[positions >= lengths[:, None]] = PAD
    return tokens, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens, y = make_reviews()
    model = ReviewClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    order = torch.randperm(tokens.shape[0])

    for step in range(args.steps):
        idx = order[(step * args.batch_size) % tokens.shape[0]:][:args.batch_size]
        loss = F.cross_entropy(model(tokens[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
