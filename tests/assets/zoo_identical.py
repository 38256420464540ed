"""Trains each named model for a few steps and saves every parameter, buffer and the RNG state to argv[1].

    python zoo_identical.py OUT.pt mlp cnn lstm transformer
Run with and without neuraldbg, the two files must be bit-identical."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True, dropout=0.2)
        self.head = nn.Linear(24, 3)

    def forward(self, tokens):
        out, _ = self.lstm(self.emb(tokens))
        return self.head(out[:, -1])


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)

    def forward(self, tokens):
        return self.head(self.encoder(self.emb(tokens)).mean(1))


def make(name):
    if name == "mlp":
        model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(inplace=True), nn.Dropout(0.2), nn.Linear(32, 3))
        return model, lambda: torch.randn(32, 12)
    if name == "cnn":
        return CNN(), lambda: torch.randn(16, 1, 16, 16)
    if name == "lstm":
        return LSTMNet(), lambda: torch.randint(0, 30, (16, 10))
    return Transformer(), lambda: torch.randint(0, 30, (16, 10))


results = {}
for name in sys.argv[2:]:
    torch.manual_seed(0)
    model, batch = make(name)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(25):
        x, y = batch(), torch.randint(0, 3, (16 if name != "mlp" else 32,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        probe = model(batch())
    results[name] = {"state": model.state_dict(), "opt": opt.state_dict()["state"], "probe": probe,
                     "rng": torch.get_rng_state()}
torch.save(results, sys.argv[1])
