"""Code that breaks naive observers: in-place ReLU, LSTM tuple outputs, dict outputs, a shared module."""
import torch
import torch.nn as nn
from common import args

a = args(steps=25)
torch.manual_seed(0)


class DictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.relu = nn.ReLU(inplace=True)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.shared = nn.Linear(16, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.relu(self.fc(x))
        out, (hn, cn) = self.lstm(h)
        z = self.shared(self.shared(out[:, -1]))
        return {"logits": self.head(z), "hidden": hn}


model = DictNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 5, 8), torch.randint(0, 2, (64,))
for step in range(a.steps):
    opt.zero_grad()
    out = model(x)
    loss = nn.functional.cross_entropy(out["logits"], y)
    loss.backward()
    opt.step()
print("final loss", loss.item())
