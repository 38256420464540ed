"""No alarm without harm: a statistic that only looks unusual while the run trains well is a note.

Some findings are wrong whatever the loss does (a misused loss call, a NaN, a layer in the wrong mode, weights
no optimizer moves); others are statistics whose harm is what they do to training: a gradient that grew (from
near zero, as attention keys and adapter factors do by construction), inputs on a raw scale. Those count
(confidence >= the presence threshold) only when the run shows harm: the loss stalls, diverges, oscillates or
turns non-finite, or does not improve, or another counted problem is present (which they may explain). "Improved"
compares the loss's start (its first value, unless the first few are lower) with the mean of its latest window:
the expected loss training minimises, which a loss swinging between 0 and 1e7 does not lower. Under
an optimizer that normalises each step (Adam's family, RMSprop, Lion), a gradient's size does not size the
update: large gradients count only with oversized updates, a blow-up of the loss or a NaN. Pure."""

from __future__ import annotations

from neuraldbg_cli.reason.families.causes import summed_only
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.settings import oversized_updates
from neuraldbg_cli.trace.events import Hypothesis, Kind
from neuraldbg_cli.vocab import adaptive

NOTE = 0.45  # what a harmless statistic is capped at: listed, with its advice, below what --fail-on reads
IMPROVED = 0.1  # the loss fell by at least this fraction of its starting size: it trains
LOSS_HARM = {Kind.loss_plateau, Kind.loss_divergence, Kind.unstable_loss, Kind.non_finite}
STATISTICS = {Kind.exploding_gradient, Kind.data_anomaly}


def weigh(hyps: list[Hypothesis], ctx: Context, presence: float) -> list[Hypothesis]:
    """Caps the harmless statistics among `hyps` at NOTE (in place; returns them)."""
    counted = [h for h in hyps if h.confidence >= presence]
    trained = ctx.loss_fell(IMPROVED)
    loss_harm = any(h.kind in LOSS_HARM for h in counted)
    scale_harm = any(h.kind in LOSS_HARM - {Kind.loss_plateau} for h in counted)  # what a scale can drive
    other_harm = any(h.kind not in STATISTICS for h in counted)
    for h in counted:
        if summed_only(h) and not scale_harm:
            why = "a loss summed over many terms only scales the gradients, and the loss neither diverges nor swings"
            h.confidence = min(h.confidence, NOTE)
            h.summary += f" Training is not harmed ({why}): a note, not a problem."
            continue
        if h.kind not in STATISTICS or _defect(h):
            continue
        if h.kind == Kind.exploding_gradient and _normalised_steps(ctx, h) and not loss_harm:
            why = (
                f"its optimizer ({_optimizer_of(ctx, h)}) normalises each step, the updates stayed in scale and the "
                f"loss {trained or 'shows no harm'}"
            )
        elif trained is not None and not other_harm:
            why = f"the loss {trained}"
        else:
            continue
        h.confidence = min(h.confidence, NOTE)
        h.summary += f" Training is not harmed ({why}): a note, not a problem."
    return hyps


def _defect(h: Hypothesis) -> bool:
    """Wrong whatever the loss does: NaN/Inf in the data or the gradients."""
    return any(e.get("to") == "non_finite" for e in h.evidence)


def _optimizer_of(ctx: Context, h: Hypothesis) -> str:
    types = sorted({str(o.get("type")) for o in ctx.optimizers if h.origin.root in (o.get("roots") or [h.origin.root])})
    return "/".join(types) or "optimizer"


def _normalised_steps(ctx: Context, h: Hypothesis) -> bool:
    """Every optimizer that trains the hypothesis's model normalises its steps, and no update was oversized (RMSprop's
    first steps, large by construction, aside)."""
    opts = [o for o in ctx.optimizers if h.origin.root in (o.get("roots") or [h.origin.root])]
    if not opts or not all(adaptive(str(o.get("type") or "")) for o in opts):
        return False
    return not oversized_updates(ctx)
