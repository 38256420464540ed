"""The causal table the reasoner ranks with: which kinds can cause which (one table, upstream first)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from neuraldbg_cli.trace.events import Hypothesis, Kind


@dataclass(frozen=True)
class Causes:
    """What one kind can cause, and when its onset can be trusted."""

    effects: tuple[Kind, ...]
    dated_late: bool = False  # known only a window of losses in (the oscillation test needs two): its onset
    #                          may be up to `loss_window` steps after the effects it caused
    needs_training: bool = False  # arises from the updates: cannot explain what is present at step 0
    when: tuple[tuple[Kind, str], ...] = ()  # effects it has only when the cause shows a condition (CONDITIONS)
    unless: tuple[tuple[Kind, str], ...] = ()  # effects it does not have when the effect shows a condition

    def can_cause(self, cause: Hypothesis, effect: Hypothesis) -> bool:
        kind = effect.kind
        if any(k == kind and CONDITIONS[c](effect) for k, c in self.unless):
            return False
        return kind in self.effects or any(k == kind and CONDITIONS[c](cause) for k, c in self.when)


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


CONDITIONS: dict[str, Callable[[Hypothesis], bool]] = {
    "outside_optimizer": _outside_optimizer,
    "opponent_wins": _opponent_wins,
    "acts_in_training": _acts_in_training,
    "acts_in_training_or_not_poisoned": lambda h: _acts_in_training(h) or not _poisoned(h),
}
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
_DRIFT = ((Kind.normalization_fault, "acts_in_training"),)  # (`unless`: a blow-up causes a drift only)


CAUSES: dict[Kind, Causes] = {  # listed upstream first: a consequence names the first cause that holds
    # gradients never zeroed: each step applies the sum of every gradient so far, an update that grows step after
    # step like an ever larger learning rate, with all that a blow-up brings (from the second step on)
    Kind.loop_misuse: Causes(
        (
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
        ),
        needs_training=True,
        unless=_DRIFT,
    ),
    # the loss called wrongly: the model cannot learn what the loss asks (or is pushed without bound)
    Kind.loss_misuse: Causes(
        (
            Kind.loss_plateau,
            Kind.unstable_loss,
            Kind.loss_divergence,
            Kind.vanishing_gradient,
            Kind.saturated_activation,
        )
    ),
    Kind.data_anomaly: Causes(
        (
            Kind.non_finite,
            Kind.exploding_gradient,
            Kind.saturated_activation,
            Kind.loss_divergence,
            Kind.unstable_loss,
            Kind.dead_activation,
            Kind.loss_plateau,
            Kind.vanishing_gradient,
            Kind.normalization_fault,  # a non-finite batch poisons BatchNorm's running statistics
        )
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
        unless=_DRIFT,
    ),
    # saturated units squash the gradient behind them; but a vanished gradient of a model beaten outright by
    # its opponent is the cause of that opponent's sure (saturated) output, not its effect
    Kind.saturated_activation: Causes(
        (Kind.vanishing_gradient, Kind.loss_plateau), unless=((Kind.vanishing_gradient, "opponent_wins"),)
    ),
    Kind.dead_activation: Causes((Kind.no_gradient, Kind.vanishing_gradient, Kind.loss_plateau)),
    Kind.vanishing_gradient: Causes(
        (Kind.loss_plateau, Kind.unchanged_weights), when=((Kind.saturated_activation, "opponent_wins"),)
    ),
    # a parameter left out of the optimizer keeps the factors multiplied by it at exactly zero gradient
    # (LoRA's A while B stays 0, a gate that stays closed): then it comes before no_gradient. Weights that
    # stand still inside the optimizer are a symptom (dead units upstream), not that cause
    Kind.unchanged_weights: Causes((Kind.loss_plateau,), when=((Kind.no_gradient, "outside_optimizer"),)),
    Kind.no_gradient: Causes((Kind.loss_plateau, Kind.unchanged_weights)),
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
        )
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
        )
    ),
    # last (any other cause of both is named first): a NaN/Inf that reached the weights (a non-finite gradient
    # applied by the step) makes every later forward non-finite, and a training-mode BatchNorm writes it into
    # its running statistics; those, written but not read in training, cause nothing back (see _eval_only)
    Kind.non_finite: Causes(
        (Kind.normalization_fault,), unless=((Kind.normalization_fault, "acts_in_training_or_not_poisoned"),)
    ),
}
