"""The normalisation family on hand-made statistics and events (pure: no torch): the classifiers, the drift of
running statistics judged over time, gains judged against their own start, the rule's advice and its place in
the causal table. Real scripts through the CLI are in tests/reason/test_architecture.py."""

import math

import pytest

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.normalization import classify_gain, classify_norm, drift_level, normalization_fault
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.reason.reasoner import rank
from neuraldbg_cli.trace.events import (
    Hypothesis,
    Kind,
    ModelInfo,
    ModuleInfo,
    NormStats,
    Origin,
    SemanticEvent,
    StepRecord,
)

TH = Thresholds()


def bn(shift=0.05, log_scale=0.05, batch=64, calls=1, tracked=100.0, training=True, momentum=0.1, gain=1.0):
    return NormStats(
        "BatchNorm2d", training, True, momentum, batch * 16, 1.0, 0.0, shift, log_scale, gain, batch, calls, tracked
    )


def test_classify_norm_keeps_its_states():
    assert classify_norm(bn(), True, TH) == "normal"
    assert classify_norm(bn(momentum=0.9), True, TH) == "momentum"
    poisoned = bn()
    poisoned.running_finite = 0.0
    assert classify_norm(poisoned, True, TH) == "poisoned"
    assert classify_norm(bn(shift=3.0, training=False), True, TH) == "eval_mode"
    assert classify_norm(bn(shift=3.0, training=False), False, TH) == "normal"  # frozen on purpose


def test_drift_is_measured_against_the_noise_of_the_batch():
    noise = 0.67 / math.sqrt(64)  # an i.i.d. batch of 64: its channel means sit ~0.084 running sigmas away
    assert drift_level(bn(shift=noise), TH) < 0.3
    assert drift_level(bn(shift=0.5), TH) > 1  # two sources normalised differently, in turn
    assert drift_level(bn(log_scale=1.0), TH) > 1  # variances 2.7x apart
    assert drift_level(bn(shift=0.5, batch=2), TH) < 1  # batch 2: its means are that noisy by themselves
    assert drift_level(bn(shift=0.2, batch=4096), TH) < 1  # a huge batch: the floor, not the noise, decides
    assert drift_level(bn(shift=0.5, calls=3), TH) is None  # a GAN's real and fake batches through one layer
    assert drift_level(bn(shift=0.5, training=False), TH) is None
    assert drift_level(bn(shift=0.5, tracked=20.0), TH) is None  # 0.9^20 = 12% of its 0/1 start remains
    assert drift_level(bn(shift=0.5, tracked=29.0), TH) > 1
    assert drift_level(bn(shift=0.5, tracked=200.0, momentum=0.01), TH) is None  # 0.99^200 = 13%
    assert drift_level(bn(shift=0.5, tracked=30.0, momentum=None), TH) > 1  # cumulative: the default's scale


def test_gain_is_judged_against_its_own_start_and_its_trend():
    assert classify_gain(0.03, 1.0, 0.3, False, TH) == "gain_collapse"  # falling through 5% of its start
    assert classify_gain(0.03, 1.0, 0.032, False, TH) == "normal"  # settled low, not falling (a long training)
    assert classify_gain(0.04, 1.0, 0.02, True, TH) == "gain_collapse"  # collapsed, jittering around 0
    assert classify_gain(0.5, 0.0, 0.0, False, TH) == "normal"  # zero-initialised (zero_init_residual): no start
    assert classify_gain(30.0, 1.0, 15.0, False, TH) == "gain_growth"
    assert classify_gain(30.0, 1.0, 29.0, False, TH) == "normal"  # large, no longer rising
    assert classify_gain(0.9, 1.0, 1.0, False, TH) == "normal"  # weight decay on a LayerNorm gain
    assert classify_gain(0.03, 1.0, None, False, TH) == "normal"  # its trend is not known yet


def observe(norms_at, steps, every=10):
    """norms_at(step) -> {(root, module): NormStats}; events of a Monitor fed every `every` steps."""
    events = []
    mon = Monitor(TH, events.append)
    mon.set_models(
        [ModelInfo("Net", "Net", {n: ModuleInfo(n, "BatchNorm2d", 32, False, True) for n in ("bn1", "bn2")})]
    )
    for step in range(0, steps, every):
        mon.observe(StepRecord(step=step, sampled=True, norms=norms_at(step)))
    mon.finish()
    return [e for e in events if e.type == "normalization_health"]


def test_a_drift_is_dated_where_it_began_and_a_converging_start_is_not_one():
    def norms(step):
        # bn1 converges from its 0/1 start (ln var ratio 6 at step 0, e-fold per 10 steps); bn2's batches
        # disagree with its running statistics for good once its statistics forgot their start
        start = bn(log_scale=6 * math.exp(-step / 10), tracked=float(step))
        return {("Net", "bn1"): start, ("Net", "bn2"): bn(shift=0.6, tracked=float(step))}

    evs = observe(norms, 120)
    assert [(e.module, e.step, e.to) for e in evs] == [("bn2", 30, "drift")]
    assert evs[0].metrics["drift"] > 1 and evs[0].metrics["batch"] == 64


def test_a_drift_that_ends_within_its_time_span_is_lag():
    evs = observe(lambda s: {("Net", "bn1"): bn(shift=0.6 if s < 60 else 0.05, tracked=float(s))}, 120)
    assert evs == []


def ev(step, module, to, **metrics):
    return SemanticEvent(
        type="normalization_health",
        step=step,
        module=module,
        root="Net",
        from_="normal",
        to=to,
        site="norm",
        metrics=metrics,
    )


def test_drift_advice_fits_its_cause():
    shuffled = normalization_fault(
        Context(events=[ev(30, "bn1", "drift", shift=0.5, log_scale=0.4, batch=64.0, momentum=0.1)])
    )
    assert shuffled.kind == Kind.normalization_fault and shuffled.origin.step == 30 and shuffled.confidence >= 0.5
    assert "0.5 running σ" in shuffled.summary and "0.084" in shuffled.summary
    assert any("shuffle" in s and "preprocessing" in s for s in shuffled.suggestions)
    assert any("update_bn" in s for s in shuffled.suggestions)
    lag = normalization_fault(Context(events=[ev(30, "bn1", "drift", shift=0.5, batch=64.0, momentum=None)]))
    assert "momentum=0.1" in lag.suggestions[0] and "momentum=None" in lag.suggestions[0]


def test_gain_collapse_names_the_penalty_unless_the_whole_model_collapses():
    gain = ev(100, "bn1", "gain_collapse", gain_rms=0.014, first_gain_rms=1.0)
    h = normalization_fault(Context(events=[gain]))
    assert "collapsed toward 0" in h.summary and "0.014x its first value 1" in h.summary
    assert any("weight_decay=0" in s and "L1" in s for s in h.suggestions)
    decay = SemanticEvent(
        type="parameter_update",
        step=5,
        module="fc",
        root="Net",
        from_="updating",
        to="collapsing",
        site="weights",
        metrics={},
    )
    assert normalization_fault(Context(events=[gain, decay])) is None  # the weight decay's story (settings)


@pytest.mark.parametrize("norm_state, caused_by", [("drift", Kind.unstable_loss), ("eval_mode", None)])
def test_a_drift_follows_a_blow_up_while_a_frozen_layer_causes_one(norm_state, caused_by):
    evidence = [{"type": "normalization_health", "to": norm_state}]
    norm = Hypothesis(
        kind=Kind.normalization_fault,
        confidence=0.7,
        origin=Origin(module="bn1", step=30),
        summary="",
        evidence=evidence,
    )
    loss = Hypothesis(kind=Kind.unstable_loss, confidence=0.7, origin=Origin(step=30), summary="")
    ranked = rank([norm, loss], slack=10)
    assert norm.caused_by == caused_by
    assert loss.caused_by == (None if caused_by else Kind.normalization_fault)
    assert ranked[0] is (loss if caused_by else norm)
