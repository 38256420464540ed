"""Broken metric learning (embeddings collapse to a point): the healthy metric_triplet_healthy.py with Adam's
learning rate at 1.0 instead of 1e-3 (a --lr typo). The first updates blow the embeddings up (loss in the
thousands), the ReLUs of the fully connected layers die, every input maps to the same embedding, and the
triplet loss sits at exactly the margin (1.0) from then on: d(a,p) = d(a,n) = 0.

Metric learning, triplet layout (adambielski/siamese-triplet and the pytorch/examples siamese_network style):
one EmbeddingNet (small conv net -> fully connected -> low-dimensional embedding) shared by a TripletNet wrapper
that embeds anchor, positive and negative; nn.TripletMarginLoss(margin=1.0); triplets drawn on the fly each step
(anchor and positive from one class, negative from another); Adam lr 1e-3 with a StepLR schedule; a validation
pass that scores nearest-class-centre accuracy of the embeddings.

Data: 10 classes of 1x12x12 "glyphs" (a fixed random pattern per class, seeded) plus per-sample noise and a small
random shift, made in code. A network that embeds everything at one point scores loss = margin = 1.0."""
import argparse

import torch
import torch.nn as nn

CLASSES, SIZE, EMB = 10, 12, 8


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.convnet = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Sequential(nn.Linear(32 * 3 * 3, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                nn.Linear(64, EMB))

    def forward(self, x):
        return self.fc(self.convnet(x).flatten(1))

    def get_embedding(self, x):
        return self.forward(x)


class TripletNet(nn.Module):
    def __init__(self, embedding_net):
        super().__init__()
        self.embedding_net = embedding_net

    def forward(self, x1, x2, x3):
        return self.embedding_net(x1), self.embedding_net(x2), self.embedding_net(x3)

    def get_embedding(self, x):
        return self.embedding_net(x)


class Glyphs:
    def __init__(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.protos = (torch.rand(CLASSES, 1, SIZE, SIZE, generator=g) > 0.6).float()
        self.g = g

    def sample(self, labels):
        x = self.protos[labels]
        shift = int(torch.randint(-1, 2, (1,), generator=self.g))
        x = torch.roll(x, shifts=shift, dims=3)
        return x + 0.3 * torch.randn(x.shape, generator=self.g)

    def triplets(self, n):
        a = torch.randint(0, CLASSES, (n,), generator=self.g)
        neg = (a + torch.randint(1, CLASSES, (n,), generator=self.g)) % CLASSES
        return self.sample(a), self.sample(a), self.sample(neg)


def evaluate(model, data, g):
    labels = torch.arange(CLASSES).repeat(20)
    with torch.no_grad():
        emb = model.get_embedding(data.sample(labels))
        centres = torch.stack([emb[labels == c].mean(0) for c in range(CLASSES)])
        pred = torch.cdist(emb, centres).argmin(1)
    return (pred == labels).float().mean().item(), emb.std(0).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--margin", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps-per-epoch", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = Glyphs(1)
    model = TripletNet(EmbeddingNet())
    loss_fn = nn.TripletMarginLoss(margin=args.margin)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3, gamma=0.1)
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for step in range(args.steps_per_epoch):
            anchor, positive, negative = data.triplets(args.batch_size)
            optimizer.zero_grad()
            outputs = model(anchor, positive, negative)
            loss = loss_fn(*outputs)
            loss.backward()
            optimizer.step()
            total += loss.item()
            if step % 25 == 0 or (epoch == 0 and step < 12):
                print(f"Train: epoch {epoch} [{step}/{args.steps_per_epoch}] loss {loss.item():.4f}")
        scheduler.step()
        model.eval()
        acc, spread = evaluate(model, data, None)
        print(f"Epoch {epoch}: average loss {total / args.steps_per_epoch:.4f} val accuracy {acc:.3f} "
              f"embedding spread {spread:.4f}")


if __name__ == "__main__":
    main()
