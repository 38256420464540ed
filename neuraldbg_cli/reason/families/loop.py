"""The training loop: the order in which the script calls the training API, read at optimizer steps and backward
passes (probe/loopprobe.py).

State (LoopState), one debounced machine per optimizer (numbered in the order first checked):
- grads_not_zeroed: between two of its steps, each following a backward pass, nothing zeroed the gradient of the
  parameter it is read off (no zero_grad(), no `.grad = None`, no in-place zero): autograd adds every backward
  pass to what is there, so each step applies the sum of every gradient since the last zeroing, a sum that grows
  step after step (with SGD the effective step size grows with the step count; the loss swings, then diverges).
Told apart from what is healthy by when the gradients are zeroed, not by how many backward passes a step has:
intended accumulation (several backward passes per step, zeroed after the step) is zeroed before the next step's
first backward; a GAN's discriminator, whose gradients the generator's backward pollutes after D's step, is zeroed
(`netD.zero_grad()`) before D's own backward; zero_grad(set_to_none=False), `p.grad.zero_()` and
`p.grad.data.zero_()` leave zeros, which the check reads. A closure optimizer (LBFGS) is not judged: its backward
passes run inside its step.

- zeroed_before_step: on a sampled step, the gradient of that parameter held a non-zero after a backward pass and
  was gone (None, or all zeros) when the optimizer's step began: a zero_grad() between backward() and step(), so
  the step applies nothing. Its own machine (the two checks read different moments of the loop).
- single_class_batches: per class loss fed class indices (N >= 8), at least 80% of at least 5 sampled batches hold
  one class each while together they span several: data sorted by label, unshuffled.
- clipped_after_step: clip_grad_norm_/clip_grad_value_ was called right after the optimizer's step, with no
  backward pass since: the step applied the unclipped gradients (its own machine, every call judged).

- sampler_epoch_fixed: a DistributedSampler with shuffle=True iterated twice or more (epochs) with its epoch never
  changed (set_epoch() never called): the same permutation every epoch (one machine per sampler).
- graphs_kept (kind memory_growth, one machine for the run): on sampled steps, the autograd graphs of earlier
  steps still alive (probe/graphwatch.py): at least MIN_ALIVE earlier sampled steps' graphs, the oldest SPAN
  steps back or more; a loop keeps the last few steps' graphs at most (the `loss` variable, a short window).

The event names the parameter's model and module (`root`, `module`) and carries `optimizer` (its number),
`line` (the script line of its step() call), `backward_line` (of the first backward() checked after it), `passes`
(backward passes between the two steps) and `stale_share` (|gradient after the previous step| / |gradient now|, on
an even slice of it); model.json's optimizer description says `step_at` / `backward_at` ("file:line") for an
optimizer found keeping its gradients."""

from __future__ import annotations

from typing import Any, NamedTuple

from neuraldbg_cli.reason.families.base import Board, Family, Observer
from neuraldbg_cli.reason.families.context import Context, Event, _lr_history
from neuraldbg_cli.reason.families.evidence import _hyp, _still
from neuraldbg_cli.reason.families.lossfn import LOSS_NAMES
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import (
    EventType,
    Hypothesis,
    Kind,
    LoopState,
    LoopStats,
    Origin,
    SamplerStats,
    StepRecord,
)

S = LoopState
SITE = "loop"
CONFIDENCE = 0.92  # a direct reading: the gradient was there, unzeroed, when the next backward pass began
ENDED = 0.4  # the script zeroes its gradients since (a state that ended: presence under 0.5)


def classify_loop(s: LoopStats) -> str | None:
    """Pure: one optimizer's interval between two steps -> a LoopState value; None when it tells nothing (no
    backward pass between the steps, or a gradient all zeros after the first one)."""
    if s.passes < 1 or s.kept < 0 or s.kept != s.kept:
        return None
    return S.grads_not_zeroed.value if s.kept >= 0.5 else S.normal.value


MIN_CHECKS = 5  # sampled batches read before "every batch holds one class" is said
ONE_CLASS_SHARE = 0.8  # of them, at least this share hold a single class


MIN_ALIVE = 4  # earlier sampled steps whose graphs are alive at once
SPAN = 20  # steps back the oldest of them is (a window of the last few losses kept stays under it)


class LoopObserver(Observer):
    """Per record: each optimizer's interval checked (sampled steps), one machine per optimizer; per class
    loss, whether its batches each hold one class (one machine per loss); the graphs kept across steps."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.batches: dict[str, tuple[int, int, frozenset[float]]] = {}  # loss -> (read, one class, classes seen)
        self.samplers: dict[int, SamplerStats] = {}  # DistributedSampler -> its latest iteration
        self.mem_first: float | None = None  # memory in use at the first reading
        self.kept_last: dict[str, Any] | None = None  # the latest reading with graphs kept

    def _graphs(self, rec: StepRecord) -> None:
        """Autograd graphs of earlier steps still alive: something keeps every step's graph."""
        g = rec.graphs
        assert g is not None
        if self.mem_first is None and g.mem == g.mem:
            self.mem_first = g.mem
        kept = g.alive >= MIN_ALIVE and g.oldest >= 0 and rec.step - g.oldest >= SPAN
        metrics: dict[str, Any] = {
            "alive": g.alive,
            "since": g.oldest if g.oldest >= 0 else None,
            "kept_loss": g.kept_loss,
            "reached": g.reached if g.reached >= 0 else None,
            "memory": g.mem if g.mem == g.mem else None,
            "retain_graph": float(g.retained),
        }
        if kept:
            self.kept_last = {"step": rec.step, **metrics}
        state = S.graphs_kept.value if kept else S.normal.value
        self.board.feed(
            ("loopgraphs",), S.normal.value, state, rec.step, metrics, EventType.loop_health.value, SITE, None, None
        )

    def _samplers(self, rec: StepRecord) -> None:
        """A shuffling DistributedSampler iterated again with its epoch unchanged: set_epoch() is never called, so
        every epoch draws the same order. Fed at its iterations and at sampled steps (its latest iteration)."""
        self.samplers.update(rec.samplers)
        for k, st in self.samplers.items():
            fixed = st.shuffle and st.iterations >= 2 and st.epochs == 1
            state = S.sampler_epoch_fixed.value if fixed else S.normal.value
            metrics: dict[str, Any] = {
                "sampler": k,
                "iterations": st.iterations,
                "epoch": st.epoch,
                "epochs": st.epochs,
                "line": st.line or None,
            }
            etype = EventType.loop_health.value
            self.board.feed(("loopsampler", k), S.normal.value, state, rec.step, metrics, etype, SITE, None, None)

    def summary(self) -> dict[str, Any]:
        """With graphs kept: the latest such reading (`graphs_*`) and the memory at the first reading; with a
        sampler's epoch never set, its iterations by the end (`sampler_iterations`)."""
        out: dict[str, Any] = {}
        fixed = [st for st in self.samplers.values() if st.shuffle and st.epochs == 1 and st.iterations >= 2]
        if fixed:
            out["sampler_iterations"] = max(st.iterations for st in fixed)
        if self.kept_last is not None:
            out.update({f"graphs_{k}": v for k, v in self.kept_last.items()})
            out["graphs_memory_first"] = self.mem_first
        return out

    def _batches(self, rec: StepRecord) -> None:
        """Batches of one class each, while together they span several: a loader over data sorted by label."""
        for name, c in rec.loss_calls.items():
            if c.one_class is None or (c.classes or 0) < 2 or c.first_target is None:
                continue
            read, single, seen = self.batches.get(name, (0, 0, frozenset()))
            read += 1
            if c.one_class >= 0.5:
                single, seen = single + 1, seen | {c.first_target}
            self.batches[name] = (read, single, seen)
            sorted_ = read >= MIN_CHECKS and single >= ONE_CLASS_SHARE * read and len(seen) >= 2
            state = S.single_class_batches.value if sorted_ else S.normal.value
            metrics: dict[str, Any] = {
                "loss_id": float(LOSS_NAMES.index(name)) if name in LOSS_NAMES else -1.0,
                "batches": read,
                "one_class": single,
                "classes_seen": len(seen),
                "classes": c.classes,
                "batch": c.terms,
            }
            etype = EventType.loop_health.value
            self.board.feed(("loopbatch", name), S.normal.value, state, rec.step, metrics, etype, SITE, None, None)

    def observe(self, rec: StepRecord) -> None:
        if rec.manual_kept is not None:  # a manual update's gradients at the next backward (GradReader.kept_grads)
            kept = S.grads_not_zeroed.value if rec.manual_kept >= 0.5 else S.normal.value
            etype = EventType.loop_health.value
            self.board.feed(("loopmanual",), S.normal.value, kept, rec.step, {"manual": 1.0}, etype, SITE, None, None)
        if rec.loss_calls:
            self._batches(rec)
        if rec.graphs is not None:
            self._graphs(rec)
        if rec.samplers or (self.samplers and rec.sampled):
            self._samplers(rec)
        for k, s in rec.loop.items():
            if s.cleared >= 0:  # its own machine: the two checks read different moments of the loop
                cleared = S.zeroed_before_step.value if s.cleared >= 0.5 else S.normal.value
                where: dict[str, Any] = {
                    "optimizer": k,
                    "line": s.line or None,
                    "backward_line": s.backward_line or None,
                }
                etype = EventType.loop_health.value
                self.board.feed(
                    ("loopclear", k), S.normal.value, cleared, rec.step, where, etype, SITE, s.root, s.module
                )
            if s.clipped >= 0:
                clip = S.clipped_after_step.value if s.clipped >= 0.5 else S.normal.value
                at: dict[str, Any] = {"optimizer": k, "line": s.line or None, "clip_line": s.clip_line or None}
                etype = EventType.loop_health.value
                self.board.feed(("loopclip", k), S.normal.value, clip, rec.step, at, etype, SITE, s.root, s.module)
            state = classify_loop(s)
            if state is None:
                continue
            metrics: dict[str, Any] = {
                "optimizer": k,
                "line": s.line or None,
                "backward_line": s.backward_line or None,
                "passes": s.passes,
                "stale_share": s.stale if state == S.grads_not_zeroed.value else None,
            }
            etype = EventType.loop_health.value
            self.board.feed(("loop", k), S.normal.value, state, rec.step, metrics, etype, SITE, s.root, s.module)


# ---------------------------------------------------------------- rule


def _optimizer(ctx: Context, ev: Event) -> dict[str, Any]:
    """model.json's description of the optimizer the event is about: the one whose step() line it names (and that
    trains the event's model), else the only one that trains that model."""
    line = ev.metrics.get("line")
    trains = [o for o in ctx.optimizers if isinstance(o.get("roots"), list) and ev.root in o["roots"]]
    if line:
        for o in trains or ctx.optimizers:
            at = o.get("step_at")
            if isinstance(at, str) and at.rpartition(":")[2] == str(int(line)):
                return o
    return trains[0] if len(trains) == 1 else {}


def _at(o: dict[str, Any], key: str, line: float | None) -> str:
    """ "file:line" of a call as model.json has it, else "line N" from the event, else ""."""
    at = o.get(key)
    if isinstance(at, str) and at:
        return at
    return f"line {int(line)}" if line else ""


def _where(at: str) -> str:
    return f" ({at})" if at else ""


def loop_misuse(ctx: Context) -> Hypothesis | None:
    """One hypothesis for the loop: the bug that does most (a step that applies nothing, then gradients summed
    over steps, batches of one class, clipping that clips nothing, the same data order every epoch, an lr that
    collapsed)."""
    frozen = _frozen_optimizer(ctx)
    if frozen is not None:
        return frozen
    for state, build in (
        (S.zeroed_before_step, _zeroed_before_step),
        (S.grads_not_zeroed, _never_zeroed),
        (S.single_class_batches, _single_class_batches),
        (S.clipped_after_step, _clipped_after_step),
        (S.sampler_epoch_fixed, _sampler_epoch_fixed),
    ):
        evs = ctx.select(types=[EventType.loop_health.value], to=[state.value], sites=[SITE])
        if evs:
            return build(ctx, evs)
    return _lr_collapsed(ctx) or _scheduler_early(ctx)


class _Site(NamedTuple):
    """What every optimizer-read loop state says the same way: its first event, whether it lasted, and the
    optimizer's type and step() line (model.json's description, else the event's line)."""

    first: Event
    held: float  # _still: the share of its sites still in the state (0: it ended everywhere)
    opt: dict[str, Any]
    kind: str
    step_at: str


def _site(ctx: Context, evs: list[Event]) -> _Site:
    first = min(evs, key=lambda e: e.step)
    o = _optimizer(ctx, first)
    step_at = _at(o, "step_at", first.metrics.get("line"))
    return _Site(first, _still(ctx, evs, first.to), o, str(o.get("type") or "optimizer"), step_at)


def _finish(h: Hypothesis, site: _Site, **lines: str) -> Hypothesis:
    """The hypothesis placed at the run's loop (no module), its first optimizer's evidence naming the lines."""
    h.origin = Origin(module=None, step=site.first.step, root=site.first.root)
    extra = {k: v for k, v in (("optimizer_type", site.kind), ("step_at", site.step_at), *lines.items()) if v}
    for e in h.evidence:
        if e.get("optimizer") == site.first.metrics.get("optimizer"):
            e.update(extra)
    return h


def _never_zeroed(ctx: Context, evs: list[Event]) -> Hypothesis:
    """Gradients never zeroed between an optimizer's steps: each step applies the sum of every gradient so far."""
    if all(e.metrics.get("manual") for e in evs):
        return _manual_never_zeroed(ctx, evs)
    evs = [e for e in evs if not e.metrics.get("manual")]
    site = _site(ctx, evs)
    first, held, kind, step_at = site.first, site.held, site.kind, site.step_at
    onset = first.step
    conf = CONFIDENCE if held else ENDED
    backward_at = _at(site.opt, "backward_at", first.metrics.get("backward_line"))
    model = first.root or "the model"
    summary = (
        "Gradients are never zeroed between optimizer steps: "
        f"{kind}.step(){' at ' + step_at if step_at else ''} is called again with no zero_grad() (nor .grad = None) "
        f"since its previous step, from step {onset} on, so the gradients of {model} add up across steps and each "
        "step applies the sum of every gradient so far."
    )
    if not held:
        ended = [
            e.step
            for e in ctx.select(types=[EventType.loop_health.value], to=[S.normal.value], sites=[SITE])
            if e.step > onset
        ]
        summary = (
            f"Gradients were not zeroed between optimizer steps from step {onset}"
            + (f" to step {min(ended)}" if ended else "")
            + f": {kind}.step(){' at ' + step_at if step_at else ''} applied the sum of the gradients since its "
            "earlier steps; they are zeroed since."
        )
    tips = [
        "zero the gradients once per optimizer step: call optimizer.zero_grad() before loss.backward()"
        f"{_where(backward_at)}, or right after optimizer.step(){_where(step_at)}: "
        "`optimizer.zero_grad(); loss.backward(); optimizer.step()`",
        "if accumulating gradients over micro-batches is intended, zero them after each step: "
        "`(loss / k).backward(); if (i + 1) % k == 0: optimizer.step(); optimizer.zero_grad()`",
    ]
    if len(ctx.optimizers) > 1:
        tips.append(
            "a model that another model's backward also reaches (a GAN's discriminator through the generator's "
            "loss) must be zeroed right before its own backward: netD.zero_grad(); errD.backward(); optD.step()"
        )
    h = _hyp(Kind.loop_misuse, conf, None, onset, summary, evs, tips, fixes=[fix("zero_grad", tips[0])])
    return _finish(h, site, backward_at=backward_at)


def _manual_never_zeroed(ctx: Context, evs: list[Event]) -> Hypothesis:
    """A script that updates its weights itself and never zeroes their gradients (the autograd tutorials'
    `w.grad.zero_()` left out): each backward pass adds to the gradient of every pass before, so each manual
    update applies the sum of every gradient so far (read at the next backward pass: still there, bit for bit,
    after the weights moved)."""
    first = min(evs, key=lambda e: e.step)
    held = _still(ctx, evs, S.grads_not_zeroed.value)
    conf = CONFIDENCE if held else ENDED
    summary = (
        "Gradients are never zeroed between manual updates: after the script updates the weights itself (no torch.optim "
        f"optimizer), their .grad is still there, unchanged, when the next backward pass begins, from step "
        f"{first.step} on, so autograd adds each pass to the last and each update applies the sum of every gradient "
        "so far."
    )
    tips = [
        "zero the gradients after each manual update: `with torch.no_grad(): p -= lr * p.grad` then `p.grad.zero_()` "
        "(or model.zero_grad() before loss.backward())"
    ]
    return _hyp(Kind.loop_misuse, conf, None, first.step, summary, evs, tips)


def _zeroed_before_step(ctx: Context, evs: list[Event]) -> Hypothesis:
    """zero_grad() between backward() and step(): the gradient the backward pass made is gone when the step
    reads it, so the step applies nothing (the weights move only by momentum or weight decay, if at all)."""
    site = _site(ctx, evs)
    first, held, kind, step_at = site.first, site.held, site.kind, site.step_at
    onset = first.step
    backward_at = _at(site.opt, "backward_at", first.metrics.get("backward_line"))
    model = first.root or "the model"
    summary = (
        f"The gradients are zeroed between backward() and step(): after each backward pass the gradients of {model} "
        f"are there, and when {kind}.step(){' at ' + step_at if step_at else ''} runs they are gone (None or all "
        f"zeros), from step {onset} on: every step applies nothing, so {model} never learns from its loss."
    )
    tips = [
        f"call optimizer.zero_grad() before loss.backward(){_where(backward_at)} (or right after optimizer.step()"
        f"{_where(step_at)}), never between the two: `optimizer.zero_grad(); loss.backward(); optimizer.step()`",
        "look for a zero_grad() (or `p.grad = None`) that runs after backward(): in a helper called before the "
        "step, a callback, or a second model's zero_grad() over shared parameters",
    ]
    h = _hyp(Kind.loop_misuse, CONFIDENCE if held else ENDED, None, onset, summary, evs, tips)
    return _finish(h, site, backward_at=backward_at)


def _single_class_batches(ctx: Context, evs: list[Event]) -> Hypothesis:
    """Each batch one class: every step pulls the model toward that class and the next batch's class undoes it;
    the loss swings at each change of class and the model ends biased toward the last classes seen."""
    first = min(evs, key=lambda e: e.step)
    m = first.metrics
    found = m.get("loss_id")
    i = int(found) if found is not None else -1
    loss = f"F.{LOSS_NAMES[i]}" if 0 <= i < len(LOSS_NAMES) else "the class loss"
    held = _still(ctx, evs, S.single_class_batches.value)
    summary = (
        f"Every batch holds one class: on {int(m.get('one_class') or 0)} of {int(m.get('batches') or 0)} sampled "
        f"steps all {int(m.get('batch') or 0)} targets of {loss} were the same class, while the batches "
        f"span {int(m.get('classes_seen') or 0)} classes: the data reach the model sorted by label (an unshuffled "
        "loader over a data set ordered by class), so each step pulls the model toward one class and the next "
        "class undoes it."
    )
    tips = [
        "shuffle the training data: DataLoader(dataset, batch_size=..., shuffle=True) (or a sampler that mixes the "
        "classes in every batch); with a hand-made loop, draw a random permutation each epoch: "
        "`perm = torch.randperm(len(x)); for i in range(0, len(x), bs): idx = perm[i:i + bs]`",
    ]
    h = _hyp(Kind.loop_misuse, CONFIDENCE if held else ENDED, None, first.step, summary, evs, tips)
    h.origin = Origin(module=None, step=first.step, root=None)
    return h


COLLAPSE = 1e-3  # an lr this far below its peak changes almost nothing
EARLY = 0.3  # collapsed within this share of the run's steps (a schedule meant to end low gets there at the end)
MIN_RUN = 50  # steps a run needs before its schedule's shape says anything


def _lr_collapsed(ctx: Context) -> Hypothesis | None:
    """A learning rate that fell COLLAPSE below its peak within the first EARLY of the run and stayed down: the
    rest of the run changes almost nothing. The usual cause is a scheduler whose step sizes are in epochs
    (StepLR's step_size, MultiStepLR's milestones, ExponentialLR's gamma, CosineAnnealingLR's T_max) stepped
    once per batch. Read from the lr history model.json records (sampled steps); replayable, no probe of its own."""
    summaries = ctx.select(types=[EventType.run_summary.value])
    total = int(summaries[-1].metrics.get("steps") or 0) if summaries else 0
    if total < MIN_RUN:
        return None
    found = None
    for opt in ctx.optimizers:
        groups = [g for g in opt.get("groups") or [] if isinstance(g, dict)]
        hist = _lr_history(opt.get("lr_at"), len(groups))
        for i in range(len(groups)):
            points = [(int(p[0]), abs(float(p[1 + i]))) for p in hist]
            if len(points) < 2:
                continue
            top_step, top = max(points, key=lambda p: p[1])
            low = [(st, lr) for st, lr in points if st > top_step and lr <= COLLAPSE * top]
            if not top or not low or low[0][0] > EARLY * total:
                continue
            if any(lr > 10 * COLLAPSE * top for st, lr in points if st > low[0][0]):
                continue  # it came back up (warm restarts): a schedule, not a collapse
            if found is None or low[0][0] < found[2]:
                found = (str(opt.get("type") or "optimizer"), top, low[0][0], points[-1][1])
    if found is None:
        return None
    kind, top, at, last = found
    share = 100 * (total - at) / total
    summary = (
        f"The learning rate collapsed early: {kind}'s lr falls from {top:g} to under a thousandth of it by step "
        f"{at} of {total} (it ends at {last:g}) and stays there for the last {share:.0f}% of the run, "
        "which then changes almost nothing: a scheduler whose step sizes are in epochs (StepLR's step_size, "
        "MultiStepLR's milestones, ExponentialLR's gamma, CosineAnnealingLR's T_max) stepped once per batch."
    )
    tips = [
        "step the scheduler once per epoch (scheduler.step() after the loop over batches), or give it step sizes "
        "in batches (step_size × batches per epoch; OneCycleLR and warm-up + cosine schedules are made to step "
        "per batch)",
    ]
    stalled = bool(ctx.select(types=[EventType.optimizer_instability.value], to=["plateau"]))
    return _read_off(
        CONFIDENCE if stalled else LR_DEAD,
        at,
        summary,
        tips,
        ("lr_schedule", "lr_collapsed"),
        {"peak_lr": top, "lr": last, "steps": float(total), "optimizer_type": kind},
        fixes=[fix("scheduler_per_epoch", tips[0])],
    )


def _float(v: Any) -> float | None:
    """A finite number read from model.json, else None (a file written by someone else may hold anything)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        return None
    return float(v)


def _read_off(
    confidence: float,
    step: int,
    summary: str,
    tips: list[str],
    what: tuple[str, str],
    metrics: dict[str, Any],
    fixes: list[dict[str, Any]] | None = None,
) -> Hypothesis:
    """A loop hypothesis read off model.json rather than an event (an lr schedule, an optimizer's parameters):
    placed at the loop from `step`, its one piece of evidence typed `what` = (type, state) with `metrics`."""
    h = _hyp(Kind.loop_misuse, confidence, None, step, summary, [], tips, fixes=fixes)
    h.origin = Origin(module=None, step=step, root=None)
    kind, state = what
    h.evidence = [{"type": kind, "step": step, "module": None, "from": "normal", "to": state, "site": SITE, **metrics}]
    return h


FROZEN_CONFIDENCE = 0.85  # read directly: not one of the optimizer's parameters requires a gradient at its steps


def _frozen_optimizer(ctx: Context) -> Hypothesis | None:
    """An optimizer that steps holding only frozen parameters (requires_grad=False, every one, at its sampled steps
    and never otherwise: model.json's `frozen`): it can change nothing. Freezing part of what an optimizer holds is
    intended (a backbone under a trained head) and never judged; an optimizer over nothing trainable is a bug: it
    was built before the model was frozen and its trained part replaced, or over the wrong module."""
    found = [o for o in ctx.optimizers if isinstance(o.get("frozen"), dict)]
    if not found:
        return None
    o = found[0]
    frozen = o["frozen"]
    kind, step_at = str(o.get("type") or "optimizer"), str(o.get("step_at") or "")
    step = int(_float(frozen.get("step")) or 0)
    modules = [str(m) for m in frozen.get("modules") or []] if isinstance(frozen.get("modules"), list) else []
    count = int(_float(frozen.get("params")) or 0)
    summary = (
        f"{kind} steps only frozen parameters: every parameter it holds ({count:,} values"
        f"{' in ' + ', '.join(modules[:4]) if modules else ''}) has requires_grad=False at its steps from step "
        f"{step} on, so its step(){' at ' + step_at if step_at else ''} changes nothing: what it was meant to train "
        "stays as it was. Usual cause: the optimizer was built before the model was frozen and its trained part "
        "(a new head) put in, which it does not hold."
    )
    tips = [
        "build the optimizer after freezing and replacing layers, over what trains: "
        "`optimizer = torch.optim."
        f"{kind if kind != 'optimizer' else 'SGD'}(filter(lambda p: p.requires_grad, model.parameters()), ...)`; "
        "or, if these parameters are meant to train, set requires_grad=True on them",
    ]
    extra = {"optimizer_type": kind, "params": count, **({"step_at": step_at} if step_at else {})}
    return _read_off(FROZEN_CONFIDENCE, step, summary, tips, ("optimizer", "steps_frozen_only"), extra)


EARLY_SKIPPED = 0.6  # the schedule's first value lost (a warm-up's gentlest stage, a decay's first epoch): wrong
EARLY_MATERIAL = 0.1  # the skipped first value counts when it differs from the next by more than this (relative):
# an epoch schedule's first step (a warm-up stage, a decay's factor), not a per-batch schedule's next tiny increment
EARLY_SHIFTED = 0.35  # the first value unchanged by the early call: only the later changes come a step early (a note)


def _scheduler_early(ctx: Context) -> Hypothesis | None:
    """An lr scheduler stepped before its optimizer's first step (model.json's `scheduler_early`, read by the probe
    at the scheduler's first step() call; torch warns of the same): the schedule starts one value late. Counted
    when that call changed the lr (its first value is never used: a warm-up loses its first stage, a decay
    trains its first epoch a factor lower), by more than EARLY_MATERIAL; a note when it did not (every later change
    comes one step early: a per-batch schedule's first increment is tiny)."""
    facts = [m.get("facts") for m in ctx.models]
    early = next(
        (f["scheduler_early"] for f in facts if isinstance(f, dict) and isinstance(f.get("scheduler_early"), dict)),
        None,
    )
    if early is None:
        return None
    name, at = str(early.get("scheduler") or "scheduler"), str(early.get("at") or "")
    before, after = _float(early.get("lr_before")), _float(early.get("lr_after"))
    step = int(_float(early.get("step")) or 0)
    known = before is not None and after is not None
    moved = (
        abs(after - before) / abs(before)
        if before is not None and after is not None and before
        else (1.0 if early.get("changed") else 0.0)
    )
    changed = bool(early.get("changed")) and moved > EARLY_MATERIAL
    lost = (
        f"so the schedule's first value (lr={before:g}) is never used: the first update already runs at lr={after:g}"
        if changed and known
        else f"which moved the lr by {100 * moved:.1f}% only: every later change of the schedule comes one step early"
        if early.get("changed")
        else "the lr did not change at that call, but every later change of the schedule comes one step early"
    )
    summary = (
        f"The lr scheduler is stepped before the optimizer: {name}.step(){' at ' + at if at else ''} is first called "
        f"{early.get('where') or 'before the first optimizer.step()'}, before the optimizer's first step, {lost} "
        "(torch warns of this order: the scheduler skips its first value)."
    )
    tips = [
        f"call {name}.step() after optimizer.step(){_where(at)}: at the end of each epoch for an epoch schedule, "
        "after each optimizer.step() for a per-batch one (`optimizer.step(); scheduler.step()`)",
    ]
    extra = {"scheduler": name, "lr_before": before, "lr_after": after, **({"scheduler_at": at} if at else {})}
    conf = EARLY_SKIPPED if changed else EARLY_SHIFTED
    return _read_off(conf, step, summary, tips, ("lr_schedule", "scheduler_before_step"), extra)


LR_DEAD = 0.7  # no stall recognised (a loss that learned first stays "improved"), yet most of the run learns nothing
CLIP_CONFIDENCE = 0.8  # the call order is read directly; whether the unclipped steps hurt is the symptoms' to say


def _clipped_after_step(ctx: Context, evs: list[Event]) -> Hypothesis:
    """clip_grad_norm_/clip_grad_value_ right after optimizer.step(): every step applies the unclipped gradients,
    and the clip rescales gradients that the next zero_grad() discards."""
    site = _site(ctx, evs)
    first, held, kind, step_at = site.first, site.held, site.kind, site.step_at
    onset = first.step
    clip_at = _at(site.opt, "clip_at", first.metrics.get("clip_line"))
    limit = site.opt.get("clip_max_norm")
    summary = (
        f"Gradients are clipped after the optimizer step: the clipping call{' at ' + clip_at if clip_at else ''} "
        f"comes right after {kind}.step(){' at ' + step_at if step_at else ''}, with no backward pass between them, "
        f"from step {onset} on: each step applies the unclipped gradients, and the clip rescales gradients that "
        "the next zero_grad() discards. It clips nothing."
    )
    norm = f"{limit:g}" if isinstance(limit, (int, float)) else "max_norm"
    tips = [
        f"clip between backward() and step(): move the clipping call{_where(clip_at)} above optimizer.step()"
        f"{_where(step_at)}: `loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), {norm}); "
        "optimizer.step()` (with a GradScaler, scaler.unscale_(optimizer) first)",
    ]
    made = fix("clip_grad_norm", tips[0], max_norm=float(limit) if isinstance(limit, (int, float)) else 1.0)
    h = _hyp(Kind.loop_misuse, CLIP_CONFIDENCE if held else ENDED, None, onset, summary, evs, tips, fixes=[made])
    return _finish(h, site, clip_at=clip_at)


SAMPLER_CONFIDENCE = 0.85  # read directly (the sampler's own epoch); how much one order hurts is the run's to say


def _sampler_epoch_fixed(ctx: Context, evs: list[Event]) -> Hypothesis:
    """DistributedSampler(shuffle=True) iterated epoch after epoch with its epoch never changed: its permutation is
    seeded by seed + epoch, so every epoch visits the data in the same order (on every rank)."""
    first = min(evs, key=lambda e: e.step)
    latest = max(evs, key=lambda e: e.step)
    at = next((str(m["facts"]["sampler_at"]) for m in ctx.models if (m.get("facts") or {}).get("sampler_at")), "")
    line = latest.metrics.get("line")
    where = at or (f"line {int(line)}" if line else "")
    epoch = int(latest.metrics.get("epoch") or 0)
    summaries = ctx.select(types=[EventType.run_summary.value])
    ran = summaries[-1].metrics.get("sampler_iterations") if summaries else None
    times = int(ran or latest.metrics.get("iterations") or 0)
    summary = (
        f"The DistributedSampler's epoch is never set: the loader over it{' at ' + where if where else ''} was "
        f"iterated {times} times (epochs) and its epoch was {epoch} every "
        "time, so its shuffle draws the same permutation each epoch: every epoch visits the data in the same "
        "order, each rank the same slice of it."
    )
    tips = [
        "call sampler.set_epoch(epoch) at the start of each epoch, before the loop over the loader"
        f"{_where(where)}: `for epoch in range(epochs): sampler.set_epoch(epoch); for batch in loader: ...`",
    ]
    h = _hyp(Kind.loop_misuse, SAMPLER_CONFIDENCE, None, first.step, summary, evs, tips)
    h.origin = Origin(module=None, step=first.step, root=None)
    for e in h.evidence:
        if where:
            e["loop_at"] = where
    return h


MEMORY_CONFIDENCE = 0.9  # read directly: the graphs of many earlier steps were alive at once


def _mb(v: Any) -> str:
    return f"{float(v) / 2**20:.1f} MB"


def memory_growth(ctx: Context) -> Hypothesis | None:
    """Each step's autograd graph kept alive across steps: the loss summed as a tensor (`total += loss`) or
    appended to a list, a recurrent state carried into the next step without `.detach()`. Memory grows with
    every step (after backward() only the graph's nodes stay; with retain_graph=True its saved tensors too),
    and a graph that continues the previous one makes every backward pass longer."""
    evs = ctx.select(types=[EventType.loop_health.value], to=[S.graphs_kept.value], sites=[SITE])
    if not evs:
        return None
    first = min(evs, key=lambda e: e.step)
    m = first.metrics
    summaries = ctx.select(types=[EventType.run_summary.value])
    last = summaries[-1].metrics if summaries else {}
    since = int(m.get("since") or 0)
    at = int(last.get("graphs_step") or first.step)
    alive = int(last.get("graphs_alive") or m.get("alive") or 0)
    found = last.get("graphs_since")
    oldest = int(found) if found is not None else since
    keeper = next(
        (x["facts"]["kept_graphs"] for x in ctx.models if isinstance((x.get("facts") or {}).get("kept_graphs"), dict)),
        None,
    )
    continued = (
        any(e.metrics.get("reached") is not None for e in evs)
        or last.get("graphs_reached") is not None
        or bool(keeper and keeper.get("how") == "carried")
    )
    loss_kept = float(m.get("kept_loss") or 0) >= 0.5 * float(m.get("alive") or 1)
    retained = any(float(e.metrics.get("retain_graph") or 0) >= 0.5 for e in evs)
    how = (
        "each step's graph continues the previous step's: a tensor carried from one step into the next, such as "
        "an RNN's hidden state, is never detached"
        if continued
        else "the loss tensor of every step is kept with its autograd graph, summed or appended for logging"
        if loss_kept
        else "tensors of every step are kept with their autograd graphs"
    )
    where = ""
    tips: list[str] = []
    if keeper:
        name, kept_how, expr, line = keeper.get("name"), keeper.get("how"), keeper.get("expr"), keeper.get("at")
        where = f" `{name}` at {line} keeps them"
        # a loss kept is a number (.item()); other tensors (outputs, features) keep their values, detached
        if kept_how == "sum" and loss_kept:
            tips.append(f"accumulate a number, not the tensor: `{name} += {expr}.item()` ({line})")
        elif kept_how == "sum":
            tips.append(f"accumulate without the graph: `{name} += {expr}.detach()` ({line})")
        elif kept_how == "append" and loss_kept:
            tips.append(
                f"keep a number or a detached tensor: `{name}.append({expr}.item())` (or `{expr}.detach()`) ({line})"
            )
        elif kept_how == "append":
            tips.append(f"keep the values without their graph: `{name}.append({expr}.detach())` ({line})")
        elif kept_how == "carried":
            tips.append(
                f"detach the carried state at the start of each step: `{name} = {name}.detach()` before "
                f"{line} (a tuple such as an LSTM's (h, c): `{name} = tuple(h.detach() for h in {name})`)"
                + (", and drop retain_graph=True from backward()" if retained else "")
            )
    if not tips:
        if continued:
            tips.append(
                "detach what one step hands the next (truncated backpropagation through time): "
                "`hidden = hidden.detach()` at the start of each step"
                + (", and drop retain_graph=True from backward()" if retained else "")
            )
        else:
            tips.append(
                "log numbers, not tensors: `total += loss.item()` (or keep `loss.detach()`), and detach "
                "any output or loss kept for later"
            )
    mem0, mem1 = last.get("graphs_memory_first"), last.get("graphs_memory")
    grew = (
        f"; memory in use went from {_mb(mem0)} to {_mb(mem1)}"
        if isinstance(mem0, (int, float)) and isinstance(mem1, (int, float)) and mem1 > mem0
        else ""
    )
    summary = (
        f"Autograd graphs are kept alive across steps: at step {at} the graphs of {alive} earlier sampled steps, "
        f"back to step {oldest}, are still in memory ({how}){';' + where if where else ''}{grew}. Memory grows "
        "with every step" + (" and each backward pass runs through every earlier step's graph." if continued else ".")
    )
    h = _hyp(Kind.memory_growth, MEMORY_CONFIDENCE, None, since, summary, evs, tips)
    h.origin = Origin(module=None, step=since, root=None)
    if keeper:
        for e in h.evidence:
            e.update({"kept_by": keeper.get("name"), "kept_at": keeper.get("at"), "kept_how": keeper.get("how")})
    return h


FAMILY = Family("loop", LoopObserver, (loop_misuse, memory_growth))
