"""Score neuraldbg on UNMODIFIED public PyTorch training scripts (scripts/public_code/*.py).

    python scripts/score_public.py --list             # the cases and their labels, nothing run
    python scripts/score_public.py --plain -k adder   # run the plain scripts (to decide labels: do this first)
    python scripts/score_public.py                    # every case through the real CLI, judged against its label
    python scripts/score_public.py -k nanogpt --json out.json --keep /tmp/pub
    python scripts/score_public.py --replay /tmp/pub    # after a reasoner change: re-explain the kept runs

Each module in scripts/public_code/ names one public repository (REPO) at one commit (COMMIT) and a list of
CASES (format: scripts/public_code/README.md). Nothing from those repositories is stored here: for every case
the harness exports COMMIT from a local git mirror of the repository into a fresh work folder
(`git --git-dir=MIRROR archive COMMIT [-- ARCHIVE_PATHS] | tar -x`: a module's optional ARCHIVE_PATHS, git
pathspecs, limit the export where the mirror lacks other blobs), applies the case's one documented line change (broken cases
only; refused unless the old text occurs exactly once), makes the case's data there with the case's own
`data(work)` (synthetic, deterministic, in the format the script reads: no downloads), and runs the script with
its own flags.

Mirrors: env PUBLIC_MIRRORS (default /work/.mirror); a repository owner/name is looked for as
`<PUBLIC_MIRRORS>/<owner>+<name>/repo`, else any bare git folder (or `*.git`) under `<owner>+<name>/`.
A case whose mirror or commit is missing is skipped, with the reason.

`--plain` runs `python SCRIPT ARGS` only and prints the exit status, the time and the last lines of stdout: labels
are decided from that, before neuraldbg sees the case. The default runs `python -m neuraldbg_cli run --quiet
--run-dir RUN SCRIPT ARGS` then `python -m neuraldbg_cli explain RUN --format json`, and judges the report with the
functions of scripts/score_scenarios.py (a label's "origins": None accepts any origin). The script's exit status
under neuraldbg must equal the plain run's (the label's "exit", default 0, or a list of the statuses an unseeded script
exits with on different draws; `--check-plain` also runs the plain
script and compares its exit status and, for a seeded script, its last lines of stdout, times aside). Runs get OMP_NUM_THREADS=1, PYTHONPATH=<this project>, PYTHONWARNINGS=ignore,
MPLBACKEND=Agg and the case's env ("{work}" in a value is the work folder; a case's PYTHONPATH goes before this
project's). Always exits 0."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT / "scripts" / "public_code"
KINDS = {"vanishing_gradient", "exploding_gradient", "dead_activation", "saturated_activation", "non_finite",
         "data_anomaly", "unchanged_weights", "no_gradient", "loss_plateau", "loss_divergence", "unstable_loss",
         "normalization_fault", "residual_imbalance", "attention_collapse", "loss_misuse", "loop_misuse",
         "memory_growth"}


def load_scorer():
    spec = importlib.util.spec_from_file_location("score_scenarios", ROOT / "scripts" / "score_scenarios.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_cases(folder: Path = CODE) -> list[dict]:
    """Every case of every module, with its module's REPO/COMMIT attached; raises on a malformed case."""
    cases, seen = [], set()
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"public_code_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for key in ("REPO", "COMMIT", "CASES"):
            if not hasattr(mod, key):
                raise ValueError(f"{path.name}: no {key}")
        if not re.fullmatch(r"[0-9a-f]{40}", mod.COMMIT):
            raise ValueError(f"{path.name}: COMMIT must be 40 hex digits")
        for c in mod.CASES:
            name = c["name"]
            if name in seen:
                raise ValueError(f"{path.name}: case name {name!r} used twice")
            seen.add(name)
            lab = c["label"]
            bad = [k for k in lab.get("kinds", []) if k not in KINDS]
            if bad:
                raise ValueError(f"{name}: unknown kinds {bad}")
            if lab["healthy"] == bool(lab.get("kinds")):
                raise ValueError(f"{name}: a healthy case has no kinds, a broken one at least one")
            if lab["healthy"] != (c.get("patch") is None):
                raise ValueError(f"{name}: healthy = the script as published (no patch); broken = one patch")
            paths = list(getattr(mod, "ARCHIVE_PATHS", []))
            cases.append(dict(c, repo=mod.REPO, commit=mod.COMMIT, module=path.stem, archive_paths=paths))
    return cases


def find_mirror(repo: str) -> Path | None:
    base = Path(os.environ.get("PUBLIC_MIRRORS", "/work/.mirror")) / repo.replace("/", "+")
    if not base.is_dir():
        return None
    if (base / "repo" / "HEAD").is_file() and (base / "repo" / "objects").is_dir():
        return base / "repo"
    for d in sorted([base, *base.glob("*"), *base.glob("*/*")]):
        if d.is_dir() and ((d / "HEAD").is_file() and (d / "objects").is_dir() or d.name.endswith(".git")):
            return d
    return None


def env_for(case: dict, work: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore", MPLBACKEND="Agg")
    for k, v in (case.get("env") or {}).items():
        v = str(v).replace("{work}", str(work))
        env[k] = v + os.pathsep + str(ROOT) if k == "PYTHONPATH" else v
    return env


def run_proc(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int | None, str, str, float]:
    """(exit status or None on timeout, stdout, stderr, seconds); the whole process group is killed on timeout
    (data-loader workers included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return None, out, err, time.perf_counter() - t0


def prepare(case: dict, folder: Path) -> tuple[Path | None, str | None]:
    """Export the case's commit into folder/repo, apply its patch, make its data: (work, None) or (None, why)."""
    mirror = find_mirror(case["repo"])
    if mirror is None:
        return None, f"no mirror of {case['repo']} under $PUBLIC_MIRRORS (see scripts/public_code/README.md)"
    gd = ["git", "--git-dir", str(mirror)]
    if subprocess.run(gd + ["cat-file", "-e", case["commit"] + "^{commit}"], capture_output=True).returncode:
        return None, f"mirror {mirror} lacks commit {case['commit'][:12]}"
    work = folder / "repo"
    work.mkdir(parents=True)
    # a module's ARCHIVE_PATHS (git pathspecs) limit the export: a mirror may lack blobs outside them (data)
    paths = case.get("archive_paths") or []
    arch = subprocess.Popen(gd + ["archive", case["commit"], "--", *paths], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", str(work)], stdin=arch.stdout, capture_output=True)
    arch.stdout.close()
    if arch.wait() or tar.returncode:
        return None, f"git archive | tar failed: {tar.stderr.decode()[-200:]}"
    patch = case.get("patch")
    if patch:
        f = work / patch["file"]
        text = f.read_text()
        n = text.count(patch["old"])
        if n != 1:
            raise ValueError(f"{case['name']}: patch text occurs {n} times in {patch['file']} (must be once)")
        f.write_text(text.replace(patch["old"], patch["new"]))
    if case.get("data"):
        case["data"](work)
    return work, None


def tail(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def normalised(text: str) -> str:
    """stdout without wall-clock figures (`123.4ms`, `mfu 1.2%`), to compare a seeded script's plain and observed
    runs."""
    return re.sub(r"[-+\d.e]+\s*ms\b|mfu\s+[-\d.]+%", "#", text)


def run_case(case: dict, base: Path, mode: str, timeout: float | None, check_plain: bool, n_tail: int) -> dict:
    name = case["name"]
    res = {"name": name, "repo": case["repo"]}
    folder = base / name
    if folder.exists():
        shutil.rmtree(folder)
    try:
        work, why = prepare(case, folder)
    except Exception as e:  # a malformed case or data maker: reported, never a crash of the harness
        return dict(res, error=f"{type(e).__name__}: {e}")
    if work is None:
        return dict(res, skipped=why)
    cwd = work / case.get("cwd", ".")
    script = os.path.relpath(work / case["script"], cwd)
    args = [str(a).replace("{work}", str(work)) for a in case.get("args", [])]
    env = env_for(case, work)
    limit = timeout or case.get("timeout", 180)
    want_exit = case["label"].get("exit", 0)
    if mode == "plain" or check_plain:
        rc, out, err, secs = run_proc([sys.executable, script, *args], cwd, env, limit)
        res.update(plain_exit=rc, plain_seconds=secs, plain_tail=tail(out, n_tail), plain_err=tail(err, 6))
        if mode == "plain":
            return res
    # the observed run gets its own fresh copy when the plain one ran first (scripts write into their folder)
    if check_plain:
        shutil.rmtree(folder)
        work, _ = prepare(case, folder)
        cwd = work / case.get("cwd", ".")
        env = env_for(case, work)
    run_dir = folder / "run"
    rc, out, err, secs = run_proc([sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(run_dir),
                                   script, *args], cwd, env, limit * 2)
    res.update(seconds=secs, stdout=out)
    (folder / "stdout.txt").write_text(out)  # for --replay (a label may read the steps from it)
    if rc is None:
        return dict(res, crash=f"timeout after {limit * 2:.0f}s")
    if rc != want_exit and not (isinstance(want_exit, list) and rc in want_exit):
        return dict(res, crash=f"exit {rc} (plain run: {want_exit}): {err.strip()[-300:]}")
    if check_plain and res["plain_exit"] != rc:
        return dict(res, crash=f"exit {rc} but the plain script exits {res['plain_exit']}")
    if check_plain and case["label"].get("seeded", True):
        res["same_output"] = normalised(res["plain_tail"]) == normalised(tail(out, n_tail))
    if "internal error" in err:
        return dict(res, crash="internal error: " + err.strip()[-300:])
    return explained(res, run_dir, env)


def replay_case(case: dict, base: Path) -> dict:
    """--replay: explain the run directory a --keep left for this case, without training."""
    folder = base / case["name"]
    res = {"name": case["name"], "repo": case["repo"]}
    if not (folder / "run").is_dir():
        return dict(res, skipped=f"no kept run under {folder}")
    out = folder / "stdout.txt"
    res["stdout"] = out.read_text() if out.is_file() else ""
    return explained(res, folder / "run", env_for(case, folder / "repo"))


def explained(res: dict, run_dir: Path, env: dict) -> dict:
    ex = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", str(run_dir), "--format", "json"],
                        capture_output=True, text=True, env=env, timeout=300)
    if ex.returncode != 0:
        return dict(res, crash=f"explain exit {ex.returncode}: {ex.stderr.strip()[-300:]}")
    return dict(res, report=json.loads(ex.stdout))


def judge(scorer, res: dict, label: dict) -> dict:
    if "error" in res:
        return {"name": res["name"], "healthy": label["healthy"], "error": res["error"], "strong": []}
    row = scorer.judge(res, label)
    if label.get("origins") is None and "origin" in row:
        row["origin"] = True  # None: any origin accepted
    row["repo"] = res["repo"]
    if "same_output" in res:
        row["same_output"] = res["same_output"]
    if "report" in res:
        row["hypotheses"] = [{k: h.get(k) for k in ("kind", "confidence", "origin", "summary", "suggestions",
                                                       "caused_by")} for h in res["report"]["hypotheses"][:5]]
    return row


def verdict(row: dict) -> str:
    if "error" in row:
        return "BAD CASE " + row["error"][:90]
    if "crash" in row:
        return "CRASH " + row["crash"][:90]
    if row["healthy"]:
        v = "FALSE ALARM" if row["false_alarm"] else "ok"
    else:
        v = ("ok" if row["detect1"] else "@3" if row["detect3"] else "MISS") + (
            "" if row.get("origin", True) else " origin?") + ("" if row.get("step", True) else " step?") + (
            "" if row.get("mention", True) else " (not named)")
    if row.get("same_output") is False:
        v += " (stdout differs from the plain run)"
    if row.get("harmful"):
        v += f" HARMFUL ADVICE: {row['harmful'][0][:80]}"
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", action="append", default=[], help="only cases whose name contains this (repeatable: any)")
    ap.add_argument("-j", type=int, default=1, help="cases run in parallel (default 1: one training at a time)")
    ap.add_argument("--plain", action="store_true", help="run the plain scripts only (to decide the labels)")
    ap.add_argument("--check-plain", action="store_true", help="also run the plain script first and compare: the "
                    "exit status, and for seeded scripts (label \"seeded\", default true) the last --tail lines of "
                    "stdout, wall-clock figures aside")
    ap.add_argument("--tail", type=int, default=12, help="--plain: lines of stdout shown per case")
    ap.add_argument("--timeout", type=float, help="override every case's timeout (seconds)")
    ap.add_argument("--json", help="write per-case results here")
    ap.add_argument("--keep", help="keep the work folders (repo copy, data, run dir) under this folder")
    ap.add_argument("--list", action="store_true", help="list the cases and their labels; run nothing")
    ap.add_argument("--replay", help="explain the run directories a --keep left in this folder, without training")
    args = ap.parse_args()
    cases = [c for c in load_cases() if not args.k or any(k in c["name"] for k in args.k)]
    if args.list:
        for c in cases:
            lab = c["label"]
            exp = "healthy" if lab["healthy"] else ",".join(lab["kinds"])
            mirror = find_mirror(c["repo"])
            print(f"{c['name']:40} {c['repo']:28} {exp:40} steps={lab.get('optimizer_steps')}"
                  + ("" if mirror else "  [no mirror]"))
            print(f"{'':40} {lab['root']}")
        print(f"\n{len(cases)} cases from {len({c['repo'] for c in cases})} repos")
        return 0
    scorer = load_scorer()
    t0 = time.perf_counter()
    tmp = None
    if args.keep:
        base = Path(args.keep).resolve()
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ndbg-public-")
        base = Path(tmp.name)
    mode = "plain" if args.plain else "observe"
    try:
        with ThreadPoolExecutor(max(1, args.j)) as pool:
            if args.replay:
                results = list(pool.map(lambda c: replay_case(c, Path(args.replay).resolve()), cases))
            else:
                results = list(pool.map(lambda c: run_case(c, base, mode, args.timeout, args.check_plain, args.tail),
                                        cases))
    finally:
        if tmp is not None:
            tmp.cleanup()
    by_name = {c["name"]: c for c in cases}

    if args.plain:
        for r in results:
            c = by_name[r["name"]]
            if "skipped" in r or "error" in r:
                print(f"== {r['name']}: {'SKIPPED ' + r['skipped'] if 'skipped' in r else 'BAD CASE ' + r['error']}")
                continue
            rc = "TIMEOUT" if r["plain_exit"] is None else r["plain_exit"]
            print(f"== {r['name']} ({c['repo']} {c['script']} {' '.join(map(str, c.get('args', [])))}): "
                  f"exit {rc}, {r['plain_seconds']:.1f}s")
            print(r["plain_tail"])
            if r["plain_exit"] != 0 and r["plain_err"]:
                print("-- stderr:\n" + r["plain_err"])
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0

    labels = {c["name"]: c["label"] for c in cases}
    rows, skipped = [], []
    for r in results:
        if "skipped" in r:
            skipped.append(r)
        else:
            rows.append(judge(scorer, r, labels[r["name"]]))
    print(f"{'case':38} {'expected':24} {'top (conf, origin, step)':46} {'steps seen/expected':20} verdict")
    for row in rows:
        lab = labels[row["name"]]
        exp = "healthy" if lab["healthy"] else ",".join(lab["kinds"])
        top = row["strong"][0] if row.get("strong") else None
        top_s = f"{top[0]} ({top[1]:.2f}, {top[2]}, {top[3]})" if top else "-"
        steps_s = "-" if "steps_expected" not in row else (
            f"{row['steps_observed']}/{row['steps_expected']}" + ("" if row["steps_ok"] else " WRONG"))
        print(f"{row['name'][:38]:38} {exp[:24]:24} {top_s[:46]:46} {steps_s:20} {verdict(row)}")
    for r in skipped:
        print(f"{r['name'][:38]:38} SKIPPED: {r['skipped']}")

    judged = [r for r in rows if "error" not in r]
    broken = [r for r in judged if not r["healthy"]]
    healthy = [r for r in judged if r["healthy"]]
    cal = scorer.calibration(judged, labels)
    if any(n for _, n, _ in cal):
        print("\ncalibration (hypotheses with confidence >= 0.5; right = accepted kind, or a consequence of one):")
        for rng, n, right in cal:
            print(f"  {rng:12} {n:>4} {right:>6}")
    counted = [r for r in judged if "steps_expected" in r]
    detected = [r for r in broken if r.get("detect3")]  # the onset of the first accepted kind in the top 3
    errors = [r for r in rows if "error" in r]
    summary = (f"public: {len(rows)} cases ({len(broken)} broken, {len(healthy)} healthy) from "
               f"{len({by_name[r['name']]['repo'] for r in rows})} repos | "
               f"broken right@1 {sum(r.get('detect1', False) for r in broken)}/{len(broken)} | "
               f"detect@3 {sum(r.get('detect3', False) for r in broken)}/{len(broken)} | "
               f"step window {sum(r.get('step', False) for r in detected)}/{len(detected)} | "
               f"false alarms {sum(r.get('false_alarm', False) for r in healthy)}/{len(healthy)} | "
               f"steps {sum(r['steps_ok'] for r in counted)}/{len(counted)} | "
               f"harmful advice {sum(len(r.get('harmful', [])) for r in judged)} | "
               f"crashes {sum('crash' in r for r in judged)} | ")
    compared = [r for r in judged if "same_output" in r]
    if compared:
        summary += f"stdout as plain {sum(r['same_output'] for r in compared)}/{len(compared)} | "
    if errors:
        summary += f"bad cases {len(errors)} | "
    if skipped:
        summary += f"skipped {len(skipped)} | "
    summary += f"{time.perf_counter() - t0:.0f}s"
    print("\n" + summary)
    if args.json:
        for row in rows:
            row.pop("stdout", None)
        Path(args.json).write_text(json.dumps(rows + skipped, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
