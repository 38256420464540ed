"""Pure and replayable: the ranks of one distributed job, compared. Each rank's trace is explained alone
(reasoner.explain); here their hypotheses merge into one list (which ranks show each, where it began first),
and two failures that only exist across ranks are judged from the statistics every rank wrote:
`rank_divergence` (weight checksums of replicas that should be identical differ) and `rank_desync` (ranks
disagree on how far they trained, or one stopped while the others went on)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.trace.events import Hypothesis, Kind, Origin

if TYPE_CHECKING:  # types only: no I/O module here
    from neuraldbg_cli.trace.job import RunData

_LATE = 1 << 62
REPLICATING = {"DistributedDataParallel", "DataParallel"}  # wrappers whose replicas must stay bit-identical
SHARDING = {"FullyShardedDataParallel", "fully_shard"}  # each rank holds another shard: checksums differ by design
# Where in one step a problem can first show, upstream first: a NaN read from one rank's data shows on that
# rank's input before the gradient all-reduce carries it to every rank
_FLOW = {"input": 0, "target": 0, "output": 1, "activation": 1, "loss": 2, "gradient": 3, "weights": 4}


def merge(
    found: list[tuple[int, list[Hypothesis]]],
    presence: float,
    clocks: dict[int, Callable[[int], float]] | None = None,
    unit: str = "rank",
) -> list[Hypothesis]:
    """Each kind once: the instance that began first (earliest step, then upstream in the step, then lowest
    rank) stands for all, with the highest confidence any rank gave it and the ranks where it is present.
    Processes that do not train in lockstep (Hogwild children of one script) count their own steps: there
    `clocks` tells when each rank's step happened, and the first is the earliest in time."""
    by_kind: dict[Kind, list[tuple[int, int, Hypothesis]]] = {}
    for rank, hyps in found:
        for pos, h in enumerate(hyps):
            by_kind.setdefault(h.kind, []).append((rank, pos, h))

    def began(x: tuple[int, int, Hypothesis]) -> tuple[float, int, int]:
        rank, _, h = x
        at = clocks[rank](_step(h)) if clocks is not None else _step(h)
        return at, _flow(h), rank

    merged: list[tuple[int, float, Hypothesis]] = []
    for items in by_kind.values():
        rank, _, first = min(items, key=began)
        h = first.model_copy(deep=True)
        h.confidence = max(x[2].confidence for x in items)
        h.ranks = sorted({r for r, _, x in items if x.confidence >= presence} or {r for r, _, _ in items})
        h.origin.rank = rank
        if len(h.ranks) < len(found):
            many = unit + ("es" if unit.endswith("s") else "s")
            h.summary += f" Seen on {many if len(h.ranks) > 1 else unit} {_list(h.ranks)} only."
        merged.append((min(pos for _, pos, _ in items), -h.confidence, h))
    merged.sort(key=lambda x: (x[0], x[1]))
    return [h for _, _, h in merged]


def place(hyps: list[Hypothesis], extra: list[Hypothesis], presence: float) -> list[Hypothesis]:
    """Cross-rank hypotheses go before the first present hypothesis that began later (temporal precedence)."""
    out = list(hyps)
    for x in sorted(extra, key=_step):
        at = next((i for i, h in enumerate(out) if h.confidence >= presence and _step(h) > _step(x)), len(out))
        out.insert(at, x)
    for i, h in enumerate(out, 1):
        h.rank = i
    return out


def _step(h: Hypothesis) -> int:
    return h.origin.step if h.origin.step is not None else _LATE


def _flow(h: Hypothesis) -> int:
    """How early in its onset step the hypothesis's first evidence of that step lies (forward, then loss,
    gradients, weights); an onset without such evidence sorts in the middle."""
    site = next(
        (e["site"] for e in h.evidence if isinstance(e, dict) and e.get("step") == h.origin.step and e.get("site")),
        "",
    )
    return _FLOW.get(site, 2)


def clocks(runs: list[RunData]) -> dict[int, Callable[[int], float]] | None:
    """When each rank's steps happened, on the clock its meta.json's `clock0` and its stats rows' `t` share
    (one per host): a step is placed at the first row at or after it. None unless every rank has both."""
    out: dict[int, Callable[[int], float]] = {}
    for run in runs:
        zero = run.meta.get("clock0")
        rows = sorted((r["step"], r["t"]) for r in run.stats if isinstance(r.get("t"), (int, float)))
        if not isinstance(zero, (int, float)) or not rows or run.meta.get("host") != runs[0].meta.get("host"):
            return None
        steps = [s for s, _ in rows]

        def at(step: int, zero: float = zero, rows: list[tuple[int, float]] = rows, steps: list[int] = steps) -> float:
            return zero + rows[min(bisect.bisect_left(steps, step), len(rows) - 1)][1]

        out[run.rank or 0] = at
    return out


def _list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


# ---------------------------------------------------------------- rank_divergence


def _replication(runs: list[RunData], th: Thresholds) -> str | None:
    """Why the ranks' weights must be identical, or None when nothing says so: a DDP wrapper; or, without
    one, gradients that agree across ranks while their losses differ (averaged by hand: data parallel)."""
    wrappers = {w for run in runs for m in run.models.get("models", []) for w in m.get("wrappers", [])}
    if wrappers & SHARDING:
        return None
    if wrappers & REPLICATING:
        return f"the model is wrapped in {sorted(wrappers & REPLICATING)[0]}, which keeps replicas identical"
    rows = [{r["step"]: r for r in run.stats if r.get("grads")} for run in runs]
    agree = 0
    for step in sorted(set.intersection(*map(set, rows)))[:50]:
        grads = [row[step]["grads"] for row in rows]
        keys = set.intersection(*(set(g) for g in grads))
        same = keys and all(_close(g[k][0], grads[0][k][0], th.rank_grad_match) for g in grads for k in keys)
        losses = [row[step].get("loss") for row in rows]
        if not same:
            return None
        if len({round(x, 9) for x in losses if isinstance(x, (int, float))}) > 1:
            agree += 1
    return "every rank's gradients are the same while their losses differ (data parallel)" if agree else None


def lockstep(runs: list[RunData], th: Thresholds) -> bool:
    """Whether the ranks train in lockstep: DDP or FSDP, or gradients averaged by hand."""
    wrappers = {w for run in runs for m in run.models.get("models", []) for w in m.get("wrappers", [])}
    return bool(wrappers & (REPLICATING | SHARDING)) or _replication(runs, th) is not None


def _close(a: Any, b: Any, tol: float) -> bool:
    return (
        isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol * max(abs(a), abs(b), 1e-30)
    )


def divergence(runs: list[RunData], th: Thresholds) -> Hypothesis | None:
    """The first sampled step at which replicas' weight checksums differ, the modules that differ there (in
    forward order) and the ranks whose weights left rank 0's. The checksums were computed anyway (they tell
    an unchanged weight): the comparison costs the training nothing, it happens here."""
    runs = [r for r in runs if r.stats]
    if len(runs) < 2:
        return None
    why = _replication(runs, th)
    if why is None:
        return None
    sums = [{r["step"]: r["sums"] for r in run.stats if isinstance(r.get("sums"), dict)} for run in runs]
    order = _order(runs[0])
    last_same = None
    for step in sorted(set.intersection(*map(set, sums))):
        rows = [s[step] for s in sums]
        keys = sorted(set.intersection(*(set(r) for r in rows)), key=lambda k: order.get(k.split("|", 1)[-1], 1 << 30))
        differ = [k for k in keys if any(r[k] != rows[0][k] for r in rows)]
        if not differ:
            last_same = step
            continue
        off = [run.rank or 0 for run, r in zip(runs, rows) if any(r[k] != rows[0][k] for k in differ)]
        root, module = differ[0].split("|", 1) if "|" in differ[0] else (None, differ[0])
        names = [k.split("|", 1)[-1] for k in differ]
        since = f"between step {last_same} and step {step}" if last_same is not None else f"by step {step}"
        summary = (
            f"The data-parallel replicas are no longer the same model: {why}, yet {_who(off)} weights "
            f"of {module}{f' and {len(names) - 1} more modules' if len(names) > 1 else ''} differ from rank "
            f"{runs[0].rank}'s {since}. Something changed weights outside the synchronised optimizer step "
            f"on some ranks only, so each rank now trains a different model."
        )
        evidence = [
            {
                "type": "rank_comparison",
                "step": step,
                "module": n,
                "from": "identical",
                "to": "different",
                "ranks": off,
                "last_identical_step": last_same,
            }
            for n in names[:5]
        ]
        tips = [
            "Change weights only through the optimizer step, identically on every rank: a weight edited "
            "under torch.no_grad() or loaded on one rank (an `if rank == 0:` block) is not synchronised by DDP",
            "After changing weights outside training (a checkpoint, a re-initialisation), broadcast them from "
            "rank 0 (torch.distributed.broadcast) before training goes on",
        ]
        return Hypothesis(
            kind=Kind.rank_divergence,
            confidence=0.9 if "wrapped" in why else 0.75,
            origin=Origin(module=module, step=step, root=root, rank=min(off)),
            summary=summary,
            evidence=evidence,
            propagation=names[:10],
            suggestions=tips,
            ranks=sorted({runs[0].rank or 0, *off}),
        )
    return None


def _order(run: RunData) -> dict[str, int]:
    order: dict[str, int] = {}
    for m in run.models.get("models", []):
        for name in m.get("order", []):
            order.setdefault(name, len(order))
    return order


def _who(ranks: list[int]) -> str:
    return f"rank {ranks[0]}'s" if len(ranks) == 1 else f"ranks {_list(ranks)}'"


# ---------------------------------------------------------------- rank_desync


def _steps(run: RunData) -> int:
    n = run.meta.get("steps_observed")
    if isinstance(n, int):
        return n
    last = max((r["step"] for r in run.stats), default=-1)
    return last + 1


def _step_time(run: RunData) -> float | None:
    """Median seconds per step, from consecutive rows' close times."""
    rows = [(r["step"], r["t"]) for r in run.stats if isinstance(r.get("t"), (int, float))]
    gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(rows, rows[1:]) if s1 > s0]
    return statistics.median(gaps) if gaps else None


def desync(runs: list[RunData], th: Thresholds) -> Hypothesis | None:
    """Ranks of a data-parallel or sharded job train in lockstep: they must end at the same step, and end
    alike. A desync is a rank that left the lockstep without failing: it finished cleanly while another did
    not or went on (its partner left the collective: a failed all-reduce, or a hang), or it stopped reporting
    (no end recorded: killed or hung) while the others went on. Ranks that all failed or were stopped by
    torchrun after one rank's own error are not: that error is the cause, not a disagreement. Ranks that
    never synchronise (independent runs launched together) are never compared."""
    if len(runs) < 2 or not lockstep(runs, th):
        return None
    info = [(run.rank or 0, _steps(run), run.meta.get("exit_status"), _step_time(run)) for run in runs]
    most = max(n for _, n, _, _ in info)
    clean = [x for x in info if x[2] == 0]
    left = [x for x in clean if len(clean) < len(info) or x[1] < most]  # finished while others did not/went on
    left += [x for x in info if x[2] is None and most - x[1] > th.rank_stop_slack]  # stopped reporting
    if not left:
        return None
    short = min(left, key=lambda x: (x[1], x[0]))
    rank, steps, code, _ = short
    ended = (
        "finished"
        if code == 0
        else "stopped reporting (killed or hung)"
        if code is None
        else f"exited with status {code}"
    )
    others = [x for x in info if x[0] != rank]
    went = ", ".join(
        f"rank {r} {'went on to' if n > steps else 'reached'} {n} steps"
        f"{'' if c == 0 else ' and never finished' if c is None else f' and exited with status {c}'}"
        for r, n, c, _ in others
    )
    summary = (
        f"The ranks fell out of step: rank {rank} {ended} after {steps} steps while {went}. Data-parallel "
        "ranks must take the same number of steps; a rank that runs out of batches first leaves the others "
        "waiting in a collective that never completes (a hang, or a failed all-reduce)."
    )
    evidence = [
        {
            "type": "rank_progress",
            "step": n,
            "module": None,
            "from": "in_step",
            "to": "finished" if c == 0 else "failed" if c else "stopped",
            "rank": r,
            "exit_status": c,
            **({"step_time_s": round(t, 4)} if t is not None else {}),
        }
        for r, n, c, t in info
    ]
    tips = [
        "Give every rank the same number of batches: a DistributedSampler (drop_last=True, or the padding "
        "it does by default) instead of a hand-made split of the data",
        "For inputs that are uneven on purpose, wrap the loop in DDP's join() context manager "
        "(torch.distributed.algorithms.Join)",
        "If a rank hung, torchrun's error report and that rank's own output tell where; "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective",
    ]
    return Hypothesis(
        kind=Kind.rank_desync,
        confidence=0.85 if code in (0, None) else 0.6,
        origin=Origin(step=steps, rank=rank),
        summary=summary,
        evidence=evidence,
        suggestions=tips,
        ranks=sorted(r for r, _, _, _ in info),
    )


# ---------------------------------------------------------------- a process training a copy (Hogwild)


def copies(runs: list[RunData]) -> Hypothesis | None:
    """Child processes that trained a model their parent handed them by fork, not in shared memory: each
    trained a private copy, so none of their steps reaches the parent's model (nor the other processes')."""
    found = [
        (run.rank or 0, models, _steps(run))
        for run in runs
        if isinstance(run.meta.get("child"), dict)
        and (models := run.meta["child"].get("unshared_models"))
        and isinstance(models, list)
        and _steps(run) > 0
    ]
    if not found:
        return None
    names = sorted({str(m) for _, models, _ in found for m in models})
    who = [r for r, _, _ in found]
    many = len(found) > 1
    summary = (
        f"{'Processes' if many else 'Process'} {_list(who)} trained {'copies' if many else 'a copy'} of "
        f"{', '.join(names)}, not the model itself: the parent handed it over by fork without "
        "`share_memory()`, so each process updated its own private copy, and none of "
        f"{sum(n for _, _, n in found)} optimizer steps reaches the parent's model"
        f"{' or the other processes' if many else ''} (an evaluation after join() sees it untrained)."
    )
    return Hypothesis(
        kind=Kind.loop_misuse,
        confidence=0.85 if many else 0.6,
        origin=Origin(step=0, rank=who[0]),
        summary=summary,
        evidence=[
            {
                "type": "process_copy",
                "step": 0,
                "module": None,
                "from": "inherited",
                "to": "private_copy",
                "rank": r,
                "models": models,
                "steps": n,
            }
            for r, models, n in found
        ],
        suggestions=[
            f"call `model.share_memory()` on {names[0]} before starting the processes (Hogwild), or use the spawn "
            "start method (`mp.set_start_method('spawn')`), whose hand-over shares the parameters",
            "if each process is meant to train its own model, build it inside the process (or return its "
            "state_dict) so the parent's copy is not mistaken for the trained one",
        ],
        ranks=who,
    )
