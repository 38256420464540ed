"""GRU sentiment-style classifier with a hand-written attention pooling.

Bug: AttentionPool implements softmax as exp(s) / sum(exp(s)) without
subtracting the max, and multiplies the scores by sqrt(d) instead of
dividing. As the score layer's weights grow during training the largest
score passes ~88 and exp() overflows float32 to inf; inf / inf = NaN.
"""
import argparse
import math

import torch
import torch.nn as nn


class AttentionPool(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Linear(hidden, 1)
        self.scale = math.sqrt(hidden)

    def forward(self, h):
        s = self.score(h) * self.scale
        w = torch.exp(s)
        w = w / w.sum(dim=1, keepdim=True)
        return (w * h).sum(dim=1)


class GRUClassifier(nn.Module):
    def __init__(self, vocab=40, emb=16, hidden=64, n_classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.attn_pool = AttentionPool(hidden)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        h, _ = self.gru(self.embedding(tokens))
        return self.fc(self.attn_pool(h))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=12)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens = torch.randint(0, 40, (512, args.seq_len))
    y = ((tokens < 10).sum(dim=1) > (tokens >= 30).sum(dim=1)).long()
    model = GRUClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(tokens[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
