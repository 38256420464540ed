"""Pure health state machines: StepRecords in, SemanticEvents out (no torch here).

The Monitor runs each registered failure family's observer on every StepRecord (families/: each family
classifies its own sites and feeds their debounced machines) and keeps what they share: the machines, the
events they confirm, and the order those are written in."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families import FAMILIES
from neuraldbg_cli.reason.families.base import NON_FINITE, Family, LossTracks, Machine, _rounded
from neuraldbg_cli.trace.events import RUN_STATES, EventType, ModelInfo, SemanticEvent, StepRecord


class Monitor:
    """Feeds each site's classifier and machine; `emit` receives every SemanticEvent in step order.

    Events are dated at the onset of their state, which can be earlier than events already confirmed
    elsewhere; a small reorder buffer holds them until no earlier-dated event can still come (the oldest
    pending candidate of any machine, each family's own lookback: a loss series' change point), and a
    non-finite event flushes it at the end of its step (a run about to crash must still leave its trace)."""

    def __init__(
        self, thresholds: Thresholds, emit: Callable[[SemanticEvent], None], families: Iterable[Family] = FAMILIES
    ) -> None:
        self.th, self.emit = thresholds, emit
        self.models: dict[str, ModelInfo] = {}
        self.machines: dict[tuple, Machine] = {}
        self.sites: dict[tuple, tuple[str, str, str | None, str | None]] = {}  # key -> (type, site, root, module)
        self.grad_since: dict[tuple, float] = {}  # largest gradient RMS since the last sample
        self.losses = LossTracks(thresholds.loss_level_window)
        self.held: list[tuple[int, int, SemanticEvent]] = []  # the reorder buffer: (step, order, event)
        self.open: dict[tuple, int] = {}  # machines with a pending candidate -> the step it would be dated at
        self.seq = 0  # arrival order among held events of the same step
        self.since: dict[tuple, int] = {}  # machine -> the step its last transition was dated at
        self.urgent = False  # a non-finite event is held: release everything at the end of this step
        self.steps_seen = 0
        self.last_step = -1
        self.observers = [f.observer(self) for f in families if f.observer is not None]

    def set_models(self, models: list[ModelInfo]) -> None:
        self.models = {m.name: m for m in models}

    # -- plumbing (the families' Board)

    def _machine(self, key: tuple, initial: str) -> Machine:
        m = self.machines.get(key)
        if m is None:
            m = self.machines[key] = Machine(initial, self.th.debounce, self.th.debounce_early)
        return m

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
        machine = self._machine(key, initial)
        self.sites.setdefault(key, (etype, site, root, module))
        for hit in machine.observe(state, step, metrics):
            self._emit(etype, site, root, module, *hit)
            self.since[key] = max(self.since.get(key, 0), hit[2])
        if machine.cand is not None:
            self.open[key] = machine.cand_step
        else:
            self.open.pop(key, None)

    def reset(self, key: tuple, state: str) -> None:
        machine = self.machines.get(key)
        if machine is not None:
            machine.state, machine.cand, machine.count = state, None, 0
        self.open.pop(key, None)
        self.since.pop(key, None)

    def _emit(
        self, etype: str, site: str, root: str | None, module: str | None, old: str, new: str, step: int, metrics: dict
    ) -> None:
        if new == NON_FINITE and etype != EventType.data_anomaly.value:
            etype = EventType.non_finite.value
        ev = SemanticEvent(
            type=etype,
            step=step,
            module=module or None,
            root=root or None,
            from_=old,
            to=new,
            metrics=_rounded(metrics),
            site=site,
        )
        self.seq += 1
        self.held.append((step, self.seq, ev))
        self.urgent = self.urgent or new == NON_FINITE

    def pending(self) -> list[SemanticEvent]:
        """The events confirmed but still held for ordering (a live decision must not wait for them)."""
        return [ev for _, _, ev in sorted(self.held)]

    def _release(self, now: int | None) -> None:
        """Emit the held events that no later observation can precede (all of them when now is None)."""
        if not self.held:
            return
        if now is None:
            floor = math.inf
        else:
            floor = min(now, min(self.open.values(), default=now))
            for observer in self.observers:
                floor = min(floor, observer.floor(now))
        ready = sorted(h for h in self.held if h[0] <= floor) if floor < math.inf else sorted(self.held)
        if not ready:
            return
        self.held = [h for h in self.held if h[0] > floor]
        for _, _, ev in ready:
            self.emit(ev)

    # -- per step

    def observe(self, rec: StepRecord) -> None:
        self.steps_seen += not rec.tail
        self.last_step = rec.step
        self.losses.add(rec)
        for observer in self.observers:
            observer.observe(rec)
        # a non-finite value is written at once (the run may be about to crash), with all it held, sorted;
        # only a state confirmed later but dated before it can then come out of order
        self._release(None if self.urgent else rec.step)
        self.urgent = False

    def finish(self) -> None:
        """End of run: confirm states cut short by the end, release every held event, then one summary."""
        for key, machine in self.machines.items():
            hit = machine.pending()
            if hit is None:
                continue
            self._emit(*self.sites[key], *hit)
        self.open.clear()
        self._release(None)
        metrics: dict = {"steps": float(self.steps_seen)}
        for observer in self.observers:
            metrics.update(observer.summary())
        self.emit(
            SemanticEvent(
                type=EventType.run_summary.value,
                step=max(self.last_step, 0),
                module=None,
                from_=RUN_STATES[0],
                to=RUN_STATES[1],
                metrics=_rounded(metrics),
                site="run",
            )
        )
