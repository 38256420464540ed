"""Mixture-of-experts language model in the Switch Transformer layout (as in the MoE layers of
lucidrains/st-moe-pytorch, fairseq's MoE and karpathy/minGPT-style blocks): a small pre-LN causal Transformer whose
feed-forward is a set of expert MLPs behind a learned router. Top-1 routing (each token goes to the expert with
the highest router probability, its output scaled by that probability), a capacity of 1.25 x tokens / experts
per expert (tokens over capacity skip the FFN through the residual), and the load-balancing auxiliary loss
num_experts * sum_i(fraction of tokens routed to i * mean router probability of i) added with weight 0.01 to the
cross-entropy. With 16 experts and 64 tokens per batch, an expert can receive no token in a step: its
parameters then get no gradient in that step (zero_grad sets them to None), which is how MoE training goes.
AdamW lr 3e-3, 300 steps.

Data: token sequences (vocabulary 24) drawn from a fixed random first-order Markov chain made in code, seeded:
the loss falls from ln(24) = 3.18 toward the chain's entropy rate."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Expert(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden)
        self.w2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class SwitchFFN(nn.Module):
    def __init__(self, d, hidden, num_experts, capacity_factor=1.25):
        super().__init__()
        self.router = nn.Linear(d, num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(d, hidden) for _ in range(num_experts)])
        self.num_experts = num_experts
        self.capacity_factor = capacity_factor

    def forward(self, x):
        B, T, C = x.shape
        tokens = x.reshape(-1, C)
        n = tokens.shape[0]
        probs = F.softmax(self.router(tokens), dim=-1)
        gate, expert_idx = probs.max(dim=-1)
        capacity = int(self.capacity_factor * n / self.num_experts) + 1
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            idx = (expert_idx == e).nonzero(as_tuple=True)[0][:capacity]
            if idx.numel() == 0:
                continue  # no token for this expert in this batch
            out[idx] = gate[idx, None] * expert(tokens[idx])
        # Switch load-balancing loss: fraction of tokens per expert x mean router probability per expert
        frac = F.one_hot(expert_idx, self.num_experts).float().mean(dim=0)
        aux = self.num_experts * (frac * probs.mean(dim=0)).sum()
        return out.view(B, T, C), aux


class Block(nn.Module):
    def __init__(self, d, n_head, block_size, num_experts):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, block_size)
        self.ln_2 = nn.LayerNorm(d)
        self.moe = SwitchFFN(d, 2 * d, num_experts)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        y, aux = self.moe(self.ln_2(x))
        return x + y, aux


class MoEGPT(nn.Module):
    def __init__(self, vocab, block_size, d=48, n_head=4, n_layer=2, num_experts=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block_size, d)
        self.h = nn.ModuleList([Block(d, n_head, block_size, num_experts) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        aux_total = 0.0
        for block in self.h:
            x, aux = block(x)
            aux_total = aux_total + aux
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss, aux_total / len(self.h)


def make_chain(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return F.softmax(torch.randn(vocab, vocab, generator=g) * 2.5, dim=-1)


def sample_batch(trans, batch, length, g):
    x = torch.empty(batch, length + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, trans.shape[0], (batch,), generator=g)
    for t in range(length):
        x[:, t + 1] = torch.multinomial(trans[x[:, t]], 1, generator=g).squeeze(1)
    return x[:, :-1], x[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--aux-weight", type=float, default=0.01)
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab = 24
    trans = make_chain(vocab, 1)
    entropy = -(trans * trans.log()).sum(-1).mean().item()
    g = torch.Generator().manual_seed(2)
    model = MoEGPT(vocab, args.block_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    for step in range(args.steps):
        x, y = sample_batch(trans, args.batch_size, args.block_size, g)
        _, loss, aux = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        (loss + args.aux_weight * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f} aux {aux.item():.3f} (chain entropy {entropy:.3f})")


if __name__ == "__main__":
    main()
