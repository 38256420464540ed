"""What neuraldbg adds to a training step, counted instead of timed: Python calls and torch ops per step,
unsampled and sampled. Counts do not move with the machine's load, so two trees compare exactly on a busy VM
where timings (scripts/bench_overhead.py, scripts/profile_probes.py) move by ±10%.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/count_probe_calls.py                 # tiny, gpt, cnn
    OMP_NUM_THREADS=1 .venv/bin/python scripts/count_probe_calls.py --models gpt --top 15
    PYTHONPATH=/other/tree .venv/bin/python scripts/count_probe_calls.py          # the same counts, another tree

One process per model: a model of scripts/bench_train.py `setup()` trains in-process with a Probe wired to a
Session as `neuraldbg run` wires it (--every 10); 40 warm-up steps, then the steps of one sampling period are
counted, first plainly (probe not installed), then observed:
- Python calls: `sys.setprofile` "call" and "c_call" events per step, observed minus plain (torch's own hook
  dispatch on the slow path of Module.__call__ included: it is what global hooks cost);
- torch ops: calls that reach a TorchFunctionMode (metadata reads such as .numel(), .dim(), .grad, .dtype left
  out), observed minus plain.
--top lists the neuraldbg_cli functions that call the most torch ops themselves (a wrapper that calls the
script's own function, a loss, is credited with that one call)."""

from __future__ import annotations

import argparse
import collections
import gc
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVERY = 10
# metadata reads: no kernel runs, so they are not counted as ops (they are in the Python call counts)
METADATA = {
    "__get__", "__set__", "numel", "dim", "data_ptr", "is_floating_point", "element_size", "size", "stride",
    "is_contiguous", "__len__", "untyped_storage", "_is_view", "__hash__", "__eq__", "_set_grad_enabled",
}


def child(model: str, top: int) -> None:
    sys.path[:0] = [str(ROOT / "scripts")]
    import bench_train as bt
    import torch
    from torch.overrides import TorchFunctionMode

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe.hooks import Probe

    torch.manual_seed(0)
    net, opt, batches, loss_fn = bt.setup(model, torch.device("cpu"))
    gc.disable()  # a collection's weakref callbacks would land in whichever step it happens in

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    def calls(first: int, n: int) -> list[int]:
        """Python + C calls of each step."""
        per: list[int] = []
        count = [0]

        def prof(frame, event, arg):  # noqa: ANN001
            if event in ("call", "c_call"):
                count[0] += 1

        for i in range(first, first + n):
            count[0] = 0
            sys.setprofile(prof)
            step(i)
            sys.setprofile(None)
            per.append(count[0])
        return per

    ops: collections.Counter = collections.Counter()
    by_fn: collections.Counter = collections.Counter()

    class Ops(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            name = getattr(func, "__name__", str(func))
            if name not in METADATA:
                ops[step_no[0]] += 1
                f = sys._getframe(1)
                if observing[0] and "neuraldbg_cli" in f.f_code.co_filename:
                    by_fn[f.f_code.co_filename.split("neuraldbg_cli/")[1] + ":" + f.f_code.co_name] += 1
            with torch._C.DisableTorchFunction():
                return func(*args, **(kwargs or {}))

    step_no, observing = [0], [False]
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(Settings(run_dir=f"{tmp}/r", quiet=True, every=EVERY), [str(ROOT / "scripts/bench_train.py")])
        probe = session.probe = Probe(session._on_steps, session._on_models, every=EVERY)
        for i in range(10):
            step(i)
        plain = calls(10, EVERY)
        with Ops():
            for k in range(EVERY):
                step_no[0] = -1 - k
                step(20 + k)
        observing[0] = True
        probe.install()
        for i in range(40):
            step(i)
        start = probe._steps.step  # the probe's step number of the next step
        observed = calls(40, EVERY)
        sampled = [probe._steps._schedule(start + k) for k in range(EVERY)]
        with Ops():
            for k in range(EVERY):
                step_no[0] = k
                step(50 + k)
        probe.close()
    base = sorted(plain)[len(plain) // 2]
    base_ops = sorted(ops[-1 - k] for k in range(EVERY))[EVERY // 2]
    un = [c - base for c, s in zip(observed, sampled) if not s]
    sa = [c - base for c, s in zip(observed, sampled) if s]
    un_ops = [ops[k] - base_ops for k, s in enumerate(sampled) if not s]
    sa_ops = [ops[k] - base_ops for k, s in enumerate(sampled) if s]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    print(f"RESULT {model} plain={base} calls_un={mean(un):.0f} calls_sa={mean(sa):.0f} "
          f"ops_un={mean(un_ops):.1f} ops_sa={mean(sa_ops):.1f}")
    for name, n in by_fn.most_common(top):
        print(f"TOP {model} {n / EVERY:.1f} {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,gpt,cnn")
    ap.add_argument("--top", type=int, default=0, help="list the N neuraldbg functions issuing the most ops per step")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.top)
        return
    print("| model | plain calls/step | + calls, unsampled step | + calls, sampled step | torch ops, unsampled | torch ops, sampled |")
    print("|---|---|---|---|---|---|")
    tops = []
    for model in args.models.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", model, "--top", str(args.top)],
                             capture_output=True, text=True, check=True).stdout
        line = next(x for x in out.splitlines() if x.startswith("RESULT"))
        kv = dict(x.split("=") for x in line.split()[2:])
        print(f"| {model} | {kv['plain']} | {kv['calls_un']} | {kv['calls_sa']} | {kv['ops_un']} | {kv['ops_sa']} |")
        tops += [x.split(" ", 1)[1] for x in out.splitlines() if x.startswith("TOP")]
    if tops:
        print("\nops per step (one sampling period's mean), by the neuraldbg function that issues them:")
        print("\n".join(tops))


if __name__ == "__main__":
    main()
