"""SAM (sharpness-aware minimization) in the layout of davda54/sam: a SAM optimizer class subclassing
torch.optim.Optimizer that wraps a base SGD; each iteration runs two forward/backward passes: first_step
(climb to the worst-case neighbour w + e(w), zero_grad) and second_step (back to w, the base optimizer's step,
zero_grad); BatchNorm running statistics are updated only in the first pass (momentum set to 0 in the second,
the repo's enable/disable_running_stats); a small wide-ResNet-like CNN, label smoothing, step lr decay.
Data: 16x16 images of oriented stripes made in code, seeded."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    def step(self, closure=None):
        raise NotImplementedError("SAM requires first_step / second_step")

    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
            for group in self.param_groups for p in group["params"] if p.grad is not None]), p=2)


def disable_running_stats(model):
    def _disable(module):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.backup_momentum = module.momentum
            module.momentum = 0
    model.apply(_disable)


def enable_running_stats(model):
    def _enable(module):
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum
    model.apply(_enable)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.short = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = self.conv2(F.relu(self.bn2(y)))
        return y + (x if self.short is None else self.short(o))


class WRN(nn.Module):
    def __init__(self, width=16, classes=8):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.b1, self.b2 = Block(width, width, 1), Block(width, 2 * width, 2)
        self.bn = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.b2(self.b1(self.conv(x)))
        x = F.relu(self.bn(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_images(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    theta = (labels % 4).float()[:, None, None] * math.pi / 4
    freq = torch.where(labels < 4, 0.6, 1.2)[:, None, None]
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
    return (img + 0.5 * torch.randn(img.shape, generator=g)).unsqueeze(1), labels


def main():
    torch.manual_seed(0)
    x, y = make_images(2048, 1)
    xt, yt = make_images(512, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
    model = WRN()
    optimizer = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer.base_optimizer, step_size=64, gamma=0.5)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    steps = 0
    for epoch in range(4):
        model.train()
        for xb, yb in loader:
            enable_running_stats(model)
            loss = crit(model(xb), yb)
            loss.backward()
            optimizer.first_step(zero_grad=True)
            disable_running_stats(model)
            crit(model(xb), yb).backward()
            optimizer.second_step(zero_grad=True)
            scheduler.step()
            steps += 1
            if steps % 16 == 0:
                print(f"step {steps} loss {loss.item():.4f}")
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print(f"epoch {epoch}: test accuracy {acc:.3f}")
    print(f"optimizer steps {steps}")


if __name__ == "__main__":
    main()
