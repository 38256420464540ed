"""Scale benchmark: long runs stay flat in memory and bounded on disk, explain reads large traces fast, and
cost per observed element does not grow with depth or with activation size.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_scale.py                  # all three, ~5 min on 2 CPUs
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_scale.py --quick          # 20k-step long run
    .venv/bin/python scripts/bench_scale.py --sections explain,elements

long      `neuraldbg run scripts/bench_train.py --model tiny` for 1k and --long-steps steps (the tiniest model,
          so that 100k steps fit in about a minute): resident memory every 1k steps, and the size of
          events.jsonl and stats.jsonl at the end.
explain   a synthetic events.jsonl of --trace-events events (default MAX_EVENTS, 200k, the most explain reads):
          tracereader.read_events throughput (in process, reading all of them), and `neuraldbg explain` on it end to
          end (which reads the first MAX_EVENTS).
elements  same-process A/B (chunks of 10 steps without / with the probe, alternated; thread CPU time) on a
          small MLP, a 200-layer MLP and an MLP with a 1M-element activation: overhead per step, per observed
          module call and per observed activation element, at the default --every 10 and at --every 1.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "scripts" / "bench_train.py"
sys.path.insert(0, str(ROOT))


def env() -> dict[str, str]:
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    e = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONWARNINGS="ignore",
             PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("NEURALDBG_THRESHOLDS", "NEURALDBG_EVERY"):
        e.pop(k, None)
    return e


# ---------------------------------------------------------------- long runs

def long_run(steps: int, tmp: Path) -> dict:
    run_dir = tmp / f"long-{steps}"
    cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(run_dir), str(TRAIN),
           "--model", "tiny", "--warmup", "0", "--steps", str(steps), "--chunk", "1000", "--rss-every", "1000"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"long run failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    rss = res["rss_kb"]
    stats_rows = sum(1 for _ in open(run_dir / "stats.jsonl", "rb"))
    events = sum(1 for _ in open(run_dir / "events.jsonl", "rb"))
    return {"steps": steps, "wall_s": wall, "step_ms": res["step_ms"], "rss_first_mib": rss[0][1] / 1024,
            "rss_last_mib": rss[-1][1] / 1024, "rss_max_mib": max(r for _, r in rss) / 1024,
            "events_bytes": (run_dir / "events.jsonl").stat().st_size, "events": events,
            "stats_bytes": (run_dir / "stats.jsonl").stat().st_size, "stats_rows": stats_rows}


def section_long(args: argparse.Namespace, tmp: Path) -> None:
    print("\n## long run: tiny model (Linear 8-8, ReLU, Linear 8-2), neuraldbg defaults\n")
    print("| steps | wall s | ms/step | RSS at 1k steps MiB | RSS at end MiB | max MiB | events.jsonl | stats.jsonl |")
    print("|---|---|---|---|---|---|---|---|")
    for steps in (1000, args.long_steps):
        r = long_run(steps, tmp)
        print(f"| {steps} | {r['wall_s']:.1f} | {r['step_ms']:.3f} | {r['rss_first_mib']:.1f} | {r['rss_last_mib']:.1f} | "
              f"{r['rss_max_mib']:.1f} | {r['events']} events, {r['events_bytes']} B | {r['stats_rows']} rows, "
              f"{r['stats_bytes'] / 1024:.0f} KiB |", flush=True)


# ---------------------------------------------------------------- explain

def write_trace(run_dir: Path, n: int) -> None:
    import random

    import orjson

    from neuraldbg_cli.trace.events import EVENT_SCHEMA, META_SCHEMA
    rnd = random.Random(0)
    run_dir.mkdir(parents=True)
    kinds = [("gradient_health_transition", "gradient", "healthy", "vanishing", "rms"),
             ("activation_regime_shift", "output", "normal", "anomalous", "std"),
             ("parameter_update", "weights", "updating", "unchanged", "weight_norm"),
             ("optimizer_instability", "loss", "normal", "plateau", "loss")]
    with open(run_dir / "events.jsonl", "wb") as f:
        for i in range(n):
            etype, site, a, b, metric = kinds[i % len(kinds)]
            f.write(orjson.dumps({"schema": EVENT_SCHEMA, "type": etype, "step": i // 8, "module": f"layers.{i % 64}",
                                  "root": "Net", "from": a if i % 16 < 8 else b, "to": b if i % 16 < 8 else a,
                                  "metrics": {metric: float(f"{rnd.random():.6g}"), "baseline": 0.01, "ratio": None},
                                  "site": site}) + b"\n")
    (run_dir / "meta.json").write_text(json.dumps({"schema": META_SCHEMA, "status": "finished", "exit_status": 0}))


def section_explain(args: argparse.Namespace, tmp: Path) -> None:
    from neuraldbg_cli.trace import reader as tracereader
    n = args.trace_events or tracereader.MAX_EVENTS
    capped = min(n, tracereader.MAX_EVENTS)  # what the explain command reads
    tracereader.MAX_EVENTS = max(n, tracereader.MAX_EVENTS)  # in process: read them all, to time the reader at this size
    run_dir = tmp / "big-trace"
    write_trace(run_dir, n)
    size = (run_dir / "events.jsonl").stat().st_size
    times, parse = [], []
    for _ in range(3):  # alternating with the yardstick: both see the same machine
        warnings: list[str] = []
        events = None  # the previous read's events are freed before the clock starts
        t0 = time.perf_counter()
        events = tracereader.read_events(run_dir / "events.jsonl", warnings)
        times.append(time.perf_counter() - t0)
        assert len(events) == n and not warnings, (len(events), warnings[:3])
        events = None
        parse.append(_orjson_yardstick(run_dir / "events.jsonl"))
    best = min(times)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", str(run_dir), "--format", "json"],
                              capture_output=True, text=True, env=env(), cwd=ROOT)
        walls.append(time.perf_counter() - t0)
    print(f"\n## explain on a synthetic trace of {n:,} events ({size / 2**20:.0f} MiB)\n")
    print(f"- tracereader.read_events: best of 3 {best:.3f} s = {n / best:,.0f} events/s (all: "
          f"{', '.join(f'{t:.3f}' for t in times)} s)")
    print(f"- yardstick, the same file through `orjson.loads` line by line into dicts (no checks, GC paused, "
          f"objects dropped): best of 3 {min(parse):.3f} s = {n / min(parse):,.0f} lines/s; the reader takes "
          f"{best / min(parse):.2f}x its time")
    print(f"- `neuraldbg explain --format json` end to end (start-up, read {capped:,} events, reason, print): best "
          f"of 3 {min(walls):.2f} s (all: {', '.join(f'{t:.2f}' for t in walls)} s), exit status {proc.returncode}")


def _orjson_yardstick(path: Path) -> float:
    """What parsing alone costs on this machine: the floor of any reader built on orjson."""
    import gc

    import orjson
    gc.disable()
    try:
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                for line in block.split(b"\n")[:-1]:  # block edges cut a line: a timing, not a reader
                    try:
                        orjson.loads(line)
                    except orjson.JSONDecodeError:
                        pass
        return time.perf_counter() - t0
    finally:
        gc.enable()


# ---------------------------------------------------------------- per element

def section_elements(args: argparse.Namespace, tmp: Path) -> None:
    import torch
    import torch.nn as nn

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe.hooks import Probe

    def mlp(depth: int, width: int, d_in: int = 256) -> nn.Module:
        layers, d = [], d_in
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        return nn.Sequential(*layers, nn.Linear(d, 10))

    configs = [("small: 4 x Linear(256) + ReLU, batch 64", lambda: mlp(4, 256), 64),
               ("deep: 200 x Linear(256) + ReLU, batch 64", lambda: mlp(200, 256), 64),
               ("wide: Linear(256, 16384) + ReLU, batch 64 (1M-element activations)", lambda: mlp(1, 16384), 64)]
    print("\n## cost per observed element (same process, interleaved chunks of 10 steps, thread CPU time)\n")
    print("| model | every | plain ms/step | overhead ms/step | module calls/step | activation elements/step | "
          "µs per module call | ns per element |")
    print("|---|---|---|---|---|---|---|---|")
    for title, make, batch in configs:
        for every in (10, 1):
            torch.manual_seed(0)
            model = make()
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            x, y = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
            calls, elements = [0], [0]

            def count(mod, inp, out):
                calls[0] += 1
                elements[0] += out.numel()

            handles = [m.register_forward_hook(count) for m in model.modules()]
            model(x)
            for h in handles:
                h.remove()
            elements[0] += x.numel()

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()

            session = Session(Settings(run_dir=str(tmp / f"el-{len(title)}-{every}-{time.time_ns()}"), quiet=True,
                                       every=every), [str(TRAIN)])
            probe = Probe(session._on_steps, session._on_models, every=every)
            session.probe = probe
            probe.install()
            for _ in range(20):  # neuraldbg's 10 warm-up steps and more
                step()
            probe.hooks.remove()
            for _ in range(3):
                step()
            on, off = [], []
            for r in range(args.pairs * 2):
                observed = (r % 4) in (1, 2)  # off on on off off on on off ...
                if observed:
                    probe.install()
                t0 = time.thread_time()
                for _ in range(10):
                    step()
                (on if observed else off).append((time.thread_time() - t0) / 10)
                if observed:
                    probe.hooks.remove()
            probe.close()
            plain, obs = statistics.median(off), statistics.median(on)
            over = max(obs - plain, 0.0)
            print(f"| {title} | {every} | {plain * 1e3:.2f} | {over * 1e3:.2f} | {calls[0]} | {elements[0]:,} | "
                  f"{over / calls[0] * 1e6:.1f} | {over / elements[0] * 1e9:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="long,explain,elements")
    ap.add_argument("--long-steps", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=6, help="elements: chunk pairs per measurement")
    ap.add_argument("--trace-events", type=int, default=0, help="explain: events in the trace [MAX_EVENTS]")
    ap.add_argument("--quick", action="store_true", help="20k-step long run, 4 pairs")
    args = ap.parse_args()
    if args.quick:
        args.long_steps, args.pairs = 20_000, 4
    import torch
    print(f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; python "
          f"{platform.python_version()}, torch {torch.__version__}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with tempfile.TemporaryDirectory(prefix="ndbg-scale-") as tmp:
        for name in args.sections.split(","):
            t0 = time.perf_counter()
            {"long": section_long, "explain": section_explain, "elements": section_elements}[name](args, Path(tmp))
            print(f"\n({name}: {time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
