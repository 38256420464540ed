"""Early divergence that kills the script (word_language_model Transformer style): a small TransformerEncoder
language model with a causal mask, trained by the manual update p.data.add_(p.grad, alpha=-lr) at lr 200 (10x the
example's default of 20), logging the perplexity math.exp(loss) at every batch.

Within five updates the loss runs from 4.6 to ~780, math.exp overflows and the script dies with
OverflowError (exit status 1), as it does under plain python (see labels.json for the plain run)."""
import argparse
import math

import torch
import torch.nn as nn

NTOKENS, BPTT, BSZ = 80, 16, 16


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=256):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(0)]


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp)
        self.encoder = nn.Embedding(ntoken, ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp

    def forward(self, src):
        mask = nn.Transformer.generate_square_subsequent_mask(len(src))
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        out = self.transformer_encoder(src, mask=mask, is_causal=True)
        return torch.log_softmax(self.decoder(out), dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=200)
    ap.add_argument("--clip", type=float, default=0.25)
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(1111)
    stream = torch.randint(0, NTOKENS, (BSZ * (BPTT * args.batches + 1),), generator=torch.Generator().manual_seed(2))
    data = stream.view(BSZ, -1).t().contiguous()
    model = TransformerModel(NTOKENS, 32, 2, 64, 2)
    criterion = nn.NLLLoss()
    for batch, i in enumerate(range(0, BPTT * args.batches, BPTT)):
        x, y = data[i:i + BPTT], data[i + 1:i + 1 + BPTT].reshape(-1)
        model.zero_grad()
        loss = criterion(model(x).view(-1, NTOKENS), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
        print(f"| batch {batch:3d} | loss {loss.item():10.2f} | ppl {math.exp(loss.item()):10.2f}")
    print("done")


if __name__ == "__main__":
    main()
