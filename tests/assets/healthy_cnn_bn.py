import torch
import torch.nn as nn
from common import args

a = args(steps=60, lr=3e-3)
torch.manual_seed(0)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16),
                                      nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(16, 2)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


x = torch.randn(256, 1, 12, 12)
y = (x[:, :, :6].mean((1, 2, 3)) > x[:, :, 6:].mean((1, 2, 3))).long()
model = SmallCNN()
opt = torch.optim.Adam(model.parameters(), lr=a.lr)
for step in range(a.steps):
    idx = torch.randint(0, 256, (32,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
    if step % 20 == 0:
        model.eval()
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean().item()
        model.train()
        print(f"step {step} loss {loss.item():.3f} acc {acc:.3f}")
print("final loss", loss.item())
