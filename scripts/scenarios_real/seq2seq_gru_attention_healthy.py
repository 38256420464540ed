"""Sequence-to-sequence GRU encoder-decoder with Bahdanau attention in the layout of the PyTorch tutorial
"Translation with a Sequence to Sequence Network and Attention": EncoderRNN (embedding, dropout, GRU), an
AttnDecoderRNN that decodes MAX_LENGTH steps one token at a time (additive attention Va(tanh(Wa q + Ua k)) over
the encoder outputs, the context concatenated with the embedded input, a GRU, log_softmax), NLLLoss on the
decoder's log-probabilities. Two optimizers, one per module (encoder_optimizer and decoder_optimizer, Adam lr
1e-3), zeroed and stepped together in train_epoch. Teacher forcing with probability 0.5 per batch (the
tutorial's teacher_forcing_ratio): on the other batches the decoder feeds back its own argmax, so the loss of
a batch depends on the coin and the training loss is noisy by design.

Data: a synthetic "translation" made in code, seeded: source sentences of 3-7 tokens (vocabulary 16); the
target is the source reversed with each word mapped through a fixed dictionary, then EOS and padding. Prints the
average loss like the tutorial's showPlot log and the greedy-decoding accuracy on held-out pairs."""
import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SOS_token, EOS_token, PAD = 1, 2, 0
MAX_LENGTH = 9
N_WORDS = 16


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        return self.gru(embedded)


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys))).squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights, keys), weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden = self.forward_step(decoder_input, decoder_hidden, encoder_outputs)
            decoder_outputs.append(decoder_output)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
            else:
                decoder_input = decoder_output.topk(1)[1].squeeze(-1).detach()
        return F.log_softmax(torch.cat(decoder_outputs, dim=1), dim=-1), decoder_hidden

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        context, _ = self.attention(hidden.permute(1, 0, 2), encoder_outputs)
        output, hidden = self.gru(torch.cat((embedded, context), dim=2), hidden)
        return self.out(output), hidden


def make_pairs(n, seed):
    rng = random.Random(seed)
    mapping = list(range(3, N_WORDS))
    random.Random(7).shuffle(mapping)
    src = torch.full((n, MAX_LENGTH), PAD, dtype=torch.long)
    tgt = torch.full((n, MAX_LENGTH), PAD, dtype=torch.long)
    for i in range(n):
        words = [rng.randrange(3, N_WORDS) for _ in range(rng.randint(3, 7))]
        out = [mapping[w - 3] for w in reversed(words)]
        src[i, :len(words) + 1] = torch.tensor(words + [EOS_token])
        tgt[i, :len(out) + 1] = torch.tensor(out + [EOS_token])
    return src, tgt


def train_epoch(dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion, tf_ratio):
    total_loss = 0
    for input_tensor, target_tensor in dataloader:
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        use_tf = random.random() < tf_ratio
        decoder_outputs, _ = decoder(encoder_outputs, encoder_hidden, target_tensor if use_tf else None)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        total_loss += loss.item()
    return total_loss / len(dataloader)


def evaluate(encoder, decoder, src, tgt):
    encoder.eval()
    decoder.eval()
    with torch.no_grad():
        out, _ = decoder(*encoder(src))
        pred = out.argmax(-1)
    encoder.train()
    decoder.train()
    mask = tgt != PAD
    return ((pred == tgt) & mask).sum().item() / mask.sum().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-epochs", type=int, default=12)
    ap.add_argument("--learning-rate", type=float, default=1e-3)
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--teacher-forcing-ratio", type=float, default=0.5)
    args = ap.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    src, tgt = make_pairs(2048, 1)
    vsrc, vtgt = make_pairs(256, 2)
    train_dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(src, tgt), batch_size=64,
                                                   shuffle=True)
    encoder = EncoderRNN(N_WORDS, args.hidden_size)
    decoder = AttnDecoderRNN(args.hidden_size, N_WORDS)
    encoder_optimizer = torch.optim.Adam(encoder.parameters(), lr=args.learning_rate)
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=args.learning_rate)
    criterion = nn.NLLLoss()
    for epoch in range(1, args.n_epochs + 1):
        loss = train_epoch(train_dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion,
                           args.teacher_forcing_ratio)
        print(f"epoch {epoch} step {epoch * len(train_dataloader)} loss {loss:.4f} "
              f"val token acc {evaluate(encoder, decoder, vsrc, vtgt):.4f}")


if __name__ == "__main__":
    main()
