import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=40, lr=0.01)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x * 100.0)))  # unnormalised features saturate tanh


model = Net()
x, y = blobs()
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps)
