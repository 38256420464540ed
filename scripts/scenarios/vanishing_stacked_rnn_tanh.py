"""Sequence classifier: 5 stacked tanh RNN layers over long sequences.

Bug: small uniform init of every recurrent layer (a "stability" tweak)
plus tanh and 50 time steps -> gradient reaching the lower layers and
the input embedding is several orders of magnitude smaller than at the top.
"""
import argparse

import torch
import torch.nn as nn


class StackedRNNClassifier(nn.Module):
    def __init__(self, in_dim, hidden, n_layers, n_classes):
        super().__init__()
        self.embed = nn.Linear(in_dim, hidden)
        self.rnns = nn.ModuleList(
            [nn.RNN(hidden, hidden, nonlinearity="tanh", batch_first=True) for _ in range(n_layers)]
        )
        self.classifier = nn.Linear(hidden, n_classes)
        for rnn in self.rnns:
            for name, p in rnn.named_parameters():
                if "weight" in name:
                    nn.init.uniform_(p, -0.05, 0.05)

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        for rnn in self.rnns:
            h, _ = rnn(h)
        return self.classifier(h[:, -1])


def make_data(n, seq_len, in_dim):
    x = torch.randn(n, seq_len, in_dim) * 0.5
    # the label depends on the very first time steps only
    y = (x[:, :5, 0].sum(dim=1) > 0).long()
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(256, args.seq_len, 8)
    model = StackedRNNClassifier(8, 24, 5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
