"""GPU overhead benchmark (issue 21): neuraldbg's cost on a GPT-style model on CUDA, in one command.

Device session (an NVIDIA GPU; torch with CUDA, triton and the package's dependencies installed, e.g.
`pip install -e .`), one command from the repository root that ends within --budget-s (plus a few seconds for
the tables; the JSON and a .md table beside it are written where the device tool brings files back, $OUT):

    python scripts/bench_gpu.py --device cuda --budget-s 420 --json "$OUT/gpu.json"

CPU smoke test (under 2 minutes on 2 CPUs; torch.compile on a CPU needs a C++ compiler and compiles for a minute
per process, hence --no-compile):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_gpu.py --device cpu --quick --no-compile

Method: scripts/bench_overhead.py's, on the gpt model of scripts/bench_train.py (GPT-2-small shape on a GPU,
`--gpt-size gpu`: 12 layers, d 768, context 1024, batches of 8 x 1024 tokens, bf16 autocast; the small CPU
gpt on a CPU). Every configuration is a separate process running bench_train.py, plainly or as
`python -m neuraldbg_cli run --quiet [--every 1] scripts/bench_train.py ...`; it times its own steps in chunks
of 10 (torch.cuda.synchronize before and after each chunk, so a chunk holds exactly one of neuraldbg's
default sampled steps) and reports the median chunk, the peak GPU memory of its process
(torch.cuda.max_memory_allocated, neuraldbg's own tensors included: it runs in the script's process) and a
SHA-256 of the final parameters. Within a round each configuration runs once, in an order rotated every round;
a ratio is taken against the plain run of the same round with the same compilation, and the table gives the
median over rounds (range in parentheses). Parameters are compared with that same plain run; on CUDA some
kernels are not deterministic, so the plain row says whether plain itself repeats across rounds.

Configurations measured (rows of the table):
- eager (no compile): plain; neuraldbg (default, every 10th step sampled); neuraldbg --every 1; the peers
  detect_anomaly, naive .item() hooks, wandb.watch(log="all") (or its emulation where wandb is missing).
- compile, torch.compile(model) (default mode, inductor): the same six. The peers are set up on the model
  before it is compiled, as a user would: naive hooks' .item() calls break the graph at every module, which is
  what such hooks cost under compile. neuraldbg's hooks do nothing while torch.compile traces, so the graph
  holds none of its code; what remains is its work outside the graph (optimizer hooks, loss, sampled reads).
  The graphs column shows whether it still costs a recompile (a guard on its state read before the
  is-compiling check would: on the CPU, neuraldbg/compile compiles 2 graphs to plain's 1, from the
  `self._steps.buf.sampled` read in observer.attention_call).
- cudagraphs, torch.compile(model, mode="reduce-overhead") (CUDA graphs; CUDA only): plain, neuraldbg,
  neuraldbg --every 1 only. The question there is whether neuraldbg, staying outside the graph, keeps the CUDA
  graphs replaying (the graph and CUDA-graph-skip counts are reported) and what it costs once launch overhead
  is gone. The peers are left out: their cost under compile is in the compile rows, their graph breaks
  (naive) cut the model into fragments for CUDA graphs, and three more processes per round would leave a
  device session fewer rounds.

Order: neuraldbg's rows (plain, neuraldbg, --every 1 in each variant) come first, then the peers, and the
list is rotated by one every round. Budget: --budget-s bounds the whole run. A round starts only if the previous round's durations (plus 15%) say it fits;
each child gets at most the time left (and --run-timeout-s); a configuration that fails or times out is
reported and dropped from later rounds. Results are printed as each run ends and the JSON (--json, with the
markdown table and every raw result) is rewritten after every run, so a run that is cut off leaves numbers.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_overhead as bo  # noqa: E402  (command lines, the child runner, ratio formatting)

ROOT = bo.ROOT
MODES = bo.MODES  # plain, neuraldbg, every1, anomaly, wandb, naive
VARIANTS = {"eager": "none", "compile": "default", "cudagraphs": "reduce-overhead"}  # -> bench_train --compile
CUDAGRAPH_MODES = ("plain", "neuraldbg", "every1")
TITLES = {"plain": "plain", "neuraldbg": "neuraldbg", "every1": "neuraldbg --every 1", "anomaly": "detect_anomaly",
          "wandb": "wandb.watch", "naive": "naive .item() hooks"}
RESERVE_S = 5.0  # kept back from the budget for the tables


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, help="whole run, seconds (default 420; 110 with --quick)")
    ap.add_argument("--rounds", type=int, help="at most this many rounds (default 6; 2 with --quick)")
    ap.add_argument("--steps", type=int, help="timed steps per run, a multiple of 10 (default 100, 50 under a "
                    "budget below 300 s; 20 with --quick)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (compile, CUDA-graph recording; default 10)")
    ap.add_argument("--modes", default=",".join(MODES), help="of " + ",".join(MODES))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    ap.add_argument("--no-compile", action="store_true", help="eager only (no torch.compile variants)")
    ap.add_argument("--gpt-size", choices=["small", "gpu"], help="default: gpu on cuda, small on cpu")
    ap.add_argument("--amp", choices=["none", "bf16"], help="autocast; default: bf16 on cuda, none on cpu")
    ap.add_argument("--log-freq", type=int, default=10, help="wandb.watch log_freq (neuraldbg samples every 10)")
    ap.add_argument("--run-timeout-s", type=float, default=180, help="at most this long for one configuration")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 rounds of 20 steps, 110 s budget")
    ap.add_argument("--json", type=Path, help="write everything here (rewritten after every run)")
    ap.add_argument("--md", type=Path, help="write the markdown table here (default: next to --json, .md)")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.budget_s = args.budget_s or (110.0 if args.quick else 420.0)
    args.rounds = args.rounds or (2 if args.quick else 6)
    args.warmup = args.warmup if args.warmup is not None else (3 if args.quick else 10)
    args.steps = args.steps or (20 if args.quick else 100 if args.budget_s >= 300 else 50)
    args.steps = max(10, args.steps // 10 * 10)
    args.gpt_size = args.gpt_size or ("gpu" if cuda else "small")
    args.amp = args.amp or ("bf16" if cuda else "none")
    if args.md is None and args.json is not None:
        args.md = args.json.with_suffix(".md")
    for path in (args.json, args.md):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    return args


def configs(args: argparse.Namespace, notes: list[str]) -> list[tuple[str, str]]:
    """(mode, variant) pairs to run, CUDA-only and unavailable ones left out with a note."""
    cuda = args.device.startswith("cuda")
    modes = [m for m in args.modes.split(",") if m]
    if "plain" not in modes:
        modes.insert(0, "plain")
    variants = [v for v in args.variants.split(",") if v]
    for v in modes + variants:
        if v not in MODES and v not in VARIANTS:
            raise SystemExit(f"unknown mode or variant {v!r}")
    if args.no_compile:
        variants = [v for v in variants if v == "eager"]
        notes.append("--no-compile: the torch.compile and CUDA-graph variants are not run")
    if not cuda and "cudagraphs" in variants:
        variants.remove("cudagraphs")
        notes.append("CUDA graphs (torch.compile mode='reduce-overhead') are CUDA-only: that variant is skipped "
                     f"on {args.device}")
    if not cuda and "compile" in variants:
        notes.append("torch.compile on a CPU: inductor compiles C++ (a C++ compiler is needed, and each "
                     "process compiles for a minute or more)")
    if cuda and {"compile", "cudagraphs"} & set(variants):
        try:
            from torch.utils._triton import has_triton
            ok = has_triton()
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            variants = [v for v in variants if v == "eager"]
            notes.append("triton is not installed: torch.compile on CUDA cannot run, compile variants skipped")
    if "cudagraphs" in variants:
        notes.append("cudagraphs variant: plain and neuraldbg only (the peers' cost under compile is in the "
                     "compile rows)")
    # neuraldbg's rows first (every variant), the peers after: a run cut short by its budget still has them
    core = [(m, v) for v in variants for m in modes if m in CUDAGRAPH_MODES]
    return core + [(m, v) for v in variants for m in modes if m not in CUDAGRAPH_MODES and v != "cudagraphs"]


def name(mode: str, variant: str) -> str:
    return f"{mode}/{variant}"


def child_command(mode: str, variant: str, args: argparse.Namespace, run_dir: Path) -> list[str]:
    """bench_overhead's command line for the gpt model, with the size, compile mode and autocast appended."""
    return [*bo.command(mode, "gpt", args, run_dir), "--gpt-size", args.gpt_size, "--compile", VARIANTS[variant],
            "--amp", args.amp]


def child_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore", WANDB_MODE="offline", WANDB_SILENT="true",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not args.device.startswith("cuda"):  # as bench_overhead on a CPU; on a GPU torch's own thread default
        threads = os.environ.get("OMP_NUM_THREADS", "1")
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.pop("NEURALDBG_THRESHOLDS", None)
    env.pop("NEURALDBG_EVERY", None)
    return env


def machine(args: argparse.Namespace) -> dict:
    import torch

    info = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "device": args.device,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {args.device}: torch {torch.__version__} sees no CUDA device "
                             "(a CPU build of torch, or no driver); nothing was run")
        props = torch.cuda.get_device_properties(torch.device(args.device))
        info.update(gpu=props.name, gpu_mib=props.total_memory // 2**20, cuda=torch.version.cuda)
        try:
            import triton
            info["triton"] = triton.__version__
        except Exception:  # noqa: BLE001
            info["triton"] = None
    return info


# ---------------------------------------------------------------- summary

def plain_of(runs: list[dict], run: dict) -> dict | None:
    """The plain run of the same round and compile variant, if it succeeded."""
    for r in runs:
        if r["round"] == run["round"] and r["variant"] == run["variant"] and r["mode"] == "plain" and r["ok"]:
            return r
    return None


def summarize(runs: list[dict], pairs: list[tuple[str, str]]) -> list[dict]:
    """One row per configuration: medians over its rounds, ratios against the plain run of the same round."""
    rows = []
    for mode, variant in pairs:
        mine = [r for r in runs if r["mode"] == mode and r["variant"] == variant]
        ok = [r for r in mine if r["ok"]]
        row: dict = {"config": name(mode, variant), "mode": mode, "variant": variant, "runs": len(ok),
                     "failed": [r["error"] for r in mine if not r["ok"]]}
        if ok:
            res = [r["result"] for r in ok]
            row["step_ms"] = statistics.median(x["step_ms"] for x in res)
            row["step_ms_range"] = [min(x["step_ms"] for x in res), max(x["step_ms"] for x in res)]
            row["cpu_ms"] = statistics.median(x["cpu_ms"] for x in res)
            peaks = [x["cuda_peak_mib"] for x in res if x.get("cuda_peak_mib") is not None]
            row["cuda_peak_mib"] = max(peaks) if peaks else None
            row["rss_mib"] = statistics.median(x["rss_mib"] for x in res)
            row["wall_s"] = statistics.median(x["wall_s"] for x in res)
            for key in ("graphs", "graph_breaks", "cudagraph_skips"):
                if any(key in x for x in res):
                    row[key] = max(x.get(key, 0) for x in res)
            paired = [(r["result"], p["result"]) for r in ok if (p := plain_of(runs, r)) is not None]
            row["ratios"] = [x["step_ms"] / p["step_ms"] for x, p in paired]
            row["cpu_ratios"] = [x["cpu_ms"] / p["cpu_ms"] for x, p in paired]
            row["params_same"] = [x["params_sha"] == p["params_sha"] for x, p in paired]
            if mode == "plain":
                row["plain_repeats"] = len({x["params_sha"] for x in res}) == 1 if len(res) > 1 else None
        rows.append(row)
    return rows


def same_cell(row: dict) -> str:
    if row["mode"] == "plain":
        rep = row.get("plain_repeats")
        return "-" if rep is None else ("repeats" if rep else "differs across rounds")
    same = row.get("params_same") or []
    if not same:
        return "-"
    return "yes" if all(same) else f"NO ({len(same) - sum(same)}/{len(same)} differ)"


def table(rows: list[dict], notes: list[str]) -> str:
    head = ["config", "compile", "rounds", "ms/step (median)", "ratio vs plain", "cpu-time ratio",
            "peak GPU MiB", "peak RSS MiB", "params = plain", "graphs / breaks / cudagraph skips"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if not row["runs"]:
            why = row["failed"][0].splitlines()[0][:80] if row["failed"] else "not run"
            cells = [TITLES[row["mode"]], row["variant"], "0", f"FAILED: {why}" if row["failed"] else why]
            lines.append("| " + " | ".join(cells + ["-"] * (len(head) - len(cells))) + " |")
            continue
        graphs = "-"
        if "graphs" in row:
            graphs = f"{row['graphs']} / {row['graph_breaks']} / {row.get('cudagraph_skips', 0)}"
        peak = row.get("cuda_peak_mib")
        cells = [TITLES[row["mode"]], row["variant"], str(row["runs"]) + (f" (+{len(row['failed'])} failed)"
                                                                          if row["failed"] else ""),
                 f"{row['step_ms']:.2f}", "1" if row["mode"] == "plain" else bo.fmt_ratio(row["ratios"]),
                 "1" if row["mode"] == "plain" else bo.fmt_ratio(row["cpu_ratios"]),
                 "-" if peak is None else f"{peak:.0f}", f"{row['rss_mib']:.0f}", same_cell(row), graphs]
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines)
    if notes:
        out += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return out


# ---------------------------------------------------------------- the run

class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.notes: list[str] = []
        self.pairs = configs(args, self.notes)
        self.info = machine(args)
        self.runs: list[dict] = []
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + args.budget_s - RESERVE_S
        self.stopped: str | None = None

    def header(self) -> str:
        i, a = self.info, self.args
        dev = f"{i['gpu']} ({i['gpu_mib']} MiB), CUDA {i['cuda']}, triton {i['triton']}" if "gpu" in i else a.device
        return (f"# bench_gpu: {dev}; {i['cpus']} CPUs {i['cpu']}, {i['platform']}; python {i['python']}, torch "
                f"{i['torch']}\n# gpt size {a.gpt_size}, amp {a.amp}, {a.warmup} warm-up + {a.steps} timed steps "
                f"(chunks of 10), up to {a.rounds} rounds, budget {a.budget_s:.0f} s; "
                f"{len(self.pairs)} configurations: {', '.join(name(*p) for p in self.pairs)}")

    def document(self, final: bool) -> dict:
        rows = summarize(self.runs, self.pairs)
        return {"machine": self.info, "args": {k: str(v) if isinstance(v, Path) else v
                                                for k, v in vars(self.args).items()},
                "configs": [name(*p) for p in self.pairs], "notes": self.notes, "stopped": self.stopped,
                "elapsed_s": time.perf_counter() - self.t0, "final": final, "summary": rows,
                "table_md": table(rows, self.notes), "runs": self.runs}

    def save(self, final: bool = False) -> dict:
        doc = self.document(final)
        if self.args.json:
            tmp = self.args.json.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            os.replace(tmp, self.args.json)
        if self.args.md and final:
            self.args.md.write_text(doc["table_md"] + "\n")
        return doc

    def run(self) -> None:
        print(self.header(), flush=True)
        env = child_env(self.args)
        check = subprocess.run([sys.executable, "-c", "import torch, neuraldbg_cli.launch.cli"], env=env, cwd=ROOT,
                               capture_output=True, text=True)
        if check.returncode != 0:  # fail in a second, not once per configuration
            raise SystemExit(f"neuraldbg cannot be imported here (pip install -e . ?):\n{check.stderr[-2000:]}")
        for n in self.notes:
            print(f"# note: {n}", flush=True)
        if "wandb" in self.args.modes.split(",") and not bo.wandb_available():
            self.notes.append("wandb is not installed: wandb.watch is an EMULATION (per-parameter weight and "
                              "gradient histograms every --log-freq steps, torch.histc + .cpu())")
            print(f"# note: {self.notes[-1]}", flush=True)
        active = list(self.pairs)
        last: dict[tuple[str, str], float] = {}
        with tempfile.TemporaryDirectory(prefix="ndbg-bench-gpu-") as tmp:
            for r in range(self.args.rounds):
                if r:
                    need = 1.15 * sum(last.get(p, 0.0) for p in active)  # a margin: a cut round pairs badly
                    left = self.deadline - time.perf_counter()
                    if need > left:
                        self.stopped = (f"budget: {r} round(s) done; another needs ~{need:.0f} s, {left:.0f} s left")
                        break
                order = active[r % len(active):] + active[:r % len(active)]
                for mode, variant in order:
                    left = self.deadline - time.perf_counter()
                    shortest = min((x["duration_s"] for x in self.runs if x["ok"]), default=3.0)
                    if left < max(3.0, 0.8 * shortest, last.get((mode, variant), 0.0)):  # would be cut: not begun
                        self.stopped = f"budget spent in round {r}"
                        break
                    self.one(r, mode, variant, env, Path(tmp), min(self.args.run_timeout_s, left), active, last)
                if self.stopped or not active:
                    break
        self.finish()

    def one(self, r: int, mode: str, variant: str, env: dict, tmp: Path, timeout: float,
            active: list, last: dict) -> None:
        cmd = child_command(mode, variant, self.args, tmp / f"{mode}-{variant}-{r}")
        t = time.perf_counter()
        rec: dict = {"round": r, "mode": mode, "variant": variant, "config": name(mode, variant), "ok": False}
        try:
            rec["result"] = bo.run_once(cmd, env, ROOT, timeout=timeout)
            rec["ok"] = True
        except SystemExit as e:  # failed or timed out: reported, dropped from later rounds
            rec["error"] = str(e.code)[-3000:]
            active.remove((mode, variant))
            if rec["error"].startswith("timed out") and timeout < self.args.run_timeout_s:
                rec["error"] = f"cut off by the budget after {timeout:.0f} s"
                self.stopped = f"budget spent in round {r}"
        rec["duration_s"] = last[(mode, variant)] = time.perf_counter() - t
        self.runs.append(rec)
        label = f"  round {r} {name(mode, variant):22s}"
        if rec["ok"]:
            x = rec["result"]
            p = plain_of(self.runs, rec)
            ratio = f"{x['step_ms'] / p['result']['step_ms']:6.3f}x" if p is not None and mode != "plain" else "      -"
            peak = x.get("cuda_peak_mib")
            graphs = f"  graphs {x['graphs']} breaks {x['graph_breaks']}" if "graphs" in x else ""
            print(f"{label} step {x['step_ms']:8.2f} ms  ratio {ratio}  cpu {x['cpu_ms']:8.2f} ms"
                  f"  gpu {'-' if peak is None else f'{peak:.0f}'} MiB  rss {x['rss_mib']:.0f} MiB"
                  f"  wall {x['wall_s']:.1f} s{graphs}", flush=True)
        else:
            print(f"{label} FAILED after {rec['duration_s']:.0f} s: {rec['error'].splitlines()[0][:200]}", flush=True)
        self.save()

    def finish(self) -> None:
        if self.stopped:
            self.notes.append(self.stopped)
        doc = self.save(final=True)
        rounds = len({r["round"] for r in self.runs})
        print(f"\n# {len(self.runs)} runs in {rounds} round(s), {doc['elapsed_s']:.0f} s"
              + (f"; stopped early: {self.stopped}" if self.stopped else ""))
        print("\nMedian step time (wall clock, synchronized chunks of 10 steps) and ratio vs the plain run of the same "
              "round and compile variant, median over rounds (range)\n")
        print(doc["table_md"], flush=True)
        speed = [r for r in doc["summary"] if r["mode"] == "plain" and r["runs"]]
        if len(speed) > 1:
            eager = next((r for r in speed if r["variant"] == "eager"), None)
            if eager:
                print("\nplain step time vs eager: " + ", ".join(f"{r['variant']} {r['step_ms'] / eager['step_ms']:.3f}x"
                                                               for r in speed if r is not eager), flush=True)
        if self.args.json:
            print(f"\nJSON: {self.args.json}" + (f"; table: {self.args.md}" if self.args.md else ""), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    bench = Bench(args)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        bench.run()
    except KeyboardInterrupt:  # cut off: what was measured is still summarized
        bench.stopped = "interrupted"
        bench.finish()
        sys.exit(130)


if __name__ == "__main__":
    main()
