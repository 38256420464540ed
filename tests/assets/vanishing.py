import torch
import torch.nn as nn
from common import args, blobs, train

a = args(depth=12, steps=40, lr=0.1)
torch.manual_seed(0)


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16 if i == 0 else 32, 32) for i in range(a.depth))
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.sigmoid(layer(x))
        return self.head(x)


model = Deep()
x, y = blobs()
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps)
