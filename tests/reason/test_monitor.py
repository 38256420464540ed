"""Pure classifiers and state machines (no torch): each state, debounce, onset step, non-finite at once."""
import math

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.activations import classify_activation
from neuraldbg_cli.reason.families.base import Machine
from neuraldbg_cli.reason.families.data import classify_data
from neuraldbg_cli.reason.families.gradient_observer import classify_gradient
from neuraldbg_cli.reason.families.loss_model import LossSeries
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import ActStats, GradStats, ModelInfo, ModuleInfo, StepRecord

TH = Thresholds()


def act(**kw):
    base = dict(n=1.0, mean=0.1, std=1.0, min=-2.0, max=2.0, zero_frac=0.0, dead_frac=0.0, sat01=0.0, sat11=0.0,
                nonfinite=0.0)
    base.update(kw)
    return ActStats(**base)


def test_gradient_states():
    assert classify_gradient(None, 1.0, None, True, 5, TH) == "absent"
    assert classify_gradient(0.0, 1.0, None, True, 5, TH) == "absent"
    assert classify_gradient(math.nan, 1.0, None, True, 5, TH) == "non_finite"
    assert classify_gradient(math.inf, 1.0, None, True, 5, TH) == "non_finite"
    assert classify_gradient(1e-9, 1.0, None, True, 5, TH) == "vanishing"
    assert classify_gradient(1e-9, 1.0, None, True, 2, TH) == "healthy"  # too shallow to compare
    assert classify_gradient(5.0, 5.0, 1e-3, True, 5, TH) == "exploding"  # 5000x its own baseline
    assert classify_gradient(0.01, 0.1, 0.01, True, 5, TH) == "healthy"


def test_activation_states():
    assert classify_activation(act(nonfinite=3.0), None, TH) == "non_finite"
    assert classify_activation(act(min=0.0, zero_frac=0.95, dead_frac=0.9), None, TH) == "dead"
    # sparse but alive ReLU: many zeros, few units dead over the batch
    assert classify_activation(act(min=0.0, zero_frac=0.65, dead_frac=0.05), None, TH) == "normal"
    assert classify_activation(act(min=0.0, max=1.0, sat01=0.9), None, TH) == "saturated"
    assert classify_activation(act(min=-1.0, max=1.0, sat11=0.9), None, TH) == "saturated"
    # a ReLU output within [0, 1] has exact zeros: not a saturated sigmoid
    assert classify_activation(act(min=0.0, max=0.9, zero_frac=0.6, sat01=0.6), None, TH) == "normal"
    assert classify_activation(act(std=500.0), 1.0, TH) == "anomalous"


def test_a_unit_silent_on_one_input_is_not_dead():
    """'Never active over the batch' needs a batch: a policy acting on one state at a time (REINFORCE) feeds its
    ReLU layer one sample, where every unit that is off for that input (half of them, more behind dropout)
    looks dead. The same fractions over 64 samples per unit are a dead layer."""
    one = dict(min=0.0, zero_frac=0.81, dead_frac=0.81)
    assert classify_activation(act(**one, per_unit=1.0), None, TH) == "normal"
    assert classify_activation(act(**one, per_unit=4.0), None, TH) == "normal"
    assert classify_activation(act(**one, per_unit=64.0), None, TH) == "dead"
    assert classify_activation(act(**one), None, TH) == "dead"  # not measured (0): judged as before
    # the output layer's lower bar too
    assert classify_activation(act(min=0.0, zero_frac=0.5, dead_frac=0.5, per_unit=1.0), None, TH, True) == "normal"


def test_act_stats_count_the_values_behind_each_unit():
    import torch

    from neuraldbg_cli.probe import tensorstats as ts

    x = torch.relu(torch.randn(1, 128, generator=torch.Generator().manual_seed(0)))  # one sample, 128 features
    out, lay = ts.full(x, ts.DEAD)
    s = ts.act_stats([float(v) for v in out], lay)
    assert s.per_unit == 1.0 and s.dead_frac == s.zero_frac
    x = torch.relu(torch.randn(8, 16, 4, 4, generator=torch.Generator().manual_seed(0)))  # conv: 16 channels
    out, lay = ts.full(x, ts.DEAD | ts.unit_axis_flags("Conv2d"))
    assert ts.act_stats([float(v) for v in out], lay).per_unit == 8 * 4 * 4


def test_data_states():
    assert classify_data(act(nonfinite=1.0), None, 20.0, TH) == "non_finite"
    assert classify_data(act(mean=127.0, std=73.0, min=0.0, max=255.0), None, 20.0, TH) == "extreme_scale"
    assert classify_data(act(mean=5.0, std=1.0), (0.0, 1.0), 20.0, TH) == "normal"
    assert classify_data(act(mean=0.0, std=15.0), (0.0, 1.0), 20.0, TH) == "shifted"


def test_a_single_value_has_no_distribution_to_shift():
    """An actor-critic's value loss gets one return per call (a 0-d target): its std is 0 by construction and the
    next step's return differs, which is no data shift. A real batch is still judged."""
    assert classify_data(act(mean=1.47, std=0.0, count=1.0), (1.53, 0.0), 20.0, TH) == "normal"
    assert classify_data(act(mean=1.47, std=0.0, count=64.0), (1.53, 0.0), 20.0, TH) == "shifted"
    assert classify_data(act(mean=1e3, std=0.0, count=1.0), (1.53, 0.0), 20.0, TH) == "extreme_scale"


def _last_state(losses):
    s = LossSeries(TH)
    return [s.add(i, v) for i, v in enumerate(losses)][-1][0]


def test_loss_states():
    assert _last_state([1.3 + 0.001 * (i % 2) for i in range(60)]) == "plateau"
    assert _last_state([1.0 / (1 + i) for i in range(30)]) == "normal"
    assert _last_state([1.0 * 1.2 ** i for i in range(30)]) == "diverging"
    assert _last_state([0.7] * 10 + [0.7 if i % 2 else 3.0 for i in range(30)]) == "oscillating"


def test_machine_debounce_and_onset():
    m = Machine("healthy", need=3, early=2)
    assert m.observe("vanishing", 5, {"a": 1}) == []
    assert m.observe("vanishing", 6, {}) == []
    assert m.observe("vanishing", 7, {}) == [("healthy", "vanishing", 5, {"a": 1})]  # onset step, onset metrics
    assert m.observe("vanishing", 8, {}) == []


def test_machine_non_finite_is_immediate_and_keeps_the_buildup():
    m = Machine("healthy", need=3, early=2)
    m.observe("exploding", 3, {})
    out = m.observe("non_finite", 4, {})
    assert [(a, b, s) for a, b, s, _ in out] == [("healthy", "exploding", 3), ("exploding", "non_finite", 4)]


def test_monitor_emits_unhealthy_from_the_first_observation():
    events = []
    mon = Monitor(TH, events.append)
    mods = {f"l{i}": ModuleInfo(name=f"l{i}", type="Linear", params=100, weight_ndim2=True) for i in range(4)}
    mon.set_models([ModelInfo(name="Net", cls="Net", modules=mods, order=list(mods))])
    for step in range(4):
        rec = StepRecord(step=step, sampled=True)
        for i in range(4):
            rec.grads[("Net", f"l{i}")] = GradStats(norm=10.0 ** (-12 + 3 * i), numel=100)
        mon.observe(rec)
    vanish = [e for e in events if e.to == "vanishing"]
    assert {e.module for e in vanish} == {"l0", "l1"} and all(e.step == 0 for e in vanish)


def test_reasoner_stack_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, neuraldbg_cli.reason.reasoner, neuraldbg_cli.reason.monitor, neuraldbg_cli.render, neuraldbg_cli.launch.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def _gan_records(g_scale, g_loss, d_loss, steps=120, every=10):
    """Two models trained against each other (separate loss series in every step), sampled like a run:
    every step at first, then every `every` steps. g_scale(step): G's per-layer gradient norm."""
    mods = {f"main.{i}": ModuleInfo(name=f"main.{i}", type="Linear", params=100, weight_ndim2=True,
                                    in_optimizer=True) for i in range(3)}
    models = [ModelInfo(name=n, cls=n, modules=dict(mods), order=list(mods)) for n in ("G", "D")]
    recs = []
    for step in range(steps):
        sampled = step <= 10 or step % every == 0
        rec = StepRecord(step=step, sampled=sampled, losses={"D": d_loss(step), "G": g_loss(step)},
                         active={"G", "D"})
        if sampled:
            for i in range(3):
                # G is read at D's optimizer step on the first step: no gradient yet
                rec.grads[("G", f"main.{i}")] = GradStats(norm=None if step == 0 else g_scale(step), numel=100)
                rec.grads[("D", f"main.{i}")] = GradStats(norm=1.0, numel=100)
        recs.append(rec)
    return models, recs


def _run(models, recs):
    events = []
    mon = Monitor(TH, events.append)
    mon.set_models(models)
    for rec in recs:
        mon.observe(rec)
    mon.finish()
    assert [e.step for e in events] == sorted(e.step for e in events)  # dated back, still written in order
    return events


def test_whole_model_gradient_fading_while_its_loss_does_not_improve_is_vanishing():
    """All of G's layers shrink together (no layer small against the largest): only its whole gradient against
    its own early level shows it. Dated where the decline began, not where it was confirmed."""
    models, recs = _gan_records(lambda s: 5.0 if s < 8 else 5.0 * math.exp(-(s - 8) / 12),
                                g_loss=lambda s: -0.5 + 0.004 * s, d_loss=lambda s: 1.0 * math.exp(-s / 15))
    fades = [e for e in _run(models, recs) if e.site == "model_gradient"]
    assert [(e.root, e.to, e.module) for e in fades] == [("G", "vanishing", "main.0")]
    assert 8 <= fades[0].step <= 30 and fades[0].metrics["fade"] >= TH.fade_factor
    assert fades[0].metrics["game"] == 1.0 and fades[0].metrics["rival_loss_ratio"] < 0.1


def test_gradient_fading_as_the_loss_falls_is_convergence():
    models, recs = _gan_records(lambda s: 5.0 * math.exp(-s / 10), g_loss=lambda s: 2.0 * math.exp(-s / 10),
                                d_loss=lambda s: 1.0)
    assert not [e for e in _run(models, recs) if e.site == "model_gradient"]


def test_gradient_drifting_down_a_few_times_is_healthy():
    models, recs = _gan_records(lambda s: 5.0 / (1 + s / 20), g_loss=lambda s: 1.0, d_loss=lambda s: 1.0)
    assert not [e for e in _run(models, recs) if e.site == "model_gradient"]
