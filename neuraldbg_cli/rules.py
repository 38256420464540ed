"""One rule per failure Kind: events of one run -> at most one Hypothesis of that kind.

A rule takes the `Context` only (keyword `ctx`), reads the events it needs and says what to change. Besides
the rules, SETTINGS find a wrong training setting (a learning rate or weight decay the weights show to be far
too large); the reasoner names it in the hypotheses it produced. CAUSES is the table of which kinds can cause
which, that the reasoner ranks with. Pure: no I/O module is imported (trace reads the events)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, cast

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import CROSS_RANK_KINDS, EventType, Hypothesis, Kind, Origin, SemanticEvent
from neuraldbg_cli.families.lossfn import loss_misuse
from neuraldbg_cli.vocab import (
    RNN_TYPES,
    SATURATING_TYPES,
    SOFTMAX_TYPES,
    decoupled_decay,
    is_norm,
    is_residual,
    usual_lr,
)

Event = SemanticEvent  # what a rule reads: one line of events.jsonl


@dataclass
class Context:
    events: list[Event]  # fixed once the Context is made: it is indexed then
    models: list[dict[str, Any]] = field(default_factory=list)  # model.json "models"
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    every: int = 10
    loss_window: int = 10
    thresholds: Thresholds = field(default_factory=Thresholds)
    _order: dict[tuple, int] = field(default_factory=dict)
    _positions: dict[tuple[str, str], list[int]] = field(default_factory=dict, init=False)  # (type, to) -> indexes
    _last: dict[tuple, str] = field(default_factory=dict, init=False)  # (type, root, module, site) -> last `to`

    def __post_init__(self) -> None:
        for m in self.models:
            for i, name in enumerate(m.get("order") or []):
                self._order[(m.get("name"), name)] = i
        # indexed once, so that rules do not each scan every event (a trace holds up to trace.MAX_EVENTS)
        positions: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
        for i, key in enumerate(map(attrgetter("type", "to"), self.events)):
            positions[key].append(i)
        self._positions = dict(positions)
        self._last = dict(
            zip(map(attrgetter("type", "root", "module", "site"), self.events), map(attrgetter("to"), self.events))
        )

    def select(self, types: Iterable[str] = (), to: Iterable[str] = (), sites: Iterable[str] = ()) -> list[Event]:
        """The events of these types, into these states, at these sites (empty: any), in trace order."""
        types, to, sites = set(types), set(to), set(sites)
        found = [pos for (t, s), pos in self._positions.items() if (not types or t in types) and (not to or s in to)]
        picked = found[0] if len(found) == 1 else sorted(chain.from_iterable(found))
        return [e for e in map(self.events.__getitem__, picked) if not sites or e.site in sites]

    def last_to(self, key: tuple) -> str | None:
        """The state of the last transition at (type, root, module, site), None if there was none."""
        return self._last.get(key)

    def order(self, ev: Event) -> int:
        """Position of the event's module in the forward pass (unknown modules sort last)."""
        return self._order.get((ev.root, ev.module), 10**6)

    def position(self, root: str | None, module: str | None) -> int:
        return self._order.get((root, module), 10**6)

    def module_types(self) -> dict[str, str]:
        return {name: info.get("type", "") for m in self.models for name, info in (m.get("modules") or {}).items()}

    def groups(self) -> list[tuple[str, dict[str, Any]]]:
        """(optimizer type, param group) for every group of every optimizer seen."""
        return [
            (str(opt.get("type") or "optimizer"), g)
            for opt in self.optimizers
            for g in opt.get("groups") or []
            if isinstance(g, dict)
        ]

    def lr_hint(self) -> tuple[str, float] | None:
        """The first group's (optimizer type, lr) as recorded."""
        return next(((opt, float(g["lr"])) for opt, g in self.groups() if _number(g.get("lr"))), None)

    def peak_lr(self) -> tuple[str, float] | None:
        """The largest learning rate of any group (its schedule's initial_lr where that is larger: a warm-up
        recorded at lr 0 still runs at its peak later): the one that makes a run diverge."""
        best: tuple[str, float] | None = None
        for opt, g in self.groups():
            lrs = [float(g[k]) for k in ("lr", "initial_lr") if _number(g.get(k))]
            if lrs and (best is None or abs(max(lrs, key=abs)) > abs(best[1])):
                best = (opt, max(lrs, key=abs))
        return best


def _number(value: object) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < float("inf")
    )


# ---------------------------------------------------------------- helpers shared by rules


def _first_by_module(events: list[Event]) -> dict[tuple, Event]:
    first: dict[tuple, Event] = {}
    for e in events:
        k = (e.root, e.module)
        if k not in first or e.step < first[k].step:
            first[k] = e
    return first


def _still(ctx: Context, events: list[Event], state: str) -> float:
    """Fraction of the affected sites whose last transition is still into `state` (did not recover)."""
    keys = {(e.type, e.root, e.module, e.site) for e in events}
    if not keys:
        return 0.0
    return sum(1 for k in keys if ctx.last_to(k) == state) / len(keys)


def _origin_of(ctx: Context, events: list[Event], output_side: bool = False) -> Event:
    """Earliest onset; among modules starting in the same observation the input side (or output side)."""
    onset = min(e.step for e in events)
    same = [e for e in events if e.step <= onset]
    return (max if output_side else min)(same, key=ctx.order)


def _evidence(events: list[Event], limit: int = 6) -> list[dict[str, Any]]:
    out = []
    for e in sorted(events, key=lambda e: e.step)[:limit]:
        d = {"type": e.type, "step": e.step, "module": e.module, "from": e.from_, "to": e.to, "site": e.site}
        d.update({k: v for k, v in e.metrics.items() if v is not None})
        out.append(d)
    return out


def _spread_confidence(base: float, n: int, persistent: float) -> float:
    return min(0.95, (base + 0.08 * min(n, 3)) * (0.6 + 0.4 * persistent))


def _hyp(
    kind: Kind,
    confidence: float,
    origin: Event | None,
    step: int | None,
    summary: str,
    events: list[Event],
    suggestions: list[str],
    propagation: list[str] | None = None,
) -> Hypothesis:
    return Hypothesis(
        kind=kind,
        confidence=round(confidence, 3),
        origin=Origin(module=origin.module if origin else None, step=step, root=origin.root if origin else None),
        summary=summary,
        evidence=_evidence(events),
        propagation=propagation or [],
        suggestions=suggestions,
    )


def lower_lr(ctx: Context) -> list[str]:
    """Advice for a run the learning rate may drive too hard (divergence, explosion, oscillation, NaN, dead
    units): a value always below the current one (the optimizer's usual value when far above it, else one
    order of magnitude down), or the words "lower the learning rate" when no optimizer was seen."""
    peak = ctx.peak_lr()
    if peak is None:
        return [
            "lower the learning rate (no torch.optim optimizer was seen: make the manual update's step "
            "size smaller, e.g. divide it by 10)"
        ]
    opt, lr = peak
    if lr < 0:
        return [f"{opt} has a negative learning rate (lr={lr:g}): it climbs the loss; use a positive one"]
    if lr == 0:
        return []  # nothing moves: a learning rate of 0 cannot be what drives this
    usual, th = usual_lr(opt), ctx.thresholds
    target = usual if lr > usual * th.lr_usual_span else lr * th.lr_lower_factor
    return [f"lr={lr:g} with {opt}: try {target:.3g}"]


def plateau_lr(ctx: Context) -> list[str]:
    """Learning-rate advice for a loss that does not move: raise it only when it is below its optimizer's
    usual range, lower it when far above it (a huge lr also pins a loss: dead or saturated units), else none."""
    peak = ctx.peak_lr()
    if peak is None:
        return []
    opt, lr = peak
    usual, span = usual_lr(opt), ctx.thresholds.lr_usual_span
    if lr == 0:
        return [zero_lr(opt, usual)]
    if lr < 0 or lr > usual * span:
        return lower_lr(ctx)
    if lr < usual / span:
        return [
            f"lr={lr:g} with {opt} is below its usual range ({usual / span:g} to {usual * span:g}): raise the "
            f"learning rate toward {usual:g}"
        ]
    return []


def zero_lr(opt: str, usual: float) -> str:
    return f"{opt} has lr=0: nothing can change; set a real learning rate (e.g. {usual:g} for {opt})"


def _model_has(ctx: Context, test: Callable[[str], bool]) -> bool:
    return any(test(t) for t in ctx.module_types().values())


def _names(events: list[Event]) -> list[str]:
    return sorted({e.module for e in events if e.module})


# ---------------------------------------------------------------- rules, one per kind


def vanishing_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["vanishing"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    chain = [e.module or "" for e in sorted(first.values(), key=ctx.order, reverse=True)]
    conf = _spread_confidence(0.62, len(first), _still(ctx, evs, "vanishing"))
    ratio = origin.metrics.get("ratio_to_max")
    types = ctx.module_types()
    sat = sorted(n for n, t in types.items() if t in SATURATING_TYPES)
    tips = []
    if sat:
        kinds = "/".join(sorted({types[n] for n in sat}))
        tips.append(
            f"{kinds} activations ({', '.join(sat[:3])}{'…' if len(sat) > 3 else ''}) have derivative "
            f"<= 0.25 (sigmoid) or saturate: switch to ReLU/GELU"
        )
    elif ctx.select(to=["saturated"]):
        tips.append("saturating functional activations (torch.sigmoid/tanh) squash gradients: switch to ReLU/GELU")
    if any(t in RNN_TYPES for t in types.values()):
        tips.append("plain RNN over long sequences: use LSTM/GRU, shorter truncated BPTT, or attention")
    tips.append("initialise with Xavier/He (nn.init.kaiming_normal_ for ReLU, xavier_uniform_ for tanh)")
    if not _model_has(ctx, is_norm):  # suggestions fit the model that was seen
        tips.append("add normalisation (LayerNorm/BatchNorm) between layers")
    if len(types) >= 8 and not _model_has(ctx, is_residual):
        tips.append("add residual (skip) connections so gradients reach the first layers")
    where = f"{ratio:.1e}× the largest layer's gradient" if ratio else "almost no gradient"
    summary = (
        f"Gradients vanish toward the input: {origin.module} gets {where} from step {origin.step}; "
        f"{len(first)} layer(s) affected, so the early layers barely learn."
    )
    return _hyp(Kind.vanishing_gradient, conf, origin, origin.step, summary, evs, tips, chain)


def _blowups(ctx: Context) -> list[Event]:
    """Activation magnitude blow-ups: a module's output std up by orders of magnitude from its early level
    (the monitor's `anomalous` state) to a size no healthy layer has (Thresholds.blowup_std)."""
    least = ctx.thresholds.blowup_std
    return [
        e
        for e in ctx.select(types=[EventType.activation_regime_shift.value], to=["anomalous"])
        if (e.metrics.get("std") or 0.0) >= least
    ]


def _blowup_phrase(ctx: Context, evs: list[Event]) -> tuple[Event, str]:
    """The first module where activations blew up (earliest step, then forward order) and a sentence on it."""
    origin = _origin_of(ctx, list(_first_by_module(evs).values()))
    m = origin.metrics
    ratio = m.get("std_ratio")
    if ratio is None and m.get("std") is not None and m.get("baseline_std"):
        ratio = m["std"] / m["baseline_std"]  # type: ignore[operator]
    size = f" (output std {m['std']:.3g}, {ratio:.3g}× its early level)" if m.get("std") is not None and ratio else ""
    n = len(_first_by_module(evs))
    return origin, (f"activations blow up at {origin.module} from step {origin.step}{size}; {n} layer(s) affected")


def exploding_gradient(ctx: Context) -> Hypothesis | None:
    """Exploding gradients; without gradient events, an activation blow-up is the same failure seen in the
    forward pass (weights grown, by a large lr or init, until every layer multiplies its input up), so it
    stands for it unless the loss diverges, which then carries it as evidence."""
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["exploding"])
    blow = _blowups(ctx)
    tips = lower_lr(ctx) + [
        "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step()",
        "check the initialisation scale (default or Xavier/He, not larger)",
    ]
    if not evs:
        if not blow or ctx.select(types=[EventType.optimizer_instability.value], to=["diverging"]):
            return None
        origin, phrase = _blowup_phrase(ctx, blow)
        first = _first_by_module(blow)
        chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
        conf = _spread_confidence(0.62, len(first), _still(ctx, blow, "anomalous"))
        summary = f"Values explode in the forward pass: {phrase}."
        return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, blow, tips, chain)
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))  # input side: where large init / high lr compounds most
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(0.66, len(first), max(_still(ctx, evs, "exploding"), 0.7))
    rms = origin.metrics.get("rms")
    summary = (
        f"Gradients explode: {origin.module} reaches gradient RMS {rms:.3g} at step {origin.step}"
        if rms
        else f"Gradients explode from step {origin.step} at {origin.module}"
    )
    summary += f"; {len(first)} layer(s) affected."
    if blow:
        summary += f" Also {_blowup_phrase(ctx, blow)[1]}."
    return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, evs + blow, tips, chain)


def _activation_rule(
    ctx: Context, state: str, kind: Kind, base: float, tips: list[str], phrase: str
) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.activation_regime_shift.value], to=[state])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(base, len(first), _still(ctx, evs, state))
    where = " (its activation output)" if origin.site == "activation" else ""
    summary = f"{phrase} at {origin.module}{where} from step {origin.step}; {len(first)} layer(s) affected."
    return _hyp(kind, conf, origin, origin.step, summary, evs, tips, chain)


def _lr_above_usual(ctx: Context) -> bool:
    peak = ctx.peak_lr()
    return peak is not None and peak[1] > usual_lr(peak[0]) * ctx.thresholds.lr_usual_span


def dead_activation(ctx: Context) -> Hypothesis | None:
    tips = [
        "use LeakyReLU/GELU, or lower the learning rate so ReLUs are not pushed into the dead zone",
        "check bias initialisation (large negative biases keep units off) and use He init",
    ]
    # a large lr is the usual way units die during training: its fix first when the lr is above its range
    tips = lower_lr(ctx) + tips if _lr_above_usual(ctx) else tips[:1] + lower_lr(ctx) + tips[1:]
    return _activation_rule(
        ctx, "dead", Kind.dead_activation, 0.62, tips, "Most ReLU units never activate on a whole batch (dead)"
    )


def saturated_activation(ctx: Context) -> Hypothesis | None:
    tips = ["normalise the inputs and use a smaller (Xavier) initialisation so pre-activations stay near 0"]
    tips.append(
        "switch to ReLU/GELU"
        if _model_has(ctx, is_norm)
        else "add BatchNorm/LayerNorm before the activation, or switch to ReLU/GELU"
    )
    return _activation_rule(
        ctx,
        "saturated",
        Kind.saturated_activation,
        0.62,
        tips,
        "Bounded activations are pinned at their rails (saturated, gradient ≈ 0)",
    )


def non_finite(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(to=["non_finite"])
    if not evs:
        return None
    onset = min(e.step for e in evs)
    same = [e for e in evs if e.step == onset]
    acts = [e for e in same if e.type == EventType.non_finite.value and e.site in ("output", "activation")]
    grads = [e for e in same if e.site == "gradient"]
    origin = (
        min(acts, key=ctx.order)
        if acts
        else max(grads, key=ctx.order)
        if grads
        else next((e for e in same if e.site == "loss"), same[0])
    )
    where = {"output": "output", "activation": "activation", "gradient": "gradient", "loss": "loss"}.get(
        origin.site or "", "value"
    )
    name = origin.module or ("the input data" if origin.site in ("input", "target") else "the loss")
    summary = f"NaN/Inf first appears in the {where} of {name} at step {onset}."
    tips = [
        "guard log/sqrt/division: torch.log(x.clamp_min(1e-8)), torch.sqrt(x + 1e-8), divide by (std + 1e-5)",
        "run a few steps with torch.autograd.detect_anomaly() to see the op",
        "lower the learning rate / clip gradients if values grew before the NaN",
    ]
    chain = [e.module or e.site or "" for e in sorted(evs, key=lambda e: (e.step, ctx.order(e)))][:12]
    return _hyp(Kind.non_finite, 0.9, origin, onset, summary, evs, tips, list(dict.fromkeys(chain)))


def data_anomaly(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.data_anomaly.value], to=["non_finite", "extreme_scale", "shifted"])
    made = [e.step for e in ctx.select(types=[EventType.non_finite.value], sites=["output", "activation"])]
    if made:  # a NaN target computed by the model's own (NaN) modules is not bad data
        evs = [e for e in evs if not (e.site == "target" and e.to == "non_finite" and e.step >= min(made))]
    if not evs:
        return None
    onset = min(e.step for e in evs)
    first = min(
        (e for e in evs if e.step == onset), key=lambda e: ("non_finite", "extreme_scale", "shifted").index(e.to)
    )
    m = {k: v for k, v in first.metrics.items() if v is not None}  # null (NaN) metrics: the defaults below
    what = "targets" if first.site == "target" else "inputs"
    conf = (
        0.92
        if first.to == "non_finite"
        else {"extreme_scale": 0.75, "shifted": 0.7}[first.to] * (0.7 + 0.3 * _still(ctx, evs, first.to))
    )  # one NaN batch is enough to ruin the weights
    if first.to == "non_finite":
        summary = f"The {what} contain NaN/Inf values from step {onset}."
        tips = [
            "drop or fix non-finite rows before training: x = x[torch.isfinite(x).all(dim=1)]",
            "check the data pipeline (missing values, division by zero in preprocessing)",
        ]
    elif first.to == "extreme_scale":
        summary = (
            f"The {what} are not normalised: mean {m.get('mean', 0):.3g}, std {m.get('std', 0):.3g} "
            f"(range {m.get('min', 0):.3g}…{m.get('max', 0):.3g}) from step {onset}."
        )
        tips = [
            f"normalise {what}: subtract mean {m.get('mean', 0):.4g} and divide by std {m.get('std', 1):.4g} "
            f"(e.g. transforms.Normalize, or x / 255 for pixels)"
        ]
    else:
        summary = (
            f"The {what} distribution shifts at step {onset}: mean {m.get('mean', 0):.3g}, std "
            f"{m.get('std', 0):.3g} vs mean {m.get('baseline_mean', 0):.3g}, std {m.get('baseline_std', 0):.3g} before."
        )
        tips = ["check the data source / preprocessing for that step (a different file, unit or augmentation)"]
    origin = Origin(module=None, step=onset, root=first.root)
    h = _hyp(Kind.data_anomaly, conf, None, onset, summary, evs, tips, [first.site or "input"])
    h.origin = origin
    return h


def unchanged_weights(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.parameter_update.value], to=["unchanged"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    names = _names(evs)
    outside = [e.module for e in first.values() if e.module and not e.metrics.get("in_optimizer")]
    hint = ctx.lr_hint()
    tips = []
    if not ctx.optimizers:
        tips.append("no optimizer was created: build one and call optimizer.step() after loss.backward()")
    elif hint and hint[1] == 0:
        tips.append(zero_lr(hint[0], usual_lr(hint[0])))
    if outside and ctx.optimizers:
        tips.append(
            f"{', '.join(outside[:4])} get gradients but are not in any optimizer: pass model.parameters() "
            f"(all of them) to the optimizer"
        )
    tips.append("make sure optimizer.step() is called every iteration (after loss.backward())")
    summary = (
        f"Weights never change: {', '.join(names[:4])}{'…' if len(names) > 4 else ''} stay bit-identical "
        f"from step {origin.step} although they receive gradients."
    )
    conf = _spread_confidence(0.7, len(first), _still(ctx, evs, "unchanged"))
    return _hyp(Kind.unchanged_weights, conf, origin, origin.step, summary, evs, tips, names)


def no_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["absent"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()), output_side=True)
    names = _names(evs)
    tips = [
        "look for .detach(), .data, .item() or torch.no_grad() on the path from these parameters to the loss",
        "check that the module's output is actually used in the loss (not overwritten or multiplied by 0)",
    ]
    listed = f"{', '.join(names[:4])}{'…' if len(names) > 4 else ''}"
    # a gradient that comes back was not cut off (detach, no_grad): whole layers whose activations saturate
    # or die under a wild optimizer lose it now and then; that is a symptom, ranked below its cause
    back = {
        (e.root, e.module)
        for e in ctx.select(types=[EventType.gradient_health_transition.value])
        if e.from_ == "absent"
    } & set(first)
    if back:
        summary = (
            f"{listed} lose their gradient (.grad exactly zero or None) from step {origin.step}, "
            f"and get it back now and then."
        )
    else:
        summary = f"{listed} never receive a gradient (.grad stays None or zero) from step {origin.step}."
    conf = _spread_confidence(0.66, len(first), _still(ctx, evs, "absent")) * (1 - 0.5 * len(back) / len(first))
    return _hyp(Kind.no_gradient, conf, origin, origin.step, summary, evs, tips, names)


def _loss_persistence(ctx: Context, evs: list[Event], state: str, intermittent: bool) -> float:
    """Confidence factor for a loss state: 1 when it lasts to the end (or turned non-finite, which is worse).
    A state that ended is history, not a present problem: below the 0.5 that --fail-on reads, unless an
    intermittent state (an oscillation comes and goes) took most of the run after its onset, or the loss
    came out of it onto a plateau (a blow-up that wrecked the progress: the plateau is its consequence)."""
    end = max((e.step for e in ctx.select(types=[EventType.run_summary.value])), default=None)
    shares = []
    for key in {(e.type, e.root, e.module, e.site) for e in evs}:
        if ctx.last_to(key) in (state, "non_finite") or (state != "plateau" and ctx.last_to(key) == "plateau"):
            shares.append(1.0)  # still there, worse, or over but the loss never won back its progress (stuck)
            continue
        moves = sorted(
            (e for e in ctx.select(types=[key[0]]) if (e.type, e.root, e.module, e.site) == key), key=attrgetter("step")
        )
        inside, since, onset = 0, None, None
        for e in moves:
            if e.to == state and since is None:
                since = e.step
                onset = e.step if onset is None else onset
            elif e.to != state and since is not None:
                inside, since = inside + e.step - since, None
        last = end if end is not None else (moves[-1].step if moves else 0)
        span = max(1, last - (onset or 0))
        shares.append(min(1.0, inside / span))
    share = max(shares, default=0.0)
    if share >= 1.0 or (state == "diverging" and _lasting_damage(ctx, min(e.step for e in evs))):
        return 1.0
    if intermittent and share >= 0.5:
        return 0.65 + 0.35 * share
    return min(0.6, 0.5 + 0.1 * share)  # base <= 0.8: at most 0.48


def _lasting_damage(ctx: Context, since: int) -> bool:
    """Whether units or gradients went dead, saturated or vanishing after `since` and stayed so: a blow-up
    of the loss that left such damage is over, but its harm is not (the weights it wrecked stay wrecked)."""
    for e in ctx.select(to=("vanishing", "saturated", "dead")):
        if e.step >= since and ctx.last_to((e.type, e.root, e.module, e.site)) == e.to:
            return True
    return False


def _loss_rule(
    ctx: Context, state: str, kind: Kind, base: float, phrase: str, tips: list[str], intermittent: bool = False
) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.optimizer_instability.value], to=[state])
    if not evs:
        return None
    first = min(evs, key=lambda e: e.step)
    m = {k: v for k, v in first.metrics.items() if v is not None}
    conf = base * _loss_persistence(ctx, evs, state, intermittent)
    if intermittent and "low" in m and "high" in m:
        summary = (
            f"{phrase} from step {first.step}: it swings between {m['low']:.4g} and {m['high']:.4g} "
            f"step to step (started at {m.get('start', 0):.4g})."
        )
    else:
        summary = (
            f"{phrase} from step {first.step}: loss {m.get('recent', m.get('loss', 0)):.4g} now vs "
            f"{m.get('start', 0):.4g} at the start (best {m.get('best', 0):.4g})."
        )
    return _hyp(kind, conf, None, first.step, summary, evs, tips)


def loss_plateau(ctx: Context) -> Hypothesis | None:
    types = ctx.module_types()
    tips = plateau_lr(ctx)
    ordered = [n for m in ctx.models for n in (m.get("order") or [])]
    if ordered and types.get(ordered[-1]) in SOFTMAX_TYPES:
        tips.insert(
            0,
            f"the model ends in {types[ordered[-1]]} ({ordered[-1]}): nn.CrossEntropyLoss applies "
            f"log-softmax itself; return raw logits",
        )
    tips.append("check that the loss can decrease at all: overfit one small batch first")
    return _loss_rule(ctx, "plateau", Kind.loss_plateau, 0.72, "The loss does not decrease", tips)


def loss_divergence(ctx: Context) -> Hypothesis | None:
    tips = lower_lr(ctx) + [
        "clip gradients (clip_grad_norm_)",
        "check the update sign (maximize=True, a negative lr, loss sign)",
    ]
    h = _loss_rule(ctx, "diverging", Kind.loss_divergence, 0.8, "The loss diverges (keeps growing)", tips)
    blow = _blowups(ctx)
    if h is not None and blow:  # the forward pass shows where values grew first (the origin stays the loss)
        h.summary += f" In the forward pass, {_blowup_phrase(ctx, blow)[1]}."
        h.evidence = (h.evidence + _evidence(blow, 3))[:8]
    return h


def unstable_loss(ctx: Context) -> Hypothesis | None:
    tips = lower_lr(ctx) + ["add learning-rate warm-up or a decaying schedule", "use a larger batch"]
    return _loss_rule(
        ctx, "oscillating", Kind.unstable_loss, 0.66, "The loss oscillates without converging", tips, intermittent=True
    )


Rule = Callable[[Context], Hypothesis | None]
RULES: tuple[Rule, ...] = (
    vanishing_gradient,
    exploding_gradient,
    dead_activation,
    saturated_activation,
    non_finite,
    data_anomaly,
    unchanged_weights,
    no_gradient,
    loss_plateau,
    loss_divergence,
    unstable_loss,
    cast("Rule", loss_misuse),  # written for families.base.Context, which this Context is until the merge
)


# ---------------------------------------------------------------- wrong settings (no kind of their own)


@dataclass
class SettingCause:
    """A training setting the weights show to be wrong. It has no Kind (the contract fixes the kinds): the
    hypotheses it produced carry it. The first of them (by tier, then onset) states it in its summary and
    ranks above the others; all of them get its fix as their first suggestion."""

    setting: str  # "learning_rate" | "weight_decay"
    onset: int  # the step its evidence began
    statement: str  # "the learning rate is too large: ..."
    fix: str
    tiers: tuple[tuple[Kind, ...], ...]  # the kinds it produces, in the order they are chosen to name it
    evidence: list[dict[str, Any]] = field(default_factory=list)
    contradicts: str = "\0"  # suggestions containing this are dropped from what it produced (they point the other way)
    ends: int | None = None  # the first step its evidence was seen to have ended at (None: it lasted)

    @property
    def effects(self) -> set[Kind]:
        return set(chain.from_iterable(self.tiers))

    def in_force(self, step: int, slack: int, late: int) -> bool:
        """Whether it acted at `step`, the onset of an effect seen up to `late` steps after it began: a setting
        acts from its evidence (seen up to `slack` late) for as long as that lasts (an early transient, such as
        the first updates of a small output layer, explains nothing that began after it ended)."""
        return self.onset <= step + slack and (self.ends is None or step - late < self.ends)


def _ratio(e: Event) -> float | None:
    m = e.metrics
    value = next((m[k] for k in ("update_ratio", "ratio") if m.get(k) is not None), None)
    return float(value) if value is not None else None


def learning_rate_setting(ctx: Context) -> SettingCause | None:
    """Updates far larger than the weights they change (update-to-weight ratio, healthy ~1e-3): the lr. The
    loss-level symptom it produced (divergence, oscillation, explosion) names it first; else the units it
    killed or saturated, or the NaN or plateau that followed."""
    evs = ctx.select(types=[EventType.parameter_update.value], to=["oversized"])
    if not evs:
        return None
    ratios = [r for r in map(_ratio, evs) if r is not None]
    size = f"{100 * max(ratios):.3g}% of their size" if ratios else "a large fraction of their size"
    fix = next(iter(lower_lr(ctx)), "lower the learning rate")
    return SettingCause(
        "learning_rate",
        min(e.step for e in evs),
        f"the learning rate is too large: each step changes the weights by {size} (healthy: about 0.1%)",
        fix,
        (
            (Kind.loss_divergence, Kind.unstable_loss, Kind.exploding_gradient),
            (
                Kind.dead_activation,
                Kind.saturated_activation,
                Kind.non_finite,
                Kind.loss_plateau,
                Kind.no_gradient,
                Kind.vanishing_gradient,
            ),
        ),
        _evidence(evs, 3),
        contradicts="raise the learning rate",
        ends=_last_in_force(ctx, evs, "oversized"),
    )


def _last_in_force(ctx: Context, evs: list[Event], state: str) -> int | None:
    """The step by which every module had left `state` again (the last such transition); None while one
    stayed in it to the end."""
    left = {
        (e.root, e.module): e.step for e in ctx.select(types=[EventType.parameter_update.value]) if e.from_ == state
    }
    last: dict[tuple, int] = {}
    for e in evs:
        last[(e.root, e.module)] = e.step
    if any(key not in left or left[key] < step for key, step in last.items()):
        return None
    return max(left.values())


def weight_decay_setting(ctx: Context) -> SettingCause | None:
    """Weight norms shrinking toward 0 under a weight_decay large enough to do it (its per-step shrink
    lr*wd, or wd itself for Adam's L2 term): the network's output flattens, so the loss stops moving and
    the gradients fade or vanish."""
    evs = ctx.select(types=[EventType.parameter_update.value], to=["collapsing"])
    if not evs:
        return None
    th = ctx.thresholds
    large = []
    for opt, g in ctx.groups():
        wd = float(g["weight_decay"]) if _number(g.get("weight_decay")) else 0.0
        lr = abs(float(g["lr"])) if _number(g.get("lr")) else 0.0
        if wd >= th.weight_decay_large or (wd > 0 and lr * wd >= th.weight_decay_shrink):
            large.append((wd, opt))
    if not large:
        return None
    wd, opt = max(large)
    usual = "0.01-0.1" if decoupled_decay(opt) else "1e-5-5e-4"
    onset = min(e.step for e in evs)
    return SettingCause(
        "weight_decay",
        onset,
        f"weight decay collapses the weights: weight_decay={wd:g} with {opt} shrinks them toward 0 from step {onset}",
        f"lower weight_decay ({wd:g} with {opt}) to {usual}, the usual range for {opt}",
        # a flat loss is what the user sees; then weights too small to pass a gradient on or
        # to move; "no gradient" and dead units (a detach, a ReLU) are the least direct readings
        (
            (Kind.loss_plateau,),
            (Kind.vanishing_gradient, Kind.unchanged_weights),
            (Kind.no_gradient, Kind.dead_activation),
        ),
        _evidence(evs, 3),
    )


SETTINGS: tuple[Callable[[Context], SettingCause | None], ...] = (learning_rate_setting, weight_decay_setting)


# ---------------------------------------------------------------- the causal table the reasoner ranks with


@dataclass(frozen=True)
class Causes:
    """What one kind can cause, and when its onset can be trusted."""

    effects: tuple[Kind, ...]
    dated_late: bool = False  # known only a window of losses in (the oscillation test needs two): its onset
    #                          may be up to `loss_window` steps after the effects it caused
    needs_training: bool = False  # arises from the updates: cannot explain what is present at step 0


CAUSES: dict[Kind, Causes] = {  # listed upstream first: a consequence names the first cause that holds
    # a loss called wrongly stalls it (broadcast target, softmax twice), sends it down without bound (raw
    # scores into nll_loss) or scales its gradients (a summed reduction): present from the first call
    Kind.loss_misuse: Causes(
        (
            Kind.loss_plateau,
            Kind.unstable_loss,
            Kind.loss_divergence,
            Kind.vanishing_gradient,
            Kind.saturated_activation,
        )
    ),
    Kind.data_anomaly: Causes(
        (
            Kind.non_finite,
            Kind.exploding_gradient,
            Kind.saturated_activation,
            Kind.loss_divergence,
            Kind.unstable_loss,
            Kind.dead_activation,
            Kind.loss_plateau,
            Kind.vanishing_gradient,
        )
    ),
    Kind.exploding_gradient: Causes(
        (Kind.non_finite, Kind.loss_divergence, Kind.unstable_loss, Kind.dead_activation, Kind.no_gradient)
    ),
    Kind.saturated_activation: Causes((Kind.vanishing_gradient, Kind.loss_plateau)),
    Kind.dead_activation: Causes((Kind.no_gradient, Kind.vanishing_gradient, Kind.loss_plateau)),
    Kind.vanishing_gradient: Causes((Kind.loss_plateau, Kind.unchanged_weights)),
    Kind.unchanged_weights: Causes((Kind.loss_plateau,)),
    Kind.no_gradient: Causes((Kind.loss_plateau, Kind.unchanged_weights)),
    # a blow-up that wrecks the weights leaves saturated/dead units, faded gradients and a stalled loss
    Kind.loss_divergence: Causes(
        (
            Kind.non_finite,
            Kind.loss_plateau,
            Kind.saturated_activation,
            Kind.dead_activation,
            Kind.vanishing_gradient,
            Kind.no_gradient,
        )
    ),
    # a wild optimizer pins bounded units at their rails and now and then zeroes whole layers' gradients
    Kind.unstable_loss: Causes(
        (Kind.saturated_activation, Kind.no_gradient, Kind.loss_plateau), dated_late=True, needs_training=True
    ),
}


def _check_rules() -> None:
    """Every Kind judged in one run has exactly one rule named after it (checked at import, naming the
    culprit); the kinds judged across ranks have theirs in crossrank."""
    names = [r.__name__ for r in RULES]
    missing = [k.value for k in Kind if k.value not in names and k not in CROSS_RANK_KINDS]
    if missing or len(set(names)) != len(names):
        raise RuntimeError(f"neuraldbg rules: missing rules for {missing} or duplicate rule names in {names}")


_check_rules()
