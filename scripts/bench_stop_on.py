"""Compute that `--stop-on` saves on doomed runs: each broken real-layout scenario (scripts/scenarios_real, the
ones labelled diverging / exploding / NaN) run to its end under neuraldbg, then again with
`--stop-on non_finite,exploding_gradient,loss_divergence`; one row each (optimizer steps and wall seconds of
both, where the onset was, steps saved) and a total.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_stop_on.py [--json out.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "scripts" / "scenarios_real"
STOP_ON = "non_finite,exploding_gradient,loss_divergence"
DOOMED = {"loss_divergence", "exploding_gradient", "non_finite"}


def run(script: Path, run_dir: Path, *opts: str) -> tuple[int, float, dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "run", "-q", "--run-dir", str(run_dir), *opts,
                           str(script)], capture_output=True, text=True, env=env, cwd=FOLDER, timeout=1800)
    seconds = time.perf_counter() - t0
    meta = json.loads((run_dir / "meta.json").read_text())
    return proc.returncode, seconds, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    labels = json.loads((FOLDER / "labels.json").read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, label in labels.items():
            if label["healthy"] or not DOOMED & set(label["kinds"]):
                continue
            if any(importlib.util.find_spec(p) is None for p in label.get("requires", [])):
                print(f"{name:<40} skipped: needs {', '.join(label['requires'])}")
                continue
            _, full_s, full = run(FOLDER / name, Path(tmp) / f"full-{name}")
            code, stop_s, stopped = run(FOLDER / name, Path(tmp) / f"stop-{name}", "--stop-on", STOP_ON)
            row = {"name": name, "full_steps": full.get("steps_observed"), "full_s": round(full_s, 1),
                   "stop_steps": stopped.get("steps_observed"), "stop_s": round(stop_s, 1), "exit": code,
                   "stopped_at": stopped.get("stopped_at"), "stopped_by": stopped.get("stopped_by")}
            rows.append(row)
            saved = 1 - (row["stop_steps"] or 0) / max(1, row["full_steps"] or 1)
            print(f"{name:<40} full {row['full_steps']:>5} steps {full_s:6.1f}s | stop-on {row['stop_steps']:>5} "
                  f"steps {stop_s:6.1f}s (exit {code}, at {row['stopped_at']}: {row['stopped_by']}) | "
                  f"{100 * saved:.0f}% of the steps saved", flush=True)
    full_steps = sum(r["full_steps"] or 0 for r in rows)
    stop_steps = sum(r["stop_steps"] or 0 for r in rows)
    full_s, stop_s = sum(r["full_s"] for r in rows), sum(r["stop_s"] for r in rows)
    print(f"stop-on: {len(rows)} doomed runs | steps {full_steps} -> {stop_steps} "
          f"({100 * (1 - stop_steps / max(1, full_steps)):.0f}% saved) | wall {full_s:.0f}s -> {stop_s:.0f}s "
          f"({100 * (1 - stop_s / max(1e-9, full_s)):.0f}% saved, start-up included)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
