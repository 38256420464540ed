"""Trace identity: run every scenario of a suite under two source trees and compare the traces byte for byte.

A refactoring of the probe side must not change what neuraldbg records. This runs each script of the suite
once with a baseline tree and once with another tree, exactly as a user would
(`python -m neuraldbg_cli run --run-dir D SCRIPT`, PYTHONPATH = the tree, OMP_NUM_THREADS=1, cwd = a fresh
temporary directory), and compares events.jsonl, stats.jsonl and model.json byte for byte, and what
`explain` prints of each (text and JSON, run by the same tree). meta.json is skipped: it holds wall times. The exit
statuses must match too.

    git worktree add /tmp/probe-base HEAD                                # the baseline, read-only
    OMP_NUM_THREADS=1 .venv/bin/python scripts/trace_identity.py         # scripts/scenarios, this tree vs it
    .venv/bin/python scripts/trace_identity.py --suite scripts/scenarios_real --tree /tmp/other --jobs 1

Prints one line per scenario and `trace identity: N/N identical`; exits 1 when any differs (the run
directories are then kept and their location printed)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
COMPARED = ("events.jsonl", "stats.jsonl", "model.json", "../explain.text", "../explain.json")
TIMEOUT_S = 600  # one scenario's run; the suite's take seconds


class Run(NamedTuple):
    returncode: int
    run_dir: Path
    stderr: str


def run_scenario(python: str, tree: Path, script: Path, work: Path) -> Run:
    """One scenario under one tree, in its own temporary working directory under `work`."""
    cwd = Path(tempfile.mkdtemp(prefix=script.stem[:40] + "-", dir=work))
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for name in ("NEURALDBG_EVERY", "NEURALDBG_THRESHOLDS"):  # the user's settings would make both runs differ alike
        env.pop(name, None)
    proc = subprocess.run([python, "-m", "neuraldbg_cli", "run", "--run-dir", "D", str(script)], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S)
    for fmt in ("text", "json"):  # the verdict as the same tree gives it
        shown = subprocess.run([python, "-m", "neuraldbg_cli", "explain", "D", "--format", fmt], cwd=cwd, env=env,
                               capture_output=True, text=True, timeout=TIMEOUT_S)
        out = shown.stdout
        if fmt == "json" and shown.returncode == 0:  # the run's wall times differ by nature
            doc = json.loads(out)
            for key in ("start", "end"):
                doc.get("run", {}).pop(key, None)
            out = json.dumps(doc, indent=1)
        (cwd / f"explain.{fmt}").write_text(f"{out}\n[exit {shown.returncode}] {shown.stderr}")
    return Run(proc.returncode, cwd / "D", proc.stderr[-2000:])


def first_difference(a: bytes, b: bytes) -> str:
    """Where two files part: line and byte, for the report."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    line = a[:n].count(b"\n") + 1
    return f"line {line}, byte {n} (sizes {len(a)} / {len(b)})"


def compare(base: Run, new: Run) -> list[str]:
    """What differs between two runs of one scenario (empty: identical)."""
    diffs = []
    if base.returncode != new.returncode:
        diffs.append(f"exit status {base.returncode} / {new.returncode}")
    for name in COMPARED:
        a, b = base.run_dir / name, new.run_dir / name
        if not a.exists() or not b.exists():
            if a.exists() != b.exists():
                diffs.append(f"{name} only in the {'baseline' if a.exists() else 'new'} run")
            continue
        x, y = a.read_bytes(), b.read_bytes()
        if x != y:
            diffs.append(f"{name} differs at {first_difference(x, y)}")
    return diffs


def imported_from(python: str, tree: Path) -> Path | None:
    """Where `neuraldbg_cli` comes from with PYTHONPATH = tree (an installed copy must not shadow it)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([python, "-c", "import neuraldbg_cli; print(neuraldbg_cli.__file__)"], env=env,
                         cwd=tempfile.gettempdir(), capture_output=True, text=True)
    return Path(out.stdout.strip()).resolve().parent.parent if out.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", type=Path, default=ROOT / "scripts" / "scenarios", help="directory of scenario scripts")
    ap.add_argument("--baseline", type=Path, default=Path("/tmp/probe-base"), help="source tree of the baseline")
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree compared with it (default: this one)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (each uses one thread)")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    trees = (args.baseline.resolve(), args.tree.resolve())
    for tree in trees:
        found = imported_from(args.python, tree)
        if found != tree:
            print(f"trace identity: PYTHONPATH={tree} imports neuraldbg_cli from {found}, not from it", file=sys.stderr)
            return 2
    scripts = sorted(p.resolve() for p in args.suite.glob("*.py"))
    if not scripts:
        print(f"trace identity: no scenario scripts in {args.suite}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ndbg-identity-"))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(s, [pool.submit(run_scenario, args.python, t, s, work) for t in trees]) for s in scripts]
        same = 0
        for script, (base, new) in ((s, [f.result() for f in fs]) for s, fs in futures):
            diffs = compare(base, new)
            same += not diffs
            print(f"{'identical' if not diffs else 'DIFFERS  '}  {script.name}" + (": " + "; ".join(diffs) if diffs else ""),
                  flush=True)
            if diffs and base.returncode != 0:
                print(f"    baseline stderr: {base.stderr.strip()[-300:]}", flush=True)
    print(f"trace identity: {same}/{len(scripts)} identical")
    if same == len(scripts):
        shutil.rmtree(work, ignore_errors=True)
        return 0
    print(f"run directories kept in {work}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
