"""Small transformer encoder classifier with L2-normalised token embeddings.

Bug: the embedding uses padding_idx=0, so padding tokens embed to the zero
vector; EmbedL2Norm then divides by the vector norm without an epsilon.
0 / 0 = NaN at every padded position, and self-attention spreads the NaN
to every token of every padded sequence.
"""
import argparse

import torch
import torch.nn as nn


class EmbedL2Norm(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, d_model=32, n_heads=4, n_layers=2, n_classes=2, max_len=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.embed_norm = EmbedL2Norm()
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        h = self.embed_norm(self.embed(tokens)) + self.pos[:, : tokens.shape[1]]
        h = self.encoder(h)
        return self.head(h.mean(dim=1))


def make_data(n, seq_len=16, vocab=50):
    tokens = torch.randint(1, vocab, (n, seq_len))
    lengths = torch.randint(8, seq_len + 1, (n,))
    for i in range(n):
        tokens[i, lengths[i]:] = 0  # right padding
    y = ((tokens == 7).sum(dim=1) > 0).long()
    return tokens, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens, y = make_data(512)
    model = TinyTransformer()
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
