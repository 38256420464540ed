"""Click-through-rate model in the facebookresearch/dlrm layout: dense features through a bottom MLP, each sparse
categorical feature through its own nn.EmbeddingBag(mode="sum", sparse=True) table (sizes 20 .. 20000), the
pairwise dot-product interaction of the bottom-MLP output and the embeddings (lower triangle, concatenated with the
dense vector), a top MLP to one logit, BCEWithLogits. As in NCF/DLRM setups with sparse gradients, two
optimizers stepped every iteration: torch.optim.SparseAdam for the embedding tables (sparse gradients) and Adam
for the dense MLPs. With 256 samples a batch and Zipf-distributed ids, most rows of the large tables get no
gradient in a step (and many never get one): that is how sparse embedding training goes. Validation AUC-like
accuracy and log-loss under model.eval() / no_grad after each epoch.

Data: synthetic CTR logs made in code, seeded: 8 dense features, 4 categorical features with Zipf(1.3)-drawn ids,
a click drawn from a hidden logistic model (hidden per-id vectors dotted with the dense features, plus per-id
biases). Log-loss falls from 0.69 toward the hidden model's ~0.50."""
import argparse

import numpy as np
import torch
import torch.nn as nn

TABLES = [20000, 5000, 300, 20]
N_DENSE = 8


class DLRM(nn.Module):
    def __init__(self, m_spa=16, ln_emb=TABLES, ln_bot=(N_DENSE, 64, 16), ln_top=(64, 32, 1)):
        super().__init__()
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(n, m_spa, mode="sum", sparse=True) for n in ln_emb])
        for emb in self.emb_l:
            nn.init.uniform_(emb.weight, -np.sqrt(1 / emb.num_embeddings), np.sqrt(1 / emb.num_embeddings))
        self.bot_l = self.create_mlp(ln_bot, sigmoid_layer=-1)
        num_fea = len(ln_emb) + 1
        num_int = num_fea * (num_fea - 1) // 2 + m_spa
        self.top_l = self.create_mlp((num_int,) + tuple(ln_top[1:]), sigmoid_layer=-1)

    @staticmethod
    def create_mlp(ln, sigmoid_layer):
        layers = nn.ModuleList()
        for i in range(len(ln) - 1):
            lin = nn.Linear(ln[i], ln[i + 1], bias=True)
            std = np.sqrt(2 / (ln[i] + ln[i + 1]))
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.normal_(lin.bias, 0.0, np.sqrt(1 / ln[i + 1]))
            layers.append(lin)
            if i < len(ln) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def interact_features(self, x, ly):
        batch_size, d = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        li, lj = torch.tril_indices(ni, nj, offset=-1)
        return torch.cat([x, Z[:, li, lj]], dim=1)

    def forward(self, dense_x, lS_o, lS_i):
        x = self.bot_l(dense_x)
        ly = [emb(lS_i[k], lS_o[k]) for k, emb in enumerate(self.emb_l)]
        return self.top_l(self.interact_features(x, ly)).squeeze(1)


def make_logs(n, seed, hidden_seed=123):
    rng = np.random.default_rng(seed)
    hid = np.random.default_rng(hidden_seed)
    w_id = [hid.normal(0, 0.6, (t, N_DENSE)) for t in TABLES]
    b_id = [hid.normal(0, 0.8, t) for t in TABLES]
    dense = rng.normal(0, 1, (n, N_DENSE))
    ids = [np.minimum(rng.zipf(1.3, n) - 1, t - 1) for t in TABLES]
    logit = sum((w[i] * dense).sum(1) * 0.3 + b[i] for w, b, i in zip(w_id, b_id, ids)) / 2 - 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return (torch.tensor(np.log1p(np.abs(dense)) * np.sign(dense), dtype=torch.float32),
            torch.tensor(np.stack(ids, 1), dtype=torch.long), torch.tensor(y))


def batches(dense, ids, y, bs, shuffle, g=None):
    order = torch.randperm(len(y), generator=g) if shuffle else torch.arange(len(y))
    for s in range(0, len(y) - bs + 1, bs):
        j = order[s:s + bs]
        # one id per bag: offsets 0..bs-1 into each table's index list
        offsets = [torch.arange(bs) for _ in TABLES]
        indices = [ids[j, k] for k in range(len(TABLES))]
        yield dense[j], offsets, indices, y[j]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--mini-batch-size", type=int, default=256)
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    train, test = make_logs(16384, 1), make_logs(4096, 2)
    model = DLRM()
    sparse_params = [p for n, p in model.named_parameters() if n.startswith("emb_l")]
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb_l")]
    optimizers = [torch.optim.SparseAdam(sparse_params, lr=args.learning_rate * 3),
                  torch.optim.Adam(dense_params, lr=args.learning_rate)]
    loss_fn = nn.BCEWithLogitsLoss()
    g = torch.Generator().manual_seed(0)
    it = 0
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        nb = 0
        for X, lS_o, lS_i, T in batches(*train, args.mini_batch_size, True, g):
            Z = model(X, lS_o, lS_i)
            E = loss_fn(Z, T)
            for opt in optimizers:
                opt.zero_grad()
            E.backward()
            for opt in optimizers:
                opt.step()
            total += E.item()
            nb += 1
            it += 1
            if it % 32 == 0:
                print(f"it {it} loss {total / nb:.4f}")
        model.eval()
        with torch.no_grad():
            losses, correct, count = 0.0, 0, 0
            for X, lS_o, lS_i, T in batches(*test, 1024, False):
                Z = model(X, lS_o, lS_i)
                losses += loss_fn(Z, T).item() * len(T)
                correct += ((Z > 0).float() == T).sum().item()
                count += len(T)
        print(f"epoch {epoch} it {it} train loss {total / nb:.4f} test loss {losses / count:.4f} "
              f"test acc {correct / count:.4f}")


if __name__ == "__main__":
    main()
