"""Non-finite values: NaN/Inf anywhere. It has no sites of its own: every family's classifier reports a
non-finite value as the state `non_finite`, which skips the debounce and is written at once as a `non_finite`
event (a data_anomaly for the input and targets); the rule finds where it first appeared."""

from __future__ import annotations

from neuraldbg_cli.events import EventType, Hypothesis, Kind
from neuraldbg_cli.families.advice import adam_eps_advice
from neuraldbg_cli.families.base import Context, Family, _hyp
from neuraldbg_cli.fixspec import fix


def non_finite(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(to=["non_finite"])
    if not evs:
        return None
    onset = min(e.step for e in evs)
    same = [e for e in evs if e.step == onset]
    acts = [e for e in same if e.type == EventType.non_finite.value and e.site in ("output", "activation")]
    grads = [e for e in same if e.site == "gradient"]
    origin = (
        min(acts, key=ctx.order)
        if acts
        else max(grads, key=ctx.order)
        if grads
        else next((e for e in same if e.site == "loss"), same[0])
    )
    where = {"output": "output", "activation": "activation", "gradient": "gradient", "loss": "loss"}.get(
        origin.site or "", "value"
    )
    name = origin.module or ("the input data" if origin.site in ("input", "target") else "the loss")
    summary = f"NaN/Inf first appears in the {where} of {name} at step {onset}."
    tips = [
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
