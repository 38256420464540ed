"""A NaN/Inf born in the loss (finite outputs, e.g. an impossible CTC alignment) and the BatchNorm running
statistics it poisons after the update: hand-made events through the rules and the ranking."""
from neuraldbg_cli.reason.families import RULES
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.reasoner import rank
from neuraldbg_cli.trace.events import Kind, SemanticEvent

MODELS = [{"name": "Net", "order": ["conv.0", "conv.1", "rnn", "fc"], "modules": {}}]


def ev(type_, step, module, frm, to, site, **metrics):
    return SemanticEvent(type=type_, step=step, module=module, root="Net", from_=frm, to=to, site=site,
                         metrics=metrics)


def _poisoned_bn(step, training):
    return ev("normalization_health", step, "conv.1", "normal", "poisoned", "norm", training=training,
              trainable=1.0, running_finite=0.0, running_initial=0.0, per_channel=256.0, batch=16.0, calls=1.0)


def _loss_inf_then_nan_weights(training=1.0):
    """Step 0: the loss is inf on finite outputs, every gradient NaN; the step writes NaN into the weights, so
    the step-1 forward is NaN and the BatchNorm writes it into its running statistics."""
    return [*(ev("non_finite", 0, m, "healthy", "non_finite", "gradient") for m in ("conv.0", "conv.1", "rnn", "fc")),
            ev("non_finite", 0, None, "normal", "non_finite", "loss", loss=1e308),
            ev("non_finite", 1, "conv.0", "normal", "non_finite", "output", nonfinite=1.0),
            _poisoned_bn(1, training)]


def _ranked(evs):
    ctx = Context(events=evs, models=MODELS)
    return rank([h for h in (r(ctx) for r in RULES) if h], slack=1)


def test_a_loss_non_finite_on_finite_outputs_is_the_origin_not_the_last_layer():
    hyps = _ranked(_loss_inf_then_nan_weights())
    nf = next(h for h in hyps if h.kind == Kind.non_finite)
    assert nf.origin.module is None and nf.origin.step == 0
    assert "loss" in nf.summary and any("loss's arguments" in s for s in nf.suggestions)


def test_running_statistics_poisoned_after_the_nan_are_its_consequence():
    """A training-mode BatchNorm only writes its running statistics: their NaN causes no training symptom and
    came a step after the NaN gradient, so it ranks below the non_finite hypothesis and names it."""
    hyps = _ranked(_loss_inf_then_nan_weights())
    kinds = [h.kind for h in hyps]
    assert kinds.index(Kind.non_finite) < kinds.index(Kind.normalization_fault)
    norm = hyps[kinds.index(Kind.normalization_fault)]
    assert norm.caused_by == Kind.non_finite and norm.confidence >= 0.85
    assert hyps[0].caused_by is None


def test_a_nan_gradient_on_a_finite_loss_still_names_the_last_layer():
    evs = [ev("non_finite", 0, m, "healthy", "non_finite", "gradient") for m in ("conv.0", "rnn", "fc")]
    nf = next(h for h in _ranked(evs) if h.kind == Kind.non_finite)
    assert nf.origin.module == "fc"
    assert not any("loss's arguments" in s for s in nf.suggestions)


def test_a_non_finite_output_still_wins_over_the_loss():
    evs = [ev("non_finite", 0, "rnn", "normal", "non_finite", "output", nonfinite=1.0),
           ev("non_finite", 0, None, "normal", "non_finite", "loss", loss=1e308)]
    nf = next(h for h in _ranked(evs) if h.kind == Kind.non_finite)
    assert nf.origin.module == "rnn"
