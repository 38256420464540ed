"""Character-level style sequence regressor with a ReLU RNN.

Bug: the recurrent matrix is initialised as 1.08 x identity (an "IRNN"
init with the wrong scale: it must be <= 1). With ReLU, positive inputs
and 40 time steps the hidden state and the backpropagated gradients grow
geometrically, so the RNN's gradient norm is ~1e4 at the first step and
~1e18 at the second; the loss jumps to 1e16 and never recovers.
"""
import argparse

import torch
import torch.nn as nn


class IRNNRegressor(nn.Module):
    def __init__(self, in_dim=4, hidden=32):
        super().__init__()
        self.rnn = nn.RNN(in_dim, hidden, nonlinearity="relu", batch_first=True)
        self.readout = nn.Linear(hidden, 1)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(1.08 * torch.eye(hidden))
            self.rnn.bias_hh_l0.zero_()

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.readout(out[:, -1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=40)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.rand(256, args.seq_len, 4)
    y = x[:, :, 0].mean(dim=1, keepdim=True)
    model = IRNNRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()
