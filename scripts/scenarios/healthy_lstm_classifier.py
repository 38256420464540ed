"""Control: LSTM sequence classifier (embedding -> LSTM -> linear) with Adam."""
import argparse

import torch
import torch.nn as nn


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=20, emb=16, hidden=32, n_classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, tokens):
        _, (h, _) = self.lstm(self.embedding(tokens))
        return self.fc(h[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (2048, args.seq_len))
    y = ((tokens == 3).sum(dim=1) > (tokens == 4).sum(dim=1)).long()
    model = LSTMClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(tokens[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
