"""Advice shared by the rules. Learning rate: lower it for a run it drives too hard, raise it only for a loss
that does not move under a learning rate below its optimizer's usual range. Warm-up for Post-LN transformers.
Re-initialisation for a symptom present before any update. Adam's eps where float16 loses it."""

from __future__ import annotations

from typing import Any

from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.fixspec import fix, lr_scale
from neuraldbg_cli.trace.events import EventType
from neuraldbg_cli.vocab import HE_INIT_TYPES, INIT_TYPES, usual_lr


def lower_lr(ctx: Context, at: int | None = None) -> list[str]:
    """Advice for a run the learning rate may drive too hard (divergence, explosion, oscillation, NaN, dead
    units): a value always below the current one (the optimizer's usual value when far above it, else one
    order of magnitude down), or the words "lower the learning rate" when no optimizer was seen (with the
    update's sign unless the sampled manual updates were measured descending: an ascent climbs the same way). `at`: the
    symptom's onset, so that the lr quoted is the one in force while it developed (see Context.peak_lr)."""
    peak = ctx.peak_lr(at)
    if peak is None:
        descends = any(
            isinstance(c := e.metrics.get("update_cos"), float) and c < 0
            for e in ctx.select(types=[EventType.parameter_update.value])
        )  # the sampled updates were measured going down the gradient: the sign is right
        sign = "" if descends else ", and check that it subtracts the gradient: p -= lr * p.grad"
        return [
            "lower the learning rate (no torch.optim optimizer was seen: make the manual update's step "
            f"size smaller, e.g. divide it by 10{sign})"
        ]
    opt, lr = peak
    if lr < 0:
        return [f"{opt} has a negative learning rate (lr={lr:g}): it climbs the loss; use a positive one"]
    if lr == 0:
        return []  # nothing moves: a learning rate of 0 cannot be what drives this
    targets = _lower_targets(ctx, opt, lr)
    tried = f"try {targets[0]:.3g}" + (f", or {targets[1]:.3g} ({opt}'s usual value)" if len(targets) > 1 else "")
    return [f"lr={lr:g} with {opt}{_as_it_acted(ctx, lr, at)}: {tried}"]


def _as_it_acted(ctx: Context, lr: float, at: int | None) -> str:
    """The lr as the symptom met it, beside the peak quoted: its value when the symptom began (if lower) and
    the schedule's shape ("rises from 1e-05 to 1 by step 20"), which may itself be the cause."""
    said = []
    began = ctx.peak_lr(at, onward=False)
    if at is not None and began is not None and abs(began[1]) < abs(lr):
        said.append(f"{began[1]:g} when it began at step {at}")
    shape = ctx.lr_shape()
    if shape:
        said.append(f"its schedule {shape}")
    return f" ({'; '.join(said)})" if said else ""


def _lower_targets(ctx: Context, opt: str, lr: float) -> list[float]:
    """One order of magnitude down; from far above the usual range, the optimizer's usual value, after one
    order down when that already lands inside the range. Why both: from 50x above it, the usual value cures
    but learns slowly at first, a 10x cut often cures at once; which one holds is what verify tests."""
    usual, th = usual_lr(opt), ctx.thresholds
    down = lr * th.lr_lower_factor
    if lr <= usual * th.lr_usual_span:
        return [down]
    return [down, usual] if down <= usual * th.lr_usual_span else [usual]


def lower_lr_fix(ctx: Context, at: int | None = None) -> list[dict[str, Any]]:
    """lower_lr's advice as a fix (lr_scale to the value it names); none without an optimizer or a positive lr."""
    peak = ctx.peak_lr(at)
    if peak is None or peak[1] <= 0:
        return []
    text = lower_lr(ctx, at)[0]
    return [lr_scale(peak[1], float(f"{target:.3g}"), text) for target in _lower_targets(ctx, *peak)]


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


def reinit_fix(
    ctx: Context, first: Event, text: str, init: str | None = None, scale: str | None = None
) -> list[dict[str, Any]]:
    """`reinit` of the layer type where a symptom began, for one present at step 0: before any update acted,
    only the init (or the data) can cause it, and a new init is what tests the first. The layer type is the
    event's module's, or that of the nearest weight layer before it in the forward order (an activation
    module). `scale` "small" / "large": only when some layer of that type in the model was measured that far
    off the scale init schemes set (model.json's init_gain), so a symptom the init does not explain (a
    functional sigmoid, unnormalised inputs) gets no reinit. `init`: He for a model with ReLU-family
    activation modules, else Glorot."""
    found = _init_layer(ctx, first.root, first.module) if first.step == 0 else None
    if found is None:
        return []
    layer, gains = found
    th = ctx.thresholds
    off = {"small": any(g < th.init_gain_low for g in gains), "large": any(g > th.init_gain_high for g in gains)}
    if scale is not None and not off[scale]:
        return []
    if init is None:
        init = "kaiming" if HE_INIT_TYPES & set(ctx.module_types().values()) else "xavier"
    return [fix("reinit", text, layer=layer, init=init)]


def _init_layer(ctx: Context, root: str | None, module: str | None) -> tuple[str, list[float]] | None:
    """The type of the weight layer at or before `module` in its model's forward order, and the init_gain of
    every layer of that type in the model."""
    for m in ctx.models:
        order, modules = m.get("order") or [], m.get("modules") or {}
        if m.get("name") != root or module not in order:
            continue
        for name in reversed(order[: order.index(module) + 1]):
            layer = (modules.get(name) or {}).get("type")
            if layer in INIT_TYPES:
                infos = [i for i in modules.values() if isinstance(i, dict) and i.get("type") == layer]
                gains = [float(i["init_gain"]) for i in infos if isinstance(i.get("init_gain"), (int, float))]
                return str(layer), gains
    return None


FLOAT16_TINY = 2.0**-24  # float16's smallest positive value: an eps below it is 0 (or that) in float16


def adam_eps_advice(ctx: Context) -> tuple[list[str], list[dict[str, Any]]]:
    """An Adam-family optimizer of float16 parameters (its state is float16 too) with an eps float16 cannot
    hold: where the second moment is 0 or underflows (a gradient of 0, or below ~1e-3 squared), the update
    is m / (0 + 0) = NaN or m / tiny = Inf. Tips and the `adam_eps` fix (1e-4, the value used for pure
    float16 training), or nothing."""
    for opt in ctx.optimizers:
        name, dtypes = str(opt.get("type") or ""), opt.get("dtypes") or []
        eps = [g.get("eps") for g in opt.get("groups") or [] if isinstance(g, dict)]
        small = [e for e in eps if isinstance(e, (int, float)) and not isinstance(e, bool) and 0 <= e < FLOAT16_TINY]
        if "adam" in name.lower() and "float16" in dtypes and small:
            text = (
                f"{name} with eps={min(small):g} on float16 parameters: float16 cannot hold it (smallest 6e-8), so "
                f"a weight whose squared gradient underflows gets m / 0 = NaN/Inf at its update; use eps=1e-4, or "
                f"keep float32 weights and train under torch.autocast with a GradScaler"
            )
            return [text], [fix("adam_eps", text, value=1e-4)]
    return [], []
