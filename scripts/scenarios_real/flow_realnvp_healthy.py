"""RealNVP density estimation on continuous tabular data in the ikostrikov/pytorch-flows layout (the flow used
for the MAF/RealNVP tabular benchmarks, POWER / GAS / MINIBOONE style): a FlowSequential of affine coupling
layers with alternating binary masks, each followed by a BatchNormFlow (batch statistics in training, running
averages in eval; its log-det sum(log_gamma - 0.5 * log(var + eps))). The coupling's scale net ends in tanh
(s = tanh(scale_net(x_masked))), the shift net in ReLU layers; y = x_masked + (1 - mask) * (x * exp(s) + t),
log-det = sum((1 - mask) * s). Loss: the negative log-likelihood under a standard normal base, -(log N(z) +
log|det|).mean(), reported and minimised in bits per dimension. Adam lr 2e-3, weight_decay 1e-6, gradient
clipping, a validation pass under model.eval() / no_grad each epoch.

Continuous data on a thin curved 2-d sheet in 8 dimensions (noise std 0.02 around it): its density is far above
1, so the NLL goes NEGATIVE while the model learns (from ~+1.5 bits/dim at the start to about -0.75 train / -0.57 val after 512 steps), as on the GAS and
POWER benchmarks. A loss below zero that keeps falling is healthy here. Seeded; prints train and val bits/dim."""
import argparse
import math

import torch
import torch.nn as nn

D = 8


class CouplingLayer(nn.Module):
    def __init__(self, num_inputs, num_hidden, mask):
        super().__init__()
        self.register_buffer("mask", mask)
        self.scale_net = nn.Sequential(
            nn.Linear(num_inputs, num_hidden), nn.Tanh(), nn.Linear(num_hidden, num_hidden), nn.Tanh(),
            nn.Linear(num_hidden, num_inputs))
        self.translate_net = nn.Sequential(
            nn.Linear(num_inputs, num_hidden), nn.ReLU(), nn.Linear(num_hidden, num_hidden), nn.ReLU(),
            nn.Linear(num_hidden, num_inputs))

    def forward(self, inputs, mode="direct"):
        masked = inputs * self.mask
        log_s = torch.tanh(self.scale_net(masked)) * (1 - self.mask)
        t = self.translate_net(masked) * (1 - self.mask)
        if mode == "direct":
            return inputs * torch.exp(log_s) + t, log_s.sum(-1, keepdim=True)
        return (inputs - t) * torch.exp(-log_s), -log_s.sum(-1, keepdim=True)


class BatchNormFlow(nn.Module):
    def __init__(self, num_inputs, momentum=0.0, eps=1e-5):
        super().__init__()
        self.log_gamma = nn.Parameter(torch.zeros(num_inputs))
        self.beta = nn.Parameter(torch.zeros(num_inputs))
        self.momentum = momentum
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(num_inputs))
        self.register_buffer("running_var", torch.ones(num_inputs))

    def forward(self, inputs, mode="direct"):
        if mode == "direct":
            if self.training:
                self.batch_mean = inputs.mean(0)
                self.batch_var = (inputs - self.batch_mean).pow(2).mean(0) + self.eps
                self.running_mean.mul_(self.momentum).add_(self.batch_mean.data * (1 - self.momentum))
                self.running_var.mul_(self.momentum).add_(self.batch_var.data * (1 - self.momentum))
                mean, var = self.batch_mean, self.batch_var
            else:
                mean, var = self.running_mean, self.running_var
            x_hat = (inputs - mean) / var.sqrt()
            y = torch.exp(self.log_gamma) * x_hat + self.beta
            return y, (self.log_gamma - 0.5 * torch.log(var)).sum(-1, keepdim=True)
        mean, var = self.running_mean, self.running_var
        x_hat = (inputs - self.beta) / torch.exp(self.log_gamma)
        return x_hat * var.sqrt() + mean, (-self.log_gamma + 0.5 * torch.log(var)).sum(-1, keepdim=True)


class FlowSequential(nn.Sequential):
    def forward(self, inputs, mode="direct"):
        logdets = torch.zeros(inputs.size(0), 1, device=inputs.device)
        modules = self._modules.values() if mode == "direct" else reversed(self._modules.values())
        for module in modules:
            inputs, logdet = module(inputs, mode)
            logdets = logdets + logdet
        return inputs, logdets

    def log_probs(self, inputs):
        u, log_jacob = self(inputs)
        log_probs = (-0.5 * u.pow(2) - 0.5 * math.log(2 * math.pi)).sum(-1, keepdim=True)
        return (log_probs + log_jacob).sum(-1, keepdim=True)


def make_sheet(n, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 2, generator=g)
    a, b = z[:, 0], z[:, 1]
    x = torch.stack([a, b, torch.sin(1.5 * a), torch.cos(b) - 0.5, 0.5 * a * b, a + 0.5 * b ** 2 - 0.5,
                     torch.tanh(2 * b), 0.3 * a ** 2 - 0.3], dim=1)
    x = x + 0.02 * torch.randn(n, D, generator=g)
    return (x - x.mean(0)) / x.std(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--num-blocks", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    train, val = make_sheet(4096, 1), make_sheet(1024, 2)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train),
                                               batch_size=args.batch_size, shuffle=True)
    mask = (torch.arange(0, D) % 2).float()
    modules = []
    for _ in range(args.num_blocks):
        modules += [CouplingLayer(D, 64, mask), BatchNormFlow(D)]
        mask = 1 - mask
    model = FlowSequential(*modules)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.orthogonal_(module.weight)
            module.bias.data.fill_(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-6)
    bpd = 1.0 / (D * math.log(2))
    step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0.0
        for (data,) in train_loader:
            optimizer.zero_grad()
            loss = -model.log_probs(data).mean() * bpd
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            train_loss += loss.item()
            step += 1
        model.eval()
        with torch.no_grad():
            model.train()  # pytorch-flows: one training-mode pass over the data sets the BatchNormFlow statistics
            model(train[:1024])
            model.eval()
            val_loss = -model.log_probs(val).mean().item() * bpd
        print(f"epoch {epoch} step {step} train {train_loss / len(train_loader):.4f} bits/dim  "
              f"val {val_loss:.4f} bits/dim")


if __name__ == "__main__":
    main()
