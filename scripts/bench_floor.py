"""What observing a training step must cost at the least, beside what neuraldbg costs, in one process.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_floor.py                        # tiny, cnn, gpt: ~6 min
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_floor.py --models tiny --rounds 15

Why: the overhead targets (issue 21) are ratios against the plain step, and a step of 0.15 ms (the tiny model)
leaves a few tens of microseconds. This script measures "floor" observers that do only what any observer of
neuraldbg's promises must do, written as bare hooks with no bookkeeping at all, so that a target can be
checked against what is possible at all with Python hooks before it is chased:

- hooks:       torch's global module forward pre/post hooks, optimizer step pre/post hooks and a wrapper of
               torch.autograd.backward, all doing nothing (what taking every module call off its fast path
               costs, before any hook does anything);
- unsampled:   hooks + the loss of each backward (detached) + every gradient's norm (one `_foreach_norm` and
               one stack) read to the host once per step: the least a step needs for "a NaN/Inf in the loss or a
               gradient is never missed, exploding/vanishing gradients are judged every step";
- every step:  unsampled + per module output its sum and sum of squares, per activation its min/max and zero
               count on a 16K sample, weight norms, update norms on a 4K sample per parameter, all read in one
               transfer: the least "every statistic every step" (`--every 1`) needs;
- default:     every step's work on the default schedule's sampled steps (the first 10, then every 10th),
               unsampled work on the others;
then neuraldbg itself wired as `neuraldbg run` wires it (a Session with its Probe): `--every` huge (only
unsampled steps after warm-up), the default `--every 10`, and `--every 1`.

Method: one process per model (scripts/bench_train.py `setup()`), configurations alternated round by round
(each installs its hooks, runs a few steps to settle, times `--steps` steps by process CPU time, removes them);
the table shows each configuration's best round as a ratio to the plain step's best round, and the median
ratio over rounds (the VM's noise is ±10%: the best is what the code costs, the median what a user sees)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ["plain", "hooks", "unsampled", "every step", "default", "neuraldbg unsampled", "neuraldbg", "neuraldbg --every 1"]
ACTS = ("ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU")


class Floor:
    """A bare observer: what neuraldbg's promises need, with none of its bookkeeping (see the module docstring)."""

    def __init__(self, net, every: int | None) -> None:
        import torch

        self.torch, self.every = torch, every  # every: None = unsampled only, 1 = every step, 10 = default
        self.params = [p for p in net.parameters() if p.requires_grad]
        self.vals: list = []
        self.loss = None
        self.step = 0
        self.before: list = []
        self.handles: list = []

    def sampled(self) -> bool:
        return self.every is not None and (self.step < 10 or self.step % self.every == 0)

    def install(self) -> None:
        import torch
        from torch.nn.modules import module as M
        from torch.optim import optimizer as O

        self.handles = [
            M.register_module_forward_pre_hook(self.pre_forward),
            M.register_module_forward_hook(self.post_forward),
            O.register_optimizer_step_pre_hook(self.pre_step),
            O.register_optimizer_step_post_hook(self.post_step),
        ]
        self._backward = torch.autograd.backward
        floor = self

        def backward(tensors, *args, **kwargs):
            floor.loss = tensors.detach() if isinstance(tensors, torch.Tensor) else None
            return floor._backward(tensors, *args, **kwargs)

        torch.autograd.backward = backward

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.torch.autograd.backward = self._backward

    def pre_forward(self, module, args) -> None:
        return None

    def post_forward(self, module, args, out) -> None:
        torch = self.torch
        if not self.sampled() or not isinstance(out, torch.Tensor) or not out.is_floating_point():
            return
        flat = out.detach().reshape(-1)
        self.vals += [flat.sum(), torch.dot(flat, flat)]
        if type(module).__name__ in ACTS:
            part = flat[:16384]
            self.vals += [*torch.aminmax(part), (part == 0).sum()]

    def pre_step(self, opt, args, kwargs) -> None:
        torch = self.torch
        grads = [p.grad for p in self.params if p.grad is not None]
        self.vals.append(torch.stack(torch._foreach_norm(grads)))
        if self.sampled():
            self.vals.append(torch.stack(torch._foreach_norm([p.detach() for p in self.params])))
            self.before = [p.detach().reshape(-1)[:4096].clone() for p in self.params]

    def post_step(self, opt, args, kwargs) -> None:
        torch = self.torch
        if self.before:
            now = [p.detach().reshape(-1)[:4096] for p in self.params]
            self.vals.append(torch.stack(torch._foreach_norm(torch._foreach_sub(now, self.before))))
            self.before = []
        if self.loss is not None:
            self.vals.append(self.loss.reshape(1))
        torch.cat([v.reshape(-1).float() for v in self.vals]).tolist()
        self.vals, self.loss = [], None
        self.step += 1


def child(model: str, rounds: int, steps: int, settle: int) -> None:
    sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
    import bench_train as bt
    import torch

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe.hooks import Probe

    torch.manual_seed(0)
    net, opt, batches, loss_fn = bt.setup(model, torch.device("cpu"))
    tmp = Path(tempfile.mkdtemp(prefix="ndbg-floor-"))
    runs = 0

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    def observer(name: str):
        nonlocal runs
        if name == "plain":
            return None
        if not name.startswith("neuraldbg"):
            every = {"hooks": None, "unsampled": None, "every step": 1, "default": 10}[name]
            floor = Floor(net, every)
            if name == "hooks":
                floor.post_forward = floor.pre_step = floor.post_step = lambda *a: None  # type: ignore[method-assign]
            floor.install()
            floor.step = 20  # past the warm-up, as the neuraldbg configurations below
            return floor
        every = {"neuraldbg unsampled": 10**9, "neuraldbg": 10, "neuraldbg --every 1": 1}[name]
        runs += 1
        session = Session(Settings(run_dir=str(tmp / f"r{runs}"), quiet=True, every=every), [str(ROOT / "scripts" / "bench_train.py")])
        probe = session.probe = Probe(session._on_steps, session._on_models, every=every)
        probe.install()
        for i in range(20):  # its warm-up (the first 10 steps are all sampled)
            step(i)
        return probe

    for i in range(settle):
        step(i)
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[: r % len(CONFIGS)]
        for name in order:
            obs = observer(name)
            for i in range(3):
                step(i)
            t = time.process_time()
            for i in range(steps):
                step(i)
            times[name].append((time.process_time() - t) / steps)
            if obs is not None:
                obs.close() if hasattr(obs, "close") else obs.remove()
    print(json.dumps(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,cnn,gpt")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per model (default: tiny 15, others 6)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round (default: tiny 400, others 20)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rounds, args.steps, 20)
        return
    print("| model | plain step | " + " | ".join(CONFIGS[1:]) + " |")
    print("|---|---|" + "---|" * (len(CONFIGS) - 1))
    for model in args.models.split(","):
        tiny = model == "tiny"
        rounds = args.rounds or (15 if tiny else 6)
        steps = args.steps or (400 if tiny else 20)
        out = subprocess.run(
            [sys.executable, __file__, "--child", model, "--rounds", str(rounds), "--steps", str(steps)],
            check=True, capture_output=True, text=True,
        ).stdout
        times = json.loads(out.strip().splitlines()[-1])
        base = min(times["plain"])
        cells = []
        for name in CONFIGS[1:]:
            best = min(times[name]) / base
            med = statistics.median(b / a for a, b in zip(times["plain"], times[name]))
            cells.append(f"{best:.3f}× ({med:.3f}×)")
        unit = "ms" if base >= 1e-3 else "µs"
        shown = base * (1e3 if unit == "ms" else 1e6)
        print(f"| {model} | {shown:.3g} {unit} | " + " | ".join(cells) + " |")
    print("\ncells: best round / best plain round (median over rounds of the per-round ratio)")


if __name__ == "__main__":
    main()
