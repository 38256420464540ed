"""Advice that never points the wrong way, and the causal ranking model (rank means cause, confidence means
presence). Hand-made event lists (pure, fast) for the reasoner, plus real small training through the CLI."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import cli_env, run_cli

from neuraldbg_cli.reason.families import RULES
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.settings import SETTINGS
from neuraldbg_cli.reason.reasoner import failing_kinds, rank
from neuraldbg_cli.trace.events import Kind, SemanticEvent
from neuraldbg_cli.vocab import warms_up

GRAD, ACT, LOSS, UPD = ("gradient_health_transition", "activation_regime_shift", "optimizer_instability",
                        "parameter_update")


def ev(type_, step, module, frm, to, site, root="Net", **metrics):
    return SemanticEvent(type=type_, step=step, module=module, root=root, from_=frm, to=to, site=site,
                         metrics=metrics)


def model(*types, name="Net"):
    """model.json's models entry: modules m0, m1... of these types, in this forward order."""
    names = [f"m{i}" for i in range(len(types))]
    return [{"name": name, "order": names, "modules": {n: {"type": t} for n, t in zip(names, types)}}]


def optimizer(type_="SGD", lr=0.01, **group):
    return [{"type": type_, "groups": [{"lr": lr, **group}], "params": 10}]


def explain(events, models=(), optimizers=(), every=10, presence=0.5):
    ctx = Context(events=list(events), models=list(models), optimizers=list(optimizers), every=every)
    hyps = [h for h in (r(ctx) for r in RULES) if h is not None]
    settings = [s for s in (f(ctx) for f in SETTINGS) if s is not None]
    return rank(hyps, slack=every, loss_window=ctx.loss_window, presence=presence, settings=settings,
                position=lambda o: ctx.position(o.root, o.module))


def by_kind(hyps):
    return {h.kind: h for h in hyps}


# events that make each rule fire (steps after 0, so that a training setting can explain them)
FIRES = {
    Kind.vanishing_gradient: [ev(GRAD, 2, "m0", "healthy", "vanishing", "gradient", rms=1e-12, ratio_to_max=1e-9)],
    Kind.exploding_gradient: [ev(GRAD, 2, "m0", "healthy", "exploding", "gradient", rms=1e4)],
    Kind.dead_activation: [ev(ACT, 2, "m1", "normal", "dead", "output", dead_frac=0.9)],
    Kind.saturated_activation: [ev(ACT, 2, "m1", "normal", "saturated", "output", sat_frac=0.9)],
    Kind.non_finite: [ev("non_finite", 2, "m0", "normal", "non_finite", "output")],
    Kind.data_anomaly: [ev("data_anomaly", 2, None, "normal", "extreme_scale", "input", mean=100.0, std=50.0)],
    Kind.unchanged_weights: [ev(UPD, 2, "m0", "updating", "unchanged", "weights", in_optimizer=1.0)],
    Kind.no_gradient: [ev(GRAD, 2, "m0", "healthy", "absent", "gradient", rms=0.0)],
    Kind.loss_plateau: [ev(LOSS, 30, None, "normal", "plateau", "loss", recent=2.3, start=2.31, best=2.3)],
    Kind.loss_divergence: [ev(LOSS, 5, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)],
    Kind.unstable_loss: [ev(LOSS, 12, None, "normal", "oscillating", "loss", low=0.5, high=4.0, start=2.3)],
}
LOWERED = {Kind.exploding_gradient, Kind.loss_divergence, Kind.unstable_loss, Kind.dead_activation}
LR_TRY = re.compile(r"lr=(-?[\d.e+-]+)\b.*?\btry (-?[\d.e+-]+)")
RAISE = re.compile(r"\b(raise|increase|higher|larger)\b.{0,40}learning rate|learning rate.{0,20}\b(up|higher)\b")
MODELS = model("Linear", "ReLU", "Linear")


def lr_suggestions(h):
    return [s for s in h.suggestions if "lr=" in s or "learning rate" in s]


@pytest.mark.parametrize("kind", list(FIRES), ids=[k.value for k in FIRES])
@pytest.mark.parametrize("opt,lr", [("SGD", 50.0), ("SGD", 0.05), ("SGD", 1e-6), ("AdamW", 1000.0),
                                    ("Adam", 1e-3), ("Adam", 1e-7), (None, None)],
                         ids=["sgd-high", "sgd-usual", "sgd-low", "adamw-high", "adam-usual", "adam-low", "no-opt"])
def test_every_lr_suggestion_points_the_right_way(kind, opt, lr):
    """Every lr number after "try" is below the current lr; only a plateau below its optimizer's usual range is
    told to raise it; runs that diverge, explode, oscillate or die are told to lower it even without an
    optimizer (manual SGD)."""
    opts = optimizer(opt, lr) if opt else []
    hyps = by_kind(explain(FIRES[kind], MODELS, opts))
    h = hyps[kind]
    for s in h.suggestions:
        for current, tried in LR_TRY.findall(s):
            assert float(tried) < float(current), (kind, s)
    text = " ".join(lr_suggestions(h))
    raises = bool(RAISE.search(text))
    assert raises == (kind == Kind.loss_plateau and lr is not None and lr < 1e-3 * (10 if opt == "SGD" else 1) / 10
                      ), (kind, lr, text)
    if kind in LOWERED or (kind == Kind.loss_plateau and lr is not None and lr >= 50):
        if opt is None:
            assert "lower the learning rate" in text, (kind, h.suggestions)
        elif lr >= 50:  # far above the usual range: straight to the usual value
            assert LR_TRY.search(text) and float(LR_TRY.search(text).group(2)) <= 1e-2, text


def test_plateau_with_a_huge_lr_is_never_told_to_raise_it():
    """GPT-2 under Trainer at AdamW lr=1000 once got loss_plateau "try 100000"."""
    h = by_kind(explain(FIRES[Kind.loss_plateau], MODELS, optimizer("AdamW", 1000.0)))[Kind.loss_plateau]
    assert h.suggestions[0] == "lr=1000 with AdamW: try 0.001"


def test_tiny_lr_plateau_is_told_the_usual_range():
    h = by_kind(explain(FIRES[Kind.loss_plateau], MODELS, optimizer("SGD", 1e-6)))[Kind.loss_plateau]
    assert h.suggestions[0].startswith("lr=1e-06 with SGD is below its usual range") and "0.01" in h.suggestions[0]
    assert not LR_TRY.search(h.suggestions[0])


def test_negative_and_zero_lr():
    h = by_kind(explain(FIRES[Kind.loss_divergence], MODELS, optimizer("SGD", -0.1)))[Kind.loss_divergence]
    assert "negative" in h.suggestions[0] and not LR_TRY.search(h.suggestions[0])
    h = by_kind(explain(FIRES[Kind.loss_divergence], MODELS, optimizer("SGD", 0.0)))[Kind.loss_divergence]
    assert not any(LR_TRY.search(s) for s in h.suggestions)


# ---------------------------------------------------------------- confidence means presence, rank means cause

def test_nan_after_explosion_keeps_its_confidence_and_fails_the_gate():
    hyps = explain([ev(GRAD, 3, "m0", "healthy", "exploding", "gradient", rms=1e4),
                    ev("non_finite", 5, "m0", "exploding", "non_finite", "output")], MODELS)
    assert [h.kind for h in hyps][:2] == [Kind.exploding_gradient, Kind.non_finite]
    nan = hyps[1]
    assert nan.caused_by == Kind.exploding_gradient and nan.confidence == 0.9 and nan.rank == 2

    class R:  # failing_kinds reads only .hypotheses
        hypotheses = hyps
    assert failing_kinds(R, ["non_finite"], 0.5) == ["non_finite"]  # type: ignore[arg-type]


def test_causes_come_before_consequences_then_confidence():
    """A chain data -> exploding -> NaN is listed in causal order whatever the confidences; an unrelated
    hypothesis sorts among the roots by confidence."""
    evs = [ev("data_anomaly", 1, None, "normal", "shifted", "input", mean=9.0, std=1.0, baseline_mean=0.0,
              baseline_std=1.0),
           ev(GRAD, 2, "m0", "healthy", "exploding", "gradient", rms=1e4),
           ev("non_finite", 3, "m0", "normal", "non_finite", "output"),
           ev(UPD, 40, "m2", "updating", "unchanged", "weights", in_optimizer=0.0)]
    hyps = explain(evs, MODELS, optimizer())
    kinds = [h.kind for h in hyps]
    assert kinds.index(Kind.data_anomaly) < kinds.index(Kind.exploding_gradient) < kinds.index(Kind.non_finite)
    k = by_kind(hyps)
    assert k[Kind.non_finite].caused_by == Kind.data_anomaly  # the most upstream cause that holds is named
    assert k[Kind.exploding_gradient].caused_by == Kind.data_anomaly
    assert k[Kind.non_finite].confidence > k[Kind.data_anomaly].confidence  # presence, untouched
    assert [h.rank for h in hyps] == list(range(1, len(hyps) + 1))


def test_a_cause_must_be_present_and_earlier():
    nan_first = [ev("non_finite", 1, "m0", "normal", "non_finite", "output"),
                 ev(GRAD, 50, "m0", "healthy", "exploding", "gradient", rms=1e4)]
    assert by_kind(explain(nan_first, MODELS))[Kind.non_finite].caused_by is None
    weak = [ev(GRAD, 1, "m0", "healthy", "exploding", "gradient", rms=1e4),
            ev("non_finite", 2, "m0", "normal", "non_finite", "output")]
    hyps = explain(weak, MODELS, presence=0.95)  # the explosion (0.74) is not "present" at this bar
    assert by_kind(hyps)[Kind.non_finite].caused_by is None and hyps[0].kind == Kind.non_finite


def test_training_dynamics_explain_nothing_present_at_step_zero():
    """An oscillating loss pins bounded units at their rails during training, not before the first update."""
    loss = [ev(LOSS, 12, None, "normal", "oscillating", "loss", low=0.5, high=4.0, start=2.3)] * 2
    at0 = [ev(ACT, 0, "m1", "normal", "saturated", "output", sat_frac=0.9)]
    assert by_kind(explain(loss + at0, MODELS))[Kind.saturated_activation].caused_by is None
    later = [ev(ACT, 3, "m1", "normal", "saturated", "output", sat_frac=0.9)]
    assert by_kind(explain(loss + later, MODELS))[Kind.saturated_activation].caused_by == Kind.unstable_loss


# ---------------------------------------------------------------- the learning rate as the named cause

OVERSIZED = [ev(UPD, s, m, "updating", "oversized", "weights", update_ratio=0.8) for s in (1, 11) for m in ("m0", "m2")]


def test_oversized_updates_name_the_lr_in_the_divergence_it_caused():
    evs = OVERSIZED + [ev(ACT, 3, "m1", "normal", "dead", "output", dead_frac=0.95),
                       ev(GRAD, 25, "m0", "healthy", "exploding", "gradient", rms=1e4),
                       ev(LOSS, 2, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)]
    hyps = explain(evs, MODELS, optimizer("SGD", 5.0))
    top = hyps[0]
    assert top.kind == Kind.loss_divergence  # the explosion began too late to be the divergence's cause
    assert "the learning rate is too large: each step changes the weights by 80% of their size" in top.summary.lower()
    assert top.suggestions[0] == "lr=5 with SGD: try 0.01"
    k = by_kind(hyps)
    for kind in (Kind.dead_activation, Kind.exploding_gradient):
        assert k[kind].caused_by == Kind.loss_divergence and k[kind].suggestions[0] == top.suggestions[0]
        assert k[kind].rank > top.rank


def test_the_most_upstream_symptom_names_the_lr():
    """Gradients exploding with the loss rise (within the sampling slack) are its cause in the table: the
    explosion states the lr, the divergence ranks below it (the evidence of the link says so)."""
    evs = OVERSIZED + [ev(GRAD, 3, "m0", "healthy", "exploding", "gradient", rms=1e4),
                       ev(LOSS, 2, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)]
    hyps = explain(evs, MODELS, optimizer("SGD", 5.0))
    assert [h.kind for h in hyps] == [Kind.exploding_gradient, Kind.loss_divergence]
    assert "learning rate is too large" in hyps[0].summary.lower() and hyps[1].caused_by == Kind.exploding_gradient
    assert "names the learning rate" in hyps[1].because


def test_oversized_updates_without_a_loss_rise_name_the_lr_in_the_dead_units():
    evs = OVERSIZED + [ev(ACT, 3, "m1", "normal", "dead", "output", dead_frac=0.95)]
    h = explain(evs, MODELS, optimizer("Adam", 0.5))[0]
    assert h.kind == Kind.dead_activation and "learning rate is too large" in h.summary.lower()
    assert h.suggestions[0] == "lr=0.5 with Adam: try 0.001"
    assert [f["params"] for f in h.fixes if f["id"] == "lr_scale"] == [{"factor": 0.002}]
    # 10-100x above the usual range: one order down lands inside it, tried before the usual value
    near = explain(evs, MODELS, optimizer("Adam", 0.05))[0]
    assert near.suggestions[0] == "lr=0.05 with Adam: try 0.005, or 0.001 (Adam's usual value)"
    assert [f["params"] for f in near.fixes if f["id"] == "lr_scale"] == [{"factor": 0.1}, {"factor": 0.02}]
    manual = explain(evs, MODELS)[0]  # no optimizer: the words, no number
    assert manual.suggestions[0].startswith("lower the learning rate")
    # and the update's sign, which nothing measures without an optimizer (an ascent climbs the same way)
    assert "check that it subtracts the gradient: p -= lr * p.grad" in manual.suggestions[0]
    blow = explain([ev(GRAD, 3, "m0", "healthy", "exploding", "gradient", rms=1e4)], MODELS)[0]
    assert blow.kind == Kind.exploding_gradient and any(t.endswith("before the manual update") for t in blow.suggestions)


def test_units_dead_before_any_update_are_not_blamed_on_the_lr():
    evs = OVERSIZED + [ev(ACT, 0, "m1", "normal", "dead", "output", dead_frac=0.95)]
    h = explain(evs, MODELS, optimizer("SGD", 5.0))[0]
    assert h.kind == Kind.dead_activation and "learning rate is too large" not in h.summary


def test_units_dead_from_the_start_get_no_lr_advice_or_fix():
    """Verify refuted a smaller lr for units dead at initialisation (a negative bias): none is offered."""
    h = explain([ev(ACT, 0, "m1", "normal", "dead", "output", dead_frac=0.95)], MODELS, optimizer("SGD", 5.0))[0]
    assert h.kind == Kind.dead_activation
    assert not any("lr=" in s or "learning rate" in s for s in h.suggestions), h.suggestions
    assert not any(f["id"] == "lr_scale" for f in h.fixes)
    later = explain([ev(ACT, 4, "m1", "normal", "dead", "output", dead_frac=0.95)], MODELS, optimizer("SGD", 5.0))[0]
    assert any(f["id"] == "lr_scale" for f in later.fixes)  # died while training at a large lr: it may be the lr


def gained(gain, *types):
    """model() whose Linear layers were initialised at this std × sqrt(fan_in) (model.json's init_gain)."""
    out = model(*types)
    for info in out[0]["modules"].values():
        if info["type"] == "Linear":
            info["init_gain"] = gain
    return out


def reinits(h):
    return [f["params"] for f in h.fixes if f["id"] == "reinit"]


def test_symptoms_from_step_zero_get_reinit_only_where_the_init_explains_them():
    """A symptom before any update comes from the init or the data. Dead units: re-initialise (He, biases 0)
    whatever the weights' scale (a bias keeps them off); saturation and explosion only when the weights were
    measured too large, a vanishing gradient only when too small; later onsets: never (training did it)."""
    act = ("Linear", "ReLU", "Linear")
    dead = [ev(ACT, 0, "m1", "normal", "dead", "output", dead_frac=0.95)]
    assert reinits(explain(dead, gained(0.58, *act))[0]) == [{"layer": "Linear", "init": "kaiming"}]
    sat = [ev(ACT, 0, "m0", "normal", "saturated", "activation", sat_frac=0.9)]
    big, usual = gained(16.0, "Linear", "Tanh", "Linear"), gained(0.58, "Linear", "Tanh", "Linear")
    assert reinits(by_kind(explain(sat, big))[Kind.saturated_activation]) == [{"layer": "Linear", "init": "xavier"}]
    assert reinits(by_kind(explain(sat, usual))[Kind.saturated_activation]) == []  # the inputs' scale, not the init
    boom = [ev(GRAD, 0, "m0", "healthy", "exploding", "gradient", rms=1e4)]
    assert reinits(explain(boom, gained(2.8, *act))[0]) == [{"layer": "Linear", "init": "kaiming"}]
    assert reinits(explain(boom, gained(1.4, *act))[0]) == []
    fade = [ev(GRAD, 0, "m0", "healthy", "vanishing", "gradient", rms=1e-12, ratio_to_max=1e-9)]
    small = gained(0.05, "Linear", "Linear", "Linear")  # functional activations: Glorot
    assert reinits(explain(fade, small)[0]) == [{"layer": "Linear", "init": "xavier"}]
    assert reinits(explain(fade, gained(0.58, "Linear", "Linear", "Linear"))[0]) == []  # a functional sigmoid?
    later = [ev(GRAD, 3, "m0", "healthy", "vanishing", "gradient", rms=1e-12, ratio_to_max=1e-9)]
    assert reinits(explain(later, small)[0]) == []
    assert not any(reinits(h) for h in explain([ev(ACT, 4, "m1", "normal", "dead", "output")], gained(9.0, *act)))


def test_an_explosion_before_any_update_leads_with_the_forward_scale_not_the_lr():
    """Gradients exploding at step 0 came before any update: the first advice is what scales the forward pass up
    (the init when it was measured too large, else inputs, sums that should be means, unnormalised residual
    branches); a smaller lr stays, last, since it tames what follows. Later onsets lead with the lr."""
    act = ("Linear", "ReLU", "Linear")
    boom = [ev(GRAD, 0, "m0", "healthy", "exploding", "gradient", rms=1e4)]
    usual = explain(boom, gained(0.58, *act), optimizer("Adam", 0.01))[0]
    assert usual.kind == Kind.exploding_gradient
    assert "before any update" in usual.suggestions[0] and "sums over many terms" in usual.suggestions[0]
    assert usual.suggestions[-1] == "lr=0.01 with Adam: try 0.001"
    large = explain(boom, gained(2.8, *act), optimizer("Adam", 0.01))[0]
    assert large.suggestions[0].startswith("check the initialisation scale")
    later = [ev(GRAD, 3, "m0", "healthy", "exploding", "gradient", rms=1e4)]
    trained = explain(later, gained(0.58, *act), optimizer("Adam", 0.01))[0]
    assert trained.suggestions[0] == "lr=0.01 with Adam: try 0.001"
    assert not any("before any update" in s for s in trained.suggestions)


def test_adam_eps_is_named_for_a_nan_in_float16_adam_only():
    nan = [ev("non_finite", 1, "m0", "normal", "non_finite", "output")]

    def adam(eps, dtypes, type_="Adam"):
        return [{"type": type_, "groups": [{"lr": 1e-3, "eps": eps}], "params": 10, "dtypes": dtypes}]

    h = explain(nan, MODELS, adam(1e-8, ["float16"]))[0]
    assert h.fixes[0] == {"id": "adam_eps", "params": {"value": 1e-4}, "text": h.suggestions[0]}, h.fixes
    assert "float16" in h.suggestions[0] and "eps=1e-08" in h.suggestions[0]
    for opts in (adam(1e-8, ["float32"]), adam(1e-8, ["bfloat16"]), adam(1e-4, ["float16"]),
                 adam(1e-8, ["float16"], "RMSprop")):
        assert not any(f["id"] == "adam_eps" for f in explain(nan, MODELS, opts)[0].fixes), opts


# ---------------------------------------------------------------- activation blow-ups are evidence

BLOWUP = [ev(ACT, 2, "m2", "normal", "anomalous", "output", std=1e6, baseline_std=1.0, std_ratio=1e6),
          ev(ACT, 2, "m0", "normal", "anomalous", "output", std=1e4, baseline_std=1.0, std_ratio=1e4),
          ev(ACT, 1, "m1", "normal", "anomalous", "output", std=5e3, baseline_std=1.0, std_ratio=5e3)]


def test_activation_blowup_alone_is_an_explosion_at_its_first_module():
    """A Transformer at lr 2000 whose loss went 9.3 -> 126,825 by step 2 was called healthy."""
    hyps = explain(BLOWUP, MODELS, optimizer("SGD", 2000.0))
    assert hyps[0].kind == Kind.exploding_gradient and hyps[0].confidence >= 0.5
    assert (hyps[0].origin.module, hyps[0].origin.step) == ("m1", 1)  # earliest step, then forward order
    assert "activations blow up at m1 from step 1" in hyps[0].summary
    assert hyps[0].suggestions[0] == "lr=2000 with SGD: try 0.01"


def test_activation_blowup_is_evidence_for_a_diverging_loss():
    hyps = explain(BLOWUP + FIRES[Kind.loss_divergence], MODELS, optimizer("SGD", 2000.0))
    assert [h.kind for h in hyps] == [Kind.loss_divergence]
    assert "activations blow up at m1" in hyps[0].summary
    assert any(e["to"] == "anomalous" for e in hyps[0].evidence)


def test_logits_sharpening_from_a_tiny_start_are_not_a_blowup():
    """A healthy warm-up classifier's logits grow 100x, from std 0.07 to 7.5: anomalous, not an explosion."""
    sharp = [ev(ACT, 40, "m2", "normal", "anomalous", "output", std=7.5, baseline_std=0.07)]
    assert explain(sharp, MODELS, optimizer("AdamW", 1e-3)) == []


def test_a_blowup_that_settled_is_not_reported():
    settled = BLOWUP[:1] + [ev(ACT, 30, "m2", "anomalous", "normal", "output", std=1.0)]
    assert all(h.confidence < 0.5 for h in explain(settled, MODELS))


# ---------------------------------------------------------------- weight-decay collapse

COLLAPSE = [ev(UPD, 5, m, "updating", "collapsing", "weights", weight_norm=1e-6) for m in ("m0", "m2")]


def test_weight_decay_collapse_is_named():
    """makemore --weight-decay 1000 got no_gradient "look for .detach()"."""
    evs = COLLAPSE + FIRES[Kind.loss_plateau] + [ev(GRAD, 8, "m0", "healthy", "absent", "gradient", rms=0.0)]
    hyps = explain(evs, MODELS, optimizer("AdamW", 5e-4, weight_decay=1000.0))
    top = hyps[0]
    assert top.kind == Kind.loss_plateau and "weight decay collapses the weights" in top.summary.lower()
    assert top.suggestions[0].startswith("lower weight_decay (1000 with AdamW) to 0.01-0.1")
    nograd = by_kind(hyps)[Kind.no_gradient]
    assert nograd.caused_by == Kind.loss_plateau and nograd.suggestions[0] == top.suggestions[0]
    assert not any(RAISE.search(s) for h in hyps for s in h.suggestions)


def test_weight_decay_is_named_in_a_plateau_dated_at_step_zero():
    """A loss that never moved is dated at step 0, where its flat stretch began; it still says the updates from
    the first on did not lower it, which a decay that collapses the weights from step 5 explains."""
    flat = [ev(LOSS, 0, None, "normal", "plateau", "loss", start=3.3, best=3.29, recent=3.3)]
    top = explain(COLLAPSE + flat, MODELS, optimizer("AdamW", 5e-4, weight_decay=1000.0))[0]
    assert top.kind == Kind.loss_plateau and "weight decay collapses the weights" in top.summary.lower()
    assert top.suggestions[0].startswith("lower weight_decay (1000 with AdamW)")


def test_a_usual_weight_decay_is_not_blamed():
    evs = COLLAPSE + FIRES[Kind.loss_plateau]
    h = explain(evs, MODELS, optimizer("AdamW", 1e-3, weight_decay=0.01))[0]
    assert "weight decay" not in h.summary


# ---------------------------------------------------------------- suggestions fit the model seen

def test_no_normalisation_or_residual_advice_for_a_model_that_has_them():
    vanish = FIRES[Kind.vanishing_gradient]
    plain = by_kind(explain(vanish, model(*["Linear", "Sigmoid"] * 5)))[Kind.vanishing_gradient]
    tips = " ".join(plain.suggestions)
    assert "normalisation" in tips and "residual" in tips and "ReLU" in tips
    for norm in ("LayerNorm", "SyncBatchNorm", "InstanceNorm3d", "RMSNorm", "LlamaRMSNorm"):
        h = by_kind(explain(vanish, model(*["Linear", "Sigmoid"] * 5, norm)))[Kind.vanishing_gradient]
        assert "normalisation" not in " ".join(h.suggestions), norm
    gpt = by_kind(explain(vanish, model(*["GPT2Block", "Linear", "GELU"] * 4)))[Kind.vanishing_gradient]
    assert not any("residual" in s or "switch to ReLU" in s for s in gpt.suggestions)
    sat = by_kind(explain(FIRES[Kind.saturated_activation], model("Linear", "BatchNorm1d", "Tanh")))
    assert not any("BatchNorm" in s for s in sat[Kind.saturated_activation].suggestions)


def test_the_reasoner_imports_no_io_module():
    """No trace reader, JSON library or torch (msgspec is there: it defines the event type, events.SemanticEvent)."""
    code = ("import sys, neuraldbg_cli.reason.reasoner; "
            "bad = [m for m in ('neuraldbg_cli.trace.reader', 'neuraldbg_cli.trace.job', 'orjson', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env())
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- through the real CLI

DIVERGING = """
import torch, torch.nn as nn
torch.manual_seed(0)
x = torch.randn(256, 8)
y = x.sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.1), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr={lr})
for step in range({steps}):  # full batch: every step overshoots further, the same on any CPU
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("final loss", loss.item())
"""


def _run(tmp_path, source, *options):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    run_dir = tmp_path / "rd"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, *options, script, cwd=tmp_path)
    report = json.loads(run_cli("explain", run_dir, "--format", "json").stdout)
    return proc, report


def test_cli_mlp_with_a_far_too_high_lr_is_told_to_lower_it(tmp_path):
    proc, report = _run(tmp_path, DIVERGING.format(lr=0.5, steps=12))
    assert proc.returncode == 0, proc.stderr
    top = report["hypotheses"][0]
    assert top["kind"] in ("loss_divergence", "exploding_gradient") and top["confidence"] >= 0.5, report
    lowered = [LR_TRY.search(s) for s in top["suggestions"]]
    assert any(m and float(m.group(2)) < float(m.group(1)) == 0.5 for m in lowered), top["suggestions"]
    assert not any(RAISE.search(s) for h in report["hypotheses"] for s in h["suggestions"])


def test_cli_nan_after_an_explosion_still_fails_the_non_finite_gate(tmp_path):
    """The weights grow geometrically until float32 overflows: an explosion, then a real NaN. The NaN
    ranks below its cause but keeps its confidence, so --fail-on non_finite exits 3."""
    proc, report = _run(tmp_path, DIVERGING.format(lr=0.5, steps=80), "--fail-on", "non_finite")
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    nan = next(h for h in report["hypotheses"] if h["kind"] == "non_finite")
    assert nan["confidence"] >= 0.5 and nan["rank"] > 1 and nan.get("caused_by"), report["hypotheses"]


def test_oversized_updates_drop_a_raise_suggestion():
    """Updates far too large say the lr is too large, whatever its value: no hypothesis they produced may
    keep a "raise the learning rate" suggestion."""
    hyps = explain(OVERSIZED + FIRES[Kind.loss_plateau], MODELS, optimizer("SGD", 1e-6))
    plateau = by_kind(hyps)[Kind.loss_plateau]
    assert "learning rate is too large" in plateau.summary.lower()
    assert not any(RAISE.search(s) for s in plateau.suggestions), plateau.suggestions


# ---------------------------------------------------------------- advice read with the schedule


def scheduled(type_="AdamW", points=(), **group):
    """An optimizer whose lr the probe recorded at sampled steps (model.json's lr_at: [step, lr])."""
    return [{"type": type_, "groups": [{"lr": points[-1][1], **group}], "params": 10,
             "lr_at": [list(p) for p in points]}]


def test_the_lr_quoted_is_the_one_that_drove_the_symptom_with_its_schedule():
    """A warm-up recorded at a tiny first value, and a schedule that multiplied the lr upward: the advice
    quotes the largest lr in force while the divergence developed (never the first value, nor a peak that was
    over before it began), the value when it began, and the schedule's shape."""
    warm = scheduled("SGD", [(0, 1e-4), (50, 0.5), (100, 5.0), (300, 0.5)])
    shape = "its schedule rises 0.0001 → 5 by step 100, then falls → 0.5"
    div = [ev(LOSS, 200, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)]
    h = by_kind(explain(div, MODELS, warm))[Kind.loss_divergence]
    assert h.suggestions[0] == f"lr=5 with SGD ({shape}): try 0.01", h.suggestions
    early = [ev(LOSS, 60, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)]
    h = by_kind(explain(early, MODELS, warm))[Kind.loss_divergence]
    assert h.suggestions[0] == f"lr=5 with SGD (0.5 when it began at step 60; {shape}): try 0.01", h.suggestions
    late = [ev(LOSS, 320, None, "normal", "diverging", "loss", recent=1e5, start=2.3, best=2.2)]
    assert by_kind(explain(late, MODELS, warm))[Kind.loss_divergence].suggestions[0].startswith("lr=0.5 with SGD")
    # a plateau dated at a warm-up's lr of 0 developed under the lr that followed: no "lr=0, nothing can change"
    zero = scheduled("AdamW", [(0, 0.0), (10, 1e-3), (20, 2e-3)])
    flat = [ev(LOSS, 0, None, "normal", "plateau", "loss", recent=2.3, start=2.3, best=2.3)]
    h = by_kind(explain(flat, MODELS, zero))[Kind.loss_plateau]
    assert not any("lr=0" in s for s in h.suggestions), h.suggestions


def test_weight_decay_collapse_under_a_warmup_is_named_before_any_lr_advice():
    """The lr at description time is a warm-up's ~0 (lr * weight_decay looks harmless); at the collapse the
    full lr is in force. The oversized updates of weights shrinking to 0 are the decay, not the lr."""
    opt = scheduled("SGD", [(0, 1e-5), (10, 0.1)], weight_decay=5.0)
    opt[0]["groups"][0]["lr"] = 1e-5
    evs = COLLAPSE + [ev(LOSS, 5, None, "normal", "plateau", "loss", recent=2.3, start=2.31, best=2.3),
                      ev(UPD, 6, "m0", "updating", "oversized", "weights", update_ratio=0.4)]
    top = explain(evs, MODELS, opt)[0]
    assert top.summary.lower().startswith("weight decay collapses the weights"), top.summary
    assert top.suggestions[0].startswith("lower weight_decay (5 with SGD)")
    assert not any("learning rate is too large" in s for s in [top.summary])
    assert not any(RAISE.search(s) for s in top.suggestions)


def postln(norm_first=False):
    """A torch.nn TransformerEncoderLayer stack as model.json lists it (forward order)."""
    names, order = {}, []
    for i in range(6):
        block = [("self_attn", "MultiheadAttention", 0), ("self_attn.out_proj", "Linear", 8),
                 ("linear1", "Linear", 8), ("linear2", "Linear", 8)]
        norms = [("norm1", "LayerNorm", 2), ("norm2", "LayerNorm", 2)]
        seq = norms[:1] + block[:2] + norms[1:] + block[2:] if norm_first else block[:2] + norms[:1] + block[2:] + norms[1:]
        for n, t, p in seq:
            names[f"enc.layers.{i}.{n}"] = {"type": t, "params": p}
            order.append(f"enc.layers.{i}.{n}")
    names["head"] = {"type": "Linear", "params": 8}
    return [{"name": "Net", "order": [*order, "head"], "modules": names}]


def test_postln_without_warmup_is_told_warmup_or_preln_never_residuals():
    evs = [ev(GRAD, 20, "enc.layers.0.linear1", "healthy", "vanishing", "gradient", rms=1e-9, ratio_to_max=1e-5),
           ev(LOSS, 0, None, "normal", "plateau", "loss", recent=2.77, start=2.9, best=2.6)]
    flat = scheduled("AdamW", [(0, 5e-3)])
    hyps = by_kind(explain(evs, postln(), flat))
    for kind in (Kind.vanishing_gradient, Kind.loss_plateau):
        tips = hyps[kind].suggestions
        assert "warm-up" in tips[0] and "norm_first=True" in tips[0], tips
        assert not any("residual" in s and "add" in s.split("residual")[0] for s in tips), tips
    # with a warm-up, or Pre-LN blocks, that advice does not apply
    warm = scheduled("AdamW", [(0, 1e-4), (10, 2e-3), (30, 5e-3)])
    assert not any("norm_first" in s for h in explain(evs, postln(), warm) for s in h.suggestions)
    assert not any("norm_first" in s for h in explain(evs, postln(norm_first=True), flat) for s in h.suggestions)


def test_postln_advice_reads_the_optimizer_facts_of_model_json():
    evs = [ev(LOSS, 0, None, "normal", "plateau", "loss", recent=2.77, start=2.9, best=2.6)]

    def with_facts(warmup, kind="AdamW"):
        models = postln()
        models[0]["facts"] = {"optimizers": [{"type": kind, "lr": 5e-3, "weight_decay": [0.01], "warmup": warmup}]}
        return models

    tips = lambda models: [s for h in explain(evs, models, []) for s in h.suggestions]  # noqa: E731
    assert any("AdamW and no warm-up" in s for s in tips(with_facts(False)))
    assert not any("norm_first" in s for s in tips(with_facts(True)))  # the fact, not the (absent) lr history
    assert not any("norm_first" in s for s in tips(with_facts(None)))  # unknown: no claim
    assert not any("norm_first" in s for s in tips(with_facts(False, "SGD")))


@pytest.mark.parametrize(
    "points, warm",
    [
        ([[0, 1e-4], [10, 2e-3], [30, 5e-3], [100, 1e-3]], True),  # linear warm-up, then a decay
        ([[0, 4e-4], [10, 5e-3], [50, 1e-5]], True),  # OneCycle: max_lr / 25 first
        ([[0, 5e-3]], False),  # constant
        ([[0, 5e-3], [50, 5e-4]], False),  # a step decay
        ([[0, 1e-2], [10, 1e-3], [20, 1e-2]], False),  # cosine restarts: it decays first
        ([[0, 1e-3, 1e-4], [10, 1e-3, 1e-3]], True),  # one group warms up
    ],
)
def test_what_a_warm_up_is(points, warm):
    assert warms_up(points) is warm


def test_rmsprops_first_steps_name_no_learning_rate():
    """torch's RMSprop has no bias correction: its first steps are 1/sqrt(1 - alpha^k) times its steady ones (10x at
    the first, alpha 0.99), so a U-Net's first updates change its weights by 20-50% at lr 1e-3 in the healthy twin
    as in the broken one (a Dice on logits). Judged at the steady size they are 2-5%: no lr is named. The same
    steps under SGD, or ten times larger under RMSprop, name it."""
    div = [ev(LOSS, 1, None, "normal", "diverging", "loss", recent=1.6, start=-0.57, best=-0.57)]
    first = [ev(UPD, 0, m, "updating", "oversized", "weights", update_ratio=r) for m, r in (("m0", 0.21), ("m1", 0.51))]
    models = model("Conv2d", "Conv2d")
    top = explain(first + div, models, optimizer("RMSprop", 1e-3, alpha=0.99))[0]
    assert top.kind == Kind.loss_divergence and "learning rate is too large" not in top.summary.lower()
    top = explain(first + div, models, optimizer("SGD", 1e-3))[0]
    assert "learning rate is too large" in top.summary.lower()
    big = [ev(UPD, 0, m, "updating", "oversized", "weights", update_ratio=5.0) for m in ("m0", "m1")]
    top = explain(big + div, models, optimizer("RMSprop", 1e-3, alpha=0.99))[0]
    assert "learning rate is too large" in top.summary.lower()
