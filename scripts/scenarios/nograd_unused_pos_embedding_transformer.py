"""Transformer encoder classifier with a learned positional embedding.

Bug: the positional embedding is computed into `h` but the encoder is
called on the raw token embedding `x` (variable mix-up). pos_embedding is
registered and handed to the optimizer, yet it never takes part in the
loss, so its .grad stays None; the model is also position-blind.
"""
import argparse

import torch
import torch.nn as nn


class SeqClassifier(nn.Module):
    def __init__(self, vocab=30, d_model=32, n_heads=4, n_layers=2, max_len=16, n_classes=2):
        super().__init__()
        self.tok_embedding = nn.Embedding(vocab, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1]).unsqueeze(0)
        x = self.tok_embedding(tokens)
        h = x + self.pos_embedding(positions)  # noqa: F841  (never used)
        out = self.encoder(x)
        return self.head(out.mean(dim=1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens = torch.randint(0, 30, (512, 16))
    # label: is the first token smaller than the last one (needs positions)
    y = (tokens[:, 0] < tokens[:, -1]).long()
    model = SeqClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(tokens[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
