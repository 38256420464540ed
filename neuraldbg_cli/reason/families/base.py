"""The family protocol and what every family's observe side shares.

A `Machine` per site (a module's gradient, a module's output, the model input, the loss, a module's
weights), fed by the family's `Observer` from each StepRecord through the `Board` (the Monitor's shared
bookkeeping). Each family has small pure classifiers, functions from statistics to a state; the machine
emits an event when a new state has held for `debounce` observations. The event carries the step where the
state *began*, so the reasoner sees onsets, not confirmations. Non-finite values skip the debounce.

The reason side is apart: a rule reads the `Context` (context.py) and builds its Hypothesis with the helpers
of evidence.py. A family is one module of this package exposing `FAMILY = Family(name, observer, rules)`;
the package's `FAMILIES` lists them (see docs/adding-a-kind.md). Pure: no torch, no I/O module."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.context import Rule
from neuraldbg_cli.trace.events import (
    ActState,
    DataState,
    GradState,
    LossState,
    ModelInfo,
    StepRecord,
    UpdateState,
)

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


@dataclass(frozen=True)
class Family:
    """One failure family: how its sites are observed (None: it judges other families' events) and its rules,
    one per Kind, each named after its Kind."""

    name: str
    observer: type[Observer] | None = None
    rules: tuple[Rule, ...] = ()
