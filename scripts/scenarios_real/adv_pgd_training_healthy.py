"""PGD adversarial training (Madry et al. 2018) in the layout of locuslab/fast_adversarial's train_pgd.py and the
madrylab robustness attack loop: for each training batch an L-inf PGD attack with a random start inside the
eps-ball (eps 8/255, step 2/255, 5 steps), each step a forward of the model on X + delta, loss.backward() to
get delta.grad (which also fills the parameters' .grad: no optimizer step follows, and opt.zero_grad() clears
it), a signed-gradient step on delta, projection onto the eps-ball and the [0, 1] image box, delta.grad.zero_();
then the training step on the adversarial batch X + delta (cross-entropy, SGD momentum 0.9, weight decay 5e-4,
a cyclic one-cycle learning rate per batch). Evaluated at the end on clean and PGD test images in eval mode.

Each optimizer step is preceded by 5 backward passes that are not training steps; the training loss is the
loss on adversarial examples, which stays well above a clean model's loss by design (robust training is
harder). The data are synthetic 3x16x16 "images" in [0, 1] made in the script: 10 classes, each a smooth
class template (random low-frequency pattern) plus per-sample noise and brightness jitter, seeded."""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n, templates, g):
    y = torch.randint(0, templates.shape[0], (n,), generator=g)
    x = templates[y] * (0.7 + 0.3 * torch.rand(n, 1, 1, 1, generator=g)) + 0.15 * torch.randn(n, 3, 16, 16, generator=g)
    return x.clamp(0, 1), y


class PreActBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class PreActNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.layer1 = PreActBlock(16, 16, 1)
        self.layer2 = PreActBlock(16, 32, 2)
        self.bn = nn.BatchNorm2d(32)
        self.linear = nn.Linear(32, num_classes)

    def forward(self, x):
        out = self.layer2(self.layer1(self.conv1(x)))
        out = F.relu(self.bn(out))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def clamp(x, lower, upper):
    return torch.max(torch.min(x, upper), lower)


def attack_pgd(model, X, y, epsilon, alpha, attack_iters, opt=None):
    delta = torch.zeros_like(X).uniform_(-epsilon, epsilon)
    delta.data = clamp(delta, -X, 1 - X)
    delta.requires_grad = True
    for _ in range(attack_iters):
        output = model(X + delta)
        loss = F.cross_entropy(output, y)
        loss.backward()
        grad = delta.grad.detach()
        d = clamp(delta + alpha * torch.sign(grad), -epsilon, epsilon)
        d = clamp(d, -X, 1 - X)
        delta.data = d
        delta.grad.zero_()
    return delta.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr-max", type=float, default=0.1)
    ap.add_argument("--epsilon", type=float, default=8)
    ap.add_argument("--alpha", type=float, default=2)
    ap.add_argument("--attack-iters", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    low = 0.2 + 0.6 * torch.rand(10, 3, 4, 4, generator=g)
    templates = F.interpolate(low, size=16, mode="bilinear", align_corners=False)
    x_train, y_train = make_data(1280, templates, g)
    x_test, y_test = make_data(256, templates, g)
    epsilon, alpha = torch.tensor(args.epsilon / 255.0), torch.tensor(args.alpha / 255.0)

    model = PreActNet()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr_max, momentum=0.9, weight_decay=5e-4)
    n_batches = len(x_train) // args.batch_size
    lr_steps = args.epochs * n_batches
    scheduler = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.0, max_lr=args.lr_max,
                                                  step_size_up=lr_steps // 2, step_size_down=lr_steps // 2)
    optimizer_steps = 0
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(x_train), generator=g)
        train_loss = train_acc = train_n = 0
        for i in range(n_batches):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            X, y = x_train[idx], y_train[idx]
            delta = attack_pgd(model, X, y, epsilon, alpha, args.attack_iters, opt)
            output = model(clamp(X + delta, torch.zeros_like(X), torch.ones_like(X)))
            loss = F.cross_entropy(output, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            optimizer_steps += 1
            scheduler.step()
            train_loss += loss.item() * y.size(0)
            train_acc += (output.max(1)[1] == y).sum().item()
            train_n += y.size(0)
        print(f"epoch {epoch}: lr {scheduler.get_last_lr()[0]:.4f}  adv train loss {train_loss / train_n:.4f}  "
              f"adv train acc {train_acc / train_n:.3f}")

    model.eval()
    clean_acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    with torch.enable_grad():
        delta = attack_pgd(model, x_test, y_test, epsilon, alpha, 10)
    with torch.no_grad():
        robust_acc = (model(x_test + delta).argmax(1) == y_test).float().mean().item()
    print(f"test clean acc {clean_acc:.3f}  test PGD-10 acc {robust_acc:.3f}")
    print(f"optimizer steps: {optimizer_steps}")


if __name__ == "__main__":
    main()
