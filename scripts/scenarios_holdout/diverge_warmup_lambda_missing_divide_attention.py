"""Tiny hand-written self-attention regressor (basket -> mean price) with a linear-warmup LambdaLR.

Bug: the warm-up factor was meant to be `min(1.0, (step + 1) / warmup)`
but was written as `lambda step: min(warmup, step + 1)` while
"simplifying" it, so instead of ramping from 0 to 1x the base lr it
ramps from 1x to 200x the base lr (SGD, 3e-3 -> 0.36 at step 120). The
loss falls for ~65 updates while the lr is small, then, once the lr
passes the stability limit of this un-normalised model (lr ~0.2), it
turns around, climbs, and blows up to inf/NaN around update 90.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        out = att.softmax(dim=-1) @ v  # (b, h, t, dh)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class AttnRegressor(nn.Module):
    def __init__(self, vocab=40, dim=32, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(max_len, dim))
        self.attn = SelfAttention(dim)
        self.ff1 = nn.Linear(dim, 64)
        self.ff2 = nn.Linear(64, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        x = x + self.attn(x)
        x = x + self.ff2(F.gelu(self.ff1(x)))
        return self.head(x.mean(dim=1)).squeeze(-1)


def make_data(n=2048, length=16, vocab=40):
    # each token carries a hidden "price"; the target is the basket's mean price
    tokens = torch.randint(0, vocab, (n, length))
    price = torch.randn(vocab)
    y = price[tokens].mean(dim=1) * 3.0
    return tokens, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens, y = make_data()
    model = AttnRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(args.warmup, step + 1))

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        loss = F.mse_loss(model(tokens[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
