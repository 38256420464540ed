"""Multi-task learning with homoscedastic uncertainty weighting (Kendall, Gal & Cipolla 2018), in the layout of
the common PyTorch implementations: a shared trunk, a classification head and a regression head, and one
learnable log-variance per task (s_i, in the optimizer with the model); the loss is
sum_i exp(-s_i) * L_i + s_i (the regression term with a 1/2 factor), so the total falls below zero once the
model fits and the s_i go negative, by design. Adam lr 1e-3. Data: tabular features made in code, a class and
a continuous target that both depend on them, seeded."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiTaskNet(nn.Module):
    def __init__(self, d=16, hidden=64, classes=4):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.cls_head = nn.Linear(hidden, classes)
        self.reg_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


class UncertaintyWeightedLoss(nn.Module):
    def __init__(self, tasks=2):
        super().__init__()
        self.log_vars = nn.Parameter(torch.zeros(tasks))

    def forward(self, cls_loss, reg_loss):
        s = self.log_vars
        return torch.exp(-s[0]) * cls_loss + s[0] + 0.5 * torch.exp(-s[1]) * reg_loss + 0.5 * s[1]


def make_data(n, seed, d=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 4, generator=torch.Generator().manual_seed(7))
    y_cls = (x @ w).argmax(1)
    y_reg = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.05 * torch.randn(n, generator=g)
    return x, y_cls, y_reg


def main():
    torch.manual_seed(0)
    x, yc, yr = make_data(4096, 1)
    xt, yct, yrt = make_data(1024, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, yc, yr), batch_size=128, shuffle=True)
    model, weighting = MultiTaskNet(), UncertaintyWeightedLoss()
    opt = torch.optim.Adam(list(model.parameters()) + list(weighting.parameters()), lr=1e-3)
    step = 0
    for epoch in range(8):
        model.train()
        for xb, ycb, yrb in loader:
            logits, pred = model(xb)
            loss = weighting(F.cross_entropy(logits, ycb), F.mse_loss(pred, yrb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 64 == 0:
                print(f"step {step} loss {loss.item():.4f} log_vars {weighting.log_vars.data.tolist()}")
        model.eval()
        with torch.no_grad():
            logits, pred = model(xt)
            acc = (logits.argmax(1) == yct).float().mean().item()
            mse = F.mse_loss(pred, yrt).item()
        print(f"epoch {epoch}: test accuracy {acc:.3f} mse {mse:.4f}")
    print(f"optimizer steps {step}")


if __name__ == "__main__":
    main()
