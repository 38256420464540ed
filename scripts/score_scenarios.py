"""Score neuraldbg on the scenario suite: every script in scripts/scenarios/ through the real CLI.

    python scripts/score_scenarios.py            # all scenarios, 2 at a time
    python scripts/score_scenarios.py -k dead    # only scenarios whose name contains "dead"
    python scripts/score_scenarios.py --json out.json

Labels (scripts/scenarios/labels.json): accepted kinds (first = root cause), acceptable origin modules
(null = not a module: data or loss), and the step window where the problem begins. A hypothesis counts
when its confidence is >= 0.5 (what `--fail-on` and the status use). Prints one row per scenario, a
calibration table (how often hypotheses at each confidence are right) and one summary line."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scripts" / "scenarios"
THRESHOLD = 0.5
BINS = [(0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]


def run_one(name: str, workdir: Path, timeout: float, folder: Path = SCENARIOS) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    run_dir = workdir / name.removesuffix(".py")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(run_dir), str(folder / name)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        return {"name": name, "crash": "timeout", "seconds": timeout}
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"name": name, "crash": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}", "seconds": seconds}
    if "internal error" in proc.stderr:
        return {"name": name, "crash": "internal error: " + proc.stderr.strip()[-300:], "seconds": seconds}
    ex = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", str(run_dir), "--format", "json"],
                        capture_output=True, text=True, env=env, timeout=120)
    if ex.returncode != 0:
        return {"name": name, "crash": f"explain exit {ex.returncode}: {ex.stderr.strip()[-300:]}", "seconds": seconds}
    return {"name": name, "report": json.loads(ex.stdout), "seconds": seconds}


def origin_ok(origin: str | None, accepted: list) -> bool:
    for a in accepted:
        if a is None and origin is None:
            return True
        if a is not None and origin is not None and (origin == a or origin.startswith(a + ".")):
            return True
    return False


def judge(result: dict, label: dict) -> dict:
    out = {"name": result["name"], "healthy": label.get("healthy", False), "seconds": result.get("seconds", 0.0)}
    if "crash" in result:
        out.update(crash=result["crash"], strong=[])
        return out
    strong = [h for h in result["report"]["hypotheses"] if h["confidence"] >= THRESHOLD]
    out["strong"] = [(h["kind"], h["confidence"], h["origin"]["module"], h["origin"]["step"], h.get("caused_by"))
                     for h in strong]
    if out["healthy"]:
        out["false_alarm"] = bool(strong)
        return out
    kinds = label["kinds"]
    out["detect1"] = bool(strong) and strong[0]["kind"] in kinds
    hit = next((h for h in strong[:3] if h["kind"] in kinds), None)
    out["detect3"] = hit is not None
    if hit is not None:
        out["origin"] = origin_ok(hit["origin"]["module"], label.get("origins") or [None])
        lo, hi = label.get("steps") or [0, 10**9]
        step = hit["origin"]["step"]
        out["step"] = step is not None and lo <= step <= hi
    return out


def is_right(row: dict, kind: str, cause: str | None, labels: dict) -> bool:
    """A hypothesis is right when its kind is an accepted kind, or when it is reported as a consequence
    (`caused_by`) of an accepted kind: "NaN, caused by the exploding gradients" is a true statement."""
    if row["healthy"]:
        return False
    kinds = labels[row["name"]]["kinds"]
    return kind in kinds or (cause is not None and cause in kinds)


def calibration(rows: list[dict], labels: dict) -> list[tuple[str, int, int]]:
    table = []
    for lo, hi in BINS:
        n = right = 0
        for r in rows:
            for kind, conf, _, _, cause in r.get("strong", []):
                if lo <= conf < hi:
                    n += 1
                    right += is_right(r, kind, cause, labels)
        table.append((f"[{lo:.1f}, {min(hi, 1.0):.1f}{']' if hi > 1 else ')'}", n, right))
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only scenarios whose file name contains this")
    ap.add_argument("-j", type=int, default=2, help="scenarios run in parallel")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--json", help="write per-scenario results here")
    ap.add_argument("--dir", default=str(SCENARIOS), help="scenario folder with labels.json "
                    "(e.g. scripts/scenarios_holdout, written without looking at the detector)")
    args = ap.parse_args()
    folder = Path(args.dir).resolve()
    labels = json.loads((folder / "labels.json").read_text())
    names = sorted(n for n in labels if args.k in n)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ndbg-score-") as tmp, ThreadPoolExecutor(args.j) as pool:
        results = list(pool.map(lambda n: run_one(n, Path(tmp), args.timeout, folder), names))
    rows = [judge(r, labels[r["name"]]) for r in results]

    print(f"{'scenario':52} {'expected':22} {'top (conf, origin, step)':44} verdict")
    for r in rows:
        lab = labels[r["name"]]
        exp = "healthy" if r["healthy"] else ",".join(lab["kinds"])
        top = r["strong"][0] if r.get("strong") else None
        top_s = f"{top[0]} ({top[1]:.2f}, {top[2]}, {top[3]})" if top else "-"
        if "crash" in r:
            verdict = "CRASH " + r["crash"][:80]
        elif r["healthy"]:
            verdict = "FALSE ALARM" if r["false_alarm"] else "ok"
        else:
            verdict = ("ok" if r["detect1"] else "@3" if r["detect3"] else "MISS") + (
                "" if r.get("origin", True) else " origin?") + ("" if r.get("step", True) else " step?")
        print(f"{r['name'][:52]:52} {exp[:22]:22} {top_s[:44]:44} {verdict}")

    buggy = [r for r in rows if not r["healthy"]]
    healthy = [r for r in rows if r["healthy"]]
    detected = [r for r in buggy if r.get("detect3")]
    pct = lambda a, b: f"{100.0 * a / b:.0f}%" if b else "n/a"  # noqa: E731
    print("\ncalibration (all hypotheses with confidence >= 0.5; right = accepted kind, or a consequence of one):")
    print(f"  {'confidence':12} {'n':>4} {'right':>6} {'precision':>9}")
    for rng, n, right in calibration(rows, labels):
        print(f"  {rng:12} {n:>4} {right:>6} {pct(right, n):>9}")
    hi = [(k, c) for r in rows for k, c, *_ in r.get("strong", []) if c >= 0.8]
    hi_right = sum(1 for r in rows for k, c, _, _, cause in r.get("strong", [])
                   if c >= 0.8 and is_right(r, k, cause, labels))
    summary = (f"scenarios {len(rows)} ({len(buggy)} buggy, {len(healthy)} healthy) | "
               f"detect@1 {pct(sum(r.get('detect1', False) for r in buggy), len(buggy))} | "
               f"detect@3 {pct(len(detected), len(buggy))} | "
               f"origin {pct(sum(r.get('origin', False) for r in detected), len(detected))} | "
               f"step-window {pct(sum(r.get('step', False) for r in detected), len(detected))} | "
               f"false alarms {sum(r.get('false_alarm', False) for r in healthy)}/{len(healthy)} | "
               f"crashes {sum('crash' in r for r in rows)} | "
               f"precision@>=0.8 {pct(hi_right, len(hi))} | {time.perf_counter() - t0:.0f}s")
    print("\n" + summary)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
