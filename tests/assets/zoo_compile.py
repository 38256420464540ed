"""torch.compile(model) and model.compile(), trained a few steps; prints torch._dynamo's counters as JSON
(graph breaks, graphs, captured calls) so a run with and without neuraldbg can be compared.

    python zoo_compile.py [BACKEND]      # default "eager": dynamo traces, no C++ compiler needed"""
import json
import sys

import torch
import torch._dynamo.utils as dynamo_utils
import torch.nn as nn

backend = sys.argv[1] if len(sys.argv) > 1 else "eager"
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)

    def forward(self, x):
        h = self.act(self.fc1(x)).view(4, 16, 16)  # 4 sequences of 16 tokens: attention traced into the graph too
        h = nn.functional.scaled_dot_product_attention(h, h, h, is_causal=True)
        return self.fc2(h.reshape(64, 16))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 2)

    def forward(self, x):
        return self.proj(x)


net = torch.compile(Net(), backend=backend)  # a wrapper (OptimizedModule) around the model
head = Head()
head.compile(backend=backend)  # in place: the module's own call is compiled
opt = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=0.1)
x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
for step in range(15):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(head(net(x)), y)
    loss.backward()
    opt.step()
counters = dynamo_utils.counters
print(json.dumps({"graph_breaks": sum(counters["graph_break"].values()),
                  "unique_graphs": counters["stats"]["unique_graphs"],
                  "calls_captured": counters["stats"]["calls_captured"],
                  "loss": round(loss.item(), 6)}))
