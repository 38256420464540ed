"""Bag-of-words topic classifier (nn.EmbeddingBag + MLP) with a StepLR schedule.

Bug: the schedule was designed per epoch - StepLR(step_size=1, gamma=0.1),
i.e. "divide the lr by 10 after every epoch" for a 3-epoch fine-tune -
but `scheduler.step()` sits inside the batch loop. The lr falls by 10x
after every batch: 1e-2, 1e-3, 1e-4, ... and is below 1e-8 after 8
updates. The model gets a couple of useful steps and then the loss stays
flat for the rest of the run.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BagClassifier(nn.Module):
    def __init__(self, vocab=1000, dim=32, n_topics=6):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.hidden = nn.Linear(dim, 64)
        self.out = nn.Linear(64, n_topics)

    def forward(self, tokens, offsets):
        h = F.relu(self.hidden(self.bag(tokens, offsets)))
        return self.out(h)


def make_docs(n=3000, vocab=1000, n_topics=6):
    topics = torch.randint(0, n_topics, (n,))
    lengths = torch.randint(5, 30, (n,))
    topic_words = torch.randint(0, vocab, (n_topics, 40))
    docs = []
    for i in range(n):
        k = int(lengths[i])
        generic = torch.randint(0, vocab, (k,))
        specific = topic_words[topics[i], torch.randint(0, 40, (k,))]
        docs.append(torch.where(torch.rand(k) < 0.4, specific, generic))
    return docs, topics


def collate(docs):
    offsets = torch.tensor([0] + [len(d) for d in docs[:-1]]).cumsum(0)
    return torch.cat(docs), offsets


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    docs, topics = make_docs()
    model = BagClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)

    for step in range(args.steps):
        idx = torch.randint(0, len(docs), (args.batch_size,)).tolist()
        tokens, offsets = collate([docs[i] for i in idx])
        loss = F.cross_entropy(model(tokens, offsets), topics[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()  # meant to run once per epoch
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.1e}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
