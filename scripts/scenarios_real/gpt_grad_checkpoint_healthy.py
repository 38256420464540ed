"""Character GPT trained with activation (gradient) checkpointing, in the layout of nanoGPT's model with the
Hugging Face `gradient_checkpointing_enable()` style: each pre-LN block is run through
torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) while training (its activations are dropped in
the forward pass and the block is run again during backward), plainly under eval / no_grad. Weight-tied lm_head,
GELU MLP, causal self-attention with a registered mask, dropout 0.1; AdamW with decay / no-decay groups, linear
warm-up then cosine decay, gradient clipping at 1.0; an eval pass every 100 iterations.

Data: character sequences (vocabulary 20) from a fixed random first-order Markov chain made in code, seeded: the
loss falls from ln(20) = 3.0 to ~1.47 (val) in 250 iterations."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size=32, n_layer=4, n_head=4, n_embd=64, dropout=0.1):
        super().__init__()
        self.block_size = block_size
        self.gradient_checkpointing = False
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in params.values() if p.dim() >= 2]
        nodecay = [p for p in params.values() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": nodecay, "weight_decay": 0.0}], lr=learning_rate, betas=betas)


def make_corpus(n, vocab, seed):
    g = torch.Generator().manual_seed(99)
    trans = torch.softmax(torch.randn(vocab, vocab, generator=g) * 3.0, dim=-1)
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, dtype=torch.long)
    out[0] = 0
    u = torch.rand(n, generator=g)
    cdf = trans.cumsum(-1)
    for i in range(1, n):
        out[i] = min(int(torch.searchsorted(cdf[out[i - 1]], u[i])), vocab - 1)
    return out


def get_batch(data, block_size, batch_size, g):
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=g)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-iters", type=int, default=250)
    ap.add_argument("--learning-rate", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(1337)
    vocab, block_size = 20, 32
    data = make_corpus(30000, vocab, 1)
    train_data, val_data = data[:27000], data[27000:]
    model = GPT(vocab, block_size)
    model.gradient_checkpointing_enable()
    optimizer = model.configure_optimizers(0.1, args.learning_rate, (0.9, 0.95))
    warmup_iters, min_lr = 30, args.learning_rate / 10

    def get_lr(it):
        if it < warmup_iters:
            return args.learning_rate * (it + 1) / (warmup_iters + 1)
        ratio = (it - warmup_iters) / (args.max_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.learning_rate - min_lr)

    g = torch.Generator().manual_seed(0)
    for it in range(args.max_iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % 100 == 0 or it == args.max_iters - 1:
            model.eval()
            with torch.no_grad():
                losses = [model(*get_batch(val_data, block_size, 32, g))[1].item() for _ in range(5)]
            model.train()
            print(f"iter {it}: val loss {sum(losses) / len(losses):.4f}")
        X, Y = get_batch(train_data, block_size, args.batch_size, g)
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if it % 50 == 0:
            print(f"iter {it}: loss {loss.item():.4f}, lr {get_lr(it):.2e}")


if __name__ == "__main__":
    main()
