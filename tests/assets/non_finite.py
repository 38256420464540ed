import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=30, lr=0.01)
torch.manual_seed(0)


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(torch.relu(x))  # log(0) = -inf for every inactive unit


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.logf = LogFeatures()
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        return self.fc2(self.logf(self.fc1(x)))


model = Net()
x, y = blobs()
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps)
