"""Broken CTC acoustic model (raw scores into CTCLoss): the deepspeech.pytorch-style recogniser of
ctc_output_lengths_wrong_stride.py with correct output lengths, but the log_softmax at the end of forward was
dropped (it was moved "into the decoder" for greedy decoding, where argmax does not need it). nn.CTCLoss takes
log-probabilities: fed raw scores, the loss starts negative (-2.52, impossible for a log-likelihood), and its
backward, which assumes normalised log-probabilities, no longer points downhill: under Adam the loss climbs
steadily from -2.52 to +2.3 by step 60 and stays there (~1.7-2.2 to step 80). With log_softmax the same script
goes 3.83 -> 2.04 by step 50, falling all the way.

Layout: a Conv2d front-end (stride 2 in time, Hardtanh), a bidirectional LSTM, a Linear to the alphabet, output laid
out (T, N, C) for nn.CTCLoss(blank=0, reduction="mean"), Adam lr 3e-4, clip_grad_norm 400 (deepspeech's max_norm).
Data: synthetic "spectrograms" (each label drawn as a 6-frame tone at its own frequency band, plus noise),
utterances of 3-9 labels, 6 frames per label, padded; made in code."""
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
        return self.fc(x)                           # (T/2, N, C)  BUG: no log_softmax


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
    ap.add_argument("--steps", type=int, default=80)
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
        output_lengths = input_lengths // 2
        loss = criterion(out, targets, output_lengths, target_lengths)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        optimizer.step()
        if step % 10 == 0 or step < 3:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
