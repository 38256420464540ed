"""Broken image classification (BatchNorm left in eval mode after validation): the healthy
vision_resnet_bn_healthy.py with model.train() called once before the epoch loop instead of at the top of
train_one_epoch. Epoch 0 trains normally; validate() switches the model to eval mode and nothing switches it
back, so from step 20 on every BatchNorm normalizes with the running statistics frozen at the end of epoch 0
while the weights keep moving under SGD at the peak learning rate: activations are no longer normalized, the
loss jumps and the network ends at chance.

Image classification in the timm train.py layout with a small ResNet written here (BasicBlocks: conv-BN-ReLU,
conv-BN, identity or 1x1-conv-BN shortcut; stem conv-BN-ReLU; global average pool; linear head): SGD with
momentum 0.9 and Nesterov, weight decay on weights but not on BN/bias parameters, a per-step cosine schedule with
linear warm-up, CrossEntropyLoss with label smoothing 0.1, gradient clipping off; train_one_epoch starts with
model.train(), validate() runs under model.eval() and torch.no_grad().

Data: 3x16x16 synthetic images of 6 classes (oriented colour gratings with random phase, plus noise), seeded."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 6


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        return F.relu(x + shortcut)


class ResNet(nn.Module):
    def __init__(self, widths=(8, 16, 32), num_classes=CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    angle = labels.float() * math.pi / CLASSES
    phase = torch.rand(n, generator=g) * 2 * math.pi
    wave = torch.sin(6 * (xx * torch.cos(angle)[:, None, None] + yy * torch.sin(angle)[:, None, None])
                     + phase[:, None, None])
    colour = torch.stack([torch.ones(n), (labels % 2).float(), (labels % 3).float() / 2], 1)
    images = wave[:, None] * colour[:, :, None, None]
    return images + 0.5 * torch.randn(images.shape, generator=g), labels


def param_groups_weight_decay(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(".bias") else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, scheduler, num_updates):
    for batch_idx, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        num_updates += 1
        scheduler.step()
        if batch_idx % 10 == 0:
            print(f"Train: {epoch} [{batch_idx:>3d}/{len(loader)}]  Loss: {loss.item():.4f}  "
                  f"LR: {optimizer.param_groups[0]['lr']:.3e}")
    return num_updates


def validate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        top1 = (logits.argmax(1) == y).float().mean().item() * 100
    return loss, top1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    args = ap.parse_args()
    torch.manual_seed(0)
    train_x, train_y = make_images(640, 1)
    val_x, val_y = make_images(192, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_x, train_y),
                                         batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = ResNet()
    optimizer = torch.optim.SGD(param_groups_weight_decay(model, args.weight_decay), lr=args.lr, momentum=0.9,
                                nesterov=True)
    total, warmup = args.epochs * len(loader), args.warmup_epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup
        else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=args.smoothing)
    num_updates = 0
    model.train()
    for epoch in range(args.epochs):
        num_updates = train_one_epoch(epoch, model, loader, optimizer, loss_fn, scheduler, num_updates)
        val_loss, top1 = validate(model, val_x, val_y)
        print(f"Test: epoch {epoch}  Loss: {val_loss:.4f}  Acc@1: {top1:.2f}")
    print(f"updates {num_updates}")


if __name__ == "__main__":
    main()
