"""GRU text classifier whose Adam optimizer was created with maximize=True.

Bug: the optimizer config was copied from an RL / GAN critic setup that
maximises its objective (`maximize=True`). Adam therefore performs
gradient ascent on the cross-entropy and the loss climbs steadily.
"""
import argparse

import torch
import torch.nn as nn


class GRUTagger(nn.Module):
    def __init__(self, vocab=40, emb=16, hidden=32, n_classes=3):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        _, h = self.gru(self.embedding(tokens))
        return self.out(h[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens = torch.randint(0, 40, (512, args.seq_len))
    y = torch.bucketize(tokens.float().mean(dim=1), torch.tensor([18.0, 21.0]))
    model = GRUTagger()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, maximize=True)
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
