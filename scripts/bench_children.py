"""What child processes cost under neuraldbg (issue 33): DataLoader workers must cost nothing, and a training
child is observed at the per-step cost of any process. Alternating rounds of `python SCRIPT` and `neuraldbg run
SCRIPT`, each timing inside the script (so interpreter and torch start-up are left out); medians of the per-round
ratios.

  loader   the workers of a DataLoader (fork and spawn) call an nn.Module transform for every item; the script times
           one pass over the loader with no training (the parent's own probe has nothing to do: what it measures is
           what the workers pay)
  hogwild  two mp.Process children train a shared MLP; the script times from start() to join()

    python scripts/bench_children.py --rounds 5 [--against /path/to/other/checkout]

`--against` runs a second neuraldbg (another checkout, e.g. the code before child processes were observed) in
the same rounds."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOADER = """
import sys, time, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset
class Items(Dataset):
    def __init__(self):
        self.x = torch.randn(6000, 64)
        self.t = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64))  # a module transform
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        with torch.no_grad():
            return self.t(self.x[i])
if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(64, 1)
    model(torch.zeros(1, 64))  # the parent has a model, as a training script does
    loader = DataLoader(Items(), batch_size=64, num_workers=2, multiprocessing_context=sys.argv[1])
    t0 = time.perf_counter()
    n = sum(len(b) for b in loader)
    print(f"ELAPSED {time.perf_counter() - t0:.4f} {n}")
"""

HOGWILD = """
import time, torch, torch.nn as nn, torch.multiprocessing as mp
def train(rank, model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for _ in range(300):
        x = torch.randn(64, 32, generator=g)
        opt.zero_grad(); nn.functional.mse_loss(model(x), x[:, :1]).backward(); opt.step()
if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    model.share_memory()
    t0 = time.perf_counter()
    ps = [mp.Process(target=train, args=(r, model)) for r in range(2)]
    [p.start() for p in ps]; [p.join() for p in ps]
    print(f"ELAPSED {time.perf_counter() - t0:.4f}")
"""


def timed(cmd: list[str], cwd: Path, pythonpath: Path) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(pythonpath))
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in out.stdout.splitlines() if x.startswith("ELAPSED")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return float(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--against", type=Path, default=None, help="another checkout's neuraldbg, in the same rounds")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-children-"))
    (tmp / "loader.py").write_text(LOADER)
    (tmp / "hogwild.py").write_text(HOGWILD)
    cases = {
        "loader workers (fork)": ["loader.py", "fork"],
        "loader workers (spawn)": ["loader.py", "spawn"],
        "hogwild, 2 children x 300 steps": ["hogwild.py"],
    }
    tools = {"neuraldbg": ROOT, **({"against": a.against.resolve()} if a.against else {})}
    print(f"{a.rounds} rounds, medians of per-round ratios against plain python (same round)")
    for c, (name, args) in enumerate(cases.items()):
        ratios: dict[str, list[float]] = {t: [] for t in tools}
        plain: list[float] = []
        for k in range(a.rounds):
            base = timed([sys.executable, *args], tmp, ROOT)
            plain.append(base)
            for tool, root in tools.items():
                run_dir = tmp / f"run-{c}-{tool}-{k}"
                t = timed([sys.executable, "-m", "neuraldbg_cli", "run", "-q", "--run-dir", str(run_dir), *args], tmp, root)
                ratios[tool].append(t / base)
        shown = "  ".join(f"{tool} {statistics.median(r):.2f}x" for tool, r in ratios.items())
        print(f"{name:34s} plain {statistics.median(plain):.3f} s  {shown}")


if __name__ == "__main__":
    main()
