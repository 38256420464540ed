"""DDPM (denoising diffusion) in the layout of lucidrains/denoising-diffusion-pytorch: a small UNet whose residual
blocks are conv -> GroupNorm -> SiLU with a scale/shift from a sinusoidal timestep embedding passed through an MLP,
a down/up path with skip connections; a GaussianDiffusion wrapper holding the linear beta schedule as buffers,
q_sample (x_t = sqrt(abar) x_0 + sqrt(1 - abar) eps) and the simple loss MSE(eps_hat, eps) at a uniformly sampled
t. Adam lr 1e-3, grad clipping at 1.0, and an EMA copy of the whole diffusion model (copy.deepcopy, decay 0.99,
updated after every optimizer step with torch.no_grad() lerp_, the way an EMA helper does it): it is in no
optimizer, never gets a gradient, and is only used to sample under torch.no_grad() every 100 steps.

The noise-prediction loss is noisy and flat-ish by nature (each batch draws new t and eps), which is what a
healthy diffusion run looks like. Data: 8x8 single-channel images made in code (a Gaussian blob at a random place),
seeded."""
import argparse
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, t):
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half, device=t.device) * -(math.log(10000) / (half - 1)))
        args = t.float()[:, None] * freqs[None, :]
        return torch.cat((args.sin(), args.cos()), dim=-1)


class Block(nn.Module):
    def __init__(self, dim, dim_out, groups=8):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim_out, 3, padding=1)
        self.norm = nn.GroupNorm(groups, dim_out)
        self.act = nn.SiLU()

    def forward(self, x, scale_shift=None):
        x = self.norm(self.proj(x))
        if scale_shift is not None:
            scale, shift = scale_shift
            x = x * (scale + 1) + shift
        return self.act(x)


class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, time_emb_dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.SiLU(), nn.Linear(time_emb_dim, dim_out * 2))
        self.block1 = Block(dim, dim_out)
        self.block2 = Block(dim_out, dim_out)
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb):
        scale_shift = self.mlp(time_emb)[:, :, None, None].chunk(2, dim=1)
        h = self.block1(x, scale_shift=scale_shift)
        h = self.block2(h)
        return h + self.res_conv(x)


class Unet(nn.Module):
    def __init__(self, dim=16, channels=1):
        super().__init__()
        time_dim = dim * 4
        self.init_conv = nn.Conv2d(channels, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, time_dim), nn.GELU(),
                                      nn.Linear(time_dim, time_dim))
        self.down1 = ResnetBlock(dim, dim, time_dim)
        self.downsample = nn.Conv2d(dim, dim * 2, 4, stride=2, padding=1)
        self.down2 = ResnetBlock(dim * 2, dim * 2, time_dim)
        self.mid = ResnetBlock(dim * 2, dim * 2, time_dim)
        self.up2 = ResnetBlock(dim * 4, dim * 2, time_dim)
        self.upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(dim * 2, dim, 3, padding=1))
        self.up1 = ResnetBlock(dim * 2, dim, time_dim)
        self.final_res_block = ResnetBlock(dim * 2, dim, time_dim)
        self.final_conv = nn.Conv2d(dim, channels, 1)

    def forward(self, x, time):
        x = self.init_conv(x)
        r = x.clone()
        t = self.time_mlp(time)
        h1 = self.down1(x, t)
        x = self.downsample(h1)
        h2 = self.down2(x, t)
        x = self.mid(h2, t)
        x = self.up2(torch.cat((x, h2), dim=1), t)
        x = self.upsample(x)
        x = self.up1(torch.cat((x, h1), dim=1), t)
        x = self.final_res_block(torch.cat((x, r), dim=1), t)
        return self.final_conv(x)


class GaussianDiffusion(nn.Module):
    def __init__(self, model, timesteps=100):
        super().__init__()
        self.model = model
        self.num_timesteps = timesteps
        betas = torch.linspace(1e-4, 0.02 * 1000 / timesteps, timesteps)
        alphas = 1.0 - betas
        alphas_cumprod = torch.cumprod(alphas, dim=0)
        self.register_buffer("betas", betas)
        self.register_buffer("alphas_cumprod", alphas_cumprod)
        self.register_buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt())
        self.register_buffer("sqrt_one_minus_alphas_cumprod", (1 - alphas_cumprod).sqrt())

    def q_sample(self, x_start, t, noise):
        return (self.sqrt_alphas_cumprod[t][:, None, None, None] * x_start
                + self.sqrt_one_minus_alphas_cumprod[t][:, None, None, None] * noise)

    def forward(self, img):
        b = img.shape[0]
        t = torch.randint(0, self.num_timesteps, (b,), device=img.device).long()
        img = img * 2 - 1  # normalize to [-1, 1]
        noise = torch.randn_like(img)
        x = self.q_sample(img, t, noise)
        model_out = self.model(x, t)
        return F.mse_loss(model_out, noise)

    @torch.no_grad()
    def sample(self, batch_size, size=8):
        img = torch.randn(batch_size, 1, size, size)
        for i in reversed(range(self.num_timesteps)):
            t = torch.full((batch_size,), i, dtype=torch.long)
            eps = self.model(img, t)
            beta, abar = self.betas[i], self.alphas_cumprod[i]
            mean = (img - beta / (1 - abar).sqrt() * eps) / (1 - beta).sqrt()
            img = mean + (beta.sqrt() * torch.randn_like(img) if i > 0 else 0)
        return ((img.clamp(-1, 1) + 1) / 2)


def make_blobs(n, seed, size=8):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    c = torch.rand(n, 2, 1, 1, generator=g) * (size - 3) + 1.5
    return torch.exp(-((xx - c[:, 0:1]) ** 2 + (yy - c[:, 1:2]) ** 2) / 2.0)


@torch.no_grad()
def ema_update(ema_model, model, decay):
    for p_ema, p in zip(ema_model.parameters(), model.parameters()):
        p_ema.lerp_(p, 1 - decay)
    for b_ema, b in zip(ema_model.buffers(), model.buffers()):
        b_ema.copy_(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--ema-decay", type=float, default=0.99)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = make_blobs(4096, 1)
    diffusion = GaussianDiffusion(Unet())
    ema = copy.deepcopy(diffusion)
    opt = torch.optim.Adam(diffusion.parameters(), lr=args.lr, betas=(0.9, 0.99))
    running = None
    for step in range(args.steps):
        diffusion.train()
        idx = torch.randint(0, data.shape[0], (args.batch_size,))
        loss = diffusion(data[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(diffusion.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        ema_update(ema, diffusion, args.ema_decay)
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        if step % 25 == 0:
            print(f"step {step}: loss {loss.item():.4f} (avg {running:.4f})")
        if (step + 1) % 100 == 0:
            ema.eval()
            samples = ema.sample(16)
            # a blob image has one bright peak: how peaked are the EMA model's samples?
            print(f"step {step + 1}: EMA sample max {samples.amax(dim=(1, 2, 3)).mean():.3f}, "
                  f"mean {samples.mean():.3f} (data mean {data.mean():.3f})")
    print(f"final avg loss {running:.4f}")


if __name__ == "__main__":
    main()
