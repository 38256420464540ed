"""Multi-task tabular model (classification + regression) trained by a Trainer class.

Bug: the shared trunk is a 12-block tanh tower whose Linear weights are
initialised with `normal_(std=0.02)`, copied from a BERT-style init helper.
BERT gets away with it thanks to LayerNorm and residual connections; this
narrow (64-unit) plain tanh tower does not: every block multiplies the
signal, forward and backward, by about 0.02*sqrt(64)=0.16, so the first
blocks get gradients ~1e-9 of the heads' (SGD + Nesterov momentum) and
the trunk never learns; the loss stays near its initial value.
"""
import argparse

import torch
import torch.nn as nn


class TanhBlock(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def init_weights(module, std=0.02):
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        nn.init.zeros_(module.bias)


class MultiTaskNet(nn.Module):
    def __init__(self, in_dim=24, width=64, depth=12, n_classes=5):
        super().__init__()
        self.trunk = nn.Sequential(*[TanhBlock(in_dim if i == 0 else width, width) for i in range(depth)])
        self.cls_head = nn.Linear(width, n_classes)
        self.reg_head = nn.Linear(width, 1)
        self.apply(init_weights)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


class Trainer:
    def __init__(self, model, lr, reg_weight=0.5):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True)
        self.ce = nn.CrossEntropyLoss()
        self.mse = nn.MSELoss()
        self.reg_weight = reg_weight
        self.history = []

    def train_step(self, x, y_cls, y_reg):
        self.model.train()
        logits, pred = self.model(x)
        loss = self.ce(logits, y_cls) + self.reg_weight * self.mse(pred, y_reg)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.history.append(loss.item())
        return loss.item()

    def fit(self, data, steps, batch_size):
        x, y_cls, y_reg = data
        for step in range(steps):
            idx = torch.randint(0, x.shape[0], (batch_size,))
            loss = self.train_step(x[idx], y_cls[idx], y_reg[idx])
            if step % 20 == 0:
                print(f"step {step:3d} loss {loss:.4f}")
        return self.history[-1]


def make_data(n=2048, in_dim=24, n_classes=5):
    x = torch.randn(n, in_dim)
    w = torch.randn(in_dim, n_classes)
    y_cls = (x @ w).argmax(dim=1)
    y_reg = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2]
    return x, y_cls, y_reg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    trainer = Trainer(MultiTaskNet(), lr=args.lr)
    final = trainer.fit(make_data(), args.steps, args.batch_size)
    print(f"final loss {final:.4f}")


if __name__ == "__main__":
    main()
