"""Intent classifier (embedding + bidirectional GRU) set up by a small Experiment class.

Bug: `setup()` builds the model and the AdamW optimizer. A later
`load_pretrained_embeddings()` helper "re-creates the model so the new
vocabulary size is picked up" and copies vectors into the fresh model,
but the optimizer is never rebuilt. The optimizer still holds the
parameters of the first, discarded model: the model actually used for
training gets gradients on every step, yet none of its weights ever
change, and the loss stays at chance level. (Side effect: zero_grad() only
clears the old model's grads, so the live model's .grad keeps summing up
and its norm grows ~40x over the run.)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class IntentGRU(nn.Module):
    def __init__(self, vocab, dim=32, hidden=32, n_intents=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, n_intents)

    def forward(self, tokens):
        out, _ = self.gru(self.embedding(tokens))
        return self.classifier(out.max(dim=1).values)


class Experiment:
    def __init__(self, lr, vocab=400):
        self.lr = lr
        self.vocab = vocab

    def setup(self):
        self.model = IntentGRU(self.vocab)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.lr)

    def load_pretrained_embeddings(self, vectors):
        self.vocab = vectors.shape[0]
        self.model = IntentGRU(self.vocab)  # re-created; self.optimizer still points at the old one
        with torch.no_grad():
            self.model.embedding.weight.copy_(vectors)

    def train_step(self, tokens, labels):
        logits = self.model(tokens)
        loss = F.cross_entropy(logits, labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_data(n=2000, length=8, vocab=400, n_intents=5):
    y = torch.randint(0, n_intents, (n,))
    tokens = torch.randint(n_intents * 8, vocab, (n, length))
    pos = torch.randint(0, length, (n,))
    tokens[torch.arange(n), pos] = y * 8 + torch.randint(0, 8, (n,))
    return tokens, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokens, y = make_data()
    exp = Experiment(args.lr)
    exp.setup()
    exp.load_pretrained_embeddings(0.3 * torch.randn(400, 32))

    for step in range(args.steps):
        idx = torch.randint(0, tokens.shape[0], (args.batch_size,))
        loss = exp.train_step(tokens[idx], y[idx])
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss:.4f}")
    print(f"final loss {loss:.4f}")


if __name__ == "__main__":
    main()
