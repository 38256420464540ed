"""A pytorch/examples-style loop that logs its running loss, and the word_language_model loop's recurrent state
(manual SGD on `p.data`, as that example does). --keep says how each step's loss or state is kept:
  item     `running_loss += loss.item()`                       (healthy: a float)
  tensor   `running_loss += loss`                              (each step's autograd graph stays alive)
  detach   the RNN's hidden state detached each batch          (healthy: truncated BPTT)
  hidden   the RNN's hidden state never detached, backward(retain_graph=True)   (the graph grows every batch)
Prints the process's resident memory and the step time per epoch: with `tensor` and `hidden` both grow."""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--keep", default="item", choices=["item", "tensor", "detach", "hidden"])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=None, help="per epoch (default 100, the RNN 12)")
args = parser.parse_args()
if args.batches is None:
    args.batches = 100 if args.keep in ("item", "tensor") else 12
torch.manual_seed(0)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class RNNModel(nn.Module):
    def __init__(self, ntoken=50, nhid=64):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.GRU(nhid, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output), hidden


g = torch.Generator().manual_seed(1)
if args.keep in ("item", "tensor"):
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    teacher = torch.randn(256, 10, generator=g)  # labels a linear model can learn
    xs = [torch.randn(64, 256, generator=g) for _ in range(args.batches)]
    data = [(x, (x @ teacher).argmax(1)) for x in xs]
    running_loss, seen = 0.0, 0  # the mean loss since the start, printed each epoch
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.perf_counter()
        for x, target in data:
            optimizer.zero_grad()
            output = model(x)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            if args.keep == "tensor":
                running_loss += loss
            else:
                running_loss += loss.item()
            seen += 1
        ms = (time.perf_counter() - start) * 1000 / len(data)
        print(f"epoch {epoch} loss {running_loss / seen:.4f} rss {rss_mb():.1f} MB step {ms:.2f} ms")
else:
    model = RNNModel()
    lr, bptt, batch = 0.5, 8, 16
    source = torch.randint(0, 50, (args.batches * bptt + 1, batch), generator=g)
    hidden = torch.zeros(1, batch, 64)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total_loss, start = 0.0, time.perf_counter()
        for i in range(0, args.batches * bptt, bptt):
            x, target = source[i : i + bptt], source[i + 1 : i + 1 + bptt]
            if args.keep == "detach":
                hidden = hidden.detach()
            model.zero_grad()
            output, hidden = model(x, hidden)
            loss = F.cross_entropy(output.view(-1, 50), target.reshape(-1))
            loss.backward(retain_graph=args.keep == "hidden")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            total_loss += loss.item()
        ms = (time.perf_counter() - start) * 1000 / args.batches
        print(f"epoch {epoch} loss {total_loss / args.batches:.4f} rss {rss_mb():.1f} MB step {ms:.2f} ms")
