"""Pure classifiers and state machines (no torch): each state, debounce, onset step, non-finite at once."""
import math

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import ActStats, GradStats, ModelInfo, ModuleInfo, StepRecord
from neuraldbg_cli.families.activations import classify_activation
from neuraldbg_cli.families.base import Machine
from neuraldbg_cli.families.data import classify_data
from neuraldbg_cli.families.gradients import classify_gradient
from neuraldbg_cli.families.loss_model import LossSeries
from neuraldbg_cli.monitor import Monitor

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


def test_data_states():
    assert classify_data(act(nonfinite=1.0), None, 20.0, TH) == "non_finite"
    assert classify_data(act(mean=127.0, std=73.0, min=0.0, max=255.0), None, 20.0, TH) == "extreme_scale"
    assert classify_data(act(mean=5.0, std=1.0), (0.0, 1.0), 20.0, TH) == "normal"
    assert classify_data(act(mean=0.0, std=15.0), (0.0, 1.0), 20.0, TH) == "shifted"


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

    code = ("import sys, neuraldbg_cli.reasoner, neuraldbg_cli.monitor, neuraldbg_cli.renderers, neuraldbg_cli.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
