"""Residual health: each residual block's branch against its skip path, and the residual stream through the blocks
(read by residprobe.py on sampled steps: the RMS of a block's input, of output - input and of its output).

States (ResidualState), one debounced machine per block, one per model for the stream:
- dead_branch: the branch's RMS is below `resid_dead_ratio` of the skip's and has not grown (by `resid_grow`) over
  the last `resid_window` samples, while the block has parameters an optimizer trains. The trend decides, not
  the start: a zero-initialised branch (ReZero's alpha = 0, ResNet's zero_init_residual, Fixup, adaLN-zero)
  reads 0 at first and grows within a few steps; a branch multiplied by 0 (or a tiny constant), overwritten, or
  whose scale is outside the optimizer stays at 0;
- swamping: the branch is more than `resid_swamp_ratio` times the skip: the block no longer passes its input
  on, and deep stacks of such blocks blow the stream up (unscaled output projections, Post-LN removed);
- stream_growth: the stream's RMS after the model's last block is more than `resid_stream_growth` times its RMS
  before the first, and at least twice what it was at the first sample (deep Pre-LN stacks without scaling).
A block that contains other blocks (an nn.Sequential of blocks adds its input too) is judged through them only.
Post-LN blocks (the sum normalised) are recorded as a model fact (their placement) and not measured."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.base import Board, Family, Observer, _runs_floor, settled
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import _first_by_module, _hyp, _still
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind, ResidStats, ResidualState, StepRecord

S = ResidualState
ETYPE = EventType.residual_health.value
SITE = "residual"
FAULTS = (S.dead_branch.value, S.swamping.value, S.stream_growth.value)
NORMAL, DEAD_BRANCH = S.normal.value, S.dead_branch.value  # plain strings: compared per block per sampled step


def ratio_of(rs: ResidStats) -> float | None:
    """The branch's RMS over the skip's (None: not measured or not finite; inf: a zero skip under a branch)."""
    if rs.skip_rms is None or rs.branch_rms is None:
        return None
    if not (math.isfinite(rs.skip_rms) and math.isfinite(rs.branch_rms)):
        return None
    if rs.skip_rms == 0:
        return math.inf if rs.branch_rms > 0 else None
    return rs.branch_rms / rs.skip_rms


def classify_block(ratio: float, past: float | None, trains: bool, th: Thresholds) -> str:
    """Pure. ratio: branch RMS / skip RMS now; past: the ratio `resid_window` samples before (None: fewer
    samples so far, the trend is not known yet); trains: an optimizer holds the block's parameters."""
    if ratio > th.resid_swamp_ratio:
        return S.swamping.value
    if ratio < th.resid_dead_ratio and trains and past is not None:
        growing = ratio > th.resid_grow * past if past > 0 else ratio > 0
        if not growing:
            return S.dead_branch.value
    return NORMAL


def classify_stream(growth: float, first: float | None, samples: int, th: Thresholds) -> str:
    """Pure. growth: RMS after the last block / RMS before the first; first: that at the first sample."""
    if samples < th.resid_window or first is None or not math.isfinite(growth):
        return NORMAL
    if growth > th.resid_stream_growth and growth > 2 * first:
        return S.stream_growth.value
    return NORMAL


class ResidualObserver(Observer):
    """Per sampled step: each innermost residual block the probe measured, then each model's stream."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.ratios: dict[tuple[str, str], deque[float]] = {}  # (root, block) -> its latest ratios
        self.stream: dict[str, tuple[float, int]] = {}  # root -> (growth at its first sample, samples)
        self.low_since: dict[tuple[str, str], int] = {}  # (root, block) -> first step of its run below dead ratio

    def _trains(self, root: str, block: str) -> bool:
        model = self.board.models.get(root)
        if model is None:
            return True
        prefix = block + "."
        return any(
            info.params > 0 and info.in_optimizer
            for name, info in model.modules.items()
            if name == block or name.startswith(prefix)
        )

    def observe(self, rec: StepRecord) -> None:
        if not rec.resid:
            return
        # every block's dotted ancestors ("layers" and "layers.3" of "layers.3.mlp"): the stacks of blocks
        stacks = {(root, name[:i]) for root, name in rec.resid for i, c in enumerate(name) if c == "."}
        by_root: dict[str, list[tuple[str, ResidStats]]] = {}
        for (root, name), rs in rec.resid.items():
            if rec.active is not None and root not in rec.active:
                continue
            if (root, name) in stacks:
                continue  # a stack of blocks: judged through its blocks
            by_root.setdefault(root, []).append((name, rs))
            ratio = ratio_of(rs)
            if ratio is None:
                continue
            hist = self.ratios.setdefault((root, name), deque(maxlen=self.th.resid_window))
            past = hist[0] if len(hist) == self.th.resid_window else None
            hist.append(ratio)
            state = classify_block(ratio, past, self._trains(root, name), self.th)
            if ratio < self.th.resid_dead_ratio:
                self.low_since.setdefault((root, name), rec.step)
            else:
                self.low_since.pop((root, name), None)
            # a dead branch is dated where its ratio fell below the threshold (judged once the trend is known)
            at = self.low_since.get((root, name), rec.step) if state == DEAD_BRANCH else rec.step
            if settled(self.board.machines, ("resid", root, name), state):
                continue  # nothing changes (most steps): no evidence to build
            metrics = {
                "ratio": ratio,
                "past_ratio": past,
                "skip_rms": rs.skip_rms,
                "branch_rms": rs.branch_rms,
                "pre_ln": 1.0 if rs.norm == "pre" else 0.0,
            }
            self.board.feed(("resid", root, name), NORMAL, state, at, metrics, ETYPE, SITE, root, name)
        for root, blocks in by_root.items():
            self._observe_stream(rec.step, root, blocks)

    def floor(self, now: int) -> int:
        """A dead branch is dated back to where its ratio fell (see observe)."""
        return _runs_floor(self.board, "resid", self.low_since, S.dead_branch.value, now)

    def _observe_stream(self, step: int, root: str, blocks: list[tuple[str, ResidStats]]) -> None:
        model = self.board.models.get(root)
        order = {n: i for i, n in enumerate(model.order)} if model is not None else {}
        measured = [(n, rs) for n, rs in blocks if rs.skip_rms and rs.out_rms is not None]
        if len(measured) < 3:
            return
        measured.sort(key=lambda b: order.get(b[0], 10**6))
        first, last = measured[0][1], measured[-1][1]
        growth = last.out_rms / first.skip_rms  # type: ignore[operator]
        if not math.isfinite(growth):
            return
        start, samples = self.stream.get(root, (growth, 0))
        samples += 1
        self.stream[root] = (start, samples)
        state = classify_stream(growth, start, samples, self.th)
        if settled(self.board.machines, ("resid_stream", root), state):
            return  # nothing changes (most steps): no evidence to build
        metrics = {"growth": growth, "start_growth": start, "blocks": float(len(measured))}
        name = measured[-1][0]
        self.board.feed(("resid_stream", root), NORMAL, state, step, metrics, ETYPE, SITE, root, name)


# ---------------------------------------------------------------- rule


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:3])}{'…' if len(names) > 3 else ''}"


def _placements(ctx: Context) -> set[str]:
    """The norm placements of the residual blocks the run saw (model.json facts)."""
    return {
        str(b.get("norm"))
        for m in ctx.models
        for b in ((m.get("facts") or {}).get("residual_blocks") or {}).values()
        if isinstance(b, dict)
    }


def _scaling_tips(ctx: Context) -> list[str]:
    tips = [
        "scale each residual branch: initialise its output projection with std / sqrt(2 * n_layers) (GPT-2), or "
        "multiply the branch by a learnable per-channel gain initialised small (LayerScale, 1e-5..1e-1)",
    ]
    placements = _placements(ctx)
    if not placements or placements != {"pre"}:  # never propose what every block already has
        tips.append("normalise the branch's input (Pre-LN: norm_first=True for torch.nn's Transformer layers)")
    return tips


def residual_imbalance(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[ETYPE], to=FAULTS)
    if not evs:
        return None
    by_state = {s: [e for e in evs if e.to == s] for s in FAULTS}
    state = min((s for s in FAULTS if by_state[s]), key=lambda s: min(e.step for e in by_state[s]))
    picked = by_state[state]
    first = _first_by_module(picked)
    ordered = sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))
    origin = ordered[0]
    names = [e.module or "" for e in sorted(first.values(), key=ctx.order)]
    persistent = _still(ctx, picked, state)
    m: dict[str, Any] = origin.metrics
    n = len(first)
    if state == S.dead_branch.value:
        summary = (
            f"Residual branch that adds nothing: in {_listed(names)} the branch's RMS is "
            f"{m.get('ratio') or 0:.2g} of its skip path's from step {origin.step} and does not grow while its "
            f"parameters train: the block passes its input through unchanged; {n} block(s)."
        )
        tips = [
            "check the branch's output is added to the skip (not overwritten, not multiplied by 0 or a tiny "
            "constant), its initialisation, and its learning rate: a zero-initialised scale (ReZero, LayerScale) "
            "must be a trainable parameter that the optimizer holds",
        ]
        conf = min(0.9, 0.6 + 0.08 * min(n, 3)) * (0.6 + 0.4 * persistent)
    elif state == S.swamping.value:
        summary = (
            f"Residual branch swamps its skip path: in {_listed(names)} the branch's RMS is "
            f"{m.get('ratio') or 0:.3g}x the block input's from step {origin.step}, so the skip connection no "
            f"longer carries the signal; {n} block(s)."
        )
        tips = _scaling_tips(ctx)
        conf = min(0.85, 0.55 + 0.08 * min(n, 3)) * (0.6 + 0.4 * persistent)
    else:
        summary = (
            f"Residual stream grows block after block: its RMS after {origin.module} is "
            f"{m.get('growth') or 0:.3g}x its RMS before the first block at step {origin.step} "
            f"({m.get('start_growth') or 0:.3g}x at the first sample), and rising over training."
        )
        tips = _scaling_tips(ctx)
        conf = 0.6 * (0.6 + 0.4 * persistent)
    return _hyp(Kind.residual_imbalance, conf, origin, origin.step, summary, picked, tips, names)


FAMILY = Family("residual", ResidualObserver, (residual_imbalance,))
