"""Healthy distillation: a frozen teacher (requires_grad False, eval) called as teacher(x, mask), where the
additive attention mask holds -inf for padding; the student learns the teacher's outputs. The mask is
neither data nor a target."""
import torch
import torch.nn as nn
from common import args

a = args(steps=60, lr=3e-3)
torch.manual_seed(0)


class Pooler(nn.Module):
    """Masked attention pooling over a sequence of vectors."""

    def __init__(self, d=8, out=4):
        super().__init__()
        self.score, self.head = nn.Linear(d, 1), nn.Linear(d, out)

    def forward(self, x, mask):
        w = torch.softmax(self.score(x).squeeze(-1) + mask, dim=-1)
        return self.head((w.unsqueeze(-1) * x).sum(1))


teacher = Pooler().eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = Pooler()
opt = torch.optim.Adam(student.parameters(), lr=a.lr)
for step in range(a.steps):
    x = torch.randn(32, 6, 8)
    lengths = torch.randint(2, 7, (32, 1))
    mask = torch.zeros(32, 6).masked_fill(torch.arange(6) >= lengths, float("-inf"))
    target = teacher(x, mask)
    opt.zero_grad()
    loss = nn.functional.mse_loss(student(x, mask), target)
    loss.backward()
    opt.step()
print("final loss", loss.item())
