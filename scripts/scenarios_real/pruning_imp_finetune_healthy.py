"""Iterative magnitude pruning with torch.nn.utils.prune in the layout of the PyTorch pruning tutorial and the
lottery-ticket / Han et al. prune -> fine-tune repos (e.g. rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch,
without the rewinding): a LeNet-300-100 MLP trained densely with Adam, then five rounds of
prune.global_unstructured(L1Unstructured, amount=0.2) over the three Linear weights (each round removes 20% of
the weights still alive, 67% pruned after five), each followed by fine-tuning at lr/3 with the same optimizer;
after the last round prune.remove makes the masks permanent. While pruned, `weight` is recomputed from
`weight_orig * weight_mask` by a forward pre-hook: the pruned entries get a zero gradient and stay zero by design,
a growing share of every layer's weights that never changes. The loss jumps up a little after each prune, then
recovers. Test accuracy and sparsity are printed after each round.

Data: a 10-class problem made in code, seeded: 64-d inputs from a Gaussian mixture (three centres per class)
passed through a fixed random tanh map, plus noise."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune


class LeNet300100(nn.Module):
    def __init__(self, n_in=64, n_out=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, 300)
        self.fc2 = nn.Linear(300, 100)
        self.fc3 = nn.Linear(100, n_out)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def make_data(n, seed, n_in=64, n_cls=10):
    g = torch.Generator().manual_seed(1234)
    centres = torch.randn(n_cls, 3, 16, generator=g) * 1.2
    mix = torch.randn(16, n_in, generator=g) / 4
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, n_cls, (n,), generator=g)
    c = torch.randint(0, 3, (n,), generator=g)
    z = centres[y, c] + 0.8 * torch.randn(n, 16, generator=g)
    x = torch.tanh(z @ mix) * 2 + 0.1 * torch.randn(n, n_in, generator=g)
    return x, y


def train_steps(model, optimizer, loader_iter, steps, log_every, tag):
    model.train()
    for i in range(steps):
        x, y = next(loader_iter)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if i % log_every == 0:
            print(f"{tag} step {i} loss {loss.item():.4f}")


def test(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def sparsity(model):
    zeros = sum(int((m.weight == 0).sum()) for m in (model.fc1, model.fc2, model.fc3))
    total = sum(m.weight.nelement() for m in (model.fc1, model.fc2, model.fc3))
    return zeros / total


def forever(loader):
    while True:
        yield from loader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1.2e-3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prune-percent", type=float, default=0.2)
    ap.add_argument("--dense-steps", type=int, default=200)
    ap.add_argument("--finetune-steps", type=int, default=60)
    args = ap.parse_args()
    torch.manual_seed(0)
    x, y = make_data(6000, 1)
    xt, yt = make_data(2000, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
    batches = forever(loader)
    model = LeNet300100()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4)
    train_steps(model, optimizer, batches, args.dense_steps, 50, "dense")
    print(f"dense: test acc {test(model, xt, yt):.4f}")
    parameters_to_prune = ((model.fc1, "weight"), (model.fc2, "weight"), (model.fc3, "weight"))
    for r in range(1, args.rounds + 1):
        prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured,
                                  amount=args.prune_percent)
        print(f"round {r}: pruned, test acc {test(model, xt, yt):.4f}, sparsity {sparsity(model):.3f}")
        for group in optimizer.param_groups:
            group["lr"] = args.lr / 3
        train_steps(model, optimizer, batches, args.finetune_steps, 20, f"round {r} finetune")
        print(f"round {r}: fine-tuned, test acc {test(model, xt, yt):.4f}, sparsity {sparsity(model):.3f}")
    for module, name in parameters_to_prune:
        prune.remove(module, name)
    print(f"final: test acc {test(model, xt, yt):.4f}, sparsity {sparsity(model):.3f}")


if __name__ == "__main__":
    main()
