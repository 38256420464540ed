"""A diverging SGD run (lr 0.4) that saves checkpoints the way timm's CheckpointSaver does: the state to a temporary
file, os.replace onto last.pth.tar (unlinked first), checkpoint-N hard-linked to it (copied with shutil.copy2 when
links fail or with --link 0), model_best the same way, only the best `--keep` checkpoints kept (the others
os.unlink'ed), a summary appended to a CSV. It checks, as it goes, that the folder looks as a real file system
would show it: a view that disagrees about which file is which stops it. SAVER_FULL=1 makes its first save fail as
on a full disk (a re-run that fails where the original did not)."""

import os
import shutil

import torch
import torch.nn as nn
from common import args

a = args(steps=40, lr=0.4, out="output/train", every=4, keep=2, link=1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True)
g = torch.Generator().manual_seed(0)


class Saver:
    def __init__(self, folder, keep, hard_link):
        self.folder, self.keep, self.hard_link = folder, keep, hard_link
        self.kept = []  # (metric, path), best first
        self.best = float("inf")
        os.makedirs(folder, exist_ok=True)

    def path(self, name):
        return os.path.join(self.folder, name)

    def duplicate(self, src, dst):
        if self.hard_link:
            try:
                if os.path.exists(dst):
                    os.unlink(dst)
                os.link(src, dst)
                return
            except OSError:
                self.hard_link = False
        shutil.copy2(src, dst)

    def save(self, epoch, metric):
        if os.environ.get("SAVER_FULL"):
            raise OSError(28, "No space left on device", self.folder)
        tmp, last = self.path("tmp.pth.tar"), self.path("last.pth.tar")
        torch.save({"epoch": epoch, "state_dict": model.state_dict(), "metric": metric}, tmp)
        if os.path.exists(last):
            os.unlink(last)
        os.replace(tmp, last)
        assert not os.path.exists(tmp) and torch.load(last)["epoch"] == epoch
        path = self.path(f"checkpoint-{epoch}.pth.tar")
        self.duplicate(last, path)
        assert os.path.samefile(last, path) == bool(self.hard_link), (last, path)
        self.kept = sorted([*self.kept, (metric, path)])
        while len(self.kept) > self.keep:
            os.unlink(self.kept.pop()[1])
        if metric < self.best:
            self.best = metric
            self.duplicate(last, self.path("model_best.pth.tar"))
        names = {n for n in os.listdir(self.folder) if n.startswith("checkpoint-")}
        mine = {os.path.basename(p) for _, p in self.kept}
        assert mine <= names, (mine, names)
        with open(self.path("summary.csv"), "a") as f:
            f.write(f"{epoch},{metric:.6g}\n")


saver = Saver(a.out, a.keep, a.link)
loss_fn = nn.MSELoss()
for step in range(a.steps):
    idx = torch.randint(0, len(x), (64,), generator=g)
    opt.zero_grad()
    loss = loss_fn(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
    if (step + 1) % a.every == 0:
        value = loss.item()
        saver.save((step + 1) // a.every, value if value == value and value < 1e30 else 1e30)
print(f"final loss {loss.item():.4f}; kept {[os.path.basename(p) for _, p in saver.kept]}")
