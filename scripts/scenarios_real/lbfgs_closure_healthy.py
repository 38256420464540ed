"""LBFGS layout (pytorch/examples time_sequence_prediction style): a full-batch model fitted by
torch.optim.LBFGS (strong Wolfe line search) with a closure that zeroes the gradients, computes the loss, calls backward and returns the
loss; each optimizer.step(closure) runs up to max_iter=20 forward/backward passes but is one optimizer step.

Data: noisy samples of a smooth 1-D function; the model is a small tanh MLP. The script prints one line per
optimizer step ("STEP")."""
import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x):
        return self.layers(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.linspace(-3, 3, 200).unsqueeze(1)
    y = torch.sin(1.5 * x) * torch.exp(-0.1 * x ** 2) + 0.02 * torch.randn_like(x)
    model = Net()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=20, line_search_fn="strong_wolfe")
    evaluations = 0
    for i in range(args.steps):
        def closure():
            nonlocal evaluations
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            evaluations += 1
            return loss
        loss = optimizer.step(closure)
        print(f"STEP: {i} loss: {loss.item():.6f}")
    with torch.no_grad():
        print(f"final loss {criterion(model(x), y).item():.6f} after {evaluations} closure calls")


if __name__ == "__main__":
    main()
