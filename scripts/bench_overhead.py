"""Overhead benchmark: the same training script run plainly, under `neuraldbg run`, and with the
alternatives a user would pick instead (see scripts/bench_train.py for what each one does).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_overhead.py                 # everything, ~10-15 min on 2 CPUs
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_overhead.py --quick         # 3 rounds of shorter runs
    .venv/bin/python scripts/bench_overhead.py --models mlp,gpt --modes plain,neuraldbg,every1
    .venv/bin/python scripts/bench_overhead.py --device cuda                     # on a GPU machine
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_overhead.py --inprocess     # same-process A/B, ~5 min
    git show 61ecc7a:neuraldbg_cli/probe/hooks.py > /tmp/probes_before.py             # ... against an older probes.py
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_overhead.py --inprocess --baseline-probes /tmp/probes_before.py
    (the older probes.py must use the current modules: from 61ecc7a on, when roots/records/tensorstats split off)

Method: every configuration is a separate process running scripts/bench_train.py, which times its own
steps (median over chunks of 10 consecutive steps, so neuraldbg's sampled steps are counted). neuraldbg
configurations are exactly `python -m neuraldbg_cli run --quiet [--every 1] scripts/bench_train.py ...`.
Within a round each configuration runs once, in an order rotated every round (A B C…, B C…A, …); a
configuration's ratio is taken against the plain run of the same round, and the table shows the median
over rounds (with the range). Peak RSS is the child's own ru_maxrss (os.wait4). The whole-process ratio
is the wall time of `neuraldbg run bench_train.py` vs `python bench_train.py`, start-up, the
end-of-run analysis and the verdict included.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "scripts" / "bench_train.py"
MODELS = ["mlp", "cnn", "transformer", "lstm", "gpt"]
MODES = ["plain", "neuraldbg", "every1", "anomaly", "wandb", "naive"]
TITLES = {"plain": "(a) plain", "neuraldbg": "(b) neuraldbg", "every1": "(c) neuraldbg --every 1",
          "anomaly": "(d) detect_anomaly", "wandb": "(e) wandb.watch", "naive": "(f) naive .item() hooks"}


def command(mode: str, model: str, args: argparse.Namespace, run_dir: Path) -> list[str]:
    train = [str(TRAIN), "--model", model, "--device", args.device, "--warmup", str(args.warmup),
             "--steps", str(args.steps)]
    if mode in ("neuraldbg", "every1"):
        extra = ["--every", "1"] if mode == "every1" else []
        return [sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(run_dir), *extra, *train]
    peer = {"plain": "none"}.get(mode, mode)
    return [sys.executable, *train, "--peer", peer, "--log-freq", str(args.log_freq)]


def run_once(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float | None = None) -> dict:
    """Run one child; its JSON result plus wall time and its own peak RSS (MiB). With a timeout (seconds) the
    child runs in its own session and the whole session is killed when the time is up (SystemExit then)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=timeout is not None)
        timer, fired = None, threading.Event()
        if timeout is not None:
            timer = threading.Timer(timeout, lambda: (fired.set(), _kill_session(proc.pid)))
            timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C or SIGTERM here: the child (in its own session) must not outlive us
            if timeout is not None:
                _kill_session(proc.pid)
                os.wait4(proc.pid, 0)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        wall = time.perf_counter() - t0
        if fired.is_set():
            raise SystemExit(f"timed out after {timeout:.0f} s: {' '.join(cmd)}")
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{stdout[-2000:]}\n{stderr[-4000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result.update(wall_s=wall, rss_mib=usage.ru_maxrss / 1024, stderr=stderr[-2000:])
    return result


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wandb_available() -> bool:
    try:
        import importlib.util
        return importlib.util.find_spec("wandb") is not None
    except Exception:  # noqa: BLE001
        return False


def fmt_ratio(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.3f}×"
    return f"{med:.3f}× ({min(values):.2f}–{max(values):.2f})"


def inprocess(args: argparse.Namespace, models: list[str]) -> None:
    """Same-process A/B: one model, chunks of 10 steps run plainly or with a Probe installed (wired to a
    monitor and a run directory as `neuraldbg run` wires it), in rotated order; thread CPU time. Less
    exposed to other load on the machine than separate processes. With --baseline-probes FILE (an older
    probes.py), that version runs as a third configuration in the same process."""
    import importlib.util

    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT))
    import bench_train as bt

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe.hooks import Probe

    classes = {"neuraldbg": Probe}
    if args.baseline_probes:
        spec = importlib.util.spec_from_file_location("baseline_probes", args.baseline_probes)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        classes = {"baseline": mod.Probe, "neuraldbg": Probe}
    names = ["plain", *classes]
    print("\nSame-process A/B: step-time ratio vs plain, thread CPU time, median over rounds (range)\n")
    print("| model | every | plain ms/step | " + " | ".join(n for n in names[1:]) + " |")
    print("|" + "---|" * (len(names) + 2))
    with tempfile.TemporaryDirectory(prefix="ndbg-inproc-") as tmp:
        for model_name in models:
            for every in (10, 1):
                torch.manual_seed(0)
                model, opt, batches, loss_fn = bt.setup(model_name, torch.device(args.device))
                sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

                def step(i: int) -> None:
                    x, y = batches[i % len(batches)]
                    opt.zero_grad(set_to_none=True)
                    loss_fn(model(x), y).backward()
                    opt.step()

                probes = {}
                for k, cls in classes.items():
                    session = Session(Settings(run_dir=f"{tmp}/{model_name}-{every}-{k}", quiet=True, every=every),
                                      [str(TRAIN)])
                    probes[k] = session.probe = cls(session._on_steps, session._on_models, every=every)
                i = 0
                for p in probes.values():  # each one's 10 warm-up steps, and more
                    p.install()
                    for _ in range(20):
                        step(i)
                        i += 1
                    p.hooks.remove()
                times: dict[str, list[float]] = {n: [] for n in names}
                for r in range(args.rounds * 3):
                    for n in names[r % len(names):] + names[:r % len(names)]:
                        p = probes.get(n)
                        if p is not None:
                            p.install()
                        sync()
                        t0 = time.thread_time() if args.device == "cpu" else time.perf_counter()
                        for _ in range(10):
                            step(i)
                            i += 1
                        sync()
                        times[n].append(((time.thread_time() if args.device == "cpu" else time.perf_counter()) - t0) / 10)
                        if p is not None:
                            p.hooks.remove()
                for p in probes.values():
                    p.close()
                plain = times["plain"]
                cells = [fmt_ratio([a / b for a, b in zip(times[n], plain)]) for n in names[1:]]
                print(f"| {model_name} | {every} | {statistics.median(plain) * 1e3:.1f} | " + " | ".join(cells) + " |",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=60, help="timed steps per run (chunks of 10)")
    ap.add_argument("--log-freq", type=int, default=10, help="wandb.watch log_freq (neuraldbg samples every 10)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 30 timed steps after 10 warm-up steps")
    ap.add_argument("--json", type=Path, help="write every raw result here")
    ap.add_argument("--inprocess", action="store_true",
                    help="instead: same-process A/B of plain vs neuraldbg's Probe (default and --every 1)")
    ap.add_argument("--baseline-probes", type=Path, help="with --inprocess: also time this (older) probes.py")
    args = ap.parse_args()
    if args.quick:
        args.warmup, args.steps, args.rounds = 10, 30, 3
    models = [m for m in args.models.split(",") if m]
    if args.inprocess:
        inprocess(args, models)
        return
    modes = [m for m in args.modes.split(",") if m]
    if "plain" not in modes:
        modes.insert(0, "plain")
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), WANDB_MODE="offline",
               WANDB_SILENT="true")
    env.pop("NEURALDBG_THRESHOLDS", None)
    env.pop("NEURALDBG_EVERY", None)

    import torch  # only for the header

    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.platform()}; python {platform.python_version()}, torch {torch.__version__}; "
          f"OMP_NUM_THREADS={threads}; device {args.device}", flush=True)
    if "wandb" in modes and not wandb_available():
        print("# wandb is not installed: column (e) is an EMULATION of wandb.watch(log='all') "
              "(per-parameter weight and gradient histograms, torch.histc + .cpu())", flush=True)
    results: dict[tuple[str, str], list[dict]] = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ndbg-bench-") as tmp:
        for model in models:
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    run_dir = Path(tmp) / f"{model}-{mode}-{r}"
                    res = run_once(command(mode, model, args, run_dir), env, ROOT)
                    results.setdefault((model, mode), []).append(res)
                    print(f"  {model:12s} round {r} {mode:10s} step {res['step_ms']:8.2f} ms  cpu {res['cpu_ms']:8.2f} ms"
                          f"  wall {res['wall_s']:6.2f} s  rss {res['rss_mib']:7.1f} MiB", flush=True)
    elapsed = time.perf_counter() - t_start

    def ratios(model: str, mode: str, key: str) -> list[float]:
        return [m[key] / p[key] for m, p in zip(results[(model, mode)], results[(model, "plain")])]

    emulated = any(r.get("wandb_emulated") for (m, mode), rs in results.items() if mode == "wandb" for r in rs)
    print(f"\n# {len(models)} models × {len(modes)} configurations × {args.rounds} rounds in {elapsed:.0f} s")
    print("\nBest-of-rounds process CPU time per step, ratio vs (a) plain (the issue-21 measure: each configuration's"
          " fastest round, so load from other processes on the machine inflates it least)\n")
    cols = [m for m in modes if m != "plain"]
    print("| " + " | ".join(["model", "(a) plain best cpu ms/step"] + [TITLES[m] for m in cols]) + " |")
    print("|" + "---|" * (len(cols) + 2))
    for model in models:
        best = {m: min(r["cpu_ms"] for r in results[(model, m)]) for m in modes}
        print("| " + " | ".join([model, f"{best['plain']:.2f}"] + [f"{best[m] / best['plain']:.3f}×" for m in cols])
              + " |")
    print("\nMedian step-time ratio vs (a) plain, wall clock (range over rounds in parentheses)\n")
    head = ["model", "(a) plain ms/step"] + [TITLES[m] + (" [emulated]" if m == "wandb" and emulated else "")
                                             for m in cols] + ["whole process (b)/(a)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model in models:
        plain_ms = statistics.median(r["step_ms"] for r in results[(model, "plain")])
        row = [model, f"{plain_ms:.1f}"] + [fmt_ratio(ratios(model, m, "step_ms")) for m in cols]
        row.append(fmt_ratio(ratios(model, "neuraldbg", "wall_s")) if "neuraldbg" in modes else "-")
        print("| " + " | ".join(row) + " |")
    print("\nMedian step-time ratio vs (a) plain, process CPU time (less sensitive to other load on the machine)\n")
    print("| " + " | ".join(["model", "(a) plain cpu ms/step"] + [TITLES[m] for m in cols]) + " |")
    print("|" + "---|" * (len(cols) + 2))
    for model in models:
        plain_ms = statistics.median(r["cpu_ms"] for r in results[(model, "plain")])
        print("| " + " | ".join([model, f"{plain_ms:.1f}"] + [fmt_ratio(ratios(model, m, "cpu_ms")) for m in cols]) + " |")
    print("\nPeak RSS of the process, MiB (median over rounds)\n")
    print("| " + " | ".join(["model"] + [TITLES[m] for m in modes]) + " |")
    print("|" + "---|" * (len(modes) + 1))
    for model in models:
        print("| " + " | ".join([model] + [f"{statistics.median(r['rss_mib'] for r in results[(model, m)]):.0f}"
                                           for m in modes]) + " |")
    print("\nFinal parameters identical to the plain run (neuraldbg must not change training):")
    for model in models:
        plain = {r["params_sha"] for r in results[(model, "plain")]}
        same = {m: {r["params_sha"] for r in results[(model, m)]} == plain for m in modes if m in ("neuraldbg", "every1")}
        print(f"  {model}: " + ", ".join(f"{m} {'yes' if ok else 'NO'}" for m, ok in same.items()))
    if args.json:
        args.json.write_text(json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
