"""Broken Post-LN transformer (no warm-up): a 12-layer nn.TransformerEncoder with PyTorch's default
norm_first=False (Post-LN, as in the original Transformer and BERT), trained with AdamW at lr 5e-3 from the
first step. Post-LN puts the LayerNorm after the residual sum, so at initialisation the gradients near the
output are large and the first full-size Adam updates wreck the stack: the loss stays at chance (ln 16 = 2.77)
for the whole run. The known remedies are a learning-rate warm-up or Pre-LN (norm_first=True); the twin
transformer_postln_warmup_healthy.py is this script with a 30-step linear warm-up (and linear decay).

Task, made in code: sequences of 16 tokens over a vocabulary of 16, half of the positions hold one planted
token; predict it (mean-pooled encoder output -> linear head)."""
import argparse
import math

import torch
import torch.nn as nn

V, T, D = 16, 16, 64


class Net(nn.Module):
    def __init__(self, layers, norm_first):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        layer = nn.TransformerEncoderLayer(D, 4, 128, dropout=0.0, batch_first=True, norm_first=norm_first)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h = self.enc(self.emb(x) * math.sqrt(D) + self.pos)
        return self.head(h.mean(1))


def batch(g, n=32):
    x = torch.randint(0, V, (n, T), generator=g)
    y = torch.randint(0, V, (n,), generator=g)
    x[:, : T // 2] = y[:, None]
    return x[:, torch.randperm(T, generator=g)], y


def main(default_warmup=0):
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--warmup", type=int, default=default_warmup)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--norm-first", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.layers, args.norm_first)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98))

    def schedule(s):
        if not args.warmup:
            return 1.0
        return min(1.0, (s + 1) / args.warmup) * max(0.1, 1 - s / args.steps)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    g = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x, y = batch(g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 30 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.3f} lr {sched.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
