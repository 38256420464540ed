"""What the monitor side costs per StepRecord: Session._on_steps (Monitor.observe, the stats.jsonl rows and their
write) replayed over records captured from a real training loop, without torch in the timed part.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/profile_monitor.py                   # tiny, gpt, cnn
    OMP_NUM_THREADS=1 .venv/bin/python scripts/profile_monitor.py --models tiny --reps 20
    PYTHONPATH=/other/tree .venv/bin/python scripts/profile_monitor.py             # the same records, another tree

Capture (once, cached as a pickle under --cache; --recapture redoes it): the model of scripts/bench_train.py
`setup()` trains in-process with a Probe wired to a Session as `neuraldbg run` wires it (tiny 2000 steps, gpt and
cnn 200, --every 10); each batch of records handed to `_on_steps` is deep-copied first (the monitor may mutate
what it is given), and so is each model description handed to the monitor. The pickle holds events.py's records:
recapture after a change to their layout.

Replay: a fresh Session (quiet, a temporary run directory) per repetition, its monitor given the models when the
probe described them, then `_on_steps([record])` for every record in order, each call timed. Per record the best
of --reps repetitions (state evolves the same way in each), averaged over unsampled and sampled records; the GC
is off while timing. Then one more replay under sys.setprofile counts Python and C calls per record (deterministic:
the measure to trust on a busy machine). --top lists the functions called most often per record.
--dump DIR keeps one replay's events.jsonl and stats.jsonl (ended as a run ends) under DIR/<model>/: two trees'
should be identical byte for byte."""

from __future__ import annotations

import argparse
import collections
import copy
import gc
import pickle
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = {"tiny": 2000, "gpt": 200, "cnn": 200}


def capture(model: str, steps: int, every: int) -> list[tuple[str, object]]:
    """The timeline of one training run as the session saw it: ("models", [ModelInfo]) and ("steps", [StepRecord])."""
    sys.path[:0] = [str(ROOT / "scripts")]
    import bench_train as bt
    import torch

    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session
    from neuraldbg_cli.probe.hooks import Probe

    torch.manual_seed(0)
    net, opt, batches, loss_fn = bt.setup(model, torch.device("cpu"))
    timeline: list[tuple[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(Settings(run_dir=f"{tmp}/r", quiet=True, every=every), [str(ROOT / "scripts/bench_train.py")])

        def on_steps(records: list) -> None:
            timeline.append(("steps", copy.deepcopy(records)))
            session._on_steps(records)

        def on_models() -> None:
            session._on_models()
            timeline.append(("models", copy.deepcopy(session.probe.models())))

        probe = session.probe = Probe(on_steps, on_models, every=every)
        probe.install()
        for i in range(steps):
            x, y = batches[i % len(batches)]
            opt.zero_grad(set_to_none=True)
            loss_fn(net(x), y).backward()
            opt.step()
        probe.close()
    return timeline


def fresh_session(tmp: str, every: int):  # noqa: ANN201
    from neuraldbg_cli.config import Settings
    from neuraldbg_cli.launch.session import Session

    return Session(Settings(run_dir=tmp, quiet=True, every=every), [str(ROOT / "scripts/bench_train.py")])


def replay(timeline: list, every: int, timer=None) -> list[tuple[bool, float]]:  # noqa: ANN001
    """One replay on a fresh session: (sampled, seconds) per record; `timer` wraps each call when given."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        session = fresh_session(f"{tmp}/r", every)
        records = copy.deepcopy(timeline)  # the monitor may mutate what it is given
        clock = time.perf_counter
        for kind, payload in records:
            if kind == "models":
                session.monitor.set_models(payload)
                continue
            for rec in payload:
                if timer is not None:
                    timer(session, rec)
                    out.append((rec.sampled, 0.0))
                    continue
                t0 = clock()
                session._on_steps([rec])
                out.append((rec.sampled, clock() - t0))
        session.writer.close()
    return out


def dump(timeline: list, every: int, out: Path) -> None:
    """One replay to its end (the stats' last row, the monitor's pending events and summary) in `out`."""
    import shutil

    with tempfile.TemporaryDirectory() as tmp:
        session = fresh_session(f"{tmp}/r", every)
        for kind, payload in copy.deepcopy(timeline):
            if kind == "models":
                session.monitor.set_models(payload)
            else:
                session._on_steps(payload)
        session.writer.stats(session.thinner.finish())
        session.monitor.finish()
        session.writer.close()
        out.mkdir(parents=True, exist_ok=True)
        for name in ("events.jsonl", "stats.jsonl"):
            shutil.copy(Path(tmp) / "r" / name, out / name)


def timings(timeline: list, every: int, reps: int) -> tuple[float, float, int, int]:
    """(µs per unsampled record, µs per sampled record, counts): per record the best of `reps` replays."""
    best: list[float] | None = None
    kinds: list[bool] = []
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            run = replay(timeline, every)
        finally:
            gc.enable()
        kinds = [s for s, _ in run]
        best = [t for _, t in run] if best is None else [min(a, t) for a, (_, t) in zip(best, run)]
    assert best is not None
    uns = [t for s, t in zip(kinds, best) if not s]
    smp = [t for s, t in zip(kinds, best) if s]
    return 1e6 * sum(uns) / max(1, len(uns)), 1e6 * sum(smp) / max(1, len(smp)), len(uns), len(smp)


def calls(timeline: list, every: int, top: int) -> tuple[float, float, dict[bool, list[tuple[str, float]]]]:
    """Calls per unsampled and per sampled record (Python functions and C functions), and the most frequent
    callees per unsampled and per sampled record."""
    per: dict[bool, list[int]] = {False: [], True: []}
    names: dict[bool, collections.Counter] = {False: collections.Counter(), True: collections.Counter()}

    def timer(session, rec) -> None:  # noqa: ANN001
        n = 0

        def prof(frame, event, arg) -> None:  # noqa: ANN001
            nonlocal n
            if event == "call":
                n += 1
                code = frame.f_code
                names[rec.sampled][f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"] += 1
            elif event == "c_call":
                n += 1
                names[rec.sampled][f"{getattr(arg, '__qualname__', arg)} (C)"] += 1

        sys.setprofile(prof)
        try:
            session._on_steps([rec])
        finally:
            sys.setprofile(None)
        per[rec.sampled].append(n - 1)  # less the setprofile(None) call itself

    replay(timeline, every, timer)
    uns, smp = per[False], per[True]
    common = {s: [(k, v / max(1, len(per[s]))) for k, v in names[s].most_common(top)] for s in (False, True)}
    return sum(uns) / max(1, len(uns)), sum(smp) / max(1, len(smp)), common


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(STEPS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "neuraldbg-monitor-replay"))
    ap.add_argument("--recapture", action="store_true")
    ap.add_argument("--dump", help="keep one replay's events.jsonl and stats.jsonl under DUMP/<model>/")
    ap.add_argument("--top", type=int, default=0, help="list the N most frequent callees per record")
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    print("| model | records (unsampled/sampled) | µs/unsampled | µs/sampled | calls/unsampled | calls/sampled |")
    print("|---|---|---|---|---|---|")
    tops = {}
    for model in args.models.split(","):
        path = cache / f"{model}-{STEPS[model]}-every{args.every}.pkl"
        if args.recapture or not path.exists():
            path.write_bytes(pickle.dumps(capture(model, STEPS[model], args.every)))
        timeline = pickle.loads(path.read_bytes())
        if args.dump:
            dump(timeline, args.every, Path(args.dump) / model)
        us_u, us_s, n_u, n_s = timings(timeline, args.every, args.reps)
        c_u, c_s, common = calls(timeline, args.every, args.top)
        tops[model] = common
        print(f"| {model} | {n_u}/{n_s} | {us_u:.1f} | {us_s:.1f} | {c_u:.0f} | {c_s:.0f} |", flush=True)
    for model, common in tops.items():
        for sampled, rows in common.items():
            if rows:
                print(f"\n{model}: most frequent callees per {'sampled' if sampled else 'unsampled'} record")
                for name, n in rows:
                    print(f"  {n:7.2f}  {name}")


if __name__ == "__main__":
    main()
