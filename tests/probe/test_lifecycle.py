"""Models come and go, and what is data: sweeps, separate G/D, a frozen teacher, an EMA copy, actor-critic and
a word-LM's carried hidden state are healthy layouts (no alarm); neuraldbg keeps no model alive and never
takes a new model for a dead one; a model's output (also detached, also made under no_grad) and a mask are
not data, while real data problems are still caught."""
import gc
import weakref

import pytest
import torch
import torch.nn as nn
from conftest import ASSETS, run_cli

from neuraldbg_cli.probe.hooks import Probe
from neuraldbg_cli.probe.provenance import Outputs, from_outside

HEALTHY = [("life_sweep.py",), ("life_gan.py",), ("life_teacher.py",), ("life_ema.py",),
           ("life_ema.py", "--grad-eval", "1"), ("life_actor_critic.py",), ("life_lstm_lm.py",)]


@pytest.mark.parametrize("script", HEALTHY, ids=" ".join)
def test_healthy_layouts_raise_no_alarm(observe, script):
    o = observe(*script)
    assert o.proc.returncode == 0, o.proc.stderr
    assert "internal error" not in o.proc.stderr
    alarms = [(h["kind"], h["confidence"], h["summary"]) for h in o.report["hypotheses"] if h["confidence"] >= 0.5]
    assert not alarms and o.report["status"] == "healthy", alarms


def test_a_sweep_gets_one_model_per_trial(observe):
    report = observe("life_sweep.py").report
    assert len(report["models"]) == 24  # one root per trial, none taken for a dead one with the same id()


def test_a_word_lm_hidden_state_is_not_data(observe):
    o = observe("life_lstm_lm.py")
    assert not [h for h in o.report["hypotheses"] if h["kind"] == "data_anomaly"]
    stats = (o.run_dir / "stats.jsonl").read_text()
    assert "|input" not in stats  # int64 token ids: no float statistics; the hidden state is not the input


def test_real_data_problems_are_still_caught_beside_a_generator(observe):
    """D(real) is data even while D(G(z).detach()) is not: unscaled real samples are reported."""
    top = observe("life_gan.py", "--real-scale", "300").top
    assert top["kind"] == "data_anomaly" and top["confidence"] >= 0.5, top
    assert top["origin"]["root"] == "Sequential#1"  # D (G, called first, is "Sequential")


def test_dropped_models_are_not_kept_alive_under_the_cli(tmp_path):
    r = run_cli("run", "--quiet", "--run-dir", tmp_path / "trace", ASSETS / "life_weakref.py")
    assert r.returncode == 0, r.stderr
    assert "alive 0 of 12" in r.stdout, r.stdout


def test_dropped_models_leave_the_live_set_and_ids_are_never_reused():
    records = []
    probe = Probe(records.extend, lambda: None, every=1, warn=lambda m: None)
    probe.install()
    try:
        refs, x, y = [], torch.randn(16, 4), torch.randn(16, 1)
        for trial in range(3):
            model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for _ in range(4):
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            refs += [weakref.ref(model), weakref.ref(model[2].bias)]
            assert [r.name for r in probe.roots] == ["Sequential" + (f"#{trial}" if trial else "")]
            del model, opt
            gc.collect()
            assert [r() is None for r in refs] == [True] * len(refs), (trial, [type(q) for r in refs if r() is not None for q in gc.get_referrers(r())])
        probe.flush()
        assert probe.roots == [] and len(probe.models()) == 3  # gone, but still described
        assert not probe._pinfo
    finally:
        probe.close()
    for rec in records:  # every step's gradients belong to the model trained in it
        assert {root for root, _ in rec.grads} <= rec.active, (rec.step, rec.active, list(rec.grads))


def test_model_outputs_are_not_data_even_detached_or_made_without_grad():
    outs, lstm = Outputs(), nn.LSTM(4, 4)
    with torch.no_grad():
        out, (h, c) = lstm(torch.randn(3, 2, 4))
    outs.add((out, (h, c)))
    data = torch.randn(3, 2, 4)
    assert not from_outside(h.detach(), outs) and not from_outside(out[1:], outs)
    assert from_outside(data, outs) and not from_outside(data > 0, outs)
    del out, h, c
    gc.collect()
    assert from_outside(torch.randn(3, 2, 4), outs)  # a new batch in freed memory is data again



def _observed(step_fn, steps=2):
    """The records of `steps` training steps of step_fn(opt) under a probe (every step sampled)."""
    records = []
    probe = Probe(records.extend, lambda: None, every=1, warn=lambda m: None)
    probe.install()
    try:
        torch.manual_seed(0)
        student = nn.Linear(4, 2)
        opt = torch.optim.SGD(student.parameters(), lr=0.01)
        for _ in range(steps):
            opt.zero_grad()
            step_fn(student).backward()
            opt.step()
    finally:
        probe.close()
    assert not probe.faults, probe.faults
    return records


class _Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x, mask):
        return self.lin(x) + mask


class _Dice(nn.Module):  # a custom loss: no parameters, returns a scalar
    def forward(self, pred, target):
        return ((pred - target) ** 2).mean()


X, Y = torch.randn(8, 4), torch.full((8, 2), 5.0)
MASK = torch.zeros(8, 2).masked_fill(torch.arange(2) > 0, float("-inf"))


@pytest.mark.parametrize("loss", [
    lambda s: nn.functional.mse_loss(s(X), Y),
    lambda s: nn.MSELoss()(s(X), Y),
    lambda s: _Dice()(s(X), Y),
    lambda s: nn.functional.smooth_l1_loss(s(X), target=Y),
], ids=["functional", "loss module", "custom loss module", "keyword target"])
def test_loss_targets_are_observed(loss):
    for rec in _observed(loss):
        target = rec.acts[("", "", "target")]
        assert target.mean == 5.0 and target.nonfinite == 0


def test_a_frozen_teacher_mask_and_prediction_are_neither_data_nor_targets():
    teacher = _Masked().requires_grad_(False)

    def distill(student):
        with torch.no_grad():
            # a new tensor made from the teacher's output in this step: the teacher's, not data (a model ran
            # outside training in this step: its outputs make targets by design, see _observe_target)
            soft = teacher(X, MASK).softmax(-1)
        return nn.functional.mse_loss(student(X), teacher(X, MASK)) + nn.functional.kl_div(
            student(X).log_softmax(-1), soft, reduction="batchmean")

    for rec in _observed(distill):
        sites = {k: v for k, v in rec.acts.items() if k[2] in ("input", "target")}
        assert set(sites) == {("Linear", "", "input")}, sites  # neither the -inf mask nor a teacher-made target
        assert all(v.nonfinite == 0 for v in sites.values())


def test_a_replaced_head_is_counted_once_and_not_kept_alive():
    records = []
    probe = Probe(records.extend, lambda: None, every=1, warn=lambda m: None)
    probe.install()
    try:
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        for phase in range(2):
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for _ in range(3):
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            if phase == 0:
                old = weakref.ref(model[2].weight)
                model[2] = nn.Linear(8, 1)  # a new head, after training began
        del opt
        gc.collect()
        assert old() is None
        assert [r.name for r in probe.roots] == ["Sequential"]
        assert probe.models()[0].modules["2"].params == 9  # the new head's, not both heads'
    finally:
        probe.close()
    assert ("Sequential", "2") in records[-1].grads
