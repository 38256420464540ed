"""One rule per failure Kind: events of one run -> at most one Hypothesis of that kind.

A rule takes the `Context` only (keyword `ctx`), reads the events it needs and says what to change. The
reasoner runs every rule in RULES, then ranks causes above their consequences (CAUSES)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, Callable, Iterable, Optional

from neuraldbg_cli.events import EventType, Hypothesis, Kind, Origin
from neuraldbg_cli.trace import Event

SATURATING_TYPES = {"Sigmoid", "Tanh", "Hardtanh", "Softsign", "Hardsigmoid", "LogSigmoid"}
RNN_TYPES = {"RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"}
NORM_TYPES = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm2d"}


@dataclass
class Context:
    events: list[Event]  # fixed once the Context is made: it is indexed then
    models: list[dict[str, Any]] = field(default_factory=list)  # model.json "models"
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    every: int = 10
    loss_window: int = 10
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
        self._last = dict(zip(map(attrgetter("type", "root", "module", "site"), self.events),
                              map(attrgetter("to"), self.events)))

    def select(self, types: Iterable[str] = (), to: Iterable[str] = (), sites: Iterable[str] = ()) -> list[Event]:
        """The events of these types, into these states, at these sites (empty: any), in trace order."""
        types, to, sites = set(types), set(to), set(sites)
        found = [pos for (t, s), pos in self._positions.items() if (not types or t in types) and (not to or s in to)]
        picked = found[0] if len(found) == 1 else sorted(chain.from_iterable(found))
        return [e for e in map(self.events.__getitem__, picked) if not sites or e.site in sites]

    def last_to(self, key: tuple) -> Optional[str]:
        """The state of the last transition at (type, root, module, site), None if there was none."""
        return self._last.get(key)

    def order(self, ev: Event) -> int:
        """Position of the event's module in the forward pass (unknown modules sort last)."""
        return self._order.get((ev.root, ev.module), 10**6)

    def module_types(self) -> dict[str, str]:
        return {name: info.get("type", "") for m in self.models for name, info in (m.get("modules") or {}).items()}

    def lr_hint(self) -> Optional[tuple[str, float]]:
        for opt in self.optimizers:
            for g in opt.get("groups") or []:
                if isinstance(g.get("lr"), (int, float)):
                    return opt.get("type", "optimizer"), float(g["lr"])
        return None


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


def _hyp(kind: Kind, confidence: float, origin: Event | None, step: Optional[int], summary: str,
         events: list[Event], suggestions: list[str], propagation: list[str] | None = None) -> Hypothesis:
    return Hypothesis(kind=kind, confidence=round(confidence, 3),
                      origin=Origin(module=origin.module if origin else None, step=step,
                                    root=origin.root if origin else None),
                      summary=summary, evidence=_evidence(events), propagation=propagation or [],
                      suggestions=suggestions)


def _lr_advice(ctx: Context, factor: float) -> list[str]:
    hint = ctx.lr_hint()
    if hint is None:
        return []
    opt, lr = hint
    if lr == 0:
        return [f"{opt} has lr=0: nothing can change; set a real learning rate (e.g. 1e-3 for Adam, 1e-2 for SGD)"]
    usual = 1e-3 if opt.lower().startswith(("adam", "nadam", "radam", "rmsprop", "adagrad")) else 1e-2
    # move toward the usual value for this optimizer when it is that far off, else by `factor`
    target = usual if (factor < 1 and lr > 10 * usual) or (factor > 1 and lr * 10 < usual) else lr * factor
    return [f"lr={lr:g} with {opt}: try {target:g}"]


def _names(events: list[Event]) -> list[str]:
    return sorted({e.module for e in events if e.module})


# ---------------------------------------------------------------- rules, one per kind

def vanishing_gradient(ctx: Context) -> Optional[Hypothesis]:
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
        tips.append(f"{kinds} activations ({', '.join(sat[:3])}{'…' if len(sat) > 3 else ''}) have derivative "
                    f"<= 0.25 (sigmoid) or saturate: switch to ReLU/GELU")
    elif ctx.select(to=["saturated"]):
        tips.append("saturating functional activations (torch.sigmoid/tanh) squash gradients: switch to ReLU/GELU")
    if any(t in RNN_TYPES for t in types.values()):
        tips.append("plain RNN over long sequences: use LSTM/GRU, shorter truncated BPTT, or attention")
    tips += ["initialise with Xavier/He (nn.init.kaiming_normal_ for ReLU, xavier_uniform_ for tanh)",
             "add normalisation (LayerNorm/BatchNorm) between layers"]
    if len(types) >= 8:
        tips.append("add residual (skip) connections so gradients reach the first layers")
    where = f"{ratio:.1e}× the largest layer's gradient" if ratio else "almost no gradient"
    summary = (f"Gradients vanish toward the input: {origin.module} gets {where} from step {origin.step}; "
               f"{len(first)} layer(s) affected, so the early layers barely learn.")
    return _hyp(Kind.vanishing_gradient, conf, origin, origin.step, summary, evs, tips, chain)


def exploding_gradient(ctx: Context) -> Optional[Hypothesis]:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["exploding"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))  # input side: where large init / high lr compounds most
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(0.66, len(first), max(_still(ctx, evs, "exploding"), 0.7))
    rms = origin.metrics.get("rms")
    tips = _lr_advice(ctx, 0.1) + ["clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) "
                                   "before optimizer.step()",
                                   "check the initialisation scale (default or Xavier/He, not larger)"]
    summary = (f"Gradients explode: {origin.module} reaches gradient RMS {rms:.3g} at step {origin.step}"
               if rms else f"Gradients explode from step {origin.step} at {origin.module}")
    return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary + f"; {len(first)} layer(s) affected.",
                evs, tips, chain)


def _activation_rule(ctx: Context, state: str, kind: Kind, base: float, tips: list[str], phrase: str) -> Optional[Hypothesis]:
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


def dead_activation(ctx: Context) -> Optional[Hypothesis]:
    tips = ["use LeakyReLU/GELU, or lower the learning rate so ReLUs are not pushed into the dead zone",
            "check bias initialisation (large negative biases keep units off) and use He init"]
    return _activation_rule(ctx, "dead", Kind.dead_activation, 0.62, _lr_advice(ctx, 0.1) + tips,
                            "Most ReLU units never activate on a whole batch (dead)")


def saturated_activation(ctx: Context) -> Optional[Hypothesis]:
    tips = ["normalise the inputs and use a smaller (Xavier) initialisation so pre-activations stay near 0",
            "add BatchNorm/LayerNorm before the activation, or switch to ReLU/GELU"]
    return _activation_rule(ctx, "saturated", Kind.saturated_activation, 0.62, tips,
                            "Bounded activations are pinned at their rails (saturated, gradient ≈ 0)")


def non_finite(ctx: Context) -> Optional[Hypothesis]:
    evs = ctx.select(to=["non_finite"])
    if not evs:
        return None
    onset = min(e.step for e in evs)
    same = [e for e in evs if e.step == onset]
    acts = [e for e in same if e.type == EventType.non_finite.value and e.site in ("output", "activation")]
    grads = [e for e in same if e.site == "gradient"]
    origin = (min(acts, key=ctx.order) if acts else max(grads, key=ctx.order) if grads
              else next((e for e in same if e.site == "loss"), same[0]))
    where = {"output": "output", "activation": "activation", "gradient": "gradient", "loss": "loss"}.get(origin.site or "", "value")
    name = origin.module or ("the input data" if origin.site in ("input", "target") else "the loss")
    summary = f"NaN/Inf first appears in the {where} of {name} at step {onset}."
    tips = ["guard log/sqrt/division: torch.log(x.clamp_min(1e-8)), torch.sqrt(x + 1e-8), divide by (std + 1e-5)",
            "run a few steps with torch.autograd.detect_anomaly() to see the op",
            "lower the learning rate / clip gradients if values grew before the NaN"]
    chain = [e.module or e.site or "" for e in sorted(evs, key=lambda e: (e.step, ctx.order(e)))][:12]
    return _hyp(Kind.non_finite, 0.9, origin, onset, summary, evs, tips, list(dict.fromkeys(chain)))


def data_anomaly(ctx: Context) -> Optional[Hypothesis]:
    evs = ctx.select(types=[EventType.data_anomaly.value], to=["non_finite", "extreme_scale", "shifted"])
    made = [e.step for e in ctx.select(types=[EventType.non_finite.value], sites=["output", "activation"])]
    if made:  # a NaN target computed by the model's own (NaN) modules is not bad data
        evs = [e for e in evs if not (e.site == "target" and e.to == "non_finite" and e.step >= min(made))]
    if not evs:
        return None
    onset = min(e.step for e in evs)
    first = min((e for e in evs if e.step == onset), key=lambda e: ("non_finite", "extreme_scale", "shifted").index(e.to))
    m = {k: v for k, v in first.metrics.items() if v is not None}  # null (NaN) metrics: the defaults below
    what = "targets" if first.site == "target" else "inputs"
    conf = 0.92 if first.to == "non_finite" else {"extreme_scale": 0.75, "shifted": 0.7}[first.to] * (
        0.7 + 0.3 * _still(ctx, evs, first.to))  # one NaN batch is enough to ruin the weights
    if first.to == "non_finite":
        summary = f"The {what} contain NaN/Inf values from step {onset}."
        tips = [f"drop or fix non-finite rows before training: x = x[torch.isfinite(x).all(dim=1)]",
                "check the data pipeline (missing values, division by zero in preprocessing)"]
    elif first.to == "extreme_scale":
        summary = (f"The {what} are not normalised: mean {m.get('mean', 0):.3g}, std {m.get('std', 0):.3g} "
                   f"(range {m.get('min', 0):.3g}…{m.get('max', 0):.3g}) from step {onset}.")
        tips = [f"normalise {what}: subtract mean {m.get('mean', 0):.4g} and divide by std {m.get('std', 1):.4g} "
                f"(e.g. transforms.Normalize, or x / 255 for pixels)"]
    else:
        summary = (f"The {what} distribution shifts at step {onset}: mean {m.get('mean', 0):.3g}, std "
                   f"{m.get('std', 0):.3g} vs mean {m.get('baseline_mean', 0):.3g}, std {m.get('baseline_std', 0):.3g} before.")
        tips = ["check the data source / preprocessing for that step (a different file, unit or augmentation)"]
    origin = Origin(module=None, step=onset, root=first.root)
    h = _hyp(Kind.data_anomaly, conf, None, onset, summary, evs, tips, [first.site or "input"])
    h.origin = origin
    return h


def unchanged_weights(ctx: Context) -> Optional[Hypothesis]:
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
        tips += _lr_advice(ctx, 1)
    if outside and ctx.optimizers:
        tips.append(f"{', '.join(outside[:4])} get gradients but are not in any optimizer: pass model.parameters() "
                    f"(all of them) to the optimizer")
    tips.append("make sure optimizer.step() is called every iteration (after loss.backward())")
    summary = (f"Weights never change: {', '.join(names[:4])}{'…' if len(names) > 4 else ''} stay bit-identical "
               f"from step {origin.step} although they receive gradients.")
    conf = _spread_confidence(0.7, len(first), _still(ctx, evs, "unchanged"))
    return _hyp(Kind.unchanged_weights, conf, origin, origin.step, summary, evs, tips, names)


def no_gradient(ctx: Context) -> Optional[Hypothesis]:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["absent"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()), output_side=True)
    names = _names(evs)
    tips = ["look for .detach(), .data, .item() or torch.no_grad() on the path from these parameters to the loss",
            "check that the module's output is actually used in the loss (not overwritten or multiplied by 0)"]
    listed = f"{', '.join(names[:4])}{'…' if len(names) > 4 else ''}"
    # a gradient that comes back was not cut off (detach, no_grad): whole layers whose activations saturate
    # or die under a wild optimizer lose it now and then; that is a symptom, ranked below its cause
    back = {(e.root, e.module) for e in ctx.select(types=[EventType.gradient_health_transition.value])
            if e.from_ == "absent"} & set(first)
    if back:
        summary = (f"{listed} lose their gradient (.grad exactly zero or None) from step {origin.step}, "
                   f"and get it back now and then.")
    else:
        summary = f"{listed} never receive a gradient (.grad stays None or zero) from step {origin.step}."
    conf = _spread_confidence(0.66, len(first), _still(ctx, evs, "absent")) * (1 - 0.5 * len(back) / len(first))
    return _hyp(Kind.no_gradient, conf, origin, origin.step, summary, evs, tips, names)


def _loss_rule(ctx: Context, state: str, kind: Kind, base: float, phrase: str, tips: list[str],
               intermittent: bool = False) -> Optional[Hypothesis]:
    evs = ctx.select(types=[EventType.optimizer_instability.value], to=[state])
    if not evs:
        return None
    first = min(evs, key=lambda e: e.step)
    m = {k: v for k, v in first.metrics.items() if v is not None}
    still = _still(ctx, evs, state)
    conf = base * (0.65 + 0.35 * (max(still, 0.8) if intermittent else still))  # oscillation comes and goes
    if intermittent and "low" in m and "high" in m:
        summary = (f"{phrase} from step {first.step}: it swings between {m['low']:.4g} and {m['high']:.4g} "
                   f"step to step (started at {m.get('start', 0):.4g}).")
    else:
        summary = (f"{phrase} from step {first.step}: loss {m.get('recent', m.get('loss', 0)):.4g} now vs "
                   f"{m.get('start', 0):.4g} at the start (best {m.get('best', 0):.4g}).")
    return _hyp(kind, conf, None, first.step, summary, evs, tips)


def loss_plateau(ctx: Context) -> Optional[Hypothesis]:
    types = ctx.module_types()
    tips = _lr_advice(ctx, 100.0)
    ordered = [n for m in ctx.models for n in (m.get("order") or [])]
    if ordered and types.get(ordered[-1]) in ("Softmax", "LogSoftmax"):
        tips.insert(0, f"the model ends in {types[ordered[-1]]} ({ordered[-1]}): nn.CrossEntropyLoss applies "
                       f"log-softmax itself; return raw logits")
    tips.append("check that the loss can decrease at all: overfit one small batch first")
    return _loss_rule(ctx, "plateau", Kind.loss_plateau, 0.72, "The loss does not decrease", tips)


def loss_divergence(ctx: Context) -> Optional[Hypothesis]:
    tips = _lr_advice(ctx, 0.1) + ["clip gradients (clip_grad_norm_)",
                                   "check the update sign (maximize=True, a negative lr, loss sign)"]
    return _loss_rule(ctx, "diverging", Kind.loss_divergence, 0.8, "The loss diverges (keeps growing)", tips)


def unstable_loss(ctx: Context) -> Optional[Hypothesis]:
    tips = _lr_advice(ctx, 0.1) + ["add learning-rate warm-up or a decaying schedule", "use a larger batch"]
    return _loss_rule(ctx, "oscillating", Kind.unstable_loss, 0.66, "The loss oscillates without converging", tips,
                      intermittent=True)


Rule = Callable[[Context], Optional[Hypothesis]]
RULES: tuple[Rule, ...] = (vanishing_gradient, exploding_gradient, dead_activation, saturated_activation,
                           non_finite, data_anomaly, unchanged_weights, no_gradient, loss_plateau,
                           loss_divergence, unstable_loss)

# cause -> the kinds it commonly produces; a consequence that starts no earlier is ranked below its cause
CAUSES: dict[Kind, tuple[Kind, ...]] = {
    Kind.data_anomaly: (Kind.non_finite, Kind.exploding_gradient, Kind.saturated_activation, Kind.loss_divergence,
                        Kind.unstable_loss, Kind.dead_activation, Kind.loss_plateau, Kind.vanishing_gradient),
    Kind.exploding_gradient: (Kind.non_finite, Kind.loss_divergence, Kind.unstable_loss, Kind.dead_activation,
                              Kind.no_gradient),
    Kind.saturated_activation: (Kind.vanishing_gradient, Kind.loss_plateau),
    Kind.dead_activation: (Kind.no_gradient, Kind.vanishing_gradient, Kind.loss_plateau),
    Kind.vanishing_gradient: (Kind.loss_plateau, Kind.unchanged_weights),
    Kind.unchanged_weights: (Kind.loss_plateau,),
    Kind.no_gradient: (Kind.loss_plateau, Kind.unchanged_weights),
    Kind.loss_divergence: (Kind.non_finite,),
    Kind.unstable_loss: (Kind.saturated_activation,),
}
# consequences that can only follow from training itself: not if present from the first step
AFTER_START: set[tuple[Kind, Kind]] = {(Kind.unstable_loss, Kind.saturated_activation)}
# causes whose onset is known only to a window of losses (the oscillation test needs two of them)
WINDOWED: set[Kind] = {Kind.unstable_loss}


def _check_rules() -> None:
    """Every Kind has exactly one rule named after it (checked at import, naming the culprit)."""
    names = [r.__name__ for r in RULES]
    missing = [k.value for k in Kind if k.value not in names]
    if missing or len(set(names)) != len(names):
        raise RuntimeError(f"neuraldbg rules: missing rules for {missing} or duplicate rule names in {names}")


_check_rules()
