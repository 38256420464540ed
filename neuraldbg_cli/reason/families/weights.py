"""Weights: on sampled steps, a module's weights are updating, unchanged (bit-identical although a gradient
reached them), moved by oversized steps (the learning rate) or collapsing (the weight decay)."""

from __future__ import annotations

import math
from collections.abc import Collection

from neuraldbg_cli.reason.families.advice import zero_lr
from neuraldbg_cli.reason.families.base import Board, Family, Observer, settled
from neuraldbg_cli.reason.families.causes import moved_then_stopped
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import (
    _first_by_module,
    _hyp,
    _names,
    _origin_of,
    _spread_confidence,
    _still,
)
from neuraldbg_cli.trace.events import EventType, GradState, GradStats, Hypothesis, Kind, StepRecord, UpdateState
from neuraldbg_cli.vocab import usual_lr

ETYPE, GRAD_HEALTHY = EventType.parameter_update.value, GradState.healthy.value
# an update at least this fraction of its weights' norm is 100x the float32 resolution: it changes their bits
CYCLE_RATIO = 100 * 2.0**-23
LEARNED = 0.25  # the loss fell by this fraction of its start: the fit converged, the cycle is its end state
NOTE = 0.45  # below the 0.5 that --fail-on reads
# the states as plain strings (judged per layer per sampled step: an Enum's `.value` is a descriptor call)
UPDATING, UNCHANGED, OVERSIZED, COLLAPSING, ASCENDING = (
    UpdateState.updating.value,
    UpdateState.unchanged.value,
    UpdateState.oversized.value,
    UpdateState.collapsing.value,
    UpdateState.ascending.value,
)


class WeightObserver(Observer):
    """Per module, on sampled steps: unchanged = a module that had a gradient at some step since the last
    sample, yet whose weights are bit-identical to that sample's (the same checksum of every parameter);
    comparing samples, not one optimizer step, also catches weights that something puts back after each
    step; layers whose gradient vanished are left to the gradient classifier. Oversized = one step moves
    the weights by a large fraction of their norm (the update-to-weight ratio, healthy around 1e-3), on
    most of the model's matrix layers: the learning rate is too large. Collapsing = the weight norm fell
    below a small fraction of its first sample and is still falling, on most matrix layers (e.g. a huge
    weight_decay). Ascending = a manual update (no optimizer: GradReader.before_manual) moves the weights along
    the gradient it followed, on most matrix layers: the update's sign is flipped.

    Still weights are only a fault when something should have moved them: a module whose optimizer has
    stepped before but not since the last sample is resting by design (a GAN generator stepped once per
    n_critic critic steps, a phase that trains other parts), not stuck. One that no optimizer holds, or whose
    optimizer never stepped, is judged as before: that is the bug."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.last_weights: dict[tuple, tuple] = {}  # checksums at the last sample
        self.weight_hist: dict[tuple, tuple[float, float]] = {}  # (root, module) -> (first, last) weight norm
        # the owner collections of the optimizers stepped since the last sample / ever, by identity: a step
        # costs one dict entry per optimizer; they are expanded to (root, module) pairs on sampled steps only
        self.stepped_since: dict[int, Collection[tuple[str, str]]] = {}
        self.ever_stepped: dict[int, Collection[tuple[str, str]]] = {}
        self.read_at: dict[tuple, int] = {}  # key -> the sampled step its weights were last read
        self.last_sample: int | None = None  # the last sampled step read

    def floor(self, now: int) -> int:
        """Weights found bit-identical are dated from the step after their previous read (see observe): until the
        next sample, nothing after the last one is released."""
        return min(now, self.last_sample + 1) if self.last_sample is not None else now

    def observe(self, rec: StepRecord) -> None:
        for owners in rec.stepped:
            self.stepped_since[id(owners)] = owners  # (held here, so the id stays this collection's)
        if not rec.sampled:
            return  # weights are read on sampled steps only
        self.last_sample = rec.step
        self.ever_stepped.update(self.stepped_since)
        since = set().union(*self.stepped_since.values())
        resting = set().union(*self.ever_stepped.values()) - since
        self.stepped_since = {}
        th = self.th
        judged: dict[str, list[tuple]] = {}
        for (root, name), gs in rec.grads.items():
            if gs.weight_norm is None or (rec.active is not None and root not in rec.active):
                continue
            judged.setdefault(root, []).append((name, gs))
        for root, items in judged.items():
            model = self.board.models.get(root)
            rows = []
            for name, gs in items:
                info = model.modules.get(name) if model else None
                key = ("weights", root, name)
                first, last = self.weight_hist.get((root, name), (gs.weight_norm, gs.weight_norm))
                self.weight_hist[(root, name)] = (first, gs.weight_norm)
                ratio = (
                    gs.update_norm / gs.weight_norm
                    if gs.update_norm is not None and gs.weight_norm > 0 and math.isfinite(gs.update_norm)
                    else None
                )
                shrunk = first > 0 and gs.weight_norm < th.weight_collapse_frac * first
                machine = self.board.machines.get(key)
                keeps = machine is not None and COLLAPSING in (machine.state, machine.cand)
                collapsing = shrunk and (gs.weight_norm < last or keeps)
                if ratio is not None and gs.weight_norm < last:
                    ratio_big = None  # a step that shrinks the weights is a decay, not an oversized lr step
                else:
                    ratio_big = ratio
                cos = _cosine(gs)
                rows.append((name, gs, info, key, ratio, ratio_big, collapsing, first, last, cos))
            matrix = [r for r in rows if r[2] is not None and r[2].weight_ndim2]
            big = sum(1 for r in matrix if r[5] is not None and r[5] > th.update_oversized)
            small = sum(1 for r in matrix if r[6])
            up = sum(1 for r in matrix if r[9] is not None and r[9] > th.update_ascent)
            oversized_model = bool(matrix) and big >= th.weights_majority * len(matrix)
            collapsing_model = bool(matrix) and small >= th.weights_majority * len(matrix)
            ascending_model = bool(matrix) and up > th.weights_majority * len(matrix)
            for name, gs, info, key, ratio, ratio_big, collapsing, first, last, cos in rows:
                prev = self.last_weights.get(key)
                now = self.last_weights[key] = gs.checksum
                read, at = self.read_at.get(key), rec.step
                self.read_at[key] = rec.step
                grad = self.board.grad_since.pop((root, name), None)
                gmachine = self.board.machines.get(("grad", root, name))
                grad_ok = gmachine is None or (gmachine.state == GRAD_HEALTHY and gmachine.cand is None)
                # bit-identical: the same checksums and the same norm. The checksum is exact for almost every
                # change, but a sum of bit patterns cancels when two weights of one exponent move by opposite
                # amounts (a 2-class bias under Adam: softmax's gradients sum to 0, its steps are +-lr); the
                # norm sees that change, the checksum the updates too small for the norm's resolution
                if prev is not None and now is not None and grad is not None and now == prev and gs.weight_norm == last:
                    if not grad_ok:
                        continue  # a vanishing/absent gradient explains still weights better
                    if (root, name) in resting and info is not None and info.in_optimizer:
                        continue  # its optimizer did not step since the last sample: nothing was meant to move it
                    state = UNCHANGED
                    # bit-identical to the last read: no update took since the step after it (weights unfrozen
                    # between samples are first read at the next one; the updates in between changed nothing)
                    at = min(rec.step, read + 1) if read is not None else rec.step
                elif ascending_model and cos is not None and cos > th.update_ascent:
                    state = ASCENDING
                elif collapsing_model and collapsing:
                    state = COLLAPSING
                elif oversized_model and ratio_big is not None and ratio_big > th.update_oversized:
                    state = OVERSIZED
                elif (prev is not None and now is not None and grad is not None) or ratio:
                    state = UPDATING
                else:
                    continue  # nothing to compare, or nothing pushed it since
                if settled(self.board.machines, key, state):
                    continue  # nothing changes (most layers): no evidence to build
                metrics = {
                    "weight_norm": gs.weight_norm,
                    "first_weight_norm": first,
                    "weight_ratio": gs.weight_norm / first if first > 0 else None,
                    "update_norm": gs.update_norm,
                    "update_ratio": ratio,
                    "grad_rms": grad,
                    "layers_frac": {OVERSIZED: big, ASCENDING: up}.get(state, small) / len(matrix) if matrix else None,
                    "update_cos": cos,
                    "in_optimizer": float(bool(info and info.in_optimizer)),
                }
                self.board.feed(
                    key,
                    UPDATING,
                    state,
                    at,
                    metrics,
                    ETYPE,
                    "weights",
                    root,
                    name,
                )


def _cosine(gs: GradStats) -> float | None:
    """The cosine between a manual update and the gradient it followed (None: not measured, or no change)."""
    dot, size, grad = gs.update_dot, gs.update_norm, gs.norm
    if dot is None or not size or not grad or not math.isfinite(dot * size * grad):
        return None
    return dot / (size * grad)


# ---------------------------------------------------------------- rule


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
    held = _held_by(ctx, first[next(iter(first))].root if first else None) if outside and ctx.optimizers else ""
    if outside and ctx.optimizers:
        path = _attr_path(outside[0])
        tips.append(
            f"{', '.join(outside[:4])} get gradients but are not in any optimizer{' (' + held + ')' if held else ''}"
            ": pass model.parameters() (all of them) to the optimizer, and build it after the model is final "
            "(after wrapping it with adapters such as peft's get_peft_model, replacing a head, or unfreezing "
            f"layers), or add them to it: `optimizer.add_param_group({{'params': model{path}.parameters()}})`"
        )
    shown = f"{', '.join(names[:4])}{'…' if len(names) > 4 else ''}"
    conf = _spread_confidence(0.7, len(first), _still(ctx, evs, "unchanged"))
    tips.append("make sure optimizer.step() is called every iteration (after loss.backward())")
    h = _hyp(Kind.unchanged_weights, conf, origin, origin.step, "", evs, tips, names)
    if moved_then_stopped(h):  # stepped for a while, then stalled: its steps, not the loop, went to nothing
        e = first[next(iter(first))].metrics
        fell = ctx.loss_fell(LEARNED)
        ratios = [x.metrics.get("update_ratio") for x in first.values()]
        if fell and all(r is not None and math.isfinite(r) and r >= CYCLE_RATIO for r in ratios):
            h.confidence = min(h.confidence, NOTE)
            h.summary = (
                f"{shown} are bit-identical at samples from step {origin.step} on, yet the optimizer's step there "
                f"moved them by {e.get('update_ratio', 0):.3g} of their norm, far above their float resolution: "
                f"they move and come back, a cycle the steps repeat (SGD over a fixed data order once the fit has "
                f"converged), while the loss {fell}: a note, not a problem."
            )
            h.suggestions = ["nothing to fix: shuffle the data (DataLoader(shuffle=True)) to break the cycle"]
            return h
        h.summary = (
            f"Weights stop changing: {shown} stay bit-identical from step {origin.step} although they receive "
            f"gradients (RMS {e.get('grad_rms', 0):.3g}), after moving before (weight norm "
            f"{e.get('first_weight_norm', 0):.3g} at the start, {e.get('weight_norm', 0):.3g} now): the optimizer's "
            "steps no longer change them at their float resolution."
        )
        h.suggestions = [
            "the optimizer steps them, but its steps have shrunk below the weights' float resolution: fix what "
            "shrank them first (an earlier blow-up whose squared gradients Adam still averages, an lr decayed to ~0)"
        ]
        return h
    h.summary = (
        f"Weights never change: {shown} stay bit-identical from step {origin.step} although they receive gradients."
    )
    if held:
        h.summary += f" {', '.join(outside[:4])} {'is' if len(outside) == 1 else 'are'} in no optimizer: {held}."
    return h


def _held_by(ctx: Context, root: str | None) -> str:
    """Which optimizers train the model `root` and the modules they hold (model.json), in words: the
    optimizers that leave the other modules out."""
    model = next((m for m in ctx.models if m.get("name") == root), None)
    trains = [o for o in ctx.optimizers if not root or root in (o.get("roots") or [])]
    if model is None or not trains:
        return ""
    modules = model.get("modules") or {}
    inside = [n for n, i in modules.items() if isinstance(i, dict) and i.get("in_optimizer") and i.get("params")]
    kinds = ", ".join(str(o.get("type") or "optimizer") for o in trains)
    shown = ", ".join(inside[:4]) + ("…" if len(inside) > 4 else "")
    return f"{kinds} {'trains' if len(trains) == 1 else 'train'} {shown} of {root} only" if inside else ""


def _attr_path(module: str) -> str:
    """A dotted module name as Python reaches it from the model: `layers.0.fc` -> `.layers[0].fc`."""
    out = ""
    for part in module.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


FAMILY = Family("weights", WeightObserver, (unchanged_weights,))
