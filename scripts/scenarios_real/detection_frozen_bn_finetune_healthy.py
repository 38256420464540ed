"""Detection fine-tune in the torchvision references/detection/train.py layout, healthy: a ResNet-style backbone
whose BatchNorms are FrozenBatchNorm2d (fixed affine statistics held as buffers, no parameters: what torchvision's
detection backbones use) and whose stem and first stage are frozen (requires_grad_(False): trainable_backbone_layers
= 2 of 3), under heads trained from scratch; the losses come back as a dict (classifier cross-entropy, box
regression smooth-L1, objectness BCE-with-logits over a grid) and are summed; SGD lr 0.02, momentum 0.9, weight
decay 1e-4, a LinearLR warm-up from 0.001x over the first 50 iterations; model.train() throughout (frozen BN is
unaffected by it).

Data: 3x32x32 synthetic images, each with one coloured square (its colour is the class, its box the target) on
noise, seeded. What is frozen must stay silent: the frozen stem's and stage's parameters get no gradient and never
change by design, and FrozenBatchNorm2d has no running statistics to update."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 4
COLOURS = torch.tensor([[1.0, 0.2, 0.2], [0.2, 1.0, 0.2], [0.2, 0.2, 1.0], [1.0, 1.0, 0.2]])
GRID = 8


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm2d with fixed statistics and affine parameters, all buffers (as torchvision.ops.FrozenBatchNorm2d)."""

    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x):
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        bias = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = FrozenBatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = FrozenBatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), FrozenBatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = FrozenBatchNorm2d(16)
        self.layer1 = Block(16, 16, 1)
        self.layer2 = Block(16, 32, 2)
        self.layer3 = Block(32, 64, 2)

    def forward(self, x):
        return self.layer3(self.layer2(self.layer1(F.relu(self.bn1(self.conv1(x))))))


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.rpn_head = nn.Conv2d(64, 1, 1)  # objectness per 4x4 cell of the 8x8 feature map
        self.box_head = nn.Sequential(nn.Flatten(), nn.Linear(64 * GRID * GRID, 128), nn.ReLU())
        self.cls_score = nn.Linear(128, CLASSES)
        self.bbox_pred = nn.Linear(128, 4)

    def forward(self, images, targets):
        feats = self.backbone(images)
        objectness = self.rpn_head(feats).squeeze(1)
        h = self.box_head(feats)
        return {
            "loss_classifier": F.cross_entropy(self.cls_score(h), targets["labels"]),
            "loss_box_reg": F.smooth_l1_loss(self.bbox_pred(h), targets["boxes"], beta=1 / 9),
            "loss_objectness": F.binary_cross_entropy_with_logits(objectness, targets["objectness"]),
        }


def make_batch(g, n):
    images = 0.3 * torch.randn(n, 3, 32, 32, generator=g)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    size = torch.randint(8, 16, (n,), generator=g)
    x0 = (torch.rand(n, generator=g) * (32 - size)).long()
    y0 = (torch.rand(n, generator=g) * (32 - size)).long()
    obj = torch.zeros(n, GRID, GRID)
    for i in range(n):
        s, x, y = int(size[i]), int(x0[i]), int(y0[i])
        images[i, :, y:y + s, x:x + s] += COLOURS[labels[i]].view(3, 1, 1)
        obj[i, y // 4:(y + s + 3) // 4, x // 4:(x + s + 3) // 4] = 1.0
    boxes = torch.stack([x0, y0, x0 + size, y0 + size], 1).float() / 32
    return images, {"labels": labels, "boxes": boxes, "objectness": obj}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Detector()
    # trainable_backbone_layers=2: the stem and the first stage stay as "pretrained"
    for part in (model.backbone.conv1, model.backbone.layer1):
        part.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.001, total_iters=50)
    model.train()
    for it in range(args.iters):
        images, targets = make_batch(g, args.batch_size)
        loss_dict = model(images, targets)
        losses = sum(loss for loss in loss_dict.values())
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
        warmup.step()
        if it % 25 == 0 or it == args.iters - 1:
            parts = "  ".join(f"{k} {v.item():.4f}" for k, v in loss_dict.items())
            print(f"iter {it}  loss {losses.item():.4f}  {parts}  lr {optimizer.param_groups[0]['lr']:.5f}")


if __name__ == "__main__":
    main()
