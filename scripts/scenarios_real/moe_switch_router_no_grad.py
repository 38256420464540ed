"""Broken MoE (the router never gets a gradient): a Switch-Transformer-style top-1 mixture-of-experts feed-forward
inside a small Transformer classifier, written the way a first MoE often is: each token goes to the expert with
the highest router logit, and the expert's output is used as is instead of being scaled by the router's
probability for that expert. argmax has no gradient, so the router's weight gets none: it keeps its random
initial routing for the whole run (the experts and the rest of the model still train, the loss falls, and
nothing crashes). Switch Transformer multiplies by the gate probability precisely so the router learns; the
load-balancing auxiliary loss, which would also reach the router, was left out "for a first run".

Layout: token embedding + learned positions, pre-norm blocks of MultiheadAttention and a SwitchFFN (router =
nn.Linear(d, n_experts), experts = ModuleList of 2-layer MLPs, tokens dispatched by index), mean pooling and a
classifier head; AdamW lr 1e-3. Data: sequences of 12 tokens from a 32-token vocabulary, the label is which of
4 marker tokens occurs most often, made in code."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SwitchFFN(nn.Module):
    def __init__(self, d, hidden, n_experts):
        super().__init__()
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)) for _ in range(n_experts))

    def forward(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        logits = self.router(flat)
        expert_index = logits.argmax(dim=-1)          # top-1 routing
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            idx = (expert_index == e).nonzero(as_tuple=True)[0]
            if idx.numel():
                out[idx] = expert(flat[idx])          # BUG: not multiplied by softmax(logits)[idx, e]
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, d, heads, hidden, n_experts):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.moe = SwitchFFN(d, hidden, n_experts)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class MoEClassifier(nn.Module):
    def __init__(self, vocab=32, seq=12, d=48, heads=4, hidden=96, n_experts=4, depth=2, n_classes=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads, hidden, n_experts) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_classes)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x).mean(dim=1))


def make_batch(n, g):
    idx = torch.randint(4, 32, (n, 12), generator=g)
    counts = torch.randint(0, 4, (n, 4), generator=g)
    for i in range(n):
        pos = torch.randperm(12, generator=g)
        k = 0
        for c in range(4):
            for _ in range(int(counts[i, c])):
                if k < 12:
                    idx[i, pos[k]] = c
                    k += 1
    y = torch.stack([(idx == c).sum(1) for c in range(4)], dim=1).argmax(1)
    return idx, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MoEClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    for step in range(args.steps):
        x, y = make_batch(args.batch_size, g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 15 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print("router grad is None:", [blk.moe.router.weight.grad is None for blk in model.blocks])


if __name__ == "__main__":
    main()
