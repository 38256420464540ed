import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=40, lr=1e-3)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 2)
        with torch.no_grad():
            self.fc2.bias.fill_(-20.0)  # a bad init: every unit after fc2 starts (and stays) off

    def forward(self, x):
        return self.fc3(self.relu(self.fc2(self.relu(self.fc1(x)))))


model = Net()
x, y = blobs()
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps)
