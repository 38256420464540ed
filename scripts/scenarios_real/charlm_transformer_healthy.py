"""Character-level language-model layout (makemore style): a small decoder-only Transformer (explicit causal
self-attention, GELU MLP, LayerNorm, tied to a block size) trained on names, one character at a time, with
model(X, Y) returning (logits, loss) and targets -1 where the name has ended; AdamW(lr, weight_decay,
betas=(0.9, 0.99)); a periodic evaluation under torch.no_grad().

Names: synthetic, made from a fixed syllable list with a seeded generator (no download). The vocabulary is the 26
letters plus the "." end token: a model that knows nothing scores ln(27) ~ 3.30."""
import argparse
import math
import random

import torch
import torch.nn as nn
from torch.nn import functional as F

SYLLABLES = ["an", "na", "el", "li", "mar", "ia", "jo", "sh", "ka", "ry", "be", "th", "da", "vi", "ro", "se",
             "lu", "ca", "em", "ma", "ol", "iv", "er", "ch", "is", "ty", "ad", "en", "zo", "qu"]


def make_names(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(n)]


class CharDataset(torch.utils.data.Dataset):
    def __init__(self, words, chars, max_len):
        self.words, self.max_len = words, max_len
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}

    def __len__(self):
        return len(self.words)

    def __getitem__(self, idx):
        ix = torch.tensor([self.stoi[w] for w in self.words[idx]], dtype=torch.long)
        x = torch.zeros(self.max_len + 1, dtype=torch.long)
        y = torch.zeros(self.max_len + 1, dtype=torch.long)
        x[1:1 + len(ix)] = ix
        y[:len(ix)] = ix
        y[len(ix) + 1:] = -1  # no loss after the end token
        return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_embd=32, n_head=4):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


@torch.inference_mode()
def evaluate(model, dataset, batch_size=100, max_batches=4):
    model.eval()
    loader = torch.utils.data.DataLoader(dataset, shuffle=True, batch_size=batch_size)
    losses = []
    for i, (X, Y) in enumerate(loader):
        losses.append(model(X, Y)[1].item())
        if i + 1 >= max_batches:
            break
    model.train()
    return sum(losses) / len(losses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--learning-rate", type=float, default=5e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(3407)
    words = make_names(3000, 42)
    chars = sorted(set("".join(words)) | set("abcdefghijklmnopqrstuvwxyz"))
    max_len = max(len(w) for w in words)
    train_dataset = CharDataset(words[:2700], chars, max_len)
    test_dataset = CharDataset(words[2700:], chars, max_len)
    model = Transformer(len(chars) + 1, max_len + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay,
                                  betas=(0.9, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True, generator=g)
    batches = iter(loader)
    step = 0
    while True:
        try:
            X, Y = next(batches)
        except StopIteration:
            batches = iter(loader)
            X, Y = next(batches)
        logits, loss = model(X, Y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} | loss {loss.item():.4f}")
        if step > 0 and step % 200 == 0:
            print(f"step {step} train loss: {evaluate(model, train_dataset):.4f} "
                  f"test loss: {evaluate(model, test_dataset):.4f}")
        step += 1
        if args.max_steps >= 0 and step >= args.max_steps:
            break
    print(f"steps {step} final test loss {evaluate(model, test_dataset):.4f}")


if __name__ == "__main__":
    main()
