"""Knowledge-distillation layout: a frozen teacher (a small Transformer encoder, eval mode, requires_grad False)
called as teacher(x, mask) under torch.no_grad() with an additive attention mask holding -inf at padded
positions; a smaller student is trained on KL(student || teacher at temperature T) plus cross-entropy.

The teacher is first fitted for a few steps in the same script so that its soft labels carry information; then
it is frozen. Sequences have random lengths; padded positions are masked with -inf in both models."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, LEN, CLASSES = 32, 16, 3


class Encoder(nn.Module):
    def __init__(self, d_model, layers):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Parameter(torch.zeros(1, LEN, d_model))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, 2, 2 * d_model, dropout=0.0, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(d_model, CLASSES)

    def forward(self, tokens, attn_mask):
        """attn_mask: (B, LEN) additive float mask, 0 for real tokens and -inf for padding."""
        h = self.embed(tokens) + self.pos
        for blk in self.blocks:
            h = blk(h, src_key_padding_mask=attn_mask)
        keep = torch.isfinite(attn_mask).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


def batch(n, g):
    tokens = torch.randint(1, VOCAB, (n, LEN), generator=g)
    lengths = torch.randint(LEN // 2, LEN + 1, (n,), generator=g)
    valid = torch.arange(LEN)[None, :] < lengths[:, None]
    tokens = tokens * valid
    mask = torch.zeros(n, LEN).masked_fill(~valid, float("-inf"))
    counts = torch.stack([((tokens % CLASSES == c) & valid).sum(1) for c in range(CLASSES)], 1)
    labels = counts.argmax(1)  # the most frequent residue mod 3 among the real tokens
    return tokens, mask, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher-steps", type=int, default=60)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.5)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)

    teacher = Encoder(32, 2)
    opt_t = torch.optim.AdamW(teacher.parameters(), lr=3e-3)
    for step in range(args.teacher_steps):
        x, mask, y = batch(64, g)
        loss = F.cross_entropy(teacher(x, mask), y)
        opt_t.zero_grad()
        loss.backward()
        opt_t.step()
    print(f"teacher loss {loss.item():.4f}")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)

    student = Encoder(16, 1)
    opt_s = torch.optim.AdamW(student.parameters(), lr=3e-3)
    T = args.temperature
    for step in range(args.steps):
        x, mask, y = batch(64, g)
        with torch.no_grad():
            soft = teacher(x, mask)
        logits = student(x, mask)
        kd = F.kl_div(F.log_softmax(logits / T, -1), F.softmax(soft / T, -1), reduction="batchmean") * T * T
        loss = args.alpha * kd + (1 - args.alpha) * F.cross_entropy(logits, y)
        opt_s.zero_grad()
        loss.backward()
        opt_s.step()
        if step % 25 == 0:
            print(f"student step {step} loss {loss.item():.4f} kd {kd.item():.4f}")
    print(f"student loss {loss.item():.4f} optimizer steps {args.teacher_steps + args.steps}")


if __name__ == "__main__":
    main()
