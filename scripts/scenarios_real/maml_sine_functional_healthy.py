"""MAML (Finn et al. 2017) on sine-wave regression in the layout of the common PyTorch re-implementations
(dragen1860/MAML-Pytorch, learn2learn's maml_sine example) written with torch.func.functional_call: an MLP
1 -> 40 -> 40 -> 1 (ReLU); each meta-iteration samples a batch of 8 tasks (amplitude 0.1-5, phase 0-pi), and for
each task adapts a dict of fast weights from the model's named_parameters with 1 inner SGD step (lr 0.02) on
10 support points, torch.autograd.grad(..., create_graph=True) so that the outer gradient flows through the
adaptation (second order); the query loss of the adapted weights on 10 other points is averaged over the tasks
and the outer Adam (lr 3e-3) steps the meta-parameters. Every 100 meta-iterations a held-out batch of tasks is
evaluated before and after adaptation.

The meta-loss is noisy by design (a new batch of tasks with amplitudes 0.1-5 each step: the MSE scales with
the amplitude squared), and the inner gradients are taken with autograd.grad, not backward: only the outer
loss is back-propagated. Tasks are sampled from a seeded generator."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call


class SineTasks:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def sample(self, n_tasks, k):
        amp = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=self.g)
        phase = torch.pi * torch.rand(n_tasks, 1, 1, generator=self.g)
        x = 10 * torch.rand(n_tasks, 2 * k, 1, generator=self.g) - 5
        y = amp * torch.sin(x - phase)
        return x[:, :k], y[:, :k], x[:, k:], y[:, k:]


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))

    def forward(self, x):
        return self.net(x)


def adapt(model, params, x_s, y_s, inner_lr, steps, create_graph):
    fast = dict(params)
    for _ in range(steps):
        loss = F.mse_loss(functional_call(model, fast, (x_s,)), y_s)
        grads = torch.autograd.grad(loss, list(fast.values()), create_graph=create_graph)
        fast = {name: w - inner_lr * g for (name, w), g in zip(fast.items(), grads)}
    return fast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meta-iterations", type=int, default=800)
    ap.add_argument("--meta-batch", type=int, default=8)
    ap.add_argument("--k-shot", type=int, default=10)
    ap.add_argument("--inner-lr", type=float, default=0.02)
    ap.add_argument("--inner-steps", type=int, default=1)
    ap.add_argument("--meta-lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    tasks = SineTasks(args.seed)
    eval_tasks = SineTasks(args.seed + 1000)
    model = Regressor()
    meta_opt = torch.optim.Adam(model.parameters(), lr=args.meta_lr)
    optimizer_steps = 0
    for it in range(args.meta_iterations):
        x_s, y_s, x_q, y_q = tasks.sample(args.meta_batch, args.k_shot)
        params = dict(model.named_parameters())
        meta_loss = 0.0
        for t in range(args.meta_batch):
            fast = adapt(model, params, x_s[t], y_s[t], args.inner_lr, args.inner_steps, create_graph=True)
            meta_loss = meta_loss + F.mse_loss(functional_call(model, fast, (x_q[t],)), y_q[t])
        meta_loss = meta_loss / args.meta_batch
        meta_opt.zero_grad()
        meta_loss.backward()
        meta_opt.step()
        optimizer_steps += 1
        if (it + 1) % 100 == 0:
            ex_s, ey_s, ex_q, ey_q = eval_tasks.sample(32, args.k_shot)
            params = {n: p.detach() for n, p in model.named_parameters()}
            pre = post = 0.0
            for t in range(32):
                with torch.no_grad():
                    pre += F.mse_loss(functional_call(model, params, (ex_q[t],)), ey_q[t]).item()
                fast = adapt(model, {n: p.requires_grad_(True) for n, p in
                                     ((n, p.clone()) for n, p in params.items())},
                             ex_s[t], ey_s[t], args.inner_lr, 10, create_graph=False)
                with torch.no_grad():
                    post += F.mse_loss(functional_call(model, fast, (ex_q[t],)), ey_q[t]).item()
            print(f"meta-iteration {it + 1}: meta loss {meta_loss.item():.3f}  held-out tasks: "
                  f"before adaptation {pre / 32:.3f}, after 10 steps {post / 32:.3f}")
    print(f"optimizer steps: {optimizer_steps}")


if __name__ == "__main__":
    main()
