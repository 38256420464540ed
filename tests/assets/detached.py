import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=40, lr=1e-3)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        h = self.encoder(x).detach()  # bug: cuts the graph, the encoder never learns
        return self.head(h)


model = Net()
x, y = blobs()
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps)
