"""What every failure family shares, and the family protocol.

Observe side: a `Machine` per site (a module's gradient, a module's output, the model input, the loss, a
module's weights), fed by the family's `Observer` from each StepRecord through the `Board` (the Monitor's
shared bookkeeping). Each family has small pure classifiers, functions from statistics to a state; the
machine emits an event when a new state has held for `debounce` observations. The event carries the step
where the state *began*, so the reasoner sees onsets, not confirmations. Non-finite values skip the debounce.

Reason side: a rule takes the `Context` only (keyword `ctx`), reads the events it needs and says what to
change; the helpers below build its Hypothesis. Pure: no torch, no I/O module (trace reads the events).

A family is one module of this package exposing `FAMILY = Family(name, observer, rules)`; the package's
`FAMILIES` lists them (see docs/adding-a-kind.md)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, Protocol, TypeGuard

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.trace.events import (
    ActState,
    DataState,
    GradState,
    Hypothesis,
    Kind,
    LossState,
    ModelInfo,
    Origin,
    SemanticEvent,
    StepRecord,
    UpdateState,
)
from neuraldbg_cli.vocab import is_norm, warms_up

HEALTHY = {
    GradState.healthy.value,
    ActState.normal.value,
    LossState.normal.value,
    DataState.normal.value,
    UpdateState.updating.value,
}
NON_FINITE = "non_finite"


def _finite(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(v)


# ---------------------------------------------------------------- debounced state machine


@dataclass
class Machine:
    """State of one site. `observe` returns an event payload when a new state is confirmed: held for `need`
    observations, or for `early` when something worse takes over or the run ends."""

    state: str
    need: int
    early: int
    cand: str | None = None
    cand_step: int = 0
    cand_metrics: dict[str, Any] = field(default_factory=dict)
    count: int = 0

    def observe(self, state: str, step: int, metrics: dict[str, Any]) -> list[tuple[str, str, int, dict]]:
        if state == self.state:
            self.cand, self.count = None, 0
            return []
        if state == NON_FINITE and self.cand not in (None, NON_FINITE):
            # what was building up (e.g. exploding) is the story of this NaN: confirm it first
            early = (self.state, self.cand, self.cand_step, self.cand_metrics)
            self.state, self.cand = self.cand, None
            return [early, *self.observe(state, step, metrics)]
        if state != self.cand:
            if self.cand is not None and self.count >= min(self.early, self.need) and state not in HEALTHY:
                # held twice, then something worse took over (exploding -> dead): it happened, say so
                early = (self.state, self.cand, self.cand_step, self.cand_metrics)
                self.state, self.cand, self.count = self.cand, None, 0
                return [early, *self.observe(state, step, metrics)]
            self.cand, self.cand_step, self.cand_metrics, self.count = state, step, metrics, 0
        self.count += 1
        if self.count >= (1 if state == NON_FINITE else self.need):
            old, self.state, self.cand, self.count = self.state, state, None, 0
            return [(old, state, self.cand_step, self.cand_metrics)]
        return []

    def pending(self) -> tuple[str, str, int, dict] | None:
        """A candidate seen at least twice but cut short by the end of the run."""
        if self.cand is not None and self.count >= min(self.early, self.need):
            return self.state, self.cand, self.cand_step, self.cand_metrics
        return None


def settled(machines: dict[tuple, Machine], key: tuple, state: str) -> bool:
    """The site's machine already holds `state` with nothing pending: feeding it would change nothing, so a
    family need not build its evidence (most sites, most steps)."""
    m = machines.get(key)
    return m is not None and m.state == state and m.cand is None


def _rounded(d: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, v in d.items():
        if v is None:
            out[k] = None
        elif isinstance(v, float) and math.isfinite(v):
            out[k] = float(f"{v:.6g}")
        elif isinstance(v, float):
            out[k] = None if math.isnan(v) else (1e308 if v > 0 else -1e308)
        else:
            out[k] = float(v)
    return out


# ---------------------------------------------------------------- the family protocol


@dataclass
class LossTrack:
    """One loss series: its first few finite values and its latest ones."""

    first: list[float] = field(default_factory=list)
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=10))

    def add(self, loss: float, keep: int) -> None:
        if math.isfinite(loss):
            if len(self.first) < keep:
                self.first.append(loss)
            self.recent.append(loss)

    def levels(self) -> tuple[float, float] | None:
        """(early, now): medians of the first and of the latest values; None while too few."""
        if len(self.first) < 3 or len(self.recent) < 3:
            return None
        return statistics.median(self.first), statistics.median(self.recent)


class LossTracks:
    """Every loss series' track, fed once per record by the Monitor, for the families that weigh a symptom
    against the model's own loss (a gradient that fades, a saturation the model learned its way into)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.series: dict[str, LossTrack] = {}

    def add(self, rec: StepRecord) -> None:
        for name, loss in rec.losses.items():
            track = self.series.get(name)
            if track is None:
                track = self.series[name] = LossTrack()
            track.add(loss, self.keep)

    def own(self, root: str) -> str | None:
        """The loss series of the model `root`: the one named after it (or a part of it); the only series when
        there is one (a single optimizer over several models names it after the first)."""
        names = [n for n in self.series if n == root or n.startswith(root + ".")]
        if len(names) == 1:
            return names[0]
        return next(iter(self.series)) if len(self.series) == 1 else None

    def now(self, root: str) -> float | None:
        """The median of the latest values of `root`'s own series; None while too few."""
        name = self.own(root)
        levels = self.series[name].levels() if name is not None else None
        return levels[1] if levels is not None else None


class Board(Protocol):
    """What an observer reads and feeds: the Monitor's shared bookkeeping."""

    th: Thresholds
    losses: LossTracks  # every loss series' first and latest values (fed before the observers, each record)
    models: dict[str, ModelInfo]  # root name -> its model, replaced when the models are described again
    machines: dict[tuple, Machine]  # site key -> its machine; a key's first element names its family
    since: dict[tuple, int]  # site key -> the step its last transition was dated at
    grad_since: dict[tuple, float]  # (root, module) -> largest gradient RMS since the last sampled step
    #                                 (written by the gradients family, read and reset by the weights family)

    def feed(
        self,
        key: tuple,
        initial: str,
        state: str,
        step: int,
        metrics: dict,
        etype: str,
        site: str,
        root: str | None,
        module: str | None,
    ) -> None:
        """One observation of the site `key` (its machine made in state `initial` on first use); what it
        confirms is emitted as events of type `etype` at `site`, `root`, `module` (non-finite: `non_finite`)."""
        ...

    def reset(self, key: tuple, state: str) -> None:
        """The site's machine goes back to `state`, with nothing pending and no transition dated (a site that
        starts afresh, e.g. the loss of a model that takes over from another)."""
        ...


class Observer:
    """Feeds one family's machines from each StepRecord. The Monitor calls `observe` for every step, in the
    order of FAMILIES; `floor` and `summary` are for families whose events can be dated back (the loss) or
    that add to the run summary."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.th = board.th

    def observe(self, rec: StepRecord) -> None:
        raise NotImplementedError

    def floor(self, now: int) -> int:
        """The earliest step a later event of this family could still be dated at (held events before it
        are released)."""
        return now

    def summary(self) -> dict[str, Any]:
        """Metrics this family adds to the run summary at the end, in order."""
        return {}


def _runs_floor(board: Board, family: str, since: dict[tuple[str, str], int], state: str, now: int) -> int:
    """`floor` of a family that dates `state` back to where a run of readings began (`since`: (root, module) ->
    the run's first step): the earliest run whose site's machine has not confirmed that state yet."""
    floor = now
    for (root, name), start in since.items():
        machine = board.machines.get((family, root, name))
        if machine is None or machine.state != state:
            floor = min(floor, start)
    return floor


Event = SemanticEvent  # what a rule reads: one line of events.jsonl
Rule = Callable[["Context"], Hypothesis | None]


@dataclass(frozen=True)
class Family:
    """One failure family: how its sites are observed (None: it judges other families' events) and its rules,
    one per Kind, each named after its Kind."""

    name: str
    observer: type[Observer] | None = None
    rules: tuple[Rule, ...] = ()


# ---------------------------------------------------------------- what a rule reads


@dataclass
class Context:
    """What a rule reads: one run's events (indexed once) and its model.json."""

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

    def output_side(self, root: str | None, module: str | None) -> bool:
        """Whether the module is its model's output layer or comes after it in the forward pass (the final
        Sigmoid/Tanh, or the output layer's activation site): what it emits is the model's output."""
        for m in self.models:
            if m.get("name") != root:
                continue
            modules, order = m.get("modules") or {}, m.get("order") or []
            layers = [n for n in order if isinstance(modules.get(n), dict) and modules[n].get("params")]
            if not layers or module not in order:
                return False
            return order.index(module) >= order.index(layers[-1])
        return False

    def norm_placements(self) -> set[str]:
        """The norm placement ("pre" / "post") of the attention blocks the run saw. From model.json facts where
        the probe recorded them; else read off the forward order: an attention layer's block is its parent
        module (`layers.3` of `layers.3.self_attn`), and a block whose last called layer is a norm normalises
        the residual sum (Post-LN: torch.nn's default norm_first=False, BERT), one whose first is a norm
        normalises the branch input (Pre-LN, GPT-2)."""
        found: set[str] = set()
        for m in self.models:
            facts = m.get("facts") if isinstance(m.get("facts"), dict) else {}
            blocks = facts.get("residual_blocks") if isinstance(facts, dict) else None
            if isinstance(blocks, dict):
                found.update(str(b.get("norm")) for b in blocks.values() if isinstance(b, dict) and b.get("norm"))
            modules, order = m.get("modules") or {}, m.get("order") or []
            layers = [n for n in order if isinstance(modules.get(n), dict) and modules[n].get("params")]
            attn = [n for n in order if "attention" in str((modules.get(n) or {}).get("type", "")).lower()]
            for a in attn:
                parent = a.rpartition(".")[0]
                inside = [n for n in layers if parent and n.startswith(parent + ".") and not n.startswith(a)]
                if not inside:
                    continue
                if is_norm(str(modules[inside[-1]].get("type", ""))):
                    found.add("post")
                elif is_norm(str(modules[inside[0]].get("type", ""))):
                    found.add("pre")
        return found

    def optimizer_facts(self) -> list[dict[str, Any]]:
        """The optimizers that train the models seen, as model.json's facts record them (type, lr, betas or
        momentum, weight decays, warmup); a trace without them (an older one) has its optimizers read instead."""
        facts = [
            o
            for m in self.models
            if isinstance(m.get("facts"), dict) and isinstance(m["facts"].get("optimizers"), list)
            for o in m["facts"]["optimizers"]
            if isinstance(o, dict)
        ]
        if facts:
            return facts
        out = []
        for opt in self.optimizers:
            groups = [g for g in opt.get("groups") or [] if isinstance(g, dict)]
            points = _lr_history(opt.get("lr_at"), len(groups))
            out.append({"type": str(opt.get("type") or "optimizer"), "warmup": warms_up(points) if points else None})
        return out

    def warms_up(self) -> bool | None:
        """Whether the schedule of some optimizer that trains the models warms up (vocab.warms_up); None when no
        learning rate was read."""
        known = [o["warmup"] for o in self.optimizer_facts() if isinstance(o.get("warmup"), bool)]
        return any(known) if known else None

    def module_types(self) -> dict[str, str]:
        return {name: info.get("type", "") for m in self.models for name, info in (m.get("modules") or {}).items()}

    def groups(self) -> list[tuple[str, dict[str, Any]]]:
        """(optimizer type, param group) for every group of every optimizer seen."""
        return [(opt, g) for opt, g, _ in self.group_lrs()]

    def group_lrs(self, at: int | None = None) -> list[tuple[str, dict[str, Any], float | None]]:
        """(optimizer type, param group, its lr) for every group: the lr in force around step `at` (see
        lrs_in_force), or its largest over the run when `at` is None; without a recorded history (a run cut
        short, a tensor lr), the larger of its described lr and its schedule's initial_lr."""
        out: list[tuple[str, dict[str, Any], float | None]] = []
        for opt in self.optimizers:
            groups = [g for g in opt.get("groups") or [] if isinstance(g, dict)]
            seen = _lr_history(opt.get("lr_at"), len(groups))
            for i, g in enumerate(groups):
                if seen:
                    lr: float | None = _in_force([(p[0], p[1 + i]) for p in seen], at, self.every)
                else:
                    lrs = [float(g[k]) for k in ("lr", "initial_lr") if _number(g.get(k))]
                    lr = max(lrs, key=abs) if lrs else None
                out.append((str(opt.get("type") or "optimizer"), g, lr))
        return out

    def lr_hint(self) -> tuple[str, float] | None:
        """The first group's (optimizer type, lr): its largest over the run (0 only if it never moved)."""
        return next(((opt, lr) for opt, _, lr in self.group_lrs() if lr is not None), None)

    def peak_lr(self, at: int | None = None) -> tuple[str, float] | None:
        """The largest learning rate of any group: in force while a symptom that began at step `at` developed
        (never a warm-up's tiny first value, nor the initial value of a schedule that multiplied it upward),
        or over the whole run when `at` is None: the one that makes a run diverge."""
        best: tuple[str, float] | None = None
        for opt, _, lr in self.group_lrs(at):
            if lr is not None and (best is None or abs(lr) > abs(best[1])):
                best = (opt, lr)
        return best


def _lr_history(points: object, groups: int) -> list[list[float]]:
    """model.json's lr_at ([step, lr of each group], when it changed, in step order), if well formed."""
    if not isinstance(points, list):
        return []
    ok = [p for p in points if isinstance(p, list) and len(p) == groups + 1 and all(map(_number, p))]
    return sorted(ok, key=lambda p: p[0]) if len(ok) == len(points) else []


def _in_force(points: list[tuple[float, float]], at: int | None, slack: int) -> float:
    """The largest lr in force from `at - slack` to `at + slack` (the sampling interval that dates a symptom):
    the one recorded last before that window and those recorded in it. `at` None: the largest of all."""
    if at is None:
        return max((lr for _, lr in points), key=abs)
    before = [lr for step, lr in points if step <= at - slack]
    inside = [lr for step, lr in points if at - slack < step <= at + slack]
    window = before[-1:] + inside or [points[0][1]]
    return max(window, key=abs)


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
    fixes: list[dict[str, Any]] | None = None,
) -> Hypothesis:
    return Hypothesis(
        kind=kind,
        confidence=round(confidence, 3),
        origin=Origin(module=origin.module if origin else None, step=step, root=origin.root if origin else None),
        summary=summary,
        evidence=_evidence(events),
        propagation=propagation or [],
        suggestions=suggestions,
        fixes=fixes or [],
    )


def _model_has(ctx: Context, test: Callable[[str], bool]) -> bool:
    return any(test(t) for t in ctx.module_types().values())


def _names(events: list[Event]) -> list[str]:
    return sorted({e.module for e in events if e.module})
