"""Non-finite values: NaN/Inf anywhere. It has no sites of its own: every family's classifier reports a
non-finite value as the state `non_finite`, which skips the debounce and is written at once as a `non_finite`
event (a data_anomaly for the input and targets); the rule finds where it first appeared."""

from __future__ import annotations

from neuraldbg_cli.reason.families.advice import adam_eps_advice
from neuraldbg_cli.reason.families.base import Family
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import _hyp
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind


def non_finite(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(to=["non_finite"])
    if not evs:
        return None
    onset = min(e.step for e in evs)
    same = [e for e in evs if e.step == onset]
    acts = [e for e in same if e.type == EventType.non_finite.value and e.site in ("output", "activation")]
    grads = [e for e in same if e.site == "gradient"]
    # the backward starts at the loss: a loss already non-finite on a finite forward is where the NaN/Inf
    # appeared (the gradients are its backward), not the last layer the backward reached first
    loss = next((e for e in same if e.site == "loss"), None)
    origin = (
        min(acts, key=ctx.order)
        if acts
        else loss
        if loss is not None
        else max(grads, key=ctx.order)
        if grads
        else same[0]
    )
    where = {"output": "output", "activation": "activation", "gradient": "gradient", "loss": "loss"}.get(
        origin.site or "", "value"
    )
    name = origin.module or ("the input data" if origin.site in ("input", "target") else "the loss")
    in_loss = origin is loss and not acts
    summary = (
        f"NaN/Inf first appears in the loss at step {onset}, on finite model outputs: the loss's own computation "
        f"made it, and its backward carried it into every gradient."
        if in_loss and origin.module is None
        else f"NaN/Inf first appears in the {where} of {name} at step {onset}."
    )
    tips = (
        [
            "the loss is non-finite although the model's outputs are finite: check the loss's arguments (a target "
            "given probability 0, sequence lengths that make the target impossible, e.g. CTC input lengths shorter "
            "than the targets need; CTCLoss(zero_infinity=True) drops such samples)"
        ]
        if in_loss
        else []
    )
    tips += [
        "guard log/sqrt/division: torch.log(x.clamp_min(1e-8)), torch.sqrt(x + 1e-8), divide by (std + 1e-5)",
        "run a few steps with torch.autograd.detect_anomaly() to see the op",
        "lower the learning rate / clip gradients if values grew before the NaN",
    ]
    chain = [e.module or e.site or "" for e in sorted(evs, key=lambda e: (e.step, ctx.order(e)))][:12]
    grew = any(
        e.step <= onset for e in ctx.select(types=[EventType.gradient_health_transition.value], to=["exploding"])
    )
    fixes = [fix("clip_grad_norm", tips[-1], max_norm=1.0)] if grew else []
    eps_tips, eps_fixes = adam_eps_advice(ctx)  # the specific cause first
    tips, fixes = eps_tips + tips, eps_fixes + fixes
    return _hyp(Kind.non_finite, 0.9, origin, onset, summary, evs, tips, list(dict.fromkeys(chain)), fixes)


FAMILY = Family("non_finite", None, (non_finite,))
