"""Gradients: a module's gradient RMS is healthy, vanishing, exploding, absent or non-finite.

Judged per step on every model that trained in it, each matrix layer against the largest of its model (and,
in a repeated stack, against the same layer in the other blocks): see gradient_observer.py. This module is
the family: its rules, what those states mean and what to change."""

from __future__ import annotations

from neuraldbg_cli.reason.families.activations import _blowup_phrase, _blowups
from neuraldbg_cli.reason.families.advice import lower_lr, lower_lr_fix, postln_warmup, postln_warmup_fix, reinit_fix
from neuraldbg_cli.reason.families.base import Family
from neuraldbg_cli.reason.families.causes import RIVAL_WINS
from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.families.evidence import (
    _first_by_module,
    _hyp,
    _model_has,
    _names,
    _origin_of,
    _site_name,
    _spread_confidence,
    _still,
)
from neuraldbg_cli.reason.families.gradient_observer import FADE_SITE, GradientObserver
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind
from neuraldbg_cli.vocab import RNN_TYPES, SATURATING_TYPES, is_norm, is_residual


def _rival_wins(ctx: Context, fade: Event) -> tuple[str, list[Event]] | None:
    """A faded model trained against another in the same steps (a game: GAN, actor-critic) whose opponent's
    loss fell toward 0 (to a tenth of its early level or less): the opponent wins outright, and the loss that
    trains the faded model is flat where the opponent is sure (G's minimax loss log(1 - D(G(z))) once
    D(G(z)) -> 0). Returns the opponent's phrase and its saturated output activations (a sure Sigmoid)."""
    ratio = fade.metrics.get("rival_loss_ratio")
    if not fade.metrics.get("game") or ratio is None or ratio > RIVAL_WINS:
        return None
    sat = [
        e
        for e in ctx.select(types=[EventType.activation_regime_shift.value], to=["saturated"])
        if e.root != fade.root and ctx.output_side(e.root, e.module)
    ]
    rivals = sorted({e.root for e in sat if e.root}) or ["the other model"]
    return "/".join(rivals), sat


def _fade_hypothesis(ctx: Context, fades: list[Event], layers: list[Event]) -> Hypothesis:
    """A whole model's gradient faded over time while its loss did not improve (see ModelFade); in a game
    whose opponent wins outright, said as that."""
    origin = min(fades, key=lambda e: e.step)
    m = origin.metrics
    model = origin.root or "the model"
    fell = (
        f"its whole gradient norm fell {m.get('fade') or 0:.3g}x from its early level "
        f"({m.get('early_norm') or 0:.3g} -> {m.get('grad_norm') or 0:.3g}) from step {origin.step}, while its "
        f"loss did not improve ({m.get('loss_early') or 0:.4g} -> {m.get('loss_now') or 0:.4g})"
    )
    conf = _spread_confidence(0.7, 2, _still(ctx, fades, "vanishing"))
    win = _rival_wins(ctx, origin)
    if win is not None:
        rival, sat = win
        sure = f" (its output {sat[0].module} saturated from step {sat[0].step})" if sat else ""
        summary = (
            f"The discriminator wins outright: {rival}'s loss fell toward 0 (to {m['rival_loss_ratio']:.2g}x its "
            f"early level){sure}, so {model}'s gradient vanished: {fell}."
        )
        tips = [
            f"train {model} with the non-saturating loss -log D(G(z)) (BCE of D(G(z)) against the *real* label), "
            f"not by minimising log(1 - D(G(z))), which is flat where D is sure",
            "return D's raw logits and use nn.BCEWithLogitsLoss instead of a final Sigmoid + nn.BCELoss",
            f"balance the two: a {rival} learning rate no larger than {model}'s (TTUR: tune the ratio, not a 10x "
            f"head start), or fewer {rival} updates per {model} update",
            "one-sided label smoothing (real labels 0.9) and spectral norm on D's layers "
            "(torch.nn.utils.parametrizations.spectral_norm)",
        ]
        return _hyp(Kind.vanishing_gradient, max(conf, 0.8), origin, origin.step, summary, fades + sat, tips)
    tips = [
        "the whole network stopped receiving gradient: look for what flattens its output (a saturated output "
        "layer, weights shrinking under weight decay, a loss that is flat where the model is)",
        "check the loss: a loss written so that its gradient vanishes once the model is wrong and sure "
        "(e.g. log(1 - p) minimised) stops training",
    ]
    summary = f"{model}'s whole gradient faded over time (all its layers together): {fell}."
    return _hyp(Kind.vanishing_gradient, conf, origin, origin.step, summary, fades + layers, tips)


def vanishing_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["vanishing"])
    if not evs:
        return None
    fades = [e for e in evs if e.site == FADE_SITE]
    evs = [e for e in evs if e.site != FADE_SITE]
    if fades and (not evs or any(_rival_wins(ctx, e) for e in fades)):
        return _fade_hypothesis(ctx, fades, evs)
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    chain = [e.module or "" for e in sorted(first.values(), key=ctx.order, reverse=True)]
    conf = _spread_confidence(0.62, len(first), _still(ctx, evs, "vanishing"))
    ratio = origin.metrics.get("ratio_to_max")
    types = ctx.module_types()
    # a model's final Sigmoid/Tanh is its output, not a hidden activation to swap (see saturated_activation)
    outputs = {n for m in ctx.models for n in (m.get("order") or []) if ctx.output_side(m.get("name"), n)}
    sat = sorted(n for n, t in types.items() if t in SATURATING_TYPES and n not in outputs)
    tips = postln_warmup(ctx)
    fixes = postln_warmup_fix(ctx)
    if sat:
        kinds = "/".join(sorted({types[n] for n in sat}))
        tips.append(
            f"{kinds} activations ({', '.join(sat[:3])}{'…' if len(sat) > 3 else ''}) have derivative "
            f"<= 0.25 (sigmoid) or saturate: switch to ReLU/GELU"
        )
        fixes.append(fix("activation_swap", tips[-1], to="ReLU"))
    elif any(not ctx.output_side(e.root, e.module) for e in ctx.select(to=["saturated"])):
        tips.append("saturating functional activations (torch.sigmoid/tanh) squash gradients: switch to ReLU/GELU")
    rnn = any(t in RNN_TYPES for t in types.values())
    # nothing else to blame (Post-LN, saturating activations, a recurrence, a norm that rescales): from step 0,
    # the init's scale is what shrinks the gradient layer after layer (reinit_fix)
    init_alone = not (tips or rnn or _model_has(ctx, is_norm))
    if rnn:
        tips.append("plain RNN over long sequences: use LSTM/GRU, shorter truncated BPTT, or attention")
    tips.append("initialise with Xavier/He (nn.init.kaiming_normal_ for ReLU, xavier_uniform_ for tanh)")
    if init_alone:
        fixes += reinit_fix(ctx, min(evs, key=lambda e: (e.step, ctx.order(e))), tips[-1], scale="small")
    if not _model_has(ctx, is_norm):  # suggestions fit the model that was seen
        tips.append("add normalisation (LayerNorm/BatchNorm) between layers")
    if len(types) >= 8 and not _model_has(ctx, is_residual) and not ctx.norm_placements():  # blocks have skips
        tips.append("add residual (skip) connections so gradients reach the first layers")
    where = f"{ratio:.1e}× the largest layer's gradient" if ratio else "almost no gradient"
    summary = (
        f"Gradients vanish toward the input: {origin.module or 'the model root own parameters'} gets {where} "
        f"from step {origin.step}; "
        f"{len(first)} layer(s) affected, so the early layers barely learn."
    )
    return _hyp(Kind.vanishing_gradient, conf, origin, origin.step, summary, evs, tips, chain, fixes)


CLIP_TIP = "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step()"
# An explosion already there at step 0 comes before any update: the learning rate cannot have made it (a smaller
# one only tames what follows). The init is named when its scale was measured too large (reinit_fix); else the
# forward pass multiplies the signal up, by its weights, its inputs or its structure
FORWARD_SCALE = (
    "the gradients are this large before any update, so the forward pass scales the signal up: check the "
    "initialisation and the input scale, sums over many terms that should be means (an unnormalised adjacency "
    "or pooling, a loss summed over elements) and residual branches added without normalisation"
)


def exploding_gradient(ctx: Context) -> Hypothesis | None:
    """Exploding gradients; without gradient events, an activation blow-up is the same failure seen in the
    forward pass (weights grown, by a large lr or init, until every layer multiplies its input up), so it
    stands for it unless the loss diverges, which then carries it as evidence."""
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["exploding"])
    blow = _blowups(ctx)
    at = min((e.step for e in evs or blow), default=None)
    clip, init = CLIP_TIP, "check the initialisation scale (default or Xavier/He, not larger)"
    if not ctx.optimizers:  # a manual update: clip before it, not before an optimizer.step() there is none of
        clip = clip.replace("before optimizer.step()", "before the manual update")
    fixes = lower_lr_fix(ctx, at) + [fix("clip_grad_norm", clip, max_norm=1.0)]
    reinit = []
    if evs or blow:  # from step 0, before any update: the init's scale (reinit), not the training
        reinit = reinit_fix(ctx, min(evs or blow, key=lambda e: (e.step, ctx.order(e))), init, scale="large")
        fixes += reinit
    if at == 0:  # before any update: no learning rate made them, the forward pass's scale did (see FORWARD_SCALE)
        tips = [init if reinit else FORWARD_SCALE, clip, *lower_lr(ctx, at)]
    else:
        tips = [*lower_lr(ctx, at), clip, init]
    if not evs:
        if not blow or ctx.select(types=[EventType.optimizer_instability.value], to=["diverging"]):
            return None
        origin, phrase = _blowup_phrase(ctx, blow)
        first = _first_by_module(blow)
        chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
        conf = _spread_confidence(0.62, len(first), _still(ctx, blow, "anomalous"))
        summary = f"Values explode in the forward pass: {phrase}."
        return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, blow, tips, chain, fixes)
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))  # input side: where large init / high lr compounds most
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(0.66, len(first), max(_still(ctx, evs, "exploding"), 0.7))
    rms = origin.metrics.get("rms")
    summary = (
        f"Gradients explode: {_site_name(origin)} reaches gradient RMS {rms:.3g} at step {origin.step}"
        if rms
        else f"Gradients explode from step {origin.step} at {_site_name(origin)}"
    )
    summary += f"; {len(first)} layer(s) affected."
    if blow:
        summary += f" Also {_blowup_phrase(ctx, blow)[1]}."
    return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, evs + blow, tips, chain, fixes)


def no_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["absent"])
    if not evs:
        return None
    first = _first_by_module(evs)
    tips = [
        "look for .detach(), .data, .item() or torch.no_grad() on the path from these parameters to the loss",
        "check that the module's output is actually used in the loss (not overwritten or multiplied by 0)",
    ]
    # a gradient that comes back was not cut off (detach, no_grad): whole layers whose activations saturate
    # or die under a wild optimizer lose it now and then, and a dynamic net skips a layer on some steps; that
    # is a symptom, ranked below its cause. A layer cut off for good beside them is judged on its own
    back = {
        (e.root, e.module)
        for e in ctx.select(types=[EventType.gradient_health_transition.value])
        if e.from_ == "absent"
    } & set(first)
    never = [e for e in evs if (e.root, e.module) not in back]
    origin = _origin_of(ctx, [first[k] for k in first if k not in back] or list(first.values()), output_side=True)
    names = _names(evs)
    cut, now_and_then = _names(never), _names([e for e in evs if (e.root, e.module) in back])
    if cut:
        one = len(cut) == 1
        summary = (
            f"{_listed(cut)} never receive{'s' if one else ''} a gradient (.grad stays None or zero) from step "
            f"{origin.step}."
        )
        if now_and_then:
            loses = "loses its" if len(now_and_then) == 1 else "lose theirs"
            summary += (
                f" {_listed(now_and_then)} {loses} now and then and get{'s' if len(now_and_then) == 1 else ''} it back."
            )
        conf = _spread_confidence(0.66, len(cut), _still(ctx, never, "absent"))
    else:
        summary = (
            f"{_listed(names)} lose their gradient (.grad exactly zero or None) from step {origin.step}, "
            f"and get it back now and then."
        )
        conf = _spread_confidence(0.66, len(first), _still(ctx, evs, "absent")) * 0.5
    return _hyp(Kind.no_gradient, conf, origin, origin.step, summary, evs, tips, names)


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:4])}{'…' if len(names) > 4 else ''}"


FAMILY = Family("gradients", GradientObserver, (vanishing_gradient, exploding_gradient, no_gradient))
