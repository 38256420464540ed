"""Vision Transformer in the layout of lucidrains/vit-pytorch and timm's vision_transformer.py: a Conv2d patch
embedding (kernel = stride = patch size), a learnable cls token (zeros) and a learnable position embedding
(truncated normal, std 0.02) as bare nn.Parameters of the model, pre-LN blocks (LayerNorm -> multi-head
self-attention with a fused qkv Linear -> residual; LayerNorm -> MLP with GELU -> residual), a final LayerNorm and
a Linear head on the cls token. AdamW lr 1e-3 with timm's parameter groups (no weight decay on biases, norms,
cls token and position embedding; 0.05 elsewhere), linear warm-up then cosine decay, label smoothing 0.1,
batch 64, 4 epochs; test accuracy under model.eval() / torch.no_grad() after each epoch.

Data: 16x16 single-channel images made in code: 8 classes of oriented stripe patterns at random phase with
additive noise, seeded (patch 4: 16 patches + the cls token)."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_images(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    theta = (labels % 4).float()[:, None, None] * math.pi / 4
    freq = torch.where(labels < 4, 0.6, 1.2)[:, None, None]
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
    return (img + 0.8 * torch.randn(img.shape, generator=g)).unsqueeze(1), labels


class PatchEmbed(nn.Module):
    def __init__(self, patch, in_chans, dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, dim)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=16, patch=4, in_chans=1, num_classes=8, dim=64, depth=4, heads=4):
        super().__init__()
        self.patch_embed = PatchEmbed(patch, in_chans, dim)
        num_patches = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.ndim <= 1 or name in ("cls_token", "pos_embed"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--warmup-steps", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    x_train, y_train = make_images(3072, 1)
    x_test, y_test = make_images(512, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                         batch_size=args.batch_size, shuffle=True)
    model = VisionTransformer()
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=args.lr)
    total = args.epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / args.warmup_steps if s < args.warmup_steps
        else 0.5 * (1 + math.cos(math.pi * (s - args.warmup_steps) / (total - args.warmup_steps))))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
            step += 1
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch}: test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
