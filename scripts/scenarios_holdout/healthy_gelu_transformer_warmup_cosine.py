"""Control: 2-block pre-LayerNorm transformer written by hand (F.gelu MLP), AdamW, warm-up + cosine.

Task: does token 1 occur more often than token 2 in a sequence of
distractors? The lr warms up linearly over 15 updates, then decays with
a cosine; gradients are clipped at 1.0. The loss falls from ~0.7 to
~0.03; the lr is tiny at the start and at the end by design, so the loss
moves little in the first and last few updates.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        return self.out((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class MajorityTransformer(nn.Module):
    def __init__(self, vocab=20, dim=32, heads=4, depth=2, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x).mean(dim=1)).squeeze(-1)


def make_batch(batch, length=10, vocab=20):
    # label: does token 1 occur more often than token 2? (other tokens are distractors)
    tokens = torch.randint(3, vocab, (batch, length))
    rank = torch.rand(batch, length).argsort(dim=1).argsort(dim=1)
    marked = rank < torch.randint(1, 6, (batch, 1))
    tokens = torch.where(marked, torch.randint(1, 3, (batch, length)), tokens)
    target = ((tokens == 1).sum(1) > (tokens == 2).sum(1)).float()
    return tokens, target


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = MajorityTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    def lr_factor(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    for step in range(args.steps):
        tokens, target = make_batch(args.batch_size)
        loss = F.binary_cross_entropy_with_logits(model(tokens), target)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
