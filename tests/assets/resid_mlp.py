"""A residual MLP (Pre-LN blocks x + s * f(norm(x))) on synthetic blobs, in three layouts:
  --mode healthy   s = 1
  --mode dead      s = 1e-6, a constant: the branches train (Adam) but add nothing to the stream
  --mode rezero    s a trainable scalar initialised at 0 (ReZero): the branches start at 0 and grow: healthy
  --mode zero_gain the branch ends in a BatchNorm whose gain starts at 0 (torchvision's zero_init_residual): the
                   branches and the gains start at 0 and grow: healthy"""
import torch
import torch.nn as nn
from common import args, blobs, train

a = args(mode="healthy", steps=80, lr=1e-3)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)
        self.out = nn.BatchNorm1d(d) if a.mode == "zero_gain" else nn.Identity()
        if a.mode == "zero_gain":
            nn.init.zeros_(self.out.weight)
        if a.mode == "rezero":
            self.alpha = nn.Parameter(torch.zeros(1))
        else:
            self.register_buffer("alpha", torch.tensor(1e-6 if a.mode == "dead" else 1.0))

    def forward(self, x):
        return x + self.alpha * self.out(self.fc2(self.act(self.fc1(self.norm(x)))))


d = 32
model = nn.Sequential(nn.Linear(16, d), *[Block(d) for _ in range(4)], nn.LayerNorm(d), nn.Linear(d, 4))
x, y = blobs(n=1024, d=16, classes=4)
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps)
