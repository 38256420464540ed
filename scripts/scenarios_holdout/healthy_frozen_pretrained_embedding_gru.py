"""Control: GRU sentiment classifier on top of a FROZEN pretrained embedding table.

The embedding is loaded from (synthetic) pretrained vectors with
nn.Embedding.from_pretrained(..., freeze=True), so its weight has
requires_grad=False and never changes - on purpose. The optimizer only
receives the trainable parameters. The GRU and head train normally and
the loss falls steadily.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FrozenEmbGRU(nn.Module):
    def __init__(self, vectors, hidden=32, n_classes=2):
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
        self.gru = nn.GRU(vectors.shape[1], hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        _, h = self.gru(self.embedding(tokens))
        return self.head(h[-1])


def make_vectors_and_data(vocab=300, dim=24, n=2000, length=12):
    vectors = 0.5 * torch.randn(vocab, dim)
    polarity = torch.zeros(vocab)
    polarity[1:31] = 1.0   # positive words
    polarity[31:61] = -1.0  # negative words
    vectors[:, 0] += 2.0 * polarity  # the pretrained space encodes sentiment
    vectors[0] = 0.0
    tokens = torch.randint(61, vocab, (n, length))
    y = torch.randint(0, 2, (n,))
    k = 3
    pos = torch.rand(n, length).argsort(dim=1)[:, :k]
    words = torch.where(y[:, None] == 1, torch.randint(1, 31, (n, k)), torch.randint(31, 61, (n, k)))
    tokens.scatter_(1, pos, words)
    return vectors, tokens, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    vectors, tokens, y = make_vectors_and_data()
    model = FrozenEmbGRU(vectors)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        loss = F.cross_entropy(model(tokens[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
