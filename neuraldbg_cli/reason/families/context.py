"""What a rule reads: one run's events, indexed once, and its model.json (the models' structure and facts,
the optimizers and their learning rates).

A rule takes the `Context` only (keyword `ctx`), reads the events it needs and says what to change
(evidence.py builds its Hypothesis). Apart from the observe side (base.py): the reasoner reads a trace with
this alone. Pure: no torch, no I/O module (trace reads the events)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.trace.events import Hypothesis, SemanticEvent
from neuraldbg_cli.vocab import is_norm, warms_up

Event = SemanticEvent  # what a rule reads: one line of events.jsonl
Rule = Callable[["Context"], Hypothesis | None]


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

    def loss_fell(self, fraction: float) -> str | None:
        """'fell from A to B' when the run's loss (one series, trained alone) fell by `fraction` of its start:
        the start is its first value unless the first few are lower, the end the mean of its latest window (the
        expected loss training minimises, which a loss swinging between 0 and 1e7 does not lower)."""
        summaries = self.select(types=["run_summary"])
        if not summaries:
            return None
        m = summaries[-1].metrics
        # (traces before late_loss: the last loss)
        first, last = m.get("start_loss", m.get("first_loss")), m.get("late_loss", m.get("last_loss"))
        if m.get("alone") == 0.0:
            return None  # a game's payoff (GAN): not a loss that training makes fall
        ended = m.get("last_loss")
        if isinstance(ended, float) and not math.isfinite(ended):
            return None  # it ended non-finite
        if not (isinstance(first, float) and isinstance(last, float) and math.isfinite(first) and math.isfinite(last)):
            return None
        if first - last < fraction * abs(first) or first == 0:
            return None
        return f"fell from {first:.4g} to {last:.4g}" + (" (its latest level)" if "late_loss" in m else "")

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

    def group_lrs(self, at: int | None = None, onward: bool = True) -> list[tuple[str, dict[str, Any], float | None]]:
        """(optimizer type, param group, its lr) for every group: the lr in force around step `at` (see
        lrs_in_force), or its largest over the run when `at` is None; without a recorded history (a run cut
        short, a tensor lr), the larger of its described lr and its schedule's initial_lr."""
        out: list[tuple[str, dict[str, Any], float | None]] = []
        for opt in self.optimizers:
            groups = [g for g in opt.get("groups") or [] if isinstance(g, dict)]
            seen = _lr_history(opt.get("lr_at"), len(groups))
            for i, g in enumerate(groups):
                if seen:
                    lr: float | None = _in_force([(p[0], p[1 + i]) for p in seen], at, self.every, onward)
                else:
                    lrs = [float(g[k]) for k in ("lr", "initial_lr") if _number(g.get(k))]
                    lr = max(lrs, key=abs) if lrs else None
                out.append((str(opt.get("type") or "optimizer"), g, lr))
        return out

    def lr_hint(self) -> tuple[str, float] | None:
        """The first group's (optimizer type, lr): its largest over the run (0 only if it never moved)."""
        return next(((opt, lr) for opt, _, lr in self.group_lrs() if lr is not None), None)

    def lr_shape(self) -> str | None:
        """The schedule of the group with the largest lr, in words (schedule_shape), None when constant."""
        best: tuple[float, str] | None = None
        for opt in self.optimizers:
            groups = [g for g in opt.get("groups") or [] if isinstance(g, dict)]
            seen = _lr_history(opt.get("lr_at"), len(groups))
            for i in range(len(groups)):
                points = [(p[0], p[1 + i]) for p in seen]
                shape = schedule_shape(points)
                if shape is not None and (best is None or max(abs(v) for _, v in points) > best[0]):
                    best = (max(abs(v) for _, v in points), shape)
        return best[1] if best else None

    def peak_lr(self, at: int | None = None, onward: bool = True) -> tuple[str, float] | None:
        """The largest learning rate of any group: in force while a symptom that began at step `at` developed
        (never a warm-up's tiny first value, nor the initial value of a schedule that multiplied it upward),
        or over the whole run when `at` is None: the one that makes a run diverge."""
        best: tuple[str, float] | None = None
        for opt, _, lr in self.group_lrs(at, onward):
            if lr is not None and (best is None or abs(lr) > abs(best[1])):
                best = (opt, lr)
        return best


def _lr_history(points: object, groups: int) -> list[list[float]]:
    """model.json's lr_at ([step, lr of each group], when it changed, in step order), if well formed."""
    if not isinstance(points, list):
        return []
    ok = [p for p in points if isinstance(p, list) and len(p) == groups + 1 and all(map(_number, p))]
    return sorted(ok, key=lambda p: p[0]) if len(ok) == len(points) else []


def _in_force(points: list[tuple[float, float]], at: int | None, slack: int, onward: bool = True) -> float:
    """The largest lr in force from `at - slack` on (the sampling interval that dates a symptom, and all that
    followed while it developed): the one recorded last before that window and those recorded since. A
    symptom dated at a warm-up's first steps grew under the lr the warm-up reached, and one dated at a
    schedule's lr of 0 developed under the lr that followed. `onward` False: only up to `at + slack` (the lr
    in force as it began). `at` None: the largest of all."""
    if at is None:
        return max((lr for _, lr in points), key=abs)
    before = [lr for step, lr in points if step <= at - slack]
    since = [lr for step, lr in points if step > at - slack and (onward or step <= at + slack)]
    window = before[-1:] + since or [points[0][1]]
    return max(window, key=abs)


def schedule_shape(points: list[tuple[float, float]]) -> str | None:
    """The shape of one group's lr schedule in words ("rises 1e-05 → 1 by step 20", "falls 0.1 → 0.001"), None
    for a constant lr: the advice quotes it beside the lr, as it may itself be the cause. (Arrows, not "to":
    advice is read as "lr=X ... try Y", and a value after "to" reads as a proposal.)"""
    if len(points) < 2:
        return None
    first, last = points[0][1], points[-1][1]
    top_step, top = max(points, key=lambda p: abs(p[1]))
    if abs(top) >= 2 * abs(first) and top_step > points[0][0]:
        shape = f"rises {first:g} → {top:g} by step {int(top_step)}"
        return shape + (f", then falls → {last:g}" if abs(last) <= abs(top) / 2 else "")
    if abs(last) <= abs(first) / 2:
        return f"falls {first:g} → {last:g}"
    return None


def _number(value: object) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < float("inf")
    )
