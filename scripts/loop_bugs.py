"""The training-loop bugs of issue 31, each on its broken script and its healthy twins (tests/assets, layouts of
pytorch/examples' MNIST and word_language_model loops, HF-style accumulation, a GAN, a fine-tune, Hogwild):
`neuraldbg run` then `explain --format json` on each, and a markdown table of the first counted hypothesis
(kind, confidence, the start of its summary) and whether that is what the case expects. BENCHMARKS.md shows it.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/loop_bugs.py [-j 2] [-k sched]

The torchrun DistributedSampler case needs two processes and a rendezvous: tests/launch/test_distributed.py
runs it (not here). Exit status 1 when a case is not as expected."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "tests" / "assets"

# (bug, script and its arguments, expected first counted kind: None = healthy, words its summary must hold)
CASES: list[tuple[str, list[str], str | None, str]] = [
    ("gradients never zeroed", ["loop_mnist.py", "--zero", "none"], "loop_misuse", "never zeroed"),
    ("  HF-style accumulation, never zeroed", ["loop_accumulation.py", "--zero", "none"], "loop_misuse", "never zeroed"),
    ("  GAN, D never zeroed", ["loop_gan.py", "--zero-d", "no"], "loop_misuse", "never zeroed"),
    ("  twin: zero_grad()", ["loop_mnist.py", "--zero", "zero_grad"], None, ""),
    ("  twin: zero_grad(set_to_none=False)", ["loop_mnist.py", "--zero", "keep_zeros"], None, ""),
    ("  twin: p.grad = None", ["loop_mnist.py", "--zero", "grad_none"], None, ""),
    ("  twin: intended accumulation", ["loop_accumulation.py"], None, ""),
    ("  twin: GAN", ["loop_gan.py"], None, ""),
    ("manual update, gradients never zeroed", ["manual_update.py", "--zero-after", "-1"], "loop_misuse",
     "never zeroed between manual updates"),
    ("  twin: p.grad.zero_() after the update", ["manual_update.py", "--zero-after", "1"], None, ""),
    ("  twin: micro-batches accumulated per update", ["manual_update.py", "--accumulate", "2"], None, ""),
    ("zero_grad() between backward() and step()", ["loop_mnist.py", "--zero", "before_step"], "loop_misuse",
     "between backward() and step()"),
    ("clipping after step()", ["loop_mnist.py", "--zero", "zero_grad", "--clip", "after", "--lr", "2"], "loop_misuse",
     "clipped after the optimizer step"),
    ("  twin: clipping before step()", ["loop_mnist.py", "--zero", "zero_grad", "--clip", "before", "--lr", "2"],
     None, ""),
    ("epoch scheduler stepped per batch", ["loop_sched.py", "--per", "batch"], "loop_misuse", "collapsed early"),
    ("  twin: per epoch", ["loop_sched.py", "--per", "epoch"], None, ""),
    ("  twin: OneCycleLR per batch", ["loop_sched.py", "--per", "onecycle"], None, ""),
    ("scheduler stepped before the optimizer (warm-up)", ["loop_sched.py", "--per", "top_warmup"], "loop_misuse",
     "stepped before the optimizer"),
    ("  StepLR at the top of each epoch (note)", ["loop_sched.py", "--per", "top"], None, ""),
    ("  OneCycleLR between backward() and step() (note)", ["loop_sched.py", "--per", "onecycle_first"], None, ""),
    ("  twin: a GradScaler skipping the first steps", ["loop_sched.py", "--per", "amp_skip"], None, ""),
    ("loss kept as a tensor (`total += loss`)", ["loop_memory.py", "--keep", "tensor"], "memory_growth",
     "`running_loss`"),
    ("RNN state never detached", ["loop_memory.py", "--keep", "hidden"], "memory_growth", "`hidden`"),
    ("  twin: `total += loss.item()`", ["loop_memory.py", "--keep", "item"], None, ""),
    ("  twin: truncated BPTT", ["loop_memory.py", "--keep", "detach"], None, ""),
    ("optimizer holding only frozen parameters", ["loop_outside.py", "--finetune", "before"], "loop_misuse",
     "only frozen parameters"),
    ("  twin: frozen body inside the optimizer", ["loop_outside.py", "--finetune", "after"], None, ""),
    ("  twin: optimizer over the new head", ["loop_outside.py", "--finetune", "head"], None, ""),
    ("trained parameters in no optimizer", ["loop_outside.py"], "unchanged_weights", "in no optimizer"),
    ("  twin: all parameters", ["loop_outside.py", "--all"], None, ""),
    ("batches of one class (sorted, unshuffled)", ["loop_sorted.py"], "loop_misuse", "one class"),
    ("  twin: shuffled", ["loop_sorted.py", "--shuffle"], None, ""),
    ("Hogwild without share_memory() (fork)", ["hogwild.py", "--start", "fork", "--mode", "unshared"], "loop_misuse",
     "private copy"),
    ("  twin: share_memory()", ["hogwild.py", "--start", "fork"], None, ""),
]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def one(case: tuple[str, list[str], str | None, str], work: Path) -> dict:
    name, argv, kind, words = case
    run_dir = work / f"r{abs(hash(tuple(argv)))}"
    _cli(work, "run", "-q", "--run-dir", str(run_dir), str(ASSETS / argv[0]), *argv[1:])
    out = _cli(work, "explain", str(run_dir), "--format", "json")
    report = json.loads(out.stdout) if out.returncode == 0 else {"hypotheses": []}
    counted = [h for h in report["hypotheses"] if h["confidence"] >= 0.5]
    top = counted[0] if counted else None
    ok = top is None if kind is None else bool(top and top["kind"] == kind and words in top["summary"])
    notes = [h for h in report["hypotheses"] if h["confidence"] < 0.5 and h["kind"] in ("loop_misuse", "memory_growth")]
    return {"name": name, "argv": " ".join(argv), "top": top, "ok": ok, "notes": notes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", type=int, default=1)
    ap.add_argument("-k", action="append", default=[], help="only cases whose arguments contain this")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.k or any(k in " ".join(c[1]) for k in args.k)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.j) as pool:
        rows = list(pool.map(lambda c: one(c, Path(tmp)), cases))
    print("| bug / twin | script | first counted hypothesis | as expected |")
    print("|---|---|---|---|")
    for r in rows:
        top = r["top"]
        said = (f"`{top['kind']}` {top['confidence']:.2f}: \"{top['summary'][:90]}…\"" if top else
                "healthy" + (f" (note: {r['notes'][0]['kind']} {r['notes'][0]['confidence']:.2f})" if r["notes"] else ""))
        print(f"| {r['name'].strip()} | `{r['argv']}` | {said} | {'yes' if r['ok'] else '**no**'} |")
    bad = sum(not r["ok"] for r in rows)
    print(f"\n{len(rows) - bad}/{len(rows)} as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
