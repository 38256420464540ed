"""Broken LoRA fine-tuning (adapters missing from the optimizer): the healthy lora_peft_healthy.py with the
optimizer built one line too early, on the base model's parameters, before get_peft_model. get_peft_model then
freezes every base parameter and adds new ones (lora_A / lora_B, and a trainable copy of the classifier for
modules_to_save) that no optimizer holds: backward fills their .grad, optimizer.step() updates nothing, and the
loss stays at chance.

LoRA fine-tuning with `peft` (the layout of the peft examples for custom models): a small pretrained-style
Transformer encoder built in code (stands in for from_pretrained; no download), a LoraConfig on its attention
projections (target_modules q_proj / v_proj, r=8, lora_alpha=16) with the new classification head in
modules_to_save, get_peft_model, print_trainable_parameters, then AdamW over the parameters that require grad,
a linear warm-up/decay schedule and a per-epoch evaluation under torch.no_grad().

Task: sequence classification of synthetic token sequences: each sequence of noise tokens holds one of 4 key
tokens at a random place; the label is which one. Chance loss is ln(4) = 1.386."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

VOCAB, SEQ, D, HEADS, CLASSES = 40, 16, 32, 4, 4
KEYS = [1, 2, 3, 4]


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(D, D), nn.Linear(D, D)
        self.v_proj, self.o_proj = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, HEADS, D // HEADS).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, D))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(D), SelfAttention(), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyEncoderForClassification(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(SEQ, D) * 0.02)
        self.layers = nn.ModuleList([Layer() for _ in range(2)])
        self.norm = nn.LayerNorm(D)
        self.classifier = nn.Linear(D, CLASSES)

    def forward(self, input_ids, labels=None):
        x = self.embed(input_ids) + self.pos
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(self.norm(x).mean(dim=1))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def make_batch(n, g):
    ids = torch.randint(len(KEYS) + 1, VOCAB, (n, SEQ), generator=g)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    where = torch.randint(0, SEQ, (n,), generator=g)
    ids[torch.arange(n), where] = torch.tensor(KEYS)[labels]
    return ids, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--steps-per-epoch", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = TinyEncoderForClassification()          # stands in for AutoModel...from_pretrained(...)
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                        modules_to_save=["classifier"])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    model = get_peft_model(model, config)
    model.print_trainable_parameters()
    total = args.epochs * args.steps_per_epoch
    warmup = total // 10
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    eval_ids, eval_labels = make_batch(256, torch.Generator().manual_seed(2))
    for epoch in range(args.epochs):
        model.train()
        for step in range(args.steps_per_epoch):
            input_ids, labels = make_batch(args.batch_size, g)
            loss, _ = model(input_ids=input_ids, labels=labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        model.eval()
        with torch.no_grad():
            eval_loss, logits = model(input_ids=eval_ids, labels=eval_labels)
            acc = (logits.argmax(-1) == eval_labels).float().mean().item()
        print(f"epoch {epoch}: eval_loss {eval_loss.item():.4f} accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
