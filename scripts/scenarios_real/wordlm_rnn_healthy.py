"""Word-level language-model layout (pytorch/examples word_language_model style): an RNNModel (Embedding ->
LSTM -> Linear decoder) trained by truncated BPTT over a batchified token stream; the hidden state is carried
from batch to batch (model(data, hidden)) and detached each batch (repackage_hidden); no optimizer: the update
is the manual p.data.add_(p.grad, alpha=-lr) after clip_grad_norm_, with the example's lr 20 and clip 0.25.

Corpus: synthetic tokens from a fixed random bigram table over 100 "words". The script counts its own updates
(one per backward: there is no optimizer.step)."""
import argparse

import torch
import torch.nn as nn

NTOKENS = 100


def make_corpus(n, seed):
    table = torch.randint(0, NTOKENS, (NTOKENS, 4), generator=torch.Generator().manual_seed(11))
    g = torch.Generator().manual_seed(seed)
    ids = torch.empty(n, dtype=torch.long)
    ids[0] = 0
    choice = torch.randint(0, 4, (n,), generator=g)
    for i in range(1, n):
        ids[i] = table[ids[i - 1], choice[i]]
    return ids


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=20)
    ap.add_argument("--clip", type=float, default=0.25)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--bptt", type=int, default=20)
    ap.add_argument("--log-interval", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(1111)
    train_data = batchify(make_corpus(24000, 1), 20)
    model = RNNModel(NTOKENS, 32, 32, 2)
    criterion = nn.NLLLoss()
    updates = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        total_loss = 0.0
        hidden = model.init_hidden(20)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)
            updates += 1
            total_loss += loss.item()
            if batch % args.log_interval == 0 and batch > 0:
                cur_loss = total_loss / args.log_interval
                print(f"| epoch {epoch:3d} | batch {batch:4d} | lr {args.lr:g} | loss {cur_loss:5.2f}")
                total_loss = 0.0
    print(f"updates {updates}")


if __name__ == "__main__":
    main()
