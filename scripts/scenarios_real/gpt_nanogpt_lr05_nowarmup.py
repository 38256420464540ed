"""Broken GPT from scratch (learning rate far too high, no warm-up): the healthy gpt_nanogpt_healthy.py run with
--learning-rate 0.5 --warmup-iters 0 (the defaults here), i.e. a learning rate ~170x the healthy 3e-3 applied
from the very first step. Clipping the gradient norm at 1.0 does not bound Adam's step: the loss jumps from
chance (3.24) to ~20 within 10 iterations, then the model falls back to predicting the character frequencies
(~2.85) and stays there while the healthy run reaches 1.25.

GPT from scratch in the karpathy/nanoGPT layout (train.py + model.py in one file): character-level tokenizer
(stoi / itos over the text's characters), get_batch drawing random block_size windows, a GPT of Blocks (pre-LN:
x + attn(ln_1(x)), x + mlp(ln_2(x))) whose CausalSelfAttention uses one c_attn projection and
F.scaled_dot_product_attention(is_causal=True), GELU MLP, weight tying wte.weight = lm_head.weight, the scaled
init of c_proj; configure_optimizers splits decay (2-D) / no-decay parameters for AdamW(betas=(0.9, 0.95));
get_lr is linear warm-up then cosine decay to min_lr; gradient_accumulation_steps micro-batches per iteration
(loss divided by it); clip_grad_norm_(1.0); estimate_loss under torch.no_grad() every eval_interval.

Text: synthetic English-like sentences from a small seeded grammar (no download)."""
import argparse
import math
import random

import torch
import torch.nn as nn
from torch.nn import functional as F

SUBJ = ["the cat", "a dog", "my friend", "the old man", "she", "he", "the bird", "our teacher"]
VERB = ["sees", "likes", "finds", "wants", "takes", "hears", "paints", "follows"]
OBJ = ["the ball", "a red apple", "the green door", "some bread", "the river", "a small house", "the moon"]
END = [".", " today.", " again.", " at night.", " in the park."]


def make_text(n, seed):
    rng = random.Random(seed)
    return "\n".join(f"{rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)}{rng.choice(END)}" for _ in range(n))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention(n_embd, n_head)
        self.ln_2, self.mlp = nn.LayerNorm(n_embd), MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_head=2, n_embd=48):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for p in param_dict.values() if p.dim() >= 2]
        nodecay_params = [p for p in param_dict.values() if p.dim() < 2]
        optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                        {"params": nodecay_params, "weight_decay": 0.0}]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--learning-rate", type=float, default=0.5)
    ap.add_argument("--warmup-iters", type=int, default=0)
    ap.add_argument("--max-iters", type=int, default=150)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--gradient-accumulation-steps", type=int, default=2)
    args = ap.parse_args()
    batch_size, block_size, eval_interval, weight_decay = 12, 32, 50, 0.1
    min_lr = args.learning_rate / 10
    torch.manual_seed(1337)
    text = make_text(3000, 0)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    print(f"vocab_size {len(chars)}, {len(train_data)} train tokens (chance loss {math.log(len(chars)):.3f})")

    def get_batch(split):
        d = train_data if split == "train" else val_data
        ix = torch.randint(len(d) - block_size, (batch_size,))
        return torch.stack([d[i:i + block_size] for i in ix]), torch.stack([d[i + 1:i + 1 + block_size] for i in ix])

    model = GPT(len(chars), block_size)
    optimizer = model.configure_optimizers(weight_decay, args.learning_rate, (0.9, 0.95))

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            out[split] = torch.stack([model(*get_batch(split))[1] for _ in range(5)]).mean().item()
        model.train()
        return out

    def get_lr(it):
        if it < args.warmup_iters:
            return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
        decay_ratio = (it - args.warmup_iters) / (args.max_iters - args.warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (args.learning_rate - min_lr)

    X, Y = get_batch("train")
    for iter_num in range(args.max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == args.max_iters:
            break
        for micro_step in range(args.gradient_accumulation_steps):
            _, loss = model(X, Y)
            loss = loss / args.gradient_accumulation_steps
            X, Y = get_batch("train")
            loss.backward()
        if args.grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % 10 == 0:
            print(f"iter {iter_num}: loss {loss.item() * args.gradient_accumulation_steps:.4f}, lr {lr:.2e}")


if __name__ == "__main__":
    main()
