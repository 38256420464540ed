"""Where neuraldbg's per-step time goes: each part of the probe timed in place (thread CPU time is the step's,
the parts are wall-clock perf_counter around each function, nested parts included in their parents).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/profile_probes.py                  # all models, default and --every 1
    OMP_NUM_THREADS=1 .venv/bin/python scripts/profile_probes.py --models gpt --steps 200

One process per model and schedule; the probe is wired to a monitor and a run directory as `neuraldbg run`
wires it; 30 warm-up steps, then `--steps` timed steps. The timers add about 1 µs per wrapped call.
Torch's own cost of running global hooks (the slow path of `Module.__call__`) is in no bucket."""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["mlp", "cnn", "transformer", "lstm", "gpt"]
# (label, owner, attribute); owner names are resolved in the child
PARTS = [
    ("forward pre-hooks", "ForwardObserver", "pre_forward"),
    ("forward hooks (all)", "ForwardObserver", "post_forward"),
    ("  statistics of sampled sites", "ts", "full"),
    ("  non-finite sums", "ts", "cheap"),
    ("  normalisation layers (sampled)", "ArchReader", "norm"),
    ("  residual blocks (sampled)", "ArchReader", "block"),
    ("  attention rows recomputed (sampled)", "attnprobe", "sdpa_values"),
    ("  attention (sampled)", "ArchReader", "claim_attention"),
    ("  loss calls (sampled)", "ArchReader", "loss"),
    ("optimizer pre-step hook", "StepPacer", "pre_step"),
    ("  gradient norms", "GradReader", "norms"),
    ("optimizer post-step hook (closes the step)", "StepPacer", "post_step"),
    ("weight norms + checksums", "GradReader", "step_stats"),
    ("flush: transfer + records", "records", "to_records"),
    ("flush: monitor", "monitor.Monitor", "observe"),
    ("flush: stats.jsonl", "RunWriter", "stats"),
    ("re-scan for new parameters", "RootFinder", "rescan"),
]


def child(model: str, every: int, steps: int) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    import bench_train as bt
    import torch

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe import attnprobe, records
    from neuraldbg_cli.probe import tensorstats as ts
    from neuraldbg_cli.probe.archreader import ArchReader
    from neuraldbg_cli.probe.gradreader import GradReader
    from neuraldbg_cli.probe.hooks import Probe
    from neuraldbg_cli.probe.observer import ForwardObserver
    from neuraldbg_cli.probe.pacer import StepPacer
    from neuraldbg_cli.probe.rootfinder import RootFinder
    from neuraldbg_cli.reason import monitor
    from neuraldbg_cli.trace import writer as tracewriter

    owners = {"ForwardObserver": ForwardObserver, "StepPacer": StepPacer, "ArchReader": ArchReader, "attnprobe": attnprobe, "GradReader": GradReader, "RootFinder": RootFinder, "ts": ts,
              "records": records, "monitor.Monitor": monitor.Monitor, "RunWriter": tracewriter.RunWriter}
    acc: collections.Counter = collections.Counter()

    def wrap(owner, attr, label):
        f = getattr(owner, attr, None)
        if f is None:
            return

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                acc[label] += time.perf_counter() - t0

        setattr(owner, attr, timed)

    for label, owner, attr in PARTS:
        wrap(owners[owner], attr, label)

    torch.manual_seed(0)
    net, opt, batches, loss_fn = bt.setup(model, torch.device("cpu"))

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    with tempfile.TemporaryDirectory() as tmp:
        session = Session(Settings(run_dir=f"{tmp}/r", quiet=True, every=every), [str(ROOT / "scripts/bench_train.py")])
        probe = session.probe = Probe(session._on_steps, session._on_models, every=every)
        for i in range(10):
            step(i)
        t_plain0 = time.thread_time()
        for i in range(steps):
            step(i)
        plain = (time.thread_time() - t_plain0) / steps
        probe.install()
        for i in range(30):
            step(i)
        acc.clear()
        t0 = time.thread_time()
        for i in range(steps):
            step(i)
        total = (time.thread_time() - t0) / steps
        probe.close()
    print(f"RESULT {model} {every} plain={plain * 1e3:.2f} observed={total * 1e3:.2f} "
          + " ".join(f"{label.strip().replace(' ', '_')}={acc[label] / steps * 1e3:.3f}" for label, _, _ in PARTS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.steps)
        return
    rows = {}
    for model in args.models.split(","):
        for every in (10, 1):
            out = subprocess.run([sys.executable, __file__, "--child", model, str(every), "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True).stdout
            line = next(x for x in out.splitlines() if x.startswith("RESULT"))
            _, m, e, *kv = line.split()
            rows[(m, int(e))] = dict(x.split("=") for x in kv)
    cols = list(rows)
    print("| part (ms/step) | " + " | ".join(f"{m} /{e}" for m, e in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, _, _ in PARTS:
        key = label.strip().replace(" ", "_")
        print(f"| {label.replace('  ', '· ')} | " + " | ".join(rows[c][key] for c in cols) + " |")
    print("| **observed step** | " + " | ".join(rows[c]["observed"] for c in cols) + " |")
    print("| plain step | " + " | ".join(rows[c]["plain"] for c in cols) + " |")


if __name__ == "__main__":
    main()
