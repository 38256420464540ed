"""Learning-rate advice shared by the rules: lower it for a run it drives too hard, raise it only for a loss
that does not move under a learning rate below its optimizer's usual range."""

from __future__ import annotations

from typing import Any

from neuraldbg_cli.families.base import Context
from neuraldbg_cli.fixspec import fix, lr_scale
from neuraldbg_cli.vocab import usual_lr


def lower_lr(ctx: Context, at: int | None = None) -> list[str]:
    """Advice for a run the learning rate may drive too hard (divergence, explosion, oscillation, NaN, dead
    units): a value always below the current one (the optimizer's usual value when far above it, else one
    order of magnitude down), or the words "lower the learning rate" when no optimizer was seen. `at`: the
    symptom's onset, so that the lr quoted is the one in force while it developed (see Context.peak_lr)."""
    peak = ctx.peak_lr(at)
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
    target = _lower_target(ctx, opt, lr)
    return [f"lr={lr:g} with {opt}: try {target:.3g}"]


def _lower_target(ctx: Context, opt: str, lr: float) -> float:
    usual, th = usual_lr(opt), ctx.thresholds
    return usual if lr > usual * th.lr_usual_span else lr * th.lr_lower_factor


def lower_lr_fix(ctx: Context, at: int | None = None) -> list[dict[str, Any]]:
    """lower_lr's advice as a fix (lr_scale to the value it names); none without an optimizer or a positive lr."""
    peak = ctx.peak_lr(at)
    if peak is None or peak[1] <= 0:
        return []
    target = _lower_target(ctx, *peak)
    return [lr_scale(peak[1], float(f"{target:.3g}"), lower_lr(ctx, at)[0])]


def plateau_lr_fix(ctx: Context, at: int | None = None) -> list[dict[str, Any]]:
    """plateau_lr's advice as a fix: lr_scale up to the usual value, or down as lower_lr_fix."""
    peak = ctx.peak_lr(at)
    if peak is None or peak[1] <= 0:
        return []
    opt, lr = peak
    usual, span = usual_lr(opt), ctx.thresholds.lr_usual_span
    if lr > usual * span:
        return lower_lr_fix(ctx, at)
    if lr < usual / span:
        return [lr_scale(lr, usual, plateau_lr(ctx, at)[0])]
    return []


def plateau_lr(ctx: Context, at: int | None = None) -> list[str]:
    """Learning-rate advice for a loss that does not move: raise it only when it is below its optimizer's
    usual range, lower it when far above it (a huge lr also pins a loss: dead or saturated units), else none."""
    peak = ctx.peak_lr(at)
    if peak is None:
        return []
    opt, lr = peak
    usual, span = usual_lr(opt), ctx.thresholds.lr_usual_span
    if lr == 0:
        return [zero_lr(opt, usual)]
    if lr < 0 or lr > usual * span:
        return lower_lr(ctx, at)
    if lr < usual / span:
        return [
            f"lr={lr:g} with {opt} is below its usual range ({usual / span:g} to {usual * span:g}): raise the "
            f"learning rate toward {usual:g}"
        ]
    return []


def zero_lr(opt: str, usual: float) -> str:
    return f"{opt} has lr=0: nothing can change; set a real learning rate (e.g. {usual:g} for {opt})"


def _lr_above_usual(ctx: Context, at: int | None = None) -> bool:
    peak = ctx.peak_lr(at)
    return peak is not None and peak[1] > usual_lr(peak[0]) * ctx.thresholds.lr_usual_span


def postln_warmup(ctx: Context) -> list[str]:
    """A Post-LN transformer (norm after the residual sum) trained by Adam-like optimizers without a warm-up:
    its first full-size updates wreck the stack (the gradients near the output are large at initialisation)
    and it stays at chance. It has residual connections already: the remedies are a warm-up or Pre-LN."""
    if "post" not in ctx.norm_placements() or ctx.warms_up() is not False:
        return []
    opts = sorted({str(o.get("type")) for o in ctx.optimizer_facts() if "adam" in str(o.get("type")).lower()})
    if not opts:
        return []
    return [
        f"Post-LN transformer layers (norm after the residual sum, torch.nn's default norm_first=False) trained "
        f"with {'/'.join(opts)} and no warm-up: add a learning-rate warm-up (e.g. linear over the first 5-10% of "
        f"steps) or use norm_first=True (Pre-LN)"
    ]


def postln_warmup_fix(ctx: Context) -> list[dict[str, Any]]:
    """postln_warmup's advice as a fix (a warm-up)."""
    return [fix("warmup", text) for text in postln_warmup(ctx)]
