import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=60, lr=2e-2)
torch.manual_seed(0)


def mlp(sizes):
    layers = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(d_in, d_out), nn.ReLU()]
    return nn.Sequential(*layers)  # bug: the last ReLU is kept, so the logits go through it


model = mlp([16, 64, 64, 10])
x, y = blobs(classes=10)
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps)
