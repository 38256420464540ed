"""Score neuraldbg on the scenario suite: every script in scripts/scenarios/ through the real CLI.

    python scripts/score_scenarios.py            # all scenarios, 2 at a time
    python scripts/score_scenarios.py -k dead    # only scenarios whose name contains "dead"
    python scripts/score_scenarios.py --json out.json
    python scripts/score_scenarios.py --dir scripts/scenarios_real   # real-world layouts (HF, Lightning, ...)
    python scripts/score_scenarios.py --keep /tmp/runs            # keep the run directories, then after a
    python scripts/score_scenarios.py --replay /tmp/runs          # reasoner change: re-explain them in seconds

Labels (scripts/scenarios/labels.json): accepted kinds (first = root cause), acceptable origin modules
(null = not a module: data or loss), and the step window where the problem begins. A hypothesis counts
when its confidence is >= 0.5 (what `--fail-on` and the status use). Prints one row per scenario, a
calibration table (how often hypotheses at each confidence are right) and one summary line.

Optional label fields (scripts/scenarios_real uses them): `optimizer_steps` (the optimizer steps the plain script
really makes: an int, or {"from_output": REGEX} whose group 1 is read from the script's own stdout, for unseeded
scripts) checked against `steps_observed`; `lr` (a broken run's learning rate: a suggestion that proposes a higher
one for a run labelled diverging/exploding/oscillating/NaN is counted as harmful advice); `exit` (the script's own
exit status, default 0: a script that crashes by itself is not a crash of the tool); `requires` (packages the
script imports: skipped, with the reason, when one is missing); `mention` (a regex the top hypothesis's text must
contain, e.g. "weight decay")."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
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
# the run kinds for which raising the learning rate is always the wrong way
LR_DOWN_KINDS = {"loss_divergence", "exploding_gradient", "unstable_loss", "non_finite"}
NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"
LR_WORD = r"(?:\blr\b|learning[ _-]?rate)"


def missing_packages(label: dict) -> list[str]:
    return [p for p in label.get("requires", []) if importlib.util.find_spec(p) is None]


def run_one(name: str, workdir: Path, timeout: float, folder: Path = SCENARIOS, label: dict | None = None,
            replay: bool = False) -> dict:
    label = label or {}
    missing = missing_packages(label)
    if missing:
        return {"name": name, "skipped": f"needs {', '.join(missing)} (pip install -e '.[integrations]')"}
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    run_dir = workdir / name.removesuffix(".py")
    if replay:
        return explain_kept(name, run_dir, env)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(run_dir), str(folder / name)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        return {"name": name, "crash": "timeout", "seconds": timeout}
    seconds = time.perf_counter() - t0
    if proc.returncode != label.get("exit", 0):
        return {"name": name, "crash": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}", "seconds": seconds}
    if "internal error" in proc.stderr:
        return {"name": name, "crash": "internal error: " + proc.stderr.strip()[-300:], "seconds": seconds}
    (run_dir / "script-stdout.txt").write_text(proc.stdout)  # for --replay (labels may read the step count from it)
    ex = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", str(run_dir), "--format", "json"],
                        capture_output=True, text=True, env=env, timeout=120)
    if ex.returncode != 0:
        return {"name": name, "crash": f"explain exit {ex.returncode}: {ex.stderr.strip()[-300:]}", "seconds": seconds}
    return {"name": name, "report": json.loads(ex.stdout), "seconds": seconds, "stdout": proc.stdout}


def explain_kept(name: str, run_dir: Path, env: dict) -> dict:
    """--replay: explain a run directory an earlier --keep left (the reasoner is pure: the same trace gives the
    same verdict as the live run, so a reasoner change is scored in seconds, without training again)."""
    if not (run_dir / "events.jsonl").exists():
        return {"name": name, "crash": f"no kept run in {run_dir} (run with --keep first)"}
    ex = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", str(run_dir), "--format", "json"],
                        capture_output=True, text=True, env=env, timeout=120)
    if ex.returncode != 0:
        return {"name": name, "crash": f"explain exit {ex.returncode}: {ex.stderr.strip()[-300:]}"}
    out = run_dir / "script-stdout.txt"
    return {"name": name, "report": json.loads(ex.stdout), "seconds": 0.0,
            "stdout": out.read_text() if out.exists() else ""}


def expected_steps(label: dict, stdout: str) -> int | None:
    want = label.get("optimizer_steps")
    if isinstance(want, dict):
        found = re.findall(want["from_output"], stdout or "", re.M)
        return int(found[-1]) if found else None
    return want


def proposed_lr(text: str, current: float | None) -> tuple[float | None, float | str] | None:
    """(current, proposed) when `text` proposes a learning rate: "lr=X ... try Y" (X read from the text, else
    `current`), or "higher" for a worded "increase/raise the learning rate"; None when it proposes none."""
    t = text.lower()
    if not re.search(LR_WORD, t):
        return None
    if re.search(rf"\b(?:increase|raise|double)\s+(?:the\s+)?{LR_WORD}|\b(?:higher|larger)\s+{LR_WORD}", t):
        return (current, "higher")
    m = re.search(rf"\b(?:try|to)\s+(?:(?:a|an|the)\s+)?(?:{LR_WORD}\s*(?:=|:|of)?\s*)?(?:about|around|~)?\s*({NUM})", t)
    if not m:
        return None
    x = re.search(rf"{LR_WORD}\s*(?:=|:|is|of)?\s*({NUM})", t[:m.start()])
    ys = [float(m.group(1))]  # and the alternatives right after it: "try 1e-3 or 3e-4", "1e-3, 1e-2"
    rest = t[m.end():]
    while (n := re.match(rf"\s*(?:,\s*(?:or\s+)?|or\s+|/\s*)({NUM})", rest)):
        ys.append(float(n.group(1)))
        rest = rest[n.end():]
    return (float(x.group(1)) if x else current, max(ys))


def harmful_advice(hyps: list[dict], label: dict) -> list[str]:
    """Suggestions that raise the learning rate of a run labelled diverging/exploding/oscillating/NaN (in any
    hypothesis), or in a top-3 hypothesis that itself says so (any run)."""
    run_down = not label.get("healthy", False) and bool(LR_DOWN_KINDS & set(label.get("kinds", [])))
    out = []
    for i, h in enumerate(hyps):
        if not (run_down or (i < 3 and h["kind"] in LR_DOWN_KINDS)):
            continue
        for s in h.get("suggestions") or []:
            p = proposed_lr(s, label.get("lr")) if isinstance(s, str) else None
            if p and (p[1] == "higher" or (p[0] is not None and p[1] > p[0] * (1 + 1e-9))):
                out.append(f"{h['kind']}: {s}")
    return out


def bad_links(report: dict) -> list[str]:
    """The report's "likely a consequence of" links that do not hold up (reasoner.unsupported_links)."""
    sys.path.insert(0, str(ROOT))
    from neuraldbg_cli.reason.reasoner import unsupported_links
    from neuraldbg_cli.trace.events import Report

    return unsupported_links(Report.model_validate(report), THRESHOLD)


def origin_ok(origin: str | None, accepted: list) -> bool:
    for a in accepted:
        if a is None and origin is None:
            return True
        if a is not None and origin is not None and (origin == a or origin.startswith(a + ".")):
            return True
    return False


def judge(result: dict, label: dict) -> dict:
    out = {"name": result["name"], "healthy": label.get("healthy", False), "seconds": result.get("seconds", 0.0)}
    if "skipped" in result:
        out.update(skipped=result["skipped"], strong=[])
        return out
    if "crash" in result:
        out.update(crash=result["crash"], strong=[])
        return out
    strong = [h for h in result["report"]["hypotheses"] if h["confidence"] >= THRESHOLD]
    out["strong"] = [(h["kind"], h["confidence"], h["origin"]["module"], h["origin"]["step"], h.get("caused_by"))
                     for h in strong]
    if "optimizer_steps" in label:
        want = expected_steps(label, result.get("stdout", ""))
        out["steps_expected"], out["steps_observed"] = want, result["report"].get("steps_observed")
        out["steps_ok"] = want is not None and out["steps_observed"] == want
    out["harmful"] = harmful_advice(result["report"]["hypotheses"], label)
    out["bad_links"] = bad_links(result["report"])
    if out["healthy"]:
        out["false_alarm"] = bool(strong)
        return out
    kinds = label["kinds"]
    out["detect1"] = bool(strong) and strong[0]["kind"] in kinds
    if out["detect1"] and label.get("mention"):
        text = " ".join([strong[0].get("summary", "")] + [s for s in strong[0].get("suggestions") or []
                                                          if isinstance(s, str)])
        out["mention"] = bool(re.search(label["mention"], text, re.I))
        out["detect1"] = out["mention"]
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
    ap.add_argument("--keep", help="keep each scenario's run directory under this folder (for --replay)")
    ap.add_argument("--replay", help="explain the run directories a --keep left in this folder, without training")
    ap.add_argument("--dir", default=str(SCENARIOS), help="scenario folder with labels.json "
                    "(e.g. scripts/scenarios_holdout, written without looking at the detector)")
    args = ap.parse_args()
    folder = Path(args.dir).resolve()
    labels = json.loads((folder / "labels.json").read_text())
    names = sorted(n for n in labels if args.k in n)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ndbg-score-") as tmp, ThreadPoolExecutor(args.j) as pool:
        work = Path(args.replay or args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = list(pool.map(
            lambda n: run_one(n, work, args.timeout, folder, labels[n], replay=bool(args.replay)), names))
    rows = [judge(r, labels[r["name"]]) for r in results]
    skipped = [r for r in rows if "skipped" in r]
    rows = [r for r in rows if "skipped" not in r]
    with_steps = any("optimizer_steps" in labels[n] for n in names)
    extra = any("optimizer_steps" in labels[n] or "lr" in labels[n] for n in names)

    print(f"{'scenario':52} {'expected':22} {'top (conf, origin, step)':44} "
          + ("steps (seen/expected) " if with_steps else "") + "verdict")
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
                "" if r.get("origin", True) else " origin?") + ("" if r.get("step", True) else " step?") + (
                "" if r.get("mention", True) else " (not named)")
        if r.get("harmful"):
            verdict += f" HARMFUL ADVICE: {r['harmful'][0][:80]}"
        if r.get("bad_links"):
            verdict += f" BAD LINK: {r['bad_links'][0][:80]}"
        steps_s = ""
        if with_steps:
            steps_s = ("-" if "steps_expected" not in r else
                       f"{r['steps_observed']}/{r['steps_expected']}" + ("" if r["steps_ok"] else " WRONG"))
            steps_s = f"{steps_s:21} "
        print(f"{r['name'][:52]:52} {exp[:22]:22} {top_s[:44]:44} {steps_s}{verdict}")
    for r in skipped:
        print(f"{r['name'][:52]:52} SKIPPED: {r['skipped']}")

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
               f"precision@>=0.8 {pct(hi_right, len(hi))} | "
               f"unsupported links {sum(len(r.get('bad_links', [])) for r in rows)} | ")
    if extra:
        counted = [r for r in rows if "steps_expected" in r]
        summary += (f"steps {sum(r['steps_ok'] for r in counted)}/{len(counted)} | "
                    f"harmful advice {sum(len(r.get('harmful', [])) for r in rows)} | ")
    if skipped:
        summary += f"skipped {len(skipped)} | "
    summary += f"{time.perf_counter() - t0:.0f}s"
    print("\n" + summary)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
