"""Measure `neuraldbg verify` over the broken scenarios of the suites: how often a fix for the top hypothesis is
verified, how many fixes are partial, worse, not verified or inconclusive, how many trials crash (the control
apart: a control that crashes where the run did not is a bug of verify), and what a trial costs.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py                  # every suite's broken scenarios
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py -k exploding -k diverge --limit 3
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py --cases exploding_large_init_mlp.py,ctc_no_log_softmax
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verify.py --dir scripts/scenarios_real --json /tmp/v.json

Each scenario: `neuraldbg run` once (timed), then `neuraldbg verify` on its run directory (default steps, one seed:
the script's own seeding). Prints one row per scenario (top kind, its fixes' verdicts, seconds per trial, the
isolation the trials ran under) and a summary line. Nothing is written outside a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("scenarios", "scenarios_holdout", "scenarios_real")
STATUSES = ("verified", "partial", "not_verified", "worse", "inconclusive")
TRIAL_LINE = re.compile(r"^  \[\d+/\d+\] .*\((\d+(?:\.\d+)?) s(?:, isolation: (\w+))?")


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


def one(script: Path, work: Path, timeout: float, kept: Path | None = None) -> dict:
    """`kept`: a run directory a suite's --keep left for this scenario (used as is: verify re-runs its command
    with the fixes, the run directory gets their verify.json); else the scenario is run first."""
    if kept is not None:
        run_dir, run_s = kept, 0.0
        if not (run_dir / "events.jsonl").exists():
            return {"name": script.name, "error": f"no kept run in {run_dir}"}
    else:
        run_dir = work / f"{script.parent.name}-{script.stem}"
        proc, run_s = _cli("run", "--quiet", "--run-dir", str(run_dir), str(script), cwd=script.parent,
                           timeout=timeout)
        if not (run_dir / "events.jsonl").exists():
            return {"name": script.name, "error": f"run failed ({proc.returncode}): {proc.stderr.strip()[-200:]}"}
    explain, _ = _cli("explain", str(run_dir), "--format", "json", cwd=work, timeout=timeout)
    report = json.loads(explain.stdout) if explain.returncode == 0 else {}
    top = next(iter(report.get("hypotheses") or []), None)
    path = run_dir / "verify.json"
    path.unlink(missing_ok=True)  # (a kept run may hold an earlier bench's: "nothing to verify" writes none)
    verify, verify_s = _cli("verify", str(run_dir), cwd=work, timeout=timeout * 20)
    result = json.loads(path.read_text()) if path.exists() else {}
    fixes = result.get("fixes") or []
    top_fixes = [f for f in fixes if top and f.get("kind") == top.get("kind")]  # verified first: verify's order
    trials = [m for m in map(TRIAL_LINE.match, verify.stdout.splitlines()) if m]
    control = (result.get("control") or {}).get("runs") or []
    return {
        "name": f"{script.parent.name}/{script.name}" if kept is None or script.suffix else f"public/{script}",
        "top": top and top.get("kind"),
        "fixes": [(f.get("kind"), f.get("id"), f.get("status")) for f in fixes],
        "top_verified": any(f.get("status") == "verified" for f in top_fixes[:1]),
        "has_top_fix": bool(top_fixes),
        "trial_crashes": sum(" trial crashed" in (f.get("reason") or "") for f in fixes),
        "control_crashed": any(r.get("state") != "ok" for r in control),
        "trial_s": [float(m.group(1)) for m in trials],
        "isolation": sorted({m.group(2) for m in trials if m.group(2)}),
        "run_s": run_s,
        "verify_s": verify_s,
        "verify_exit": verify.returncode,
    }


def scenarios(dirs: list[str], keys: list[str], cases: list[str], limit: int | None) -> list[Path]:
    """The broken scenarios of the suites, filtered by -k (name contains) and --cases (file name or stem)."""
    out = []
    for d in dirs:
        folder = Path(d).resolve()
        labels = json.loads((folder / "labels.json").read_text())
        for name, label in sorted(labels.items()):
            if label.get("healthy") or (keys and not any(k in name for k in keys)):
                continue
            if cases and name not in cases and Path(name).stem not in cases:
                continue
            out.append(folder / name)
    return out[:limit] if limit is not None else out


def public_cases(keys: list[str], cases: list[str]) -> list[tuple[str, Path]]:
    """The broken cases of the unmodified-public-code set (scripts/public_code), by name, with the kept folder's
    relative run directory (score_public.py --keep DIR leaves DIR/<case>/run, the repository copy beside it)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import score_public

    out = []
    for c in score_public.load_cases():
        name = c["name"]
        if c["label"]["healthy"] or (keys and not any(k in name for k in keys)) or (cases and name not in cases):
            continue
        out.append((name, Path(name) / "run"))
    return out


def summary(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    statuses = [s for r in ok for _, _, s in r["fixes"]]
    with_fix = [r for r in ok if r["has_top_fix"]]
    won = sum(r["top_verified"] for r in with_fix)
    rate = f"{100 * won / len(with_fix):.0f}%" if with_fix else "n/a"
    per_trial = [s for r in ok for s in r["trial_s"]]
    counts = ", ".join(f"{s} {statuses.count(s)}" for s in STATUSES)
    isolation = ", ".join(sorted({i for r in ok for i in r["isolation"]})) or "unknown"
    return (
        f"verify: top fix verified {won}/{len(with_fix)} ({rate}; {len(ok) - len(with_fix)} scenarios with no fix "
        f"for their top kind, {len(rows) - len(ok)} not run) | fixes: {counts} | crashes: control "
        f"{sum(r['control_crashed'] for r in ok)}, trials {sum(r['trial_crashes'] for r in ok)} | "
        f"{statistics.median(per_trial) if per_trial else float('nan'):.1f} s per trial (median of "
        f"{len(per_trial)}), isolation {isolation}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", action="append", help="a suite folder with labels.json (repeatable) [all three suites]")
    p.add_argument("-k", action="append", default=[], help="only scenarios whose name contains this (repeatable)")
    p.add_argument("--cases", default="", help="only these scenarios: comma-separated file names or stems")
    p.add_argument("--limit", type=int, help="at most this many scenarios (after the filters)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for one run (verify gets 20x)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--runs", action="append", default=[],
                   help="SUITE=DIR: that suite's run directories as its score_scenarios.py --keep DIR left them "
                        "(not run again); SUITE is the folder name (scenarios, scenarios_holdout, scenarios_real)")
    p.add_argument("--public", help="also the broken cases of the public-code set, from score_public.py --keep DIR")
    p.add_argument("-j", type=int, default=1, help="scenarios verified at once")
    a = p.parse_args()
    dirs = a.dir or [str(ROOT / "scripts" / s) for s in SUITES]
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    kept_dirs = dict(r.split("=", 1) for r in a.runs)
    chosen: list[tuple[Path, Path | None]] = []
    for script in scenarios(dirs, a.k, cases, a.limit):
        base = kept_dirs.get(script.parent.name)
        chosen.append((script, Path(base) / script.stem if base else None))
    if a.public:
        chosen += [(Path(name), Path(a.public) / run) for name, run in public_cases(a.k, cases)]
    if not chosen:
        print("bench_verify: no broken scenario matches", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp, ThreadPoolExecutor(a.j) as pool:
        for row in pool.map(lambda c: one(c[0], Path(tmp), a.timeout, c[1]), chosen):
            rows.append(row)
            if "error" in row:
                print(f"{row['name']:60s} ERROR {row['error']}", flush=True)
                continue
            verdicts = ", ".join(f"{k}/{i}: {s}" for k, i, s in row["fixes"]) or "no fixes"
            each = statistics.median(row["trial_s"]) if row["trial_s"] else float("nan")
            crash = " CONTROL CRASHED" if row["control_crashed"] else ""
            print(f"{row['name']:60s} {str(row['top']):22s} {each:5.1f} s/trial{crash}  {verdicts}", flush=True)
    print(summary(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
