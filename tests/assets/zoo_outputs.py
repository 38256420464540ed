"""Awkward model code that must run unchanged under neuraldbg: in-place ops, modules returning tuples,
None, ints, dicts and dataclasses, a block shared and called three times per step, an RNN cell in a Python
loop, weight tying, a model built inside a function after the optimizer, a parameter added later."""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    aux: dict
    note: str


class Tupler(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x), None, 3, "text"


class Nothing(nn.Module):
    def forward(self, x):
        return None


class Counter(nn.Module):
    def forward(self, x):
        return x.shape[0]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(inplace=True))

    def forward(self, x):
        y = self.inner(x) + x
        y.mul_(0.5)  # in-place on an intermediate tensor
        return F.relu(y, inplace=True)


class Zoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.tupler = Tupler()
        self.nothing = Nothing()
        self.counter = Counter()
        self.block = Block()  # shared: called three times per step
        self.cell = nn.GRUCell(16, 16)  # an RNN cell in a Python loop
        self.head = nn.Linear(16, 20, bias=False)
        self.head.weight = self.emb.weight  # weight tying

    def forward(self, tokens):
        x = self.emb(tokens)
        h = torch.zeros(x.shape[0], 16)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        h, none, three, text = self.tupler(h)
        assert none is None and three == 3 and text == "text"
        assert self.nothing(h) is None and self.counter(h) == h.shape[0]
        for _ in range(3):
            h = self.block(h)
        return Out(self.head(h), {"h": h, "k": 1}, "ok")


def build():
    return Zoo()


def make_late():
    return nn.Sequential(nn.Linear(20, 8), nn.Tanh(), nn.Linear(8, 20))


model = build()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
late = make_late()  # built after the optimizer, added to it later
opt.add_param_group({"params": late.parameters()})
extra = None
tokens = torch.randint(0, 20, (32, 6))
for step in range(20):
    if step == 10:  # a parameter added in the middle of training
        extra = nn.Parameter(torch.zeros(20))
        opt.add_param_group({"params": [extra]})
    opt.zero_grad()
    out = model(tokens)
    logits = late(out.logits)
    if extra is not None:
        logits = logits + extra
    loss = F.cross_entropy(logits, tokens[:, -1])
    loss.backward()
    opt.step()
print("final loss", round(loss.item(), 4))
