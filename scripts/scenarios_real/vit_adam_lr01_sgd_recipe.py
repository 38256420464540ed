"""Broken ViT (Adam at lr 0.1, the SGD recipe's learning rate): a small Vision Transformer in the
lucidrains/vit-pytorch layout whose optimizer line was switched from a ResNet recipe's SGD(lr=0.1) to Adam without
touching the learning rate, and no warm-up. Transformers with Adam want ~1e-4..1e-3 and a warm-up; at 0.1 the
first updates throw the loss from ln(10) up to ~8 (step 2), after which the network collapses to predicting the
class prior: loss ~2.30 = ln(10) to the end, eval accuracy 0.10 (chance). At lr 3e-4 the same script reaches
loss ~0.08 and accuracy 1.0.

Layout: patch embedding (patches + LayerNorm + Linear + LayerNorm), a learned pos_embedding and cls_token
(nn.Parameter), pre-norm Transformer blocks (Attention with a fused to_qkv, FeedForward with GELU), cls pooling and
an mlp_head. Data: 16x16 single-channel images made in code, 10 classes (a bright bar at one of 10 places plus
noise)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=16):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale = heads, dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x):
        x = self.norm(x)
        b, n, _ = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        attn = (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(
            nn.ModuleList([Attention(dim, heads, dim_head), FeedForward(dim, mlp_dim)]) for _ in range(depth))

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.norm(x)


class ViT(nn.Module):
    def __init__(self, image_size=16, patch_size=4, num_classes=10, dim=64, depth=4, heads=4, mlp_dim=128, channels=1,
                 dim_head=16):
        super().__init__()
        self.p = patch_size
        num_patches = (image_size // patch_size) ** 2
        patch_dim = channels * patch_size * patch_size
        self.to_patch_embedding = nn.Sequential(nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim)
        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.p
        patches = img.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)
        x = self.to_patch_embedding(patches)
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1) + self.pos_embedding
        x = self.transformer(x)
        return self.mlp_head(x[:, 0])


def make_batch(n, g):
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 16, 16, generator=g) * 0.3
    for i in range(n):
        r, c = divmod(int(y[i]), 5)
        x[i, 0, 3 + 6 * r:7 + 6 * r, 1 + 3 * c:4 + 3 * c] += 1.5
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = ViT()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x, y = make_batch(args.batch_size, g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step < 10:
            print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        x, y = make_batch(512, g)
        acc = (model(x).argmax(-1) == y).float().mean().item()
    print(f"eval accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
