"""BROKEN: ctc_speech_healthy.py with the log_softmax left out before nn.CTCLoss (the raw Linear scores are
passed as if they were log-probabilities; a common slip when porting from a framework whose CTC loss normalises
itself). CTCLoss then scores -log of a sum of exp(raw score) products that no longer sum to 1: the model
lowers the loss without bound by growing every score, the loss goes negative and keeps falling, and the
greedy decoding learns nothing useful.

Original description: CTC speech-recognition-style model in the layout of deepspeech.pytorch / the torchaudio ASR examples: a conv
front end over (batch, features, time) spectrogram-like frames (Conv1d -> BatchNorm1d -> ReLU, stride 2 in
time), a bidirectional GRU, a Linear classifier, log_softmax over the classes, transposed to (time, batch,
classes) for nn.CTCLoss(blank=0, zero_infinity=True) with per-utterance input and target lengths (padded batch,
targets concatenated). AdamW lr 1e-3 with OneCycleLR, gradient clipping at 400 as DeepSpeech does; greedy CTC
decoding (collapse repeats, drop blanks) and the label error rate on a held-out batch.

Data: utterances made in code: each of 12 symbols has its own 20-dim feature template; a transcript of 3-7 symbols
is rendered as 3-6 noisy frames per symbol with silence frames in between and around, padded to the longest in the
batch; seeded. The CTC loss starts high (~30 per utterance, mean-reduced over target lengths: ~6) and falls as
the alignment is learned."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_SYMBOLS, FEAT = 12, 20


def make_batch(templates, batch, g):
    feats, targets, in_lens, tgt_lens = [], [], [], []
    for _ in range(batch):
        n = int(torch.randint(3, 8, (1,), generator=g))
        labels = torch.randint(1, NUM_SYMBOLS + 1, (n,), generator=g)
        frames = [torch.zeros(int(torch.randint(2, 5, (1,), generator=g)), FEAT)]
        for lab in labels.tolist():
            d = int(torch.randint(3, 7, (1,), generator=g))
            frames.append(templates[lab].expand(d, FEAT))
            frames.append(torch.zeros(int(torch.randint(1, 3, (1,), generator=g)), FEAT))
        x = torch.cat(frames)
        feats.append(x + 0.4 * torch.randn(x.shape, generator=g))
        targets.append(labels)
        in_lens.append(x.shape[0])
        tgt_lens.append(n)
    T = max(in_lens)
    padded = torch.zeros(batch, FEAT, T)
    for i, x in enumerate(feats):
        padded[i, :, : x.shape[0]] = x.T
    return padded, torch.cat(targets), torch.tensor(in_lens), torch.tensor(tgt_lens)


class SpeechModel(nn.Module):
    def __init__(self, n_feats=FEAT, hidden=64, n_class=NUM_SYMBOLS + 1):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(n_feats, hidden, 5, stride=2, padding=2), nn.BatchNorm1d(hidden),
                                  nn.ReLU(), nn.Conv1d(hidden, hidden, 3, padding=1), nn.BatchNorm1d(hidden),
                                  nn.ReLU())
        self.rnn = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, n_class)

    def output_lengths(self, lengths):
        return (lengths + 2 * 2 - 5) // 2 + 1

    def forward(self, x):
        x = self.conv(x).transpose(1, 2)  # (batch, time, hidden)
        x, _ = self.rnn(x)
        return self.classifier(x)


def greedy_decode(log_probs, lengths):
    out = []
    best = log_probs.argmax(-1)  # (batch, time)
    for seq, n in zip(best, lengths):
        seq = torch.unique_consecutive(seq[:n])
        out.append([s for s in seq.tolist() if s != 0])
    return out


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    templates = torch.randn(NUM_SYMBOLS + 1, FEAT, generator=g)
    model = SpeechModel()
    criterion = nn.CTCLoss(blank=0, zero_infinity=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr * 5, total_steps=args.steps,
                                                    anneal_strategy="linear")
    test = make_batch(templates, 64, torch.Generator().manual_seed(99))
    for step in range(args.steps):
        model.train()
        x, targets, in_lens, tgt_lens = make_batch(templates, args.batch_size, g)
        output = model(x)  # (batch, time, class) -- BUG: no log_softmax
        output = output.transpose(0, 1)  # (time, batch, class)
        loss = criterion(output, targets, model.output_lengths(in_lens), tgt_lens)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 400)
        optimizer.step()
        scheduler.step()
        if step % 25 == 0 or step == args.steps - 1:
            model.eval()
            with torch.no_grad():
                x, targets, in_lens, tgt_lens = test
                lp = F.log_softmax(model(x), dim=2)
                hyps = greedy_decode(lp, model.output_lengths(in_lens))
                refs = torch.split(targets, tgt_lens.tolist())
                errs = sum(edit_distance(h, r.tolist()) for h, r in zip(hyps, refs))
            print(f"step {step}: loss {loss.item():.4f} test LER {errs / int(tgt_lens.sum()):.3f}")


if __name__ == "__main__":
    main()
