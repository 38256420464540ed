"""Graph convolutional network for semi-supervised node classification in the layout of tkipf/pygcn (and the
GCN example of PyTorch Geometric), written in pure torch: message passing with `index_add_` over an edge list
(symmetric normalisation D^-1/2 (A + I) D^-1/2, messages weighted per edge and summed into the target node),
two GCN layers with ReLU and dropout 0.5, log_softmax + nll_loss on the labelled training nodes only (20 per
class), full-batch training with Adam lr 0.01 and weight decay 5e-4 for 200 epochs, validation accuracy under
model.eval() / torch.no_grad() every epoch, test accuracy at the end.

Data: a stochastic block model graph made in code (600 nodes, 4 communities, edges 20x more likely inside a
community), node features a noisy bag-of-words drawn from per-community word distributions, seeded."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, edge_index, edge_weight):
        h = x @ self.weight
        src, dst = edge_index
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * edge_weight[:, None])
        return out + self.bias


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, edge_index, edge_weight):
        x = F.relu(self.gc1(x, edge_index, edge_weight))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, edge_index, edge_weight)
        return F.log_softmax(x, dim=1)


def make_graph(n=600, k=4, nfeat=200, seed=1):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, k, (n,), generator=g)
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, 0.04, 0.002)
    adj = torch.rand(n, n, generator=g) < p
    adj = torch.triu(adj, diagonal=1)
    adj = adj | adj.T
    adj = adj | torch.eye(n, dtype=torch.bool)  # self-loops
    edge_index = adj.nonzero().T  # (2, E): src, dst
    deg = adj.sum(1).float()
    edge_weight = deg[edge_index[0]].rsqrt() * deg[edge_index[1]].rsqrt()
    word_dist = F.softmax(torch.randn(k, nfeat, generator=g) * 1.5, dim=-1)
    counts = torch.stack([torch.multinomial(word_dist[c], 12, replacement=True, generator=g) for c in labels.tolist()])
    features = torch.zeros(n, nfeat).scatter_add_(1, counts, torch.ones(counts.shape))
    features = features / features.sum(1, keepdim=True)  # row-normalise, as pygcn does
    perm = torch.randperm(n, generator=g)
    idx_train = torch.cat([perm[labels[perm] == c][:20] for c in range(k)])
    rest = perm[~torch.isin(perm, idx_train)]
    idx_val, idx_test = rest[:150], rest[150:]
    return features, edge_index, edge_weight, labels, idx_train, idx_val, idx_test


def accuracy(output, labels):
    return (output.argmax(1) == labels).float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--dropout", type=float, default=0.5)
    args = ap.parse_args()
    torch.manual_seed(42)
    features, edge_index, edge_weight, labels, idx_train, idx_val, idx_test = make_graph()
    model = GCN(features.shape[1], args.hidden, int(labels.max()) + 1, args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    for epoch in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, edge_index, edge_weight)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        acc_train = accuracy(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            output = model(features, edge_index, edge_weight)
            loss_val = F.nll_loss(output[idx_val], labels[idx_val])
            acc_val = accuracy(output[idx_val], labels[idx_val])
        if epoch % 20 == 0 or epoch == args.epochs - 1:
            print(f"Epoch: {epoch + 1:04d} loss_train: {loss_train.item():.4f} acc_train: {acc_train:.4f} "
                  f"loss_val: {loss_val.item():.4f} acc_val: {acc_val:.4f}")
    model.eval()
    with torch.no_grad():
        output = model(features, edge_index, edge_weight)
    print(f"Test set results: loss= {F.nll_loss(output[idx_test], labels[idx_test]).item():.4f} "
          f"accuracy= {accuracy(output[idx_test], labels[idx_test]):.4f}")


if __name__ == "__main__":
    main()
