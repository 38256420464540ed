"""Temporal convolutional network in the layout of locuslab/TCN (the adding problem): residual TemporalBlocks of
two dilated causal Conv1d layers, each wrapped in weight normalisation (here the parametrization API,
torch.nn.utils.parametrizations.weight_norm: the conv's weight is computed from
`parametrizations.weight.original0` (the per-channel gain g) and `original1` (the direction v)), chomped to stay
causal, ReLU and dropout, a 1x1 downsample conv on the skip path when the widths differ, dilation doubling per
level; a Linear head on the last time step. MSE loss, Adam lr 4e-3, gradient clipping at 1.0 (its --clip option),
500 steps of batch 32.

Data: the adding problem made in code: a sequence of 40 steps with two channels, random values in [0, 1] and
a marker channel with exactly two ones; the target is the sum of the two marked values. Predicting the mean
gives MSE ~0.167; the TCN learns to find the markers and the loss falls well below it. Seeded."""
import argparse

import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, : -self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super().__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)
        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        with torch.no_grad():
            self.conv1.parametrizations.weight.original1.normal_(0, 0.01)
            self.conv2.parametrizations.weight.original1.normal_(0, 0.01)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.2):
        super().__init__()
        layers = []
        for i, out_ch in enumerate(num_channels):
            d = 2 ** i
            in_ch = num_inputs if i == 0 else num_channels[i - 1]
            layers.append(TemporalBlock(in_ch, out_ch, kernel_size, stride=1, dilation=d,
                                        padding=(kernel_size - 1) * d, dropout=dropout))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class TCN(nn.Module):
    def __init__(self, input_size, output_size, num_channels, kernel_size, dropout):
        super().__init__()
        self.tcn = TemporalConvNet(input_size, num_channels, kernel_size=kernel_size, dropout=dropout)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        return self.linear(self.tcn(x)[:, :, -1])


def data_generator(n, seq_len, g):
    values = torch.rand(n, 1, seq_len, generator=g)
    markers = torch.zeros(n, 1, seq_len)
    for i in range(n):
        pos = torch.randperm(seq_len, generator=g)[:2]
        markers[i, 0, pos] = 1
    x = torch.cat((values, markers), dim=1)
    y = (values * markers).sum(dim=(1, 2)).unsqueeze(1)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=40)
    ap.add_argument("--clip", type=float, default=1.0)
    args = ap.parse_args()
    torch.manual_seed(1111)
    g = torch.Generator().manual_seed(1)
    x_train, y_train = data_generator(4000, args.seq_len, g)
    x_test, y_test = data_generator(500, args.seq_len, g)
    model = TCN(2, 1, [24] * 5, kernel_size=3, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        model.train()
        idx = torch.randint(0, x_train.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x_train[idx]), y_train[idx])
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        if step % 25 == 0 or step == args.steps - 1:
            model.eval()
            with torch.no_grad():
                test_loss = nn.functional.mse_loss(model(x_test), y_test).item()
            print(f"step {step}: train loss {loss.item():.4f} test loss {test_loss:.4f}")


if __name__ == "__main__":
    main()
