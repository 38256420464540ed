"""Builds, trains and drops models one after another inside a function (as a sweep does); prints how many of
the dropped models, their weights and optimizers are still alive after gc.collect(): an observer must keep
none of them."""
import gc
import weakref

import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    refs = []
    for trial in range(4):
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(12):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            model(x)  # a validation pass
        refs += [weakref.ref(model), weakref.ref(model[0].weight), weakref.ref(opt)]
        del model, opt, loss
        gc.collect()
    print("alive", sum(r() is not None for r in refs), "of", len(refs))


if __name__ == "__main__":
    main()
