"""Control: encoder and decoder trained by two separate optimizers (different LRs).

Both optimizers zero their grads, share one backward pass and step every
iteration; every parameter is covered by exactly one optimizer.
"""
import argparse

import torch
import torch.nn as nn


class EncoderDecoder(nn.Module):
    def __init__(self, in_dim=16, latent=8, out_dim=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Linear(64, out_dim))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--enc-lr", type=float, default=1e-3)
    parser.add_argument("--dec-lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    y = torch.tanh(x @ torch.randn(16, 4) / 2.0)
    model = EncoderDecoder()
    enc_opt = torch.optim.Adam(model.encoder.parameters(), lr=args.enc_lr)
    dec_opt = torch.optim.SGD(model.decoder.parameters(), lr=args.dec_lr * 10, momentum=0.9)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        enc_opt.zero_grad()
        dec_opt.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        enc_opt.step()
        dec_opt.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
