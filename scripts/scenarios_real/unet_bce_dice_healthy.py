"""U-Net binary segmentation in the milesial/Pytorch-UNet layout: DoubleConv blocks (conv 3x3 -> BatchNorm ->
ReLU, twice), four Down stages (max-pool + DoubleConv), Up stages (bilinear upsampling, padding to the skip's
size, concatenation with the encoder feature map, DoubleConv) and a 1x1 OutConv to one logit per pixel. Loss =
BCEWithLogits + Dice loss on sigmoid(logits) (the repo's `criterion(...) + dice_loss(F.sigmoid(...))` for
n_classes == 1), RMSprop (weight_decay 1e-8, momentum 0.9, foreach), gradient clipping at 1.0,
ReduceLROnPlateau('max') stepped on the validation Dice score after each epoch, validation under model.eval() /
torch.inference_mode() with the mask thresholded at 0.5.

Data: 32x32 RGB images made in code, seeded: one to three blobs (ellipses of random size, position and colour)
on a smooth noisy background; the mask is the blobs. Prints the loss and the validation Dice per epoch."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        mid_channels = mid_channels or out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size(2) - x1.size(2), x2.size(3) - x1.size(3)
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=1, base=8):
        super().__init__()
        self.n_classes = n_classes
        self.inc = DoubleConv(n_channels, base)
        self.down1 = Down(base, base * 2)
        self.down2 = Down(base * 2, base * 4)
        self.down3 = Down(base * 4, base * 8)
        self.down4 = Down(base * 8, base * 16 // 2)
        self.up1 = Up(base * 16, base * 8 // 2)
        self.up2 = Up(base * 8, base * 4 // 2)
        self.up3 = Up(base * 4, base * 2 // 2)
        self.up4 = Up(base * 2, base)
        self.outc = nn.Conv2d(base, n_classes, kernel_size=1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)


def dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
    sum_dim = (-1, -2) if input.dim() == 2 or not reduce_batch_first else (-1, -2, -3)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    return ((inter + epsilon) / (sets_sum + epsilon)).mean()


def dice_loss(input, target):
    return 1 - dice_coeff(input, target, reduce_batch_first=True)


def make_blobs(n, seed, size=32):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    images = torch.empty(n, 3, size, size)
    masks = torch.zeros(n, 1, size, size)
    for i in range(n):
        bg = torch.rand(3, 1, 1, generator=g) * 0.5
        grad = (torch.rand(3, 1, 1, generator=g) - 0.5) * 0.4
        img = bg + grad * xx + 0.08 * torch.randn(3, size, size, generator=g)
        m = torch.zeros(size, size)
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            c = torch.rand(2, generator=g) * 1.4 - 0.7
            r = torch.rand(2, generator=g) * 0.3 + 0.15
            blob = (((xx - c[0]) / r[0]) ** 2 + ((yy - c[1]) / r[1]) ** 2) <= 1
            m = torch.maximum(m, blob.float())
        colour = torch.rand(3, 1, 1, generator=g) * 0.5 + 0.4
        images[i] = img * (1 - m) + (colour + 0.08 * torch.randn(3, size, size, generator=g)) * m
        masks[i, 0] = m
    return images, masks


@torch.inference_mode()
def evaluate(net, loader):
    net.eval()
    dice_score = 0
    for image, mask_true in loader:
        mask_pred = (F.sigmoid(net(image)) > 0.5).float()
        dice_score += dice_coeff(mask_pred, mask_true, reduce_batch_first=False)
    net.train()
    return dice_score / max(len(loader), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    images, masks = make_blobs(352, seed=1)
    train_set = torch.utils.data.TensorDataset(images[:320], masks[:320])
    val_set = torch.utils.data.TensorDataset(images[320:], masks[320:])
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=args.batch_size, shuffle=False, drop_last=True)

    model = UNet(n_channels=3, n_classes=1)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, weight_decay=1e-8, momentum=0.9, foreach=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=2)
    criterion = nn.CrossEntropyLoss() if model.n_classes > 1 else nn.BCEWithLogitsLoss()
    global_step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        epoch_loss = 0
        for images_b, true_masks in train_loader:
            masks_pred = model(images_b)
            loss = criterion(masks_pred, true_masks)
            loss += dice_loss(F.sigmoid(masks_pred), true_masks)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            global_step += 1
            epoch_loss += loss.item()
        val_score = evaluate(model, val_loader)
        scheduler.step(val_score)
        print(f"epoch {epoch} step {global_step} loss {epoch_loss / len(train_loader):.4f} "
              f"val dice {float(val_score):.4f} lr {optimizer.param_groups[0]['lr']:.2e}")


if __name__ == "__main__":
    main()
