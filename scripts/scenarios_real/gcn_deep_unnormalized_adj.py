"""Broken deep GCN (adjacency not normalised): node classification in the tkipf/pygcn layout, deepened to 8
GraphConvolution layers, where the preprocessing line adj = normalize(adj + I) was dropped and the raw A + I is
used. Each layer then sums ~7 neighbours (and itself) instead of averaging them, so the hidden features grow
several-fold per layer: the first loss is 2.6e4 instead of ln(4) = 1.39, with gradients to match (the first
layer's largest). Adam's first steps shrink the weights until the logits are small again, and the network ends
where a blow-up leaves it: loss ~1.35-1.45 = chance, validation accuracy 0.25 (chance) from epoch 40 to the end.
The same script with normalize(adj + I) starts at 1.44 and reaches 1.04 / accuracy 0.41 at epoch 90.

Layout: GraphConvolution(in, out) with weight/bias Parameters initialised uniform(+-1/sqrt(out)),
support = input @ weight, output = adj @ support + bias; GCN = stack of layers with ReLU and dropout 0.5, log_softmax
+ nll_loss on the training nodes, Adam lr 0.01 weight_decay 5e-4, full-batch epochs (one step each). Data: a
4-community stochastic block model of 240 nodes (p_in 0.08, p_out 0.01), features = noisy community indicators
plus random dimensions, made in code."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        stdv = 1.0 / math.sqrt(out_features)
        self.weight.data.uniform_(-stdv, stdv)
        self.bias.data.uniform_(-stdv, stdv)

    def forward(self, x, adj):
        return adj @ (x @ self.weight) + self.bias


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, nlayers=8, dropout=0.5):
        super().__init__()
        dims = [nfeat] + [nhid] * (nlayers - 1) + [nclass]
        self.gcs = nn.ModuleList(GraphConvolution(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x, adj):
        for gc in self.gcs[:-1]:
            x = F.relu(gc(x, adj))
            x = F.dropout(x, self.dropout, training=self.training)
        return F.log_softmax(self.gcs[-1](x, adj), dim=1)


def normalize(mx):
    rowsum = mx.sum(1, keepdim=True)
    return mx / rowsum


def load_data(g, n=240, k=4, nfeat=32):
    labels = torch.arange(n) % k
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    p = torch.where(same, torch.tensor(0.08), torch.tensor(0.01))
    upper = (torch.rand(n, n, generator=g) < p).float().triu(1)
    adj = upper + upper.T
    features = torch.randn(n, nfeat, generator=g)
    features[:, :k] += 1.5 * F.one_hot(labels, k).float()
    perm = torch.randperm(n, generator=g)
    return adj, features, labels, perm[:80], perm[80:160], perm[160:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    adj, features, labels, idx_train, idx_val, idx_test = load_data(g)
    adj = adj + torch.eye(adj.shape[0])             # BUG: adj = normalize(adj + I) in the original
    model = GCN(features.shape[1], args.hidden, int(labels.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    for epoch in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        if epoch % 10 == 0 or epoch < 5:
            model.eval()
            with torch.no_grad():
                out = model(features, adj)
                acc_val = (out[idx_val].argmax(1) == labels[idx_val]).float().mean().item()
            print(f"Epoch {epoch:04d} loss_train {loss_train.item():.4g} acc_val {acc_val:.3f}")


if __name__ == "__main__":
    main()
