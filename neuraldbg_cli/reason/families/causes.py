"""The causal table the reasoner ranks with: which kinds can cause which (one table, upstream first)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind


@dataclass(frozen=True)
class Causes:
    """What one kind can cause, and when its onset can be trusted. A link is a claim about the run: each
    effect says by which mechanism (MECHANISMS) and, where the mechanism needs it, on which condition of the
    pair (CONDITIONS: the cause's evidence must show it can act that way, the effect's that it is that kind of
    damage)."""

    effects: tuple[Kind, ...]
    dated_late: bool = False  # known only a window of losses in (the oscillation test needs two): its onset
    #                          may be up to `loss_window` steps after the effects it caused
    needs_training: bool = False  # arises from the updates: cannot explain what is present at step 0
    when: tuple[tuple[Kind, str], ...] = ()  # effects it has only when the pair shows a condition (CONDITIONS)
    unless: tuple[tuple[Kind, str], ...] = ()  # effects it does not have when the pair shows a condition

    def can_cause(self, cause: Hypothesis, effect: Hypothesis) -> bool:
        kind = effect.kind
        if any(k == kind and CONDITIONS[c](cause, effect) for k, c in self.unless):
            return False
        return kind in self.effects or any(k == kind and CONDITIONS[c](cause, effect) for k, c in self.when)

    def condition(self, cause: Hypothesis, effect: Hypothesis) -> str | None:
        """The name of the `when` condition the link rests on (None: the kind's own effect)."""
        if effect.kind in self.effects:
            return None
        return next((c for k, c in self.when if k == effect.kind and CONDITIONS[c](cause, effect)), None)


def _outside_optimizer(h: Hypothesis) -> bool:
    """Its evidence shows parameters that get gradients but that no optimizer holds."""
    return any(e.get("in_optimizer") == 0.0 for e in h.evidence)


RIVAL_WINS = 0.1  # an opponent whose loss fell to this fraction of its early level (or less) wins outright


def _opponent_wins(h: Hypothesis) -> bool:
    """A model's gradient that vanished because the model it is trained against wins outright (a GAN's
    discriminator, see gradient_observer.ModelFade): the opponent's saturated output is part of that story, its
    consequence."""
    return any(
        e.get("site") == "model_gradient" and e.get("game") and (e.get("rival_loss_ratio") or 1.0) <= RIVAL_WINS
        for e in h.evidence
    )


def _eval_only(e: dict) -> bool:
    """A normalisation finding that only eval mode reads: a drift of the running statistics, or running
    statistics turned non-finite in a layer that runs in training mode (it normalises each batch by the batch's
    own statistics and only writes the running ones)."""
    return e.get("to") == "drift" or (e.get("to") == "poisoned" and e.get("training") == 1.0)


def _acts_in_training(h: Hypothesis) -> bool:
    """A normalisation fault that changes what the training forwards compute (frozen or noisy statistics,
    poisoned statistics in an eval-mode layer, a collapsed gain); not one that only eval mode reads (see
    _eval_only): it causes no training symptom, and a blow-up (a NaN in the weights, a fast-moving weight that
    the running average follows too slowly) causes it."""
    return not all(_eval_only(e) for e in h.evidence if e.get("type") == "normalization_health")


def _poisoned(h: Hypothesis) -> bool:
    """Its evidence shows non-finite running statistics."""
    return any(e.get("to") == "poisoned" for e in h.evidence if e.get("type") == "normalization_health")


def _non_finite_data(h: Hypothesis) -> bool:
    """Its evidence shows NaN/Inf values in the data (not merely badly scaled ones)."""
    return any(e.get("type") == "data_anomaly" and e.get("to") == "non_finite" for e in h.evidence)


OVERFLOW = 1e18  # data this large overflows float32 when squared (its max is 3.4e38)


def _overflows(h: Hypothesis) -> bool:
    """Its evidence shows data values large enough that a square (a variance, a norm) overflows float32."""
    return any(
        isinstance(v, (int, float)) and abs(v) >= OVERFLOW
        for e in h.evidence
        if e.get("type") == "data_anomaly"
        for v in (e.get("max"), e.get("min"), e.get("mean"))
    )


def _still_modules(h: Hypothesis) -> set[str]:
    """The modules its evidence shows bit-identical although they receive gradients."""
    return {e["module"] for e in h.evidence if e.get("to") == "unchanged" and isinstance(e.get("module"), str)}


UNDERFLOW = 1e4  # a blow-up's gradients this many times the later ones: those steps vanish against the weights


def moved_then_stopped(h: Hypothesis) -> bool:
    """Unchanged weights that had moved before they stopped (their norm is no longer their first): an optimizer
    that holds them and stepped them, so not a step never taken or a parameter left out; their updates fell
    below the weights' float resolution."""
    evs = [e for e in h.evidence if e.get("to") == "unchanged"]
    ratios = [e.get("weight_ratio") for e in evs]
    return (
        h.kind == Kind.unchanged_weights
        and bool(evs)
        and all(isinstance(r, (int, float)) and abs(r - 1) > 0.05 for r in ratios)
        and all(e.get("in_optimizer") != 0 for e in evs)
    )


def _steps_underflow(c: Hypothesis, e: Hypothesis) -> bool:
    """A blow-up whose gradients were UNDERFLOW times those the stalled weights get now: steps that small move
    them by less than their float resolution (an adaptive optimizer divides them by the blow-up's squared
    gradients, which its running average keeps for thousands of steps)."""
    big = [v for ev in c.evidence if isinstance(v := ev.get("rms"), (int, float)) and math.isfinite(v)]
    small = [v for ev in e.evidence if isinstance(v := ev.get("grad_rms"), (int, float)) and v > 0]
    return moved_then_stopped(e) and bool(big and small) and max(big) >= UNDERFLOW * min(small)


def falls_without_bound(h: Hypothesis) -> bool:
    """A divergence of a loss that falls below zero without bound: the objective rewards what grows (a term
    with the wrong sign), which no learning rate or blow-up explains; it drives the blow-up instead."""
    return h.kind == Kind.loss_divergence and any(e.get("fall_factor") is not None for e in h.evidence)


Pair = Callable[[Hypothesis, Hypothesis], bool]
CONDITIONS: dict[str, Pair] = {
    "outside_optimizer": lambda c, e: _outside_optimizer(c),
    "opponent_wins": lambda c, e: _opponent_wins(c),
    "effect_opponent_wins": lambda c, e: _opponent_wins(e),
    "acts_in_training": lambda c, e: _acts_in_training(c),
    "effect_acts_in_training": lambda c, e: _acts_in_training(e),
    "effect_acts_or_clean": lambda c, e: _acts_in_training(e) or not _poisoned(e),
    # NaN/Inf in a batch writes NaN into a training-mode BatchNorm's running statistics; badly scaled inputs
    # cannot put a layer in eval mode, nor freeze or poison its statistics
    "poisons_norm": lambda c, e: _non_finite_data(c) and _poisoned(e),
    # NaN/Inf in the data spread from the first layer; badly scaled data makes one only through what it drives
    # (updates that grow: a NaN after step 0) or by overflowing float32 (a square of 1e19); a NaN made in the
    # first forward from finite, representable data is made by an operation (a one-pass variance, a log of 0)
    "makes_nan": lambda c, e: _non_finite_data(c) or (e.origin.step or 0) > 0 or _overflows(c),
    # a layer whose weights never change saturates later only because its inputs moved (a partner that trains
    # hands it values that grow): it cannot follow them, as it would if its optimizer stepped
    "frozen_site": lambda c, e: bool(e.origin.step) and e.origin.module in _still_modules(c),
    "sign_error": lambda c, e: falls_without_bound(c),
    "sums": lambda c, e: any(ev.get("to") == "sum_reduction" for ev in c.evidence),
    "effect_sign_error": lambda c, e: falls_without_bound(e),
    # an lr a thousand times below its peak moves the weights by less than their float resolution
    "lr_collapsed": lambda c, e: any(ev.get("to") == "lr_collapsed" for ev in c.evidence),
    "one_order": lambda c, e: bool(c.evidence) and all(ev.get("to") == "sampler_epoch_fixed" for ev in c.evidence),
    "steps_underflow": lambda c, e: _steps_underflow(c, e),
}
CROSS_MODEL = {"opponent_wins"}  # conditions whose mechanism acts from one model on another (a GAN's game)
# what a normalisation fault that acts in training causes: the layers after it see badly scaled values
_NORM_EFFECTS = (
    Kind.non_finite,
    Kind.loss_divergence,
    Kind.unstable_loss,
    Kind.exploding_gradient,
    Kind.dead_activation,
    Kind.saturated_activation,
    Kind.no_gradient,
    Kind.vanishing_gradient,
    Kind.loss_plateau,
)
_DRIFT = ((Kind.normalization_fault, "effect_acts_in_training"),)  # (`unless`: a blow-up causes a drift only)
_SIGN = ((Kind.loss_divergence, "effect_sign_error"),)  # a loss falling without bound is its own cause (its sign)


_LOOP_EFFECTS = (
    Kind.exploding_gradient,
    Kind.loss_divergence,
    Kind.unstable_loss,
    Kind.non_finite,
    Kind.loss_plateau,
    Kind.saturated_activation,
    Kind.dead_activation,
    Kind.vanishing_gradient,
    Kind.no_gradient,
    Kind.residual_imbalance,
    Kind.attention_collapse,
    Kind.normalization_fault,
)


CAUSES: dict[Kind, Causes] = {  # listed upstream first: a consequence names the first cause that holds
    # gradients never zeroed: each step applies the sum of every gradient so far, an update that grows step after
    # step like an ever larger learning rate, with all that a blow-up brings (from the second step on)
    Kind.loop_misuse: Causes(
        _LOOP_EFFECTS,
        needs_training=True,
        when=((Kind.unchanged_weights, "lr_collapsed"),),
        # the same data order every epoch (a DistributedSampler's epoch never set) blows up and stalls nothing
        unless=_DRIFT + tuple((k, "one_order") for k in _LOOP_EFFECTS),
    ),
    # the loss called wrongly: the model cannot learn what the loss asks (or is pushed without bound)
    Kind.loss_misuse: Causes(
        (
            Kind.loss_plateau,
            Kind.unstable_loss,
            Kind.loss_divergence,
            Kind.vanishing_gradient,
            Kind.saturated_activation,
        ),
        # a loss summed over many terms makes every gradient that many times the mean's
        when=((Kind.exploding_gradient, "sums"), (Kind.non_finite, "sums")),
    ),
    Kind.data_anomaly: Causes(
        (
            Kind.exploding_gradient,
            Kind.saturated_activation,
            Kind.loss_divergence,
            Kind.unstable_loss,
            Kind.dead_activation,
            Kind.loss_plateau,
            Kind.vanishing_gradient,
        ),
        when=((Kind.normalization_fault, "poisons_norm"), (Kind.non_finite, "makes_nan")),
        unless=_SIGN,
    ),
    # frozen or poisoned normalisation: the layers after it see badly scaled values, the loss stalls or swings
    Kind.normalization_fault: Causes((), when=tuple((k, "acts_in_training") for k in _NORM_EFFECTS)),
    # (a blow-up also throws residual branches and attention logits far out of scale: when those begin with it,
    # or after it, they are its consequences; begun well before it, they are its cause: see the rows at the end)
    Kind.exploding_gradient: Causes(
        (
            Kind.non_finite,
            Kind.loss_divergence,
            Kind.unstable_loss,
            Kind.dead_activation,
            Kind.no_gradient,
            Kind.residual_imbalance,
            Kind.attention_collapse,
            Kind.normalization_fault,
        ),
        when=((Kind.unchanged_weights, "steps_underflow"),),
        unless=_DRIFT + _SIGN,
    ),
    # saturated units squash the gradient behind them; but a vanished gradient of a model beaten outright by
    # its opponent is the cause of that opponent's sure (saturated) output, not its effect
    Kind.saturated_activation: Causes(
        (Kind.vanishing_gradient, Kind.loss_plateau), unless=((Kind.vanishing_gradient, "effect_opponent_wins"),)
    ),
    Kind.dead_activation: Causes((Kind.no_gradient, Kind.vanishing_gradient, Kind.loss_plateau)),
    Kind.vanishing_gradient: Causes((Kind.loss_plateau,), when=((Kind.saturated_activation, "opponent_wins"),)),
    # a parameter left out of the optimizer keeps the factors multiplied by it at exactly zero gradient
    # (LoRA's A while B stays 0, a gate that stays closed): then it comes before no_gradient. Nothing in the
    # network causes unchanged weights: they are reported only while they receive gradients (weights that get
    # none are the gradient kinds' story), so only a step never taken, an optimizer that does not hold them or
    # an lr of 0 leaves them bit-identical: a bug of the loop, a root
    Kind.unchanged_weights: Causes(
        (Kind.loss_plateau,),
        when=((Kind.no_gradient, "outside_optimizer"), (Kind.saturated_activation, "frozen_site")),
    ),
    Kind.no_gradient: Causes((Kind.loss_plateau,)),
    # a blow-up that wrecks the weights leaves saturated/dead units, faded gradients and a stalled loss
    Kind.loss_divergence: Causes(
        (
            Kind.non_finite,
            Kind.loss_plateau,
            Kind.saturated_activation,
            Kind.dead_activation,
            Kind.vanishing_gradient,
            Kind.no_gradient,
            Kind.residual_imbalance,
            Kind.attention_collapse,
            Kind.normalization_fault,
        ),
        when=((Kind.exploding_gradient, "sign_error"),),  # the objective rewards growth: gradients grow with it
        unless=_DRIFT,
    ),
    # a wild optimizer pins bounded units at their rails and now and then zeroes whole layers' gradients
    Kind.unstable_loss: Causes(
        (Kind.saturated_activation, Kind.no_gradient, Kind.loss_plateau, Kind.normalization_fault),
        dated_late=True,
        needs_training=True,
        unless=_DRIFT,
    ),
    # listed after the blow-ups they also follow from (an onset shared with one is the blow-up's doing). A branch
    # that swamps its skip (or a stream that grows block after block) blows activations and gradients up; a
    # branch that adds nothing leaves the block an identity and the loss stalls
    Kind.residual_imbalance: Causes(
        (
            Kind.exploding_gradient,
            Kind.vanishing_gradient,
            Kind.loss_plateau,
            Kind.unstable_loss,
            Kind.loss_divergence,
        ),
        unless=_SIGN,
    ),
    # attention logits that grow without bound: loss spikes and divergence, large gradients, overflow; rows
    # collapsed to one key pass no gradient and the loss stalls
    Kind.attention_collapse: Causes(
        (
            Kind.unstable_loss,
            Kind.loss_divergence,
            Kind.exploding_gradient,
            Kind.non_finite,
            Kind.loss_plateau,
        ),
        unless=_SIGN,
    ),
    # last (any other cause of both is named first): a NaN/Inf that reached the weights (a non-finite gradient
    # applied by the step) makes every later forward non-finite, and a training-mode BatchNorm writes it into
    # its running statistics; those, written but not read in training, cause nothing back (see _eval_only)
    Kind.non_finite: Causes((Kind.normalization_fault,), unless=((Kind.normalization_fault, "effect_acts_or_clean"),)),
}

# How a cause produces an effect, in words (the `because` of a drawn link): (cause, effect) first, then the
# cause's general mechanism
_HOW: dict[tuple[Kind, Kind | None], str] = {
    (Kind.loss_misuse, Kind.exploding_gradient): "a loss summed over many terms makes every gradient that many "
    "times the mean's",
    (Kind.loss_misuse, Kind.non_finite): "gradients summed over many terms overflow",
    (Kind.loss_misuse, None): "the loss as called cannot be minimised the way training needs",
    (Kind.loop_misuse, None): "gradients never zeroed add up over the steps, so each update is the sum of every "
    "gradient so far and grows like an ever larger learning rate",
    (Kind.memory_growth, None): "every step's graph kept alive adds to the memory and to each backward pass",
    (Kind.data_anomaly, Kind.normalization_fault): "NaN/Inf in a batch is written into the running statistics",
    (Kind.data_anomaly, None): "every forward pass starts from these values",
    (Kind.normalization_fault, None): "the layers after it receive values it failed to normalise",
    (Kind.exploding_gradient, Kind.non_finite): "gradients that large overflow",
    (Kind.exploding_gradient, Kind.unchanged_weights): "after the blow-up the gradients are many orders smaller, "
    "and steps that small (under an adaptive optimizer, divided by the blow-up's squared gradients it still "
    "averages) no longer change the weights at their float resolution",
    (Kind.exploding_gradient, None): "updates sized by gradients that large throw the weights out of scale",
    (Kind.saturated_activation, None): "saturated units pass almost no gradient back",
    (Kind.dead_activation, None): "dead units pass no gradient back",
    (Kind.vanishing_gradient, Kind.saturated_activation): "the model beaten outright stops pushing back, so its "
    "opponent's output saturates",
    (Kind.vanishing_gradient, None): "layers that get almost no gradient barely learn",
    (Kind.unchanged_weights, None): "weights that never change cannot lower the loss",
    (Kind.unchanged_weights, Kind.saturated_activation): "a layer whose weights never change cannot follow inputs "
    "that move as the rest of the run trains: its bounded units drift to their rails",
    (Kind.no_gradient, None): "parameters that get no gradient never learn",
    (Kind.loss_divergence, Kind.exploding_gradient): "a loss that rewards growth makes the outputs and their "
    "gradients grow with it",
    (Kind.loss_divergence, None): "the blow-up wrecked the weights",
    (Kind.unstable_loss, None): "the optimizer's wild steps throw units and statistics out of range",
    (Kind.residual_imbalance, None): "the residual stream is out of balance in every block after it",
    (Kind.attention_collapse, None): "attention logits that grow without bound swing the loss and its gradients",
    (Kind.non_finite, None): "NaN/Inf in the weights reaches every later forward pass",
}


# a loop bug's mechanism depends on which one it is (the state its evidence shows), not only on its kind
_LOOP_HOW = {
    "zeroed_before_step": "a zero_grad() between backward() and step() leaves every step nothing to apply",
    "lr_collapsed": "steps at a learning rate a thousand times below its peak change almost nothing",
    "single_class_batches": "batches of one class pull the model toward that class, and each change of class undoes it",
    "clipped_after_step": "the clip comes after the step, so every step applies the unclipped gradients",
}


def mechanism(cause: Hypothesis, effect: Hypothesis) -> str:
    """How `cause` produces `effect` (the link's mechanism, as the table allows it)."""
    if cause.kind == Kind.loop_misuse:
        state = next((_LOOP_HOW[e["to"]] for e in cause.evidence if e.get("to") in _LOOP_HOW), None)
        if state:
            return state
    return _HOW.get((cause.kind, effect.kind)) or _HOW.get((cause.kind, None)) or "its mechanism reaches it"


def acts_at_once(h: Hypothesis) -> bool:
    """A loop bug that acts from the first step (the gradients cleared before each step), unlike one that needs
    steps to add up (gradients never zeroed): it can explain what is present from step 0."""
    return h.kind == Kind.loop_misuse and any(e.get("to") == "zeroed_before_step" for e in h.evidence)


# Kinds that name something the user did (a bug in the loss call or the loop, a layer in the wrong mode,
# parameters no optimizer moves, broken data), not a state the network got into: a root, when nothing
# present explains it, comes before the states of the network
_ROOT_KINDS = {Kind.loss_misuse, Kind.loop_misuse, Kind.memory_growth, Kind.unchanged_weights, Kind.no_gradient}


def summed_only(h: Hypothesis) -> bool:
    """A loss misuse that is only a summed reduction: a scale of every gradient (the lr's twin), not a bug."""
    calls = [e for e in h.evidence if e.get("type") == EventType.loss_call_health.value]
    return h.kind == Kind.loss_misuse and bool(calls) and all(e.get("to") == "sum_reduction" for e in calls)


def is_root_kind(h: Hypothesis) -> bool:
    """Whether `h` names a bug or broken data rather than a state of the network (see _ROOT_KINDS): also a
    normalisation fault that acts in training (a layer left in eval mode, frozen statistics), NaN/Inf in the
    data and a loss that falls without bound (a term with the wrong sign)."""
    if h.kind == Kind.loss_misuse:  # a loss summed, not averaged, is a scale: a setting, like the lr
        return not summed_only(h)
    if moved_then_stopped(h):  # stepped, then stalled: a state of the network, not a step never taken
        return False
    if h.kind in _ROOT_KINDS or falls_without_bound(h):
        return True
    if h.kind == Kind.normalization_fault:
        return _acts_in_training(h)
    return h.kind == Kind.data_anomaly and _non_finite_data(h)
