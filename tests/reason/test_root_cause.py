"""Root cause first, links only where the trace supports them, no alarm without harm (issue 30). Hand-made
event lists through the real reasoner (rules, settings, harm, rank): each test is one pattern seen on public
training code, and the link or order that must (or must not) be drawn."""
from __future__ import annotations

import pytest
from conftest import ASSETS, explain_json, run_cli
from test_advice import GRAD, LOSS, MODELS, UPD, by_kind, ev, model, optimizer

from neuraldbg_cli.reason import harm
from neuraldbg_cli.reason.families import RULES
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.settings import SETTINGS
from neuraldbg_cli.reason.reasoner import rank, unsupported_links
from neuraldbg_cli.trace.events import Kind, Report

NORM = ("normalization_health", "norm")


def explain(events, models=(), optimizers=(), every=10, presence=0.5):
    ctx = Context(events=list(events), models=list(models), optimizers=list(optimizers), every=every)
    hyps = harm.weigh([h for h in (r(ctx) for r in RULES) if h is not None], ctx, presence)
    settings = [s for s in (f(ctx) for f in SETTINGS) if s is not None]
    return rank(hyps, slack=every, loss_window=ctx.loss_window, presence=presence, settings=settings,
                position=lambda o: ctx.position(o.root, o.module))


def summary(step, first, last):
    return ev("run_summary", step, None, "", "", "run", root=None, first_loss=first, last_loss=last, steps=step)


def assert_links_have_evidence(hyps):
    """Every drawn link names a present cause and says what it rests on (onsets, sites, mechanism)."""
    present = {h.kind: h for h in hyps if h.confidence >= 0.5}
    for h in hyps:
        if h.caused_by is None:
            assert h.because is None
            continue
        cause = present[h.caused_by]
        assert h.because and f"{cause.kind.value} " in h.because and h.kind.value in h.because
        assert cause.rank < h.rank


def test_un_normalised_inputs_cannot_put_a_batchnorm_in_eval_mode():
    """Raw pixels and a BatchNorm left in eval mode (frozen statistics) under a stalled loss: the eval-mode
    layer is not a consequence of the inputs (scaled inputs cannot change a layer's mode) and, a bug of the
    user's making, it leads."""
    models = model("Conv2d", "BatchNorm2d", "ReLU", "Linear")
    evs = [
        ev("data_anomaly", 0, None, "normal", "extreme_scale", "input", root="Net", mean=120.0, std=70.0, min=0.0,
           max=255.0),
        ev(NORM[0], 1, "m1", "normal", "eval_mode", NORM[1], training=0.0, running_initial=1.0),
        ev(LOSS, 5, None, "normal", "plateau", "loss", recent=2.3, start=2.3, best=2.29),
    ]
    hyps = explain(evs, models, optimizer("SGD", 0.01))
    k = by_kind(hyps)
    assert k[Kind.normalization_fault].caused_by is None
    assert hyps[0].kind == Kind.normalization_fault
    assert_links_have_evidence(hyps)


def test_nan_inputs_do_poison_running_statistics():
    models = model("Linear", "BatchNorm1d", "ReLU", "Linear")
    evs = [
        ev("data_anomaly", 3, None, "normal", "non_finite", "input", root="Net"),
        ev(NORM[0], 3, "m1", "normal", "poisoned", NORM[1], training=0.0),
    ]
    hyps = explain(evs, models, optimizer())
    k = by_kind(hyps)
    assert k[Kind.normalization_fault].caused_by == Kind.data_anomaly
    assert "running statistics" in k[Kind.normalization_fault].because
    assert_links_have_evidence(hyps)


def test_an_optimizer_never_stepped_is_not_a_consequence_of_another_models_fading_gradient():
    """Two models, each with its own optimizer: the encoder's gradient fades, the decoder's weights stay
    bit-identical although they receive gradients. The fade cannot freeze weights that get gradients, let
    alone another model's: the still weights are a root, and they lead."""
    models = model("Linear", "Tanh", "Linear", name="Encoder") + model("Linear", "ReLU", "Linear", name="Decoder")
    evs = [
        ev(GRAD, 1, "m0", "healthy", "vanishing", "gradient", root="Encoder", rms=1e-12, ratio_to_max=1e-9),
        ev(UPD, 10, "m0", "updating", "unchanged", "weights", root="Decoder", in_optimizer=1.0),
        ev(UPD, 10, "m2", "updating", "unchanged", "weights", root="Decoder", in_optimizer=1.0),
    ]
    hyps = explain(evs, models, optimizer("Adam", 1e-3) + optimizer("Adam", 1e-3))
    k = by_kind(hyps)
    assert k[Kind.unchanged_weights].caused_by is None
    assert hyps[0].kind == Kind.unchanged_weights
    assert_links_have_evidence(hyps)


def test_weights_that_moved_then_stalled_after_a_blow_up_are_its_consequence_not_a_root():
    """Adam at a huge lr: gradients of 1e4 at step 1, dead units, and from step 460 a layer's weights bit-identical
    although they get gradients of 3e-7 (steps divided by the blow-up's squared gradients Adam still averages).
    They had moved (norm 3.5 -> 14): a stall, not a step never taken; the blow-up explains it and leads. Weights
    that never moved at all (the norm still its first) stay a root whatever came before."""
    evs = [
        ev(GRAD, 1, "m2", "healthy", "exploding", "gradient", rms=9.3e3, ratio_to_max=1.0),
        ev(LOSS, 1, None, "normal", "diverging", "loss", recent=1.4e4, start=650.0, best=650.0),
        ev(UPD, 460, "m2", "updating", "unchanged", "weights", weight_norm=14.0, first_weight_norm=3.46,
           weight_ratio=4.06, update_ratio=0.0, grad_rms=2.65e-7, in_optimizer=1.0),
    ]
    hyps = explain(evs, MODELS, optimizer("Adam", 0.1))
    k = by_kind(hyps)
    assert hyps[0].kind != Kind.unchanged_weights and k[Kind.unchanged_weights].caused_by == Kind.exploding_gradient
    assert "stop changing" in k[Kind.unchanged_weights].summary and "float resolution" in k[Kind.unchanged_weights].because
    assert "optimizer.step() is called" not in " ".join(k[Kind.unchanged_weights].suggestions)
    assert_links_have_evidence(hyps)
    never = [*evs[:2], ev(UPD, 2, "m2", "updating", "unchanged", "weights", weight_norm=3.46, first_weight_norm=3.46,
                        weight_ratio=1.0, update_ratio=0.0, grad_rms=2.65e-7, in_optimizer=1.0)]
    k = by_kind(explain(never, MODELS, optimizer("Adam", 0.1)))
    assert k[Kind.unchanged_weights].caused_by is None and "never change" in k[Kind.unchanged_weights].summary


def test_a_loss_that_falls_without_bound_leads_its_explosion():
    """A loss term with the wrong sign: the loss falls below zero without bound, gradients and updates grow
    with it. The sign leads, the explosion is its consequence, and no lr advice comes first."""
    evs = [ev(UPD, s, "m0", "updating", "oversized", "weights", update_ratio=0.5) for s in (10, 20)] + [
        ev(GRAD, 4, "m0", "healthy", "exploding", "gradient", rms=1e3),
        ev(LOSS, 5, None, "normal", "diverging", "loss", recent=-1e8, start=30.0, best=-1e8, fall_factor=3e6),
    ]
    hyps = explain(evs, MODELS, optimizer("Adam", 1e-3))
    assert hyps[0].kind == Kind.loss_divergence and "without bound" in hyps[0].summary
    assert "sign" in hyps[0].suggestions[0] and "learning rate is too large" not in hyps[0].summary
    k = by_kind(hyps)
    assert k[Kind.exploding_gradient].caused_by == Kind.loss_divergence
    assert "grow" in k[Kind.exploding_gradient].because
    assert_links_have_evidence(hyps)


def test_a_weight_decay_of_one_is_named_in_the_loss_symptom_it_produced():
    """SGD with weight_decay=1: the weights collapse and the loss climbs. The decay is the root: the loss's
    symptom carries it, its fix first, and lowering weight_decay is the first suggestion."""
    evs = [ev(UPD, s, m, "updating", "collapsing", "weights", weight_ratio=0.05) for s in (5, 15) for m in ("m0", "m2")]
    evs.append(ev(LOSS, 8, None, "normal", "diverging", "loss", recent=6.7, start=2.3, best=2.2))
    hyps = explain(evs, MODELS, optimizer("SGD", 0.1, weight_decay=1.0))
    assert hyps[0].kind == Kind.loss_divergence
    assert "weight decay collapses the weights" in hyps[0].summary.lower()
    assert hyps[0].suggestions[0].startswith("lower weight_decay (1 with SGD)")


@pytest.mark.parametrize("first_step,carrier", [(0, Kind.loss_plateau), (300, Kind.no_gradient)])
def test_a_weight_decay_acts_from_its_optimizers_first_step(first_step, carrier):
    """Adam with weight_decay=1 (graykode's BiLSTM with attention): the loss sits at ln 2 from step 0, the weights
    are under 5% of their start by step 500, and they pass no gradient from 2365. The shrink seen at 500 pulled
    from the optimizer's first step: the stall from step 0 is its doing and carries it. An optimizer that only
    began at 300 cannot have made a stall that began at 0."""
    evs = [ev(UPD, s, m, "updating", "collapsing", "weights", weight_ratio=0.05) for s in (500, 680) for m in ("m0", "m2")]
    evs.append(ev(LOSS, 0, None, "normal", "plateau", "loss", loss=0.686, start=0.684, best=0.684, improvement=0.0))
    evs += [ev(GRAD, 2365, m, "healthy", "absent", "param") for m in ("m0", "m2")]
    opt = optimizer("Adam", 1e-3, weight_decay=1.0)
    opt[0]["lr_at"] = [[first_step, 1e-3]]
    hyps = explain(evs, MODELS, opt)
    assert hyps[0].kind == carrier, hyps
    assert "weight decay collapses the weights" in hyps[0].summary.lower()
    # the stall it carries is dated where the decay began to pull, however late its own symptom showed (the
    # optimizer's first step: 0, or 300 for the one that began there, whose no_gradient showed at 2365)
    assert hyps[0].origin.step == first_step and f"first step, {first_step}" in hyps[0].summary


@pytest.mark.parametrize("wd,named", [(1.0, True), (5e-4, False)])
def test_a_weight_decay_of_one_is_named_on_the_plateau_where_the_weights_never_shrank(wd, named):
    """Logistic regression under SGD with weight_decay=1: the two weights start near 0 and stay small (nothing
    shrinks), and the loss stops at 0.61 instead of its floor. The decay holds them: named on the plateau, its fix
    first. The same plateau under a usual decay says nothing of it."""
    evs = [ev(LOSS, 71, None, "normal", "plateau", "loss", loss=0.61, start=0.79, best=0.61, improvement=0.23)]
    hyps = explain(evs, MODELS, optimizer("SGD", 0.01, weight_decay=wd))
    assert hyps[0].kind == Kind.loss_plateau
    assert ("weight decay holds the weights back" in hyps[0].summary.lower()) is named, hyps[0].summary
    assert hyps[0].suggestions[0].startswith("lower weight_decay (1 with SGD) to 1e-5-5e-4") is named


def test_a_weight_decay_that_shrank_the_weights_is_named_before_the_lr():
    """Short of a collapse (normalised layers hold the loss up), SGD with weight_decay=1 shrinks the weights
    to a fraction of their start and each update becomes large against them: the decay is named, not the lr
    (0.1, SGD's usual range), and the loss's symptom carries it."""
    evs = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=0.4, weight_ratio=0.2)
           for s in (20, 30) for m in ("m0", "m2")]
    evs.append(ev(LOSS, 25, None, "normal", "oscillating", "loss", low=1.0, high=6.7, start=2.3))
    evs.append(ev(LOSS, 25, None, "normal", "oscillating", "loss", low=1.0, high=6.7, start=2.3))
    hyps = explain(evs, MODELS, optimizer("SGD", 0.1, weight_decay=1.0))
    assert hyps[0].kind == Kind.unstable_loss
    assert hyps[0].summary.lower().startswith("weight decay shrinks the weights: weight_decay=1 with sgd")
    assert "learning rate is too large" not in hyps[0].summary.lower()
    assert hyps[0].suggestions[0].startswith("lower weight_decay (1 with SGD)")
    # weights that grew under the same updates: the decay did not shrink them, it is not named
    grown = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=0.4, weight_ratio=3.0)
             for s in (20, 30) for m in ("m0", "m2")] + evs[4:]
    assert "weight decay" not in explain(grown, MODELS, optimizer("SGD", 0.1, weight_decay=1.0))[0].summary.lower()


def test_a_huge_lr_is_named_in_the_loss_symptom_not_in_the_architecture_damage():
    """lr far too large: oversized updates, a residual branch thrown out of scale and a diverging loss. The
    loss's symptom states the lr and leads; the residual imbalance follows as its consequence."""
    evs = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=0.9) for s in (1, 11) for m in ("m0", "m2")]
    evs += [
        ev("residual_health", 2, "m1", "normal", "swamping", "residual", ratio=40.0),
        ev(LOSS, 3, None, "normal", "diverging", "loss", recent=1e4, start=2.3, best=2.2),
    ]
    hyps = explain(evs, MODELS, optimizer("Adam", 1.0))
    assert hyps[0].kind == Kind.loss_divergence and "learning rate is too large" in hyps[0].summary.lower()
    assert hyps[0].suggestions[0].startswith("lr=1 with Adam: try")
    assert_links_have_evidence(hyps)


def test_a_gradient_grown_from_near_zero_under_adam_is_a_note_while_the_loss_falls():
    evs = [
        ev(GRAD, 20, "m0", "healthy", "exploding", "gradient", rms=3e-5),
        ev(GRAD, 20, "m2", "healthy", "exploding", "gradient", rms=4e-4),
        summary(300, 2.3, 0.4),
    ]
    hyps = explain(evs, MODELS, optimizer("AdamW", 1e-3))
    h = by_kind(hyps)[Kind.exploding_gradient]
    assert h.confidence < 0.5 and "not harmed" in h.summary
    # the same growth with updates far out of scale (or a loss that blows up) counts
    big = evs + [ev(UPD, 20, "m0", "updating", "oversized", "weights", update_ratio=0.9)]
    big += [ev(LOSS, 21, None, "normal", "diverging", "loss", recent=1e4, start=2.3, best=2.2)]
    assert by_kind(explain(big, MODELS, optimizer("AdamW", 1e-3)))[Kind.exploding_gradient].confidence >= 0.5
    # RMSprop's first steps are large by construction (no bias correction): on a loss that did not improve, they are
    # no evidence of steps out of scale, where the same ratio later in the run is
    flat = evs[:2] + [summary(300, 2.3, 2.2)]
    rms = optimizer("RMSprop", 1e-3, alpha=0.99)
    start = flat + [ev(UPD, 0, m, "updating", "oversized", "weights", update_ratio=0.4) for m in ("m0", "m2")]
    assert by_kind(explain(start, MODELS, rms))[Kind.exploding_gradient].confidence < 0.5
    later = flat + [ev(UPD, 200, m, "updating", "oversized", "weights", update_ratio=0.4) for m in ("m0", "m2")]
    assert by_kind(explain(later, MODELS, rms))[Kind.exploding_gradient].confidence >= 0.5


def test_raw_pixels_into_a_run_that_learns_are_a_note_and_a_nan_never_is():
    models = model("Conv2d", "BatchNorm2d", "ReLU", "Linear")
    raw = [ev("data_anomaly", 0, None, "normal", "extreme_scale", "input", root="Net", mean=120.0, std=70.0, min=0.0,
              max=255.0), summary(200, 2.3, 0.3)]
    h = by_kind(explain(raw, models, optimizer("SGD", 0.01)))[Kind.data_anomaly]
    assert h.confidence < 0.5 and "fell from 2.3 to 0.3" in h.summary and h.suggestions  # a note, with its advice
    stalled = raw[:1] + [summary(200, 2.3, 2.29)]
    assert by_kind(explain(stalled, models, optimizer("SGD", 0.01)))[Kind.data_anomaly].confidence >= 0.5
    nan = [ev("data_anomaly", 3, None, "normal", "non_finite", "input", root="Net"), summary(200, 2.3, 0.3)]
    assert by_kind(explain(nan, models, optimizer("SGD", 0.01)))[Kind.data_anomaly].confidence >= 0.9


def test_a_loss_swinging_between_zero_and_huge_has_not_fallen_because_it_ended_on_zero():
    """Adam at lr 10 on separable blobs: the step loss swings 0 <-> 1e7 and ends on a 0. 'The loss fell' reads
    the mean of its latest window (the expected loss), so the explosion with oversized updates is no note."""
    evs = [ev(GRAD, 1, "m0", "healthy", "exploding", "gradient", rms=519.0)]
    evs += [ev(UPD, 1, m, "updating", "oversized", "weights", update_ratio=0.66) for m in ("m0", "m2")]
    ended = ev("run_summary", 320, None, "", "", "run", root=None, first_loss=5e6, start_loss=2.3, last_loss=0.0,
               late_loss=2.2e7, steps=320)
    assert by_kind(explain(evs + [ended], MODELS, optimizer("Adam", 10.0)))[Kind.exploding_gradient].confidence >= 0.5
    # a run whose latest window is low on average did learn: the same explosion is a note there
    learned = ev("run_summary", 320, None, "", "", "run", root=None, first_loss=5e6, start_loss=2.3, last_loss=0.0,
                 late_loss=0.2, steps=320)
    h = by_kind(explain(evs + [learned], MODELS, optimizer("SGD", 0.01)))[Kind.exploding_gradient]
    assert h.confidence < 0.5 and "fell from 2.3 to 0.2 (its latest level)" in h.summary


def test_a_huge_lr_under_a_stalled_loss_is_named_on_the_plateau_not_the_network_damage():
    """nanoGPT at lr 1: oversized updates, a swamped residual branch at step 3, the loss stuck from step 8 and
    never blowing up: the loss's own symptom (the plateau) states the lr and leads."""
    evs = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=0.7) for s in (0, 10) for m in ("m0", "m2")]
    evs += [
        ev("residual_health", 3, "m1", "normal", "swamping", "residual", ratio=22.0),
        ev(LOSS, 8, None, "normal", "plateau", "loss", recent=3.2, start=3.9, best=3.0),
    ]
    hyps = explain(evs, MODELS, optimizer("AdamW", 1.0))
    assert hyps[0].kind == Kind.loss_plateau and "learning rate is too large" in hyps[0].summary.lower(), hyps
    assert by_kind(hyps)[Kind.residual_imbalance].caused_by == Kind.loss_plateau
    assert "consequence of the learning rate (stated in loss_plateau)" in by_kind(hyps)[Kind.residual_imbalance].summary
    assert_links_have_evidence(hyps)


def test_a_stall_that_follows_the_damage_of_oversized_early_steps_still_states_the_lr():
    """minGPT at lr 0.5: oversized updates for the first steps only, a swamped residual branch at step 1, the loss
    stuck from step 37 (after the updates came back in scale): the stall is where training shows the lr."""
    evs = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=1.0) for s in (0,) for m in ("m0", "m2")]
    evs += [ev(UPD, 10, m, "oversized", "updating", "weights", update_ratio=1e-3) for m in ("m0", "m2")]
    evs += [
        ev("residual_health", 1, "m1", "normal", "swamping", "residual", ratio=55.0),
        ev(LOSS, 37, None, "normal", "plateau", "loss", recent=3.18, start=3.93, best=3.18),
    ]
    hyps = explain(evs, MODELS, optimizer("AdamW", 0.5))
    assert hyps[0].kind == Kind.loss_plateau and "learning rate is too large" in hyps[0].summary.lower(), hyps
    assert hyps[0].suggestions[0].startswith("lr=0.5 with AdamW: try")
    assert_links_have_evidence(hyps)



@pytest.mark.parametrize("back_at,stall_ends,named", [(4, False, Kind.loss_plateau), (40, False, Kind.exploding_gradient),
                                                       (4, True, Kind.dead_activation)])
def test_a_blow_up_the_loss_falls_back_from_within_its_window_is_a_transient_the_stall_states_the_lr(
        back_at, stall_ends, named):
    """Adam at 1000x its lr (jcjohnson's two-layer net): the loss spikes at step 1, is back within 3 steps, then
    stalls for good (its ReLUs dead). The stall is what training shows: it states the lr; where the stall comes
    and goes (not counted), the dead units the spike left do, not the spike. A blow-up that lasts beyond the loss
    window (nanoGPT at lr 0.5 without warm-up: 20 steps) is itself the symptom: it, or the explosion that drives it,
    states it."""
    evs = [ev(UPD, 0, m, "updating", "oversized", "weights", update_ratio=0.98) for m in ("m0", "m2")]
    evs += [ev(UPD, 6, m, "oversized", "updating", "weights", update_ratio=1e-3) for m in ("m0", "m2")]
    evs += [
        ev(LOSS, 1, None, "normal", "diverging", "loss", recent=1.4e4, start=736.0, best=736.0, rise_factor=18.0),
        ev(LOSS, back_at, None, "diverging", "normal", "loss", recent=2740.0, start=736.0, best=736.0),
        ev(LOSS, 60, None, "normal", "plateau", "loss", recent=685.0, start=736.0, best=677.0),
        ev(GRAD, 1, "m2", "healthy", "exploding", "gradient", rms=8e3),
        ev("activation_regime_shift", 20, "m0", "normal", "dead", "activation", dead_frac=1.0, zero_frac=1.0),
    ]
    if stall_ends:
        evs.append(ev(LOSS, 80, None, "plateau", "normal", "loss", recent=690.0, start=736.0, best=677.0))
        evs.append(summary(500, 736.0, 690.0))
    hyps = explain(evs, MODELS, optimizer("Adam", 0.1))
    assert hyps[0].kind == named and "learning rate is too large" in hyps[0].summary.lower(), hyps
    assert hyps[0].suggestions[0].startswith("lr=0.1 with Adam: try"), hyps[0].suggestions
    assert_links_have_evidence(hyps)


@pytest.mark.parametrize("saturated_at,linked", [(8, False), (2, True), (20, True)])
def test_a_layer_state_first_seen_after_a_dense_sample_saw_it_normal_explains_nothing_before(saturated_at, linked):
    """Ten sigmoid convolutions (a factory's gated config): gradients vanish toward the input from step 0, and one
    sigmoid saturates at step 8. The probe samples every step up to step 10, so that layer was seen normal at step
    7: its saturation cannot have made the vanishing seen at step 0, which leads. A state dated within a site's
    baseline (the first samples, not judged) may have held from step 0, and after the dense start one sampling
    interval is unknown: both may explain an effect dated a little earlier."""
    models = model("Conv1d", "Sigmoid", "Conv1d", "Sigmoid", "Conv1d", "Sigmoid", "Linear")
    evs = [ev(GRAD, 0 if saturated_at <= 10 else 12, m, "healthy", "vanishing", "gradient", rms=1e-9, ratio_to_max=1e-9)
           for m in ("m0", "m2", "m4")]
    evs.append(ev("activation_regime_shift", saturated_at, "m5", "normal", "saturated", "activation", sat_frac=0.9))
    hyps = explain(evs, models, optimizer("Adagrad", 0.01))
    k = by_kind(hyps)
    assert (k[Kind.vanishing_gradient].caused_by == Kind.saturated_activation) is linked, hyps
    if not linked:
        assert hyps[0].kind == Kind.vanishing_gradient
    assert_links_have_evidence(hyps)


@pytest.mark.parametrize("data,nan_at,linked", [
    ({"to": "extreme_scale", "mean": 300.0, "std": 2.8, "min": 295.0, "max": 305.0}, 0, False),
    ({"to": "extreme_scale", "mean": 300.0, "std": 2.8, "min": 295.0, "max": 305.0}, 6, True),
    ({"to": "non_finite", "mean": None, "std": None, "min": None, "max": None}, 0, True),
    ({"to": "extreme_scale", "mean": 1e19, "std": 1e18, "min": 0.0, "max": 3e19}, 0, True),
])
def test_badly_scaled_data_makes_a_nan_only_through_growth_or_overflow(data, nan_at, linked):
    """Temperatures around 300 K into a hand-written norm layer whose one-pass variance (E[x^2] - E[x]^2) goes
    negative: a NaN in its output at step 0. Finite, representable data does not make a NaN in the first forward
    pass (an operation does): the NaN leads, not "a consequence of data_anomaly". NaN data, data whose square
    overflows float32, or a NaN after updates began (the scale drove them) are the data's doing."""
    to = data.pop("to")
    evs = [
        ev("data_anomaly", 0, None, "normal", to, "input", root="Net", **data),
        ev("non_finite", nan_at, "m0", "normal", "non_finite", "output"),
        ev(LOSS, nan_at, None, "normal", "non_finite", "loss", recent=None, start=1.0, best=1.0),
    ]
    hyps = explain(evs, MODELS, optimizer("Adam", 1e-3))
    k = by_kind(hyps)
    assert (k[Kind.non_finite].caused_by == Kind.data_anomaly) is linked, hyps
    if not linked:
        assert hyps[0].kind == Kind.non_finite
    assert_links_have_evidence(hyps)


@pytest.mark.parametrize("faded_at,first", [(32, Kind.loss_plateau), (0, Kind.vanishing_gradient)])
def test_the_loss_symptom_leads_a_network_state_that_began_after_it_and_explains_nothing(faded_at, first):
    """A Post-LN transformer without warm-up: the loss is stuck from step 0, the gradients fade toward the input
    from step 32 (more confident, but later: they cannot have caused the stall). The stall is where training
    first showed harm and leads; gradients that vanished from step 0 explain it and lead instead."""
    evs = [ev(GRAD, faded_at, m, "healthy", "vanishing", "gradient", rms=1e-9, ratio_to_max=7e-5)
           for m in ("m0", "m1", "m2")]
    evs.append(ev(LOSS, 0, None, "normal", "plateau", "loss", recent=2.84, start=2.95, best=2.52))
    hyps = explain(evs, MODELS, optimizer("AdamW", 5e-3))
    assert hyps[0].kind == first, hyps
    assert_links_have_evidence(hyps)


@pytest.mark.parametrize("site,at,linked", [("m1", 50, True), ("m2", 50, False), ("m1", 0, False)])
def test_a_layer_whose_weights_never_change_saturating_later_is_a_consequence_of_them(site, at, linked):
    """A seq2seq decoder whose optimizer is never stepped: its weights stay bit-identical from step 1 while the
    encoder trains, and at step 50 its own bounded units saturate. A layer that never changes saturates later only
    because its inputs moved and it cannot follow them: a consequence. A saturated layer whose weights do change,
    or one saturated from the first step (the init's scale), is not."""
    evs = [ev(UPD, 1, m, "updating", "unchanged", "weights", weight_norm=3.0, first_weight_norm=3.0,
              weight_ratio=1.0, update_ratio=0.0, grad_rms=1e-3, in_optimizer=1.0) for m in ("m0", "m1")]
    evs.append(ev("activation_regime_shift", at, site, "normal", "saturated", "activation", sat_frac=0.9))
    hyps = explain(evs, MODELS, optimizer("Adam", 1e-3))
    k = by_kind(hyps)
    assert (k[Kind.saturated_activation].caused_by == Kind.unchanged_weights) is linked, hyps
    if linked:
        assert "cannot follow inputs" in k[Kind.saturated_activation].because
    assert hyps[0].kind == Kind.unchanged_weights
    assert_links_have_evidence(hyps)

# ---------------------------------------------------------------- through the real CLI

LINKED = [
    "data_nan.py",
    "exploding.py",
    "divergence.py",
    "dead_relu.py",
    "missing_step.py",
    "healthy_cnn_bn.py",
    "negated_loss.py",
]


@pytest.mark.parametrize("asset", LINKED)
def test_every_drawn_link_holds_on_real_training(observe, asset):
    """Real small training runs (broken and healthy): each link explain draws gives its evidence in `because`
    (text, JSON), names a present cause listed above it, and joins connected sites (unsupported_links). (The
    runs are the session's shared ones: test_kinds reads the same.)"""
    obs = observe(asset)
    assert obs.proc.returncode in (0, 1), obs.proc.stderr[-2000:]
    run_dir = obs.run_dir
    report = explain_json(run_dir)
    assert unsupported_links(Report.model_validate(report)) == []
    linked = [h for h in report["hypotheses"] if h.get("caused_by")]
    assert all(h["because"] for h in linked)
    assert all("because" not in h for h in report["hypotheses"] if not h.get("caused_by"))
    text = run_cli("explain", run_dir).stdout
    for h in linked:
        if h["confidence"] >= 0.5:
            assert f"consequence of {h['caused_by']}, because: {h['because']}" in text


def test_a_minus_sign_in_front_of_the_loss_is_the_root_of_its_fall_without_bound(observe):
    hyps = observe("negated_loss.py").report["hypotheses"]
    top = hyps[0]
    assert top["kind"] == "loss_misuse" and "wrong sign" in top["summary"], hyps
    assert "remove the minus" in top["suggestions"][0]
    div = [h for h in hyps if h["kind"] == "loss_divergence"]
    assert div and div[0].get("caused_by") == "loss_misuse", div
    # resizing the steps cures no sign error: no lr or clipping advice on what it caused
    for h in hyps[1:]:
        assert not [t for t in h["suggestions"] if t.startswith(("lr=", "clip gradients"))], h
        assert not [f for f in h.get("fixes", []) if f["id"] in ("lr_scale", "clip_grad_norm")], h


def test_a_dead_layer_leads_the_still_gradients_it_makes_and_no_weight_is_called_unchanged(observe):
    """A ReLU layer dead from initialisation feeds zeros to the head: the head's weight gets no gradient and its
    2-class bias moves by +-lr under Adam (which a sum of bit patterns alone would read as unchanged)."""
    hyps = observe("dead_relu.py").report["hypotheses"]
    assert hyps[0]["kind"] == "dead_activation", hyps
    assert "unchanged_weights" not in [h["kind"] for h in hyps]


def test_what_a_too_large_lr_produced_quotes_its_target_once():
    """The lr named as the root: its own target is the first suggestion of everything it produced, and the rules'
    own lr targets (under a warm-up, the same lr quoted from each symptom's onset in other words) are not repeated
    beside it (nanoGPT at lr 1)."""
    evs = [ev(UPD, 0, m, "updating", "oversized", "weights", update_ratio=0.7) for m in ("m0", "m2")]
    evs.append(ev(LOSS, 30, None, "normal", "plateau", "loss", recent=3.0, start=3.9, best=3.0, improvement=0.1))
    evs.append(ev(GRAD, 3, "m0", "healthy", "exploding", "param", rms=500.0))
    opt = optimizer("AdamW", 1.0)
    opt[0]["lr_at"] = [[i, 0.01 * (i + 1)] for i in range(100)] + [[100, 1.0]]  # a warm-up to 1 over 100 steps
    produced = [h for h in explain(evs, MODELS, opt, every=1) if h.confidence >= 0.5]
    assert len(produced) == 2, produced
    for h in produced:
        assert h.suggestions[0].startswith("lr=1 with AdamW (0.02 when it began at step 0"), h.suggestions
        assert sum(t.startswith("lr=") for t in h.suggestions) == 1, h.suggestions


def test_weights_bit_identical_at_samples_while_their_steps_move_them_are_a_converged_cycle():
    """vinhkhuc's linear regression: SGD with momentum over 10 batches in a fixed order converges to a cycle of 10
    steps, so weights sampled every 10 steps are bit-identical, though each step moves them by 8e-5 of their norm
    (600x their float resolution). The loss fell 6.9 -> 0.105: a note. The same still weights under a loss that
    never fell (something puts them back), or steps below the float resolution, still count."""
    def run(update_ratio, first, last):
        evs = [ev(UPD, 311, "linear", "updating", "unchanged", "weights", weight_norm=1.98, first_weight_norm=0.833,
                  weight_ratio=2.38, update_ratio=update_ratio, grad_rms=0.234, in_optimizer=1.0),
               ev("run_summary", 999, None, "running", "finished", "run", root=None, start_loss=first,
                  late_loss=last, alone=1.0, steps=1000.0)]
        return by_kind(explain(evs, MODELS, optimizer("SGD", 0.01)))[Kind.unchanged_weights]
    h = run(7.93e-5, 6.9, 0.105)
    assert h.confidence < 0.5 and "cycle" in h.summary and "fell from 6.9 to 0.105" in h.summary, h.summary
    assert run(7.93e-5, 6.9, 6.5).confidence >= 0.5  # the loss never learned: put back, not converged
    assert run(1e-7, 6.9, 0.105).confidence >= 0.5  # steps below the float resolution: a stall


def test_oversized_steps_of_gradients_never_zeroed_do_not_blame_an_lr_in_its_usual_range():
    """vinhkhuc's linear regression without zero_grad(): SGD lr 0.01 applies the sum of every gradient so far, so
    each step moves the weights by 81% of their size and the loss diverges. The loop is the cause, not the lr:
    no hypothesis says the learning rate is too large. At an lr far above its range, the lr is named too."""
    def run(lr):
        evs = [
            ev("loop_health", 1, "linear", "normal", "grads_not_zeroed", "loop", optimizer=0.0, passes=1.0,
               stale_share=0.61),
            ev(UPD, 5, "linear", "updating", "oversized", "weights", weight_norm=0.49, first_weight_norm=0.83,
               weight_ratio=0.59, update_ratio=0.814, grad_rms=9.5, layers_frac=1.0, in_optimizer=1.0),
            ev(LOSS, 10, None, "normal", "diverging", "loss", recent=33.7, start=4.42, best=0.18, root=None),
        ]
        return explain(evs, model("Linear"), optimizer("SGD", lr))
    hyps = run(0.01)
    assert hyps[0].kind == Kind.loop_misuse, [(h.kind, h.summary) for h in hyps]
    assert not any("learning rate is too large" in h.summary.lower() for h in hyps)
    assert_links_have_evidence(hyps)
    assert any("learning rate is too large" in h.summary.lower() for h in run(10.0))
