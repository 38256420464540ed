"""A classifier whose head is left out of the optimizer (built from the body's parameters only, as when a head is
replaced after the optimizer was made): the head gets gradients that no optimizer applies. --all builds the
optimizer from model.parameters() (healthy). --finetune freezes the model and replaces its head, the usual
fine-tuning recipe: `before` builds the optimizer before that (it holds only frozen parameters and not the new head:
it trains nothing), `after` builds it from model.parameters() after (the frozen body in it: healthy, intended),
`head` from the new head's parameters (healthy). Prints the loss: with the head left out it stalls higher."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--all", action="store_true")
p.add_argument("--finetune", choices=["before", "after", "head"])
a = p.parse_args()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.body(x))


model = Net()
if a.finetune:
    if a.finetune == "before":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for p in model.parameters():
        p.requires_grad = False
    model.head = nn.Linear(32, 3)
    if a.finetune != "before":
        optimizer = torch.optim.Adam(model.head.parameters() if a.finetune == "head" else model.parameters(), lr=1e-2)
else:
    optimizer = torch.optim.Adam(model.parameters() if a.all else model.body.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
teacher = torch.randn(8, 3, generator=g)
for step in range(150):
    x = torch.randn(64, 8, generator=g)
    y = (x @ teacher).argmax(1)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 50 == 49:
        print(f"step {step + 1} loss {loss.item():.4f}")
