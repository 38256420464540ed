"""Pure and replayable: a run directory's events -> ranked hypotheses (the explain report).

Rules propose one hypothesis per kind and SETTINGS the wrong settings they show; `rank` then orders them by
one causal model (see its docstring). Imports no I/O module: the run is read by the caller (trace)."""

from __future__ import annotations

import copy
import heapq
import re
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from neuraldbg_cli.config import SAMPLE_WARMUP, Thresholds
from neuraldbg_cli.reason import crossrank, fixspec, harm
from neuraldbg_cli.reason.families import RULES
from neuraldbg_cli.reason.families.causes import (
    CAUSES,
    CROSS_MODEL,
    acts_at_once,
    falls_without_bound,
    is_root_kind,
    mechanism,
    summed_only,
)
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.settings import SETTINGS, SettingCause
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind, ModelSummary, Origin, Report

if TYPE_CHECKING:  # types only: the reasoner must not import the trace reader (files, JSON)
    from neuraldbg_cli.trace.job import JobData, RunData

_LATE = 1 << 62  # an unknown onset sorts after every known one


def build_context(run: RunData) -> Context:
    settings = _dict(run.meta.get("settings"))
    thresholds = _dict(settings.get("thresholds"))
    try:  # the thresholds the run was observed with (defaults for fields it predates)
        th = Thresholds.model_validate(thresholds)
    except ValidationError:
        th = Thresholds()
    every, window = settings.get("every"), thresholds.get("loss_window")
    models = _list(run.models.get("models"))
    opts = _list(run.models.get("optimizers"))
    return Context(
        events=run.events,
        models=[m for m in models if isinstance(m, dict)],
        optimizers=[o for o in opts if isinstance(o, dict)],
        every=_count(every, 10),
        loss_window=_count(window, 10),
        thresholds=th,
    )


def _dict(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(value: object, default: int) -> int:
    return value if type(value) is int and 0 < value < 1 << 31 else default


def _onset(h: Hypothesis) -> int:
    return h.origin.step or 0


_LOSS_LEVEL = {Kind.loss_plateau, Kind.loss_divergence, Kind.unstable_loss, Kind.non_finite}


def _produced_by(setting: SettingCause, h: Hypothesis, slack: int) -> bool:
    """A setting acts through the updates: it explains what began after step 0, while its evidence lasted
    (within `slack`, the sampling interval that dates that evidence and most effects; a NaN is checked on
    every step, so its onset is exact). A plateau is the exception: it is dated where the flat stretch began,
    step 0 for a loss that never moved, yet what it says is that the updates from the first on did not lower
    the loss, which is what a setting that acts through them does."""
    late = 0 if h.kind == Kind.non_finite else slack
    after_updates = _onset(h) > 0 or h.kind == Kind.loss_plateau
    return (
        h.kind in setting.effects
        and after_updates
        and setting.in_force(_onset(h), slack, late)
        and not falls_without_bound(h)  # no step size makes a loss fall without bound: its sign does
    )


def name_setting(
    setting: SettingCause,
    hyps: list[Hypothesis],
    presence: float,
    slack: int,
    causes: Callable[[Hypothesis, Hypothesis], bool] = lambda a, b: False,
) -> int | None:
    """The hypothesis that states the setting: in the first of its tiers with a present one, the most upstream
    (none of the others `causes` it), then the earliest. Its summary names the setting; every hypothesis the
    setting produced gets its fix first. Returns its index, None when the setting produced none present."""
    named = None
    reached = {i for i, h in enumerate(hyps) if _produced_by(setting, h, slack)}
    for _ in range(2):  # the loss's symptom that what the setting produced went on to cause (a stall that
        # follows the damage of oversized early steps) still states it: the loss is where training shows it; so
        # does damage of the kinds it makes that its early blow-up left (units a transient spike killed)
        reached |= {
            i
            for i, h in enumerate(hyps)
            if (h.kind in _LOSS_LEVEL or h.kind in setting.effects)
            and any(causes(hyps[j], h) for j in reached if j != i)
        }
    for tier in setting.tiers:
        found = [i for i, h in enumerate(hyps) if h.kind in tier and h.confidence >= presence and i in reached]
        if found:
            named = min(
                found,
                key=lambda i: (
                    any(causes(hyps[j], hyps[i]) for j in found if j != i),
                    _onset(hyps[i]),
                    tier.index(hyps[i].kind),
                ),
            )
            break
    if named is None:
        return None
    for k, h in enumerate(hyps):
        if _produced_by(setting, h, slack) or k == named:
            h.suggestions = [setting.fix] + [
                s for s in h.suggestions if s != setting.fix and not any(c in s for c in setting.contradicts)
            ]
            ids = {f["id"] for f in setting.fixes}  # the setting's own fix replaces the rule's of the same id
            h.fixes = [copy.deepcopy(f) for f in setting.fixes] + [f for f in h.fixes if f["id"] not in ids]
    carrier = hyps[named]
    if setting.dates and setting.onset < _onset(carrier):
        carrier.origin.step = setting.onset
    carrier.summary = f"{setting.statement[0].upper()}{setting.statement[1:]}. {carrier.summary}"
    carrier.evidence = setting.evidence + carrier.evidence
    return named


def rank(
    hyps: list[Hypothesis],
    slack: int,
    loss_window: int = 0,
    presence: float = 0.5,
    settings: Iterable[SettingCause] = (),
    position: Callable[[Origin], int] | None = None,
    judged_from: int = Thresholds.model_fields["baseline_samples"].default,
) -> list[Hypothesis]:
    """The causal model: which hypothesis explains which, drawn only where the trace supports it. A is a
    cause of B when A is present (confidence >= `presence`), began no later than B (within `slack` steps, plus
    `loss_window` for a cause the table dates late; a cause that needs training explains nothing present at
    step 0), their sites are connected (one model, a run-wide hypothesis, or a mechanism that acts from one
    model on another) and A's mechanism can produce B's signature (the CAUSES table and its conditions on
    the pair; a wrong setting acts through every update it sized). A link that fails any test is not drawn.
    A consequence names its first cause in `caused_by` and the evidence in `because`; its confidence
    (presence) is left as it is. Order: causes before their consequences; among the rest, what is present
    first, then bugs of the user's making (and a NaN nothing present explains: a numerical bug), then what
    states a setting or explains others, then confidence, onset and forward position."""

    def link(cause: Hypothesis, effect: Hypothesis) -> str | None:
        """The evidence for "cause produced effect", None when the trace does not support it."""
        entry = CAUSES.get(cause.kind)
        if entry is None or cause.confidence < presence or not entry.can_cause(cause, effect):
            return None
        if entry.needs_training and not effect.origin.step and not acts_at_once(cause):
            return None
        early = _uncertain(_onset(cause), slack, judged_from) if cause.origin.module else slack
        if _onset(cause) > _onset(effect) + early + (loss_window if entry.dated_late else 0):
            return None
        site = _connected(cause, effect, entry.condition(cause, effect))
        if site is None:
            return None
        return f"{_timing(cause, effect)}; {site}; {mechanism(cause, effect)}"

    def causes(cause: Hypothesis, effect: Hypothesis) -> bool:
        return link(cause, effect) is not None

    links: list[tuple[int, int, str]] = []  # (cause, consequence, because), the preferred cause first
    carriers: set[int] = set()
    through: dict[tuple[int, int], str] = {}  # (carrier, consequence) -> the setting that link stands for
    scaled = False  # the learning rate is named: a summed loss is the same scale, not a cause of its own
    for setting in settings:
        named = name_setting(setting, hyps, presence, slack, causes)
        if named is not None:
            carriers.add(named)
            scaled |= setting.setting == "learning_rate"
            made = [j for j, h in enumerate(hyps) if j != named and _produced_by(setting, h, slack)]
            links += [(named, j, _setting_because(setting, hyps[named], hyps[j])) for j in made]
            through.update({(named, j): setting.setting.replace("_", " ") for j in made})
    upstream = list(CAUSES)
    for i in sorted(range(len(hyps)), key=lambda i: upstream.index(hyps[i].kind) if hyps[i].kind in CAUSES else 99):
        if scaled and summed_only(hyps[i]):
            continue  # lr x terms is one step size: the lr's carrier explains what it drove
        for j, h in enumerate(hyps):
            because = link(hyps[i], h) if i != j else None
            if because is not None:
                links.append((i, j, because))

    parents: list[list[int]] = [[] for _ in hyps]
    why: dict[tuple[int, int], str] = {}
    for i, j, because in links:
        if i != j and i not in parents[j] and not _ancestor(j, i, parents):  # a link that closes a loop loses
            parents[j].append(i)
            why[(i, j)] = because
    for j, h in enumerate(hyps):
        if parents[j] and h.caused_by is None:
            h.caused_by = hyps[parents[j][0]].kind
            h.because = why[(parents[j][0], j)]
            named_setting = through.get((parents[j][0], j))
            if named_setting:  # the carrier did not make it: the setting it states did
                h.summary += f" Likely a consequence of the {named_setting} (stated in {h.caused_by.value})."
            else:
                h.summary += f" Likely a consequence of {h.caused_by.value}."
            root = _first_root(j, parents)
            if is_root_kind(hyps[root]) and root not in carriers:
                _drop_lr_advice(h)
                if not h.suggestions:
                    h.suggestions = [f"fix {hyps[root].kind.value} first (above): this follows from it"]

    where = position or (lambda origin: 0)
    explains = {i for p in parents for i in p}
    first = _first_symptom(hyps, parents, presence, slack, judged_from)
    key = [
        (
            h.confidence < presence,
            0 if is_root_kind(h) or h.kind == Kind.non_finite else 1 if j in carriers | explains | first else 2,
            -h.confidence,
            h.origin.step if h.origin.step is not None else _LATE,
            where(h.origin),
            j,
        )
        for j, h in enumerate(hyps)
    ]
    waiting = [len(p) for p in parents]
    ready = [key[j] for j in range(len(hyps)) if not waiting[j]]
    heapq.heapify(ready)
    ordered: list[Hypothesis] = []
    while ready:
        j = heapq.heappop(ready)[-1]
        ordered.append(hyps[j])
        for c in range(len(hyps)):
            if j in parents[c]:
                waiting[c] -= 1
                if not waiting[c]:
                    heapq.heappush(ready, key[c])
    for i, h in enumerate(ordered, 1):
        h.rank = i
    return ordered


def _first_symptom(
    hyps: list[Hypothesis], parents: list[list[int]], presence: float, every: int, judged_from: int
) -> set[int]:
    """The loss's symptom when it is where training first showed harm: present, explained by nothing, and begun
    before every present state of the network that nothing explains either (each later than its own dating
    uncertainty allows). A stall from step 0 then leads the gradients that faded at step 32: they cannot have
    caused it, and the stall is what the run shows first."""
    free = [j for j, h in enumerate(hyps) if h.confidence >= presence and not parents[j] and not is_root_kind(h)]
    network = [j for j in free if hyps[j].kind not in _LOSS_LEVEL]
    out = set()
    for j in free:
        if hyps[j].kind not in _LOSS_LEVEL - {Kind.non_finite} or not network:
            continue
        at = _onset(hyps[j])
        if all(_onset(hyps[k]) - _uncertain(_onset(hyps[k]), every, judged_from) > at for k in network):
            out.add(j)
    return out


def _uncertain(onset: int, every: int, judged_from: int) -> int:
    """How much earlier than its dated onset a state may have begun: it was dated at the first sampled step that
    saw it, and the sampled step before saw another state. The probe samples every step up to SAMPLE_WARMUP,
    then every `every`-th: a cause dated at step 8 began after step 7 and explains nothing seen at step 0. The
    first `judged_from` samples are a site's baseline, not judged: a state dated there may have held from step 0.
    (For a layer's state; the loss is read every step but a state of it is recognised late, and the data's
    faults are a run's: those keep one sampling interval.)"""
    if onset <= judged_from:
        return onset
    return 0 if onset <= SAMPLE_WARMUP else max(0, every - 1)


def _first_root(j: int, parents: list[list[int]]) -> int:
    """The hypothesis `j`'s chain of first causes leads to (itself when it has none; links never loop)."""
    while parents[j]:
        j = parents[j][0]
    return j


# advice.lower_lr / plateau_lr (the lr in force, and a value to move it to), the clipping tips, and the search
# for a detached graph that a missing gradient sends the user on (the bug above it is where the gradient went)
_STEP_TIP = re.compile(
    r"^(lr=\S+ with |clip gradients|look for \.detach\(\)|check that the module's output|make sure optimizer\.step)"
)
_STEP_FIXES = {"lr_scale", "clip_grad_norm"}


def _drop_lr_advice(h: Hypothesis) -> None:
    """A consequence of a bug (a loss with the wrong sign, weights no optimizer moves, NaN data, a layer in the
    wrong mode) is not cured by resizing the steps: a lower lr or clipping slows the damage, a higher lr speeds
    it up, and either sends the user away from the line to change; nor is a gradient the bug took away found by
    looking for a detached graph. Those suggestions and fixes go."""
    h.suggestions = [t for t in h.suggestions if not _STEP_TIP.match(t)]
    h.fixes = [f for f in h.fixes if f.get("id") not in _STEP_FIXES]


def _timing(cause: Hypothesis, effect: Hypothesis) -> str:
    a, b = cause.origin.step, effect.origin.step
    if a is None or b is None:
        return f"{cause.kind.value} and {effect.kind.value} were both seen"
    if a <= b:
        return f"{cause.kind.value} began at step {a}, {effect.kind.value} at step {b}"
    return f"{cause.kind.value} was seen at step {a}, {effect.kind.value} at step {b} (within one sampling interval)"


def _connected(cause: Hypothesis, effect: Hypothesis, condition: str | None) -> str | None:
    """How the two sites are connected, in words; None when they are not: one model, or a run-wide
    hypothesis (the loss, the data), or a mechanism that acts across models (a GAN's game)."""
    a, b = cause.origin, effect.origin
    if a.root is None or b.root is None:
        wide = cause if a.root is None else effect
        return f"{wide.kind.value} concerns the whole run"
    if a.root == b.root:
        if a.module and b.module and a.module != b.module:
            return f"both in {a.root} ({a.module}, {b.module})"
        return f"both in {a.root}" + (f" ({a.module})" if a.module else "")
    if condition in CROSS_MODEL:
        return f"{a.root} and {b.root} are trained against each other"
    return None


def _setting_because(setting: SettingCause, carrier: Hypothesis, effect: Hypothesis) -> str:
    name = setting.setting.replace("_", " ")
    return (
        f"{carrier.kind.value} names the {name}, which acts on every update of every model it trains from step "
        f"{setting.onset}; {effect.kind.value} began at step {_onset(effect)}, while it was in force"
    )


def _ancestor(a: int, b: int, parents: list[list[int]]) -> bool:
    """Whether `a` is `b` or one of its causes, through the links accepted so far."""
    seen, todo = set(), [b]
    while todo:
        n = todo.pop()
        if n == a:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(parents[n])
    return False


def steps_observed(run: RunData) -> int:
    summary_type = EventType.run_summary.value  # looked up once: an Enum member's .value is slow per event
    summary = [e for e in run.events if e.type == summary_type]
    counts = [int(run.meta.get("steps_observed") or 0)]
    if summary:  # the monitor's own count: completed steps (a NaN made after the last one is dated past it)
        counts.append(int(summary[-1].metrics.get("steps") or 0))
    elif run.events:  # cut short before its summary: the latest step an event was dated at
        counts.append(max(map(attrgetter("step"), run.events)) + 1)
    return min(max(counts), (1 << 63) - 1)  # a corrupt count must not break the JSON report


def explain(run: RunData, min_confidence: float = 0.5) -> Report:
    ctx = build_context(run)
    hyps = harm.weigh([h for h in (rule(ctx) for rule in RULES) if h is not None], ctx, min_confidence)
    settings = [s for s in (find(ctx) for find in SETTINGS) if s is not None]
    hyps = rank(
        hyps,
        slack=ctx.every,
        loss_window=ctx.loss_window,
        presence=min_confidence,
        settings=settings,
        position=lambda o: ctx.position(o.root, o.module),
        judged_from=ctx.thresholds.baseline_samples,
    )
    for h in hyps:
        if not ctx.optimizers:  # (the advice keeps them in words: the script applies them in its own loop)
            h.fixes = [f for f in h.fixes if f.get("id") not in fixspec.VIA_OPTIMIZER]
        h.fixes = fixspec.annotate(h.fixes, h.kind.value, run.verify)
        if h.fixes and h.fixes[0].get("verified") == "verified":  # the best proven cure is the first thing to try
            best = h.fixes[0]["text"]
            h.suggestions = [best] + [t for t in h.suggestions if t != best]
    steps = steps_observed(run)
    warnings = list(run.warnings)
    state = run.meta.get("status")
    if state == "running" or (run.meta and "exit_status" not in run.meta):
        warnings.append(
            "the run was cut short (killed before neuraldbg could record its end); "
            "this explains what was observed up to then"
        )
    if steps == 0 and not hyps:
        status = "no_training_observed"
    elif any(h.confidence >= min_confidence for h in hyps):
        status = "problems_found"
    else:
        status = "healthy"
    models = [
        ModelSummary(
            name=str(m.get("name")), modules=int(m.get("n_modules") or 0), parameters=int(m.get("n_params") or 0)
        )
        for m in ctx.models
    ]
    run_info = {k: run.meta.get(k) for k in ("script", "exit_status", "status", "start", "end") if k in run.meta}
    return Report(
        run_dir=str(run.dir),
        status=status,
        steps_observed=steps,
        models=models,
        hypotheses=hyps,
        warnings=warnings,
        run=run_info,
    )


def explain_job(job: JobData, min_confidence: float = 0.5) -> Report:
    """A single-process run, or a distributed job: each rank explained alone, their hypotheses merged (see
    crossrank.merge), and the comparisons across ranks placed among them by onset."""
    if not job.distributed:
        return explain(job.runs[0], min_confidence)
    reports = [(run.rank or 0, explain(run, min_confidence)) for run in job.runs]
    th = build_context(job.runs[0]).thresholds
    extra = [
        h
        for h in (crossrank.divergence(job.runs, th), crossrank.desync(job.runs, th), crossrank.copies(job.runs))
        if h is not None
    ]
    lockstep = crossrank.lockstep(job.runs, th)
    children = all(isinstance(run.meta.get("child"), dict) for run in job.runs)
    merged = crossrank.merge(
        [(r, rep.hypotheses) for r, rep in reports],
        min_confidence,
        clocks=None if lockstep else crossrank.clocks(job.runs),
        unit="process" if children and not lockstep else "rank",
    )
    extra = [_frozen_replica(x, merged, min_confidence) for x in extra]
    hyps = crossrank.place(merged, extra, min_confidence)
    lead = reports[0][1]
    world = max((r.meta.get("world_size") or 0 for r in job.runs if not children), default=0)
    missing = sorted(set(range(world)) - {r.rank for r in job.runs})
    notes = list(job.warnings)
    if missing:  # a node's own run directory: the other nodes wrote theirs
        notes.append(
            f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of this {world}-rank job "
            f"{'are' if len(missing) > 1 else 'is'} not in this run directory (another node's?): pass every node's "
            "run directory to `neuraldbg explain` to compare the ranks"
        )
    warnings = notes + list(
        dict.fromkeys(w if w.startswith("rank ") else f"rank {r}: {w}" for r, rep in reports for w in rep.warnings)
    )
    if any(h.confidence >= min_confidence for h in hyps):
        status = "problems_found"
    elif all(rep.status == "no_training_observed" for _, rep in reports):
        status = "no_training_observed"
    else:
        status = "healthy"
    meta = job.meta or job.runs[0].meta
    ranks = {
        str(run.rank): {
            k: run.meta.get(k) for k in ("host", "exit_status", "status", "steps_observed") if k in run.meta
        }
        for run in job.runs
    }
    run_info: dict[str, Any] = {
        k: meta.get(k) for k in ("script", "exit_status", "status", "start", "end") if k in meta
    }
    run_info.update(world_size=meta.get("world_size", len(job.runs)), ranks=ranks)
    steps = [rep.steps_observed for _, rep in reports]
    if children and not lockstep:  # each process stepped its own optimizers: a shared model took them all
        run_info["processes"] = len(reports)
    return Report(
        run_dir=", ".join(map(str, job.dirs)),
        status=status,
        steps_observed=sum(steps) if "processes" in run_info else max(steps),
        models=lead.models,
        hypotheses=hyps,
        warnings=warnings,
        run=run_info,
    )


def _frozen_replica(x: Hypothesis, merged: list[Hypothesis], min_confidence: float) -> Hypothesis:
    """Replicas that part because one rank's weights never change (its optimizer is never stepped, or leaves
    them out) follow from that: the divergence is its consequence, and its advice (weights edited on one rank)
    would point the wrong way."""
    frozen = next(
        (h for h in merged if h.kind == Kind.unchanged_weights and h.confidence >= min_confidence and h.ranks), None
    )
    if x.kind != Kind.rank_divergence or frozen is None or x.origin.rank not in (frozen.ranks or []):
        return x
    x = x.model_copy(deep=True)
    x.caused_by = Kind.unchanged_weights
    x.because = (
        f"unchanged_weights on rank {x.origin.rank}: its weights stay as they were while the other ranks' train, "
        "so the replicas part from its first step"
    )
    seen = x.summary.split(" Something changed weights")[0]  # (that guess is what this replaces)
    x.summary = f"{seen} Likely a consequence of unchanged_weights: rank {x.origin.rank}'s weights never change."
    x.suggestions = ["fix unchanged_weights first (above): this follows from it"]
    x.origin.step = max(x.origin.step or 0, frozen.origin.step or 0)  # placed after its cause
    return x


def failing_kinds(report: Report, fail_on: list[str], min_confidence: float) -> list[str]:
    """Kinds named by --fail-on ('any' = all) that reach min_confidence in this report."""
    wanted: set[str] | None = None if "any" in fail_on else set(fail_on)
    return [
        h.kind.value
        for h in report.hypotheses
        if h.confidence >= min_confidence and (wanted is None or h.kind.value in wanted)
    ]


def verdict_lines(report: Report, min_confidence: float, limit: int = 3) -> list[str]:
    shown = [h for h in report.hypotheses if h.confidence >= min_confidence][:limit]
    processes = report.run.get("processes") if report.run else None
    where = f" in {processes} processes" if processes else ""
    lines = [f"neuraldbg: {report.status.replace('_', ' ')} ({report.steps_observed} steps observed{where})"]
    if not shown:
        return lines
    for h in shown:
        where = f" at {h.origin.module}" if h.origin.module else ""
        lines.append(f"  {h.rank}. {h.kind.value} ({h.confidence:.2f}){where}, step {h.origin.step}: {h.summary}")
    return lines


def kinds_checked(fail_on: list[str]) -> list[Kind]:
    if not fail_on or "any" in fail_on:
        return list(Kind)
    return [Kind(k) for k in fail_on]


def unsupported_links(report: Report, min_confidence: float = 0.5) -> list[str]:
    """The "likely a consequence of" links of a report that do not hold up: no evidence given, a cause that
    is not present or not listed above its consequence, a cause that began after it, or sites in two models
    with no mechanism across them. Empty for every report `explain` makes (scored on each suite run)."""
    bad = []
    for h in report.hypotheses:
        if h.caused_by is None:
            continue
        cause = next((c for c in report.hypotheses if c.kind == h.caused_by and c.rank < h.rank), None)
        name = f"{h.kind.value} <- {h.caused_by.value}"
        if not h.because:
            bad.append(f"{name}: no evidence given")
        elif cause is None or cause.confidence < min_confidence:
            bad.append(f"{name}: the cause is not present above it")
        elif f"{cause.kind.value} " not in h.because:
            bad.append(f"{name}: the evidence does not name the cause ({h.because})")
        elif (
            cause.origin.root
            and h.origin.root
            and cause.origin.root != h.origin.root
            and "against each other" not in h.because
        ):
            bad.append(f"{name}: {cause.origin.root} and {h.origin.root} are not connected")
    return bad
