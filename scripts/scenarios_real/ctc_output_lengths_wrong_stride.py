"""Broken CTC acoustic model (output lengths computed with the wrong stride): a deepspeech.pytorch-style
recogniser whose conv front-end subsamples time by 2, but the output lengths handed to nn.CTCLoss are computed
as input_lengths // 4 (left from an earlier front-end with two stride-2 convs). For the utterances whose
transcript needs more frames than that (label length plus one blank between repeated labels), no alignment exists:
their CTC loss is +inf, and with zero_infinity=False (the default) the batch mean is inf from the first batch and
the gradient is NaN; Adam writes the NaN into every weight at the first step and the loss is NaN from then on.

Layout: a Conv2d front-end (stride 2 in time, Hardtanh), a bidirectional LSTM, a Linear to the alphabet, log_softmax
over classes, output laid out (T, N, C) for nn.CTCLoss(blank=0, reduction="mean"), Adam lr 3e-4, clip_grad_norm 400
(deepspeech's max_norm). Data: synthetic "spectrograms" (each label drawn as a 6-frame tone at its own frequency
band, plus noise), utterances of 3-9 labels, 6 frames per label, padded; made in code."""
import argparse

import torch
import torch.nn as nn

N_FREQ, N_CLASSES = 16, 8   # class 0 = blank


class DeepSpeechLite(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)), nn.BatchNorm2d(8), nn.Hardtanh(0, 20))
        self.rnn = nn.LSTM(8 * (N_FREQ // 2), hidden, bidirectional=True, batch_first=False)
        self.fc = nn.Linear(2 * hidden, N_CLASSES)

    def forward(self, spect):                       # spect (N, 1, F, T)
        x = self.conv(spect)                        # (N, 8, F/2, T/2)
        n, c, f, t = x.shape
        x = x.view(n, c * f, t).permute(2, 0, 1)    # (T/2, N, 8*F/2)
        x, _ = self.rnn(x)
        return self.fc(x).log_softmax(dim=-1)       # (T/2, N, C)


def make_batch(n, g):
    lens = torch.randint(3, 10, (n,), generator=g)
    targets = [torch.randint(1, N_CLASSES, (int(k),), generator=g) for k in lens]
    frames = 6 * lens
    tmax = int(frames.max())
    spect = 0.1 * torch.randn(n, 1, N_FREQ, tmax, generator=g)
    for i, tgt in enumerate(targets):
        for j, c in enumerate(tgt):
            spect[i, 0, 2 * int(c):2 * int(c) + 2, 6 * j:6 * j + 6] += 1.0
    return spect, torch.cat(targets), frames, lens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-norm", type=float, default=400.0)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = DeepSpeechLite()
    criterion = nn.CTCLoss(blank=0, reduction="mean")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        spect, targets, input_lengths, target_lengths = make_batch(args.batch_size, g)
        out = model(spect)
        output_lengths = input_lengths // 4          # BUG: the front-end subsamples time by 2, not 4
        loss = criterion(out, targets, output_lengths, target_lengths)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        optimizer.step()
        if step % 10 == 0 or step < 3:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
