"""A tiny Pre-LN causal transformer LM (attention through F.scaled_dot_product_attention, q/k/v apart as in
nanoGPT) on sequences of a noisy repeating pattern, in two layouts:
  --mode healthy   AdamW lr 3e-3 (weight decay --wd on every parameter, LayerNorm gains included) with a linear
                   warm-up over 20 steps: quiet
  --mode collapse  the query and key projections get lr 0.1 (their own param group): the attention logits grow
                   and the rows collapse onto one key while the rest trains normally
  --mode tied      as healthy, with the output head's weight tied to the token embedding (GPT-2, nanoGPT)"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from common import args

a = args(mode="healthy", steps=60, wd=0.1)
torch.manual_seed(0)
V, T, D, H, B = 16, 32, 32, 4, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (m(x).view(b, t, H, c // H).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = LM()
if a.mode == "tied":
    model.head.weight = model.tok.weight  # one parameter in two modules
g = torch.Generator().manual_seed(0)
pattern = torch.randint(0, V, (7,), generator=g)


def batch():
    start = torch.randint(0, 7, (B,), generator=g)
    seq = pattern[(start[:, None] + torch.arange(T + 1)) % 7]
    noise = torch.rand(B, T + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, V, (B, T + 1), generator=g), seq)
    return seq[:, :-1], seq[:, 1:]


qk = [p for n, p in model.named_parameters() if n.endswith(("q.weight", "k.weight"))]
rest = [p for n, p in model.named_parameters() if not n.endswith(("q.weight", "k.weight"))]
if a.mode == "collapse":
    opt = torch.optim.Adam([{"params": qk, "lr": 0.1}, {"params": rest, "lr": 3e-3}])
    sched = None
else:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=a.wd)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
for step in range(a.steps):
    x, y = batch()
    loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if sched is not None:
        sched.step()
print(f"final loss {loss.item():.4f} (chance {math.log(V):.2f})")
