"""Mean Teacher semi-supervised classification in the layout of CuriousAI/mean-teacher (pytorch/main.py): a
student and a teacher of the same architecture (conv -> BatchNorm -> LeakyReLU stages, dropout, Linear head); the
teacher is built by create_model(ema=True), which detach_()es its parameters, is in no optimizer, and follows the
student as an exponential moving average after every optimizer step
(ema_param.data.mul_(alpha).add_(param.data, alpha=1 - alpha), alpha = min(1 - 1/(step + 1), 0.99)). Each batch
mixes labelled and unlabelled images (label -1, ignored by CrossEntropyLoss(ignore_index=-1)); student and teacher
see two differently noised copies; the teacher runs in training mode with gradients enabled (as in the
reference), its output detached; the loss is the class loss plus a consistency MSE between the two softmaxes,
weighted by a sigmoid ramp-up over the first 100 steps (so the total loss first rises as the weight ramps up).
SGD lr 0.05, Nesterov momentum 0.9, weight decay 1e-4, 5 epochs.

Data: 16x16 images made in code (8 classes of oriented stripe patterns, random phase, noise), 20% of the
training images labelled, seeded."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NO_LABEL = -1


def make_images(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    theta = (labels % 4).float()[:, None, None] * math.pi / 4
    freq = torch.where(labels < 4, 0.6, 1.2)[:, None, None]
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
    return (img + 0.5 * torch.randn(img.shape, generator=g)).unsqueeze(1), labels


class Net(nn.Module):
    def __init__(self, num_classes=8, width=32):
        super().__init__()
        def stage(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1),
                                 nn.MaxPool2d(2))
        self.features = nn.Sequential(stage(1, width), stage(width, 2 * width), nn.Dropout(0.3))
        self.fc = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def create_model(ema=False):
    model = Net()
    if ema:
        for param in model.parameters():
            param.detach_()
    return model


def update_ema_variables(model, ema_model, alpha, global_step):
    alpha = min(1 - 1 / (global_step + 1), alpha)
    for ema_param, param in zip(ema_model.parameters(), model.parameters()):
        ema_param.data.mul_(alpha).add_(param.data, alpha=1 - alpha)


def sigmoid_rampup(current, rampup_length):
    current = max(0.0, min(current, rampup_length)) / rampup_length
    return float(math.exp(-5.0 * (1.0 - current) ** 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--consistency", type=float, default=10.0)
    ap.add_argument("--rampup", type=int, default=100)
    ap.add_argument("--ema-decay", type=float, default=0.99)
    args = ap.parse_args()
    torch.manual_seed(0)
    images, labels = make_images(2048, 1)
    train_labels = labels.clone()
    train_labels[torch.rand(len(labels), generator=torch.Generator().manual_seed(3)) > 0.2] = NO_LABEL
    x_test, y_test = make_images(512, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, train_labels),
                                         batch_size=args.batch_size, shuffle=True, drop_last=True)
    model, ema_model = create_model(), create_model(ema=True)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4, nesterov=True)
    class_criterion = nn.CrossEntropyLoss(reduction="sum", ignore_index=NO_LABEL)
    global_step = 0
    for epoch in range(args.epochs):
        model.train()
        ema_model.train()
        for x, target in loader:
            input_var = x + 0.15 * torch.randn_like(x)
            ema_input_var = x + 0.15 * torch.randn_like(x)
            minibatch_size = len(target)
            labeled = (target != NO_LABEL).sum().item()
            ema_logit = ema_model(ema_input_var).detach()
            model_out = model(input_var)
            class_loss = class_criterion(model_out, target) / minibatch_size
            weight = args.consistency * sigmoid_rampup(global_step, args.rampup)
            consistency_loss = weight * F.mse_loss(F.softmax(model_out, 1), F.softmax(ema_logit, 1),
                                                   reduction="sum") / minibatch_size
            loss = class_loss + consistency_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            global_step += 1
            update_ema_variables(model, ema_model, args.ema_decay, global_step)
            if global_step % 20 == 1:
                print(f"step {global_step}: loss {loss.item():.4f} class {class_loss.item():.4f} "
                      f"cons {consistency_loss.item():.4f} (weight {weight:.2f}, labelled {labeled})")
        model.eval()
        ema_model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
            ema_acc = (ema_model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch}: student test accuracy {acc:.3f}, teacher {ema_acc:.3f}")


if __name__ == "__main__":
    main()
