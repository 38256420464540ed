"""1-D signal classifier built by a config-driven factory (nn.Sequential).

Bug: the factory's `act="sigmoid"` option was meant for a 2-layer gating
experiment but the config also sets depth=10. Ten Conv1d layers, each
followed by nn.Sigmoid (derivative <= 0.25), with no normalisation or skip
connections: the gradient shrinks by roughly an order of magnitude per
layer, so the first convolution receives ~1e-9 of the head's gradient
(Adagrad cannot compensate that) and the loss stays at chance level.
"""
import argparse

import torch
import torch.nn as nn

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def build_model(cfg):
    layers = []
    in_ch = cfg["in_channels"]
    for _ in range(cfg["depth"]):
        layers += [nn.Conv1d(in_ch, cfg["width"], cfg["kernel"], padding=cfg["kernel"] // 2), ACTIVATIONS[cfg["act"]]()]
        in_ch = cfg["width"]
    features = nn.Sequential(*layers)
    head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(in_ch, cfg["n_classes"]))
    return nn.Sequential(features, head)


def make_signals(n, length=48, n_classes=4):
    t = torch.linspace(0, 1, length)
    y = torch.randint(0, n_classes, (n,))
    freq = 2.0 + 3.0 * y.float()
    phase = 6.28 * torch.rand(n, 1)
    x = torch.sin(6.28 * freq[:, None] * t[None, :] + phase) + 0.3 * torch.randn(n, length)
    return x.unsqueeze(1), y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--depth", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    cfg = {"in_channels": 1, "width": 16, "kernel": 5, "depth": args.depth, "act": "sigmoid", "n_classes": 4}
    model = build_model(cfg)
    x, y = make_signals(1024)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        logits = model(x[idx])
        loss = loss_fn(logits, y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
