"""Control: small transformer encoder classifier (2 layers, d_model=32) with AdamW."""
import argparse

import torch
import torch.nn as nn


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=20, d_model=32, n_heads=4, n_layers=2, max_len=12, n_classes=2):
        super().__init__()
        self.tok_embedding = nn.Embedding(vocab, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1]).unsqueeze(0)
        h = self.tok_embedding(tokens) + self.pos_embedding(positions)
        h = self.encoder(h)
        return self.head(h.mean(dim=1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=12)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (2048, args.seq_len))
    y = ((tokens == 5).any(dim=1)).long()
    model = TransformerClassifier(max_len=args.seq_len)
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
