"""Customer model with two heads (churn classification + spend regression).

Bug: feature engineering adds a ratio feature `spend / visits`. About 0.1%
of customers have visits == 0 (visits ~ Poisson(7)), so for them the ratio
is +inf (spend is always positive). The pipeline standardises the other columns but
not the engineered one, and nobody checks torch.isfinite. Batches without
those rows train normally; the first batch that contains one produces
inf activations in the shared trunk, a NaN loss, and NaN weights from
then on.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def engineer_features(n=5000):
    visits = torch.poisson(torch.full((n,), 7.0))
    spend = 20.0 * torch.rand(n) * (visits + 1) + 5.0
    tenure = torch.rand(n) * 60
    other = torch.randn(n, 6)
    base = torch.cat([visits[:, None], spend[:, None], tenure[:, None]], dim=1)
    base = (base - base.mean(0)) / base.std(0)
    ratio = (spend / visits)[:, None] / 20.0  # engineered, not standardised, inf where visits == 0
    x = torch.cat([base, other, ratio], dim=1)
    churn = ((tenure < 12) & (visits < 5)).long()
    future_spend = (0.5 * base[:, 1] + 0.2 * other[:, 0] + 0.1 * torch.randn(n))
    return x, churn, future_spend


class TwoHeadNet(nn.Module):
    def __init__(self, in_dim=10, hidden=48):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(in_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.churn_head = nn.Linear(hidden, 2)
        self.spend_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.churn_head(h), self.spend_head(h).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=48)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, churn, spend = engineer_features()
    model = TwoHeadNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    perm = torch.randperm(x.shape[0])

    for step in range(args.steps):
        idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
        logits, pred = model(x[idx])
        loss = F.cross_entropy(logits, churn[idx]) + F.mse_loss(pred, spend[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
