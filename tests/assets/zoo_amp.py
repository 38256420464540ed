"""Mixed precision and other training-loop machinery that must run unchanged under neuraldbg:
autocast (bf16 on CPU) with a GradScaler whose huge initial scale overflows the first steps (the scaler
skips them: normal, not a failure), gradient accumulation over 4 micro-batches, gradient checkpointing
(reentrant and not), and per-sample gradients with torch.func (vmap over grad) after training."""
import json

import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2, self.head = nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Linear(32, 2)

    def forward(self, x):
        h = checkpoint(lambda t: self.act(self.fc1(t)), x, use_reentrant=False)
        h = checkpoint(self.fc2, h, use_reentrant=True)
        return self.head(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.005)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, growth_interval=10**6)
x = torch.randn(256, 16) * 3
y = (x[:, 0] > 0).long()
ACCUMULATE, WEIGHT, skipped = 4, 60.0, 0  # a weighted loss: its first scaled gradients overflow
for step in range(40):
    opt.zero_grad()
    for micro in range(ACCUMULATE):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = WEIGHT * nn.functional.cross_entropy(model(x[micro::ACCUMULATE]), y[micro::ACCUMULATE]) / ACCUMULATE
        scaler.scale(loss).backward()
    scale = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    skipped += scaler.get_scale() < scale

small = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 2))
params = {k: v.detach() for k, v in small.named_parameters()}


def sample_loss(p, xi, yi):
    return nn.functional.cross_entropy(functional_call(small, p, (xi[None],)), yi[None])


per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x[:8], y[:8])
print(json.dumps({"skipped": int(skipped), "loss": round(loss.item() * ACCUMULATE, 4),
                  "per_sample_grad": list(per_sample["0.weight"].shape)}))
