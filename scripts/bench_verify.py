"""Measure `neuraldbg verify` over the broken scenarios of a suite: how many top suggestions are verified, how
many fixes are refuted (not verified: the advice rules to correct), and what verify costs against the run.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py                       # scripts/scenarios, broken ones
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py -k exploding -k diverge
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py --dir scripts/scenarios_real --json /tmp/v.json

Each scenario: `neuraldbg run` once (timed), then `neuraldbg verify` on its run directory (timed, default steps and
one seed: the script's own seeding). Prints one row per scenario (top kind, its fixes' verdicts, time ratio) and a
summary line: `verify: top fix verified a/b | fixes verified v, not verified n, inconclusive i | time x.x× the run`.
Nothing is written outside a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "neuraldbg_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    return proc, time.perf_counter() - t0


def one(script: Path, work: Path, timeout: float) -> dict:
    run_dir = work / script.stem
    proc, run_s = _cli("run", "--quiet", "--run-dir", str(run_dir), str(script), cwd=script.parent, timeout=timeout)
    if not (run_dir / "events.jsonl").exists():
        return {"name": script.name, "error": f"run failed ({proc.returncode}): {proc.stderr.strip()[-200:]}"}
    explain, _ = _cli("explain", str(run_dir), "--format", "json", cwd=work, timeout=timeout)
    report = json.loads(explain.stdout) if explain.returncode == 0 else {}
    top = next(iter(report.get("hypotheses") or []), None)
    verify, verify_s = _cli("verify", str(run_dir), cwd=work, timeout=timeout * 20)
    path = run_dir / "verify.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    fixes = result.get("fixes") or []
    top_fixes = [f for f in fixes if top and f.get("kind") == top.get("kind")]
    return {
        "name": script.name,
        "top": top and top.get("kind"),
        "fixes": [(f.get("kind"), f.get("id"), f.get("status")) for f in fixes],
        "top_verified": any(f.get("status") == "verified" for f in top_fixes[:1]),
        "has_top_fix": bool(top_fixes),
        "run_s": run_s,
        "verify_s": verify_s,
        "verify_exit": verify.returncode,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(ROOT / "scripts" / "scenarios"))
    p.add_argument("-k", action="append", default=[], help="only scenarios whose name contains this (repeatable)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for one run (verify gets 20x)")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    folder = Path(a.dir).resolve()
    labels = json.loads((folder / "labels.json").read_text())
    names = [n for n, lab in labels.items() if not lab.get("healthy") and (not a.k or any(k in n for k in a.k))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        for name in sorted(names):
            row = one(folder / name, Path(tmp), a.timeout)
            rows.append(row)
            if "error" in row:
                print(f"{name:55s} ERROR {row['error']}", flush=True)
                continue
            verdicts = ", ".join(f"{k}/{i}: {s}" for k, i, s in row["fixes"]) or "no fixes"
            ratio = row["verify_s"] / row["run_s"] if row["run_s"] else float("nan")
            print(f"{name:55s} {str(row['top']):22s} {ratio:5.1f}x  {verdicts}", flush=True)
    ok = [r for r in rows if "error" not in r]
    statuses = [s for r in ok for _, _, s in r["fixes"]]
    with_fix = [r for r in ok if r["has_top_fix"]]
    ratios = [r["verify_s"] / r["run_s"] for r in ok if r["run_s"]]
    print(
        f"verify: top fix verified {sum(r['top_verified'] for r in with_fix)}/{len(with_fix)} "
        f"({len(ok) - len(with_fix)} scenarios with no fix for their top kind) | fixes verified "
        f"{statuses.count('verified')}, not verified {statuses.count('not_verified')}, inconclusive "
        f"{statuses.count('inconclusive')} | time {statistics.median(ratios) if ratios else float('nan'):.1f}x the run "
        f"(median)"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
