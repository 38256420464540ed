"""The probe's parts alone (see probes.py for the map): each is built by hand, with no global hook installed
unless the test says so, and checked against what torch computes directly."""
import copy
import gc
import threading

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as _module

from neuraldbg_cli.errors import StopTraining
from neuraldbg_cli.probe import records
from neuraldbg_cli.probe.backward import BackwardWatch
from neuraldbg_cli.probe.gradreader import GradReader
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.probe.observer import ForwardObserver
from neuraldbg_cli.probe.optimizers import OptimizerWatch
from neuraldbg_cli.probe.paramsets import ParamSets
from neuraldbg_cli.probe.records import Outbox, StepBuffer, Steps, to_records
from neuraldbg_cli.probe.registry import Registry
from neuraldbg_cli.probe.rootfinder import Found, RootFinder
from neuraldbg_cli.probe.stepclock import StepClock
from neuraldbg_cli.trace.events import StepRecord
from tests.probe.test_probes import Recorder


def _quiet() -> Guard:
    return Guard(lambda m: None)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
        self.discriminator = nn.Sequential(nn.Linear(4, 1))


def _record(buf: StepBuffer) -> StepRecord:
    return to_records([buf], grads_observed=True)[0]


# ---- guard ----


def test_guard_reports_a_fault_once_and_switches_that_observation_off():
    said = []
    guard = Guard(said.append)
    guard.fault("grads", RuntimeError("first"))
    guard.fault("grads", RuntimeError("again"))
    assert guard.off == {"grads"} and guard.messages == said and len(said) == 1
    assert "internal error in grads (RuntimeError: first)" in said[0]
    assert guard.mine()


# ---- records: the step under way, the outbox ----


def test_outbox_announces_a_model_change_before_the_records_and_sends_cpu_steps_at_once():
    calls = []
    box = Outbox(lambda recs: calls.append([r.step for r in recs]), lambda: calls.append("models"), 10, _quiet())
    steps = Steps(lambda step: step == 0)
    steps.buf.add_loss(torch.tensor(2.0))
    steps.buf.assign_loss("Net", main=True)
    box.models_changed()
    box.put(steps.buf)
    steps.next()
    assert calls == ["models", [0]] and steps.step == 1 and not steps.buf.sampled


def test_outbox_keeps_device_steps_until_a_sampled_one_or_every_nth(monkeypatch):
    monkeypatch.setattr(records, "to_records", lambda pending, grads_observed: [StepRecord(b.step, b.sampled) for b in pending])
    sent = []
    box = Outbox(lambda recs: sent.append([r.step for r in recs]), lambda: None, 3, _quiet())
    steps = Steps(lambda step: step == 4)
    for _ in range(6):
        steps.buf.check(("Net", "fc", "output"), torch.zeros((), device="meta"))  # a device: no read at once
        box.put(steps.buf)
        steps.next()
    assert sent == [[0, 1, 2], [3, 4]] and [b.step for b in box.pending] == [5]


def test_a_failed_transfer_is_one_fault_and_hands_nothing_over(monkeypatch):
    def fail(pending, grads_observed):
        raise RuntimeError("no host")

    monkeypatch.setattr(records, "to_records", fail)
    sent, guard = [], _quiet()
    box = Outbox(sent.append, lambda: None, 1, guard)
    for step in range(2):
        box.put(StepBuffer(step, True))
    assert not sent and not box.pending and len(guard.messages) == 1 and "transfer" in guard.messages[0]


# ---- parameter sets ----


def test_param_sets_follow_the_registry_and_each_optimizers_groups():
    model = nn.Sequential(nn.Linear(2, 3), nn.Embedding(5, 2), nn.Linear(3, 1).requires_grad_(False))
    reg = Registry()
    reg.register(model)
    sets = ParamSets(reg)
    every = sets.every()
    assert every is sets.every()  # cached while nothing changed
    assert every.owners == (("Sequential", "0"), ("Sequential", "0"), ("Sequential", "1"))  # frozen: not observed
    assert every.ids == {id(model[0].weight), id(model[0].bias), id(model[1].weight)}
    assert sets.sparse() == {id(model[1].weight)}  # an embedding's gradient: always read whole
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    assert sets.of_optimizer(opt).params == [model[0].weight, model[0].bias]
    opt.add_param_group({"params": model[1].parameters()})
    assert sets.of_optimizer(opt).params == [model[0].weight, model[0].bias, model[1].weight]
    sets.forget()
    assert sets.every() is not every and sets.every() == every


# ---- gradient reader ----


def _grad_setup(model):
    reg = Registry()
    reg.register(model)
    sets = ParamSets(reg)
    return sets, GradReader(sets)


def test_gradient_norms_are_exact_on_a_sampled_step_and_read_once_per_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    sets, reader = _grad_setup(model)
    model(torch.randn(16, 4)).pow(2).mean().backward()
    buf = StepBuffer(0, True)
    reader.norms(buf, sets.every())
    reader.norms(buf, sets.every())  # nothing new to read
    rec = _record(buf)
    for name, m in (("0", model[0]), ("2", model[2])):
        exact = torch.cat([p.grad.reshape(-1) for p in m.parameters()]).norm().item()
        assert rec.grads[("Sequential", name)].norm == pytest.approx(exact, rel=1e-5)
    assert sum(t.numel() for t in buf.parts) == 4  # one norm per parameter, once


def test_a_big_gradient_between_samples_is_read_off_an_even_sample():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 4096))  # 262K weights: over SAMPLE_GRADS_OVER
    sets, reader = _grad_setup(model)
    model(torch.randn(8, 64)).pow(2).mean().backward()
    exact = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm().item()
    sampled, unsampled = StepBuffer(0, True), StepBuffer(1, False)
    reader.norms(sampled, sets.every())
    reader.norms(unsampled, sets.every())
    assert _record(sampled).grads[("Sequential", "0")].norm == pytest.approx(exact, rel=1e-5)
    estimate = _record(unsampled).grads[("Sequential", "0")].norm
    assert estimate == pytest.approx(exact, rel=0.05) and estimate != _record(sampled).grads[("Sequential", "0")].norm


def test_weight_norms_checksums_and_update_norms_of_a_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    sets, reader = _grad_setup(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(8, 4)).sum().backward()
    first = StepBuffer(0, True)
    before = reader.before_update(first, sets.of_optimizer(opt))
    old = [p.detach().clone() for p in model.parameters()]
    opt.step()
    reader.update(before)
    reader.step_stats(first)
    rec = _record(first)
    stats = rec.grads[("Sequential", "0")]
    change = torch.cat([(p.detach() - o).reshape(-1) for p, o in zip(model.parameters(), old)]).norm().item()
    weight = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).norm().item()
    assert stats.update_norm == pytest.approx(change, rel=1e-5) and stats.weight_norm == pytest.approx(weight, rel=1e-5)
    assert stats.norm is not None  # step_stats read the gradient no optimizer pre-step had read
    second = StepBuffer(1, True)
    reader.step_stats(second)
    assert _record(second).grads[("Sequential", "0")].checksum == stats.checksum  # nothing moved
    with torch.no_grad():
        model[0].bias[0] += 1e-6
    third = StepBuffer(2, True)
    reader.step_stats(third)
    assert _record(third).grads[("Sequential", "0")].checksum != stats.checksum  # a tiny change is seen


# ---- root finder ----


def test_root_finder_names_a_part_called_alone_from_its_model_and_skips_what_trains_nothing():
    gan, changes = GAN(), []
    finder = RootFinder(Registry(), lambda: changes.append(1), _quiet())
    found = finder.find(gan.generator)
    assert found.root.name == "GAN" and not found.whole and changes == [1]
    assert finder.find(gan) == Found(found.root, True) and changes == [1]
    assert finder.find(nn.ReLU()) is None and finder.find(nn.Linear(2, 2).requires_grad_(False)) is None
    assert [r.name for r in finder.live] == ["GAN"]


def test_a_layers_init_scale_is_read_when_its_model_is_first_seen():
    """std(weight) × sqrt(fan_in): PyTorch's default init 1/sqrt(3), N(0, 1) over 64 inputs 8."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 64), nn.Tanh(), nn.Conv1d(4, 8, 3), nn.Linear(64, 2))
    nn.init.normal_(model[3].weight, std=1.0)
    finder = RootFinder(Registry(), lambda: None, _quiet())
    modules = finder.find(model).root.info(set()).modules
    assert modules["0"].init_gain == pytest.approx(3**-0.5, rel=0.05)
    assert modules["2"].init_gain == pytest.approx(3**-0.5, rel=0.2)  # fan_in 4 × kernel 3
    assert modules["3"].init_gain == pytest.approx(8.0, rel=0.15) and modules["1"].init_gain is None


def test_a_part_called_while_its_model_is_built_is_folded_into_the_model():
    """spectral_norm's register_parametrization calls the ParametrizationList inside its own constructor (a
    consistency check), before it is attached to its Linear: that first call with gradients on made it a root
    of its own, which then kept the layer's weight from the discriminator. With no step completed since, the
    outermost model is the root; a part that trained alone first (a step completed since) keeps its root."""
    step = [0]
    finder = RootFinder(Registry(), lambda: None, _quiet(), lambda: step[0])
    lin = nn.Linear(4, 8)
    early = finder.find(lin).root  # called alone while the model is built
    model = nn.Sequential(lin, nn.ReLU(), nn.Linear(8, 1))
    root = finder.find(model).root
    assert early.absorbed and [r.name for r in finder.live] == ["Sequential"]
    assert root.n_params == 4 * 8 + 8 + 8 + 1
    assert sorted(n for n, m in root.info(set()).modules.items() if m.params) == ["0", "2"]
    pretrained = nn.Linear(4, 8)
    alone = finder.find(pretrained).root
    step[0] = 5  # it trained alone, then is wrapped
    whole = nn.Sequential(pretrained, nn.Linear(8, 1))
    wrapper = finder.find(whole).root
    assert not alone.absorbed and {r.name for r in finder.live} == {"Sequential", "Linear#1", "Sequential#1"}
    assert wrapper.n_params == 9


def test_a_parametrized_layer_owns_its_parametrization_parameters():
    """weight_norm / spectral_norm keep a layer's weight in `layer.parametrizations.weight.original*`: they are
    the layer's (one module with weight and bias, as the user wrote it), and the list is no layer of its own.
    Scanning never evaluates the parametrized weight (spectral_norm's power iteration would move its u/v)."""
    from torch.nn.utils.parametrizations import spectral_norm, weight_norm

    torch.manual_seed(0)
    model = nn.Sequential(spectral_norm(nn.Linear(2, 16)), nn.LeakyReLU(0.1),
                          weight_norm(nn.Linear(16, 1, bias=False)))
    u = model[0].parametrizations.weight[0]._u.clone()
    with torch.no_grad():  # registered without a call (no training call made it a root)
        finder = RootFinder(Registry(), lambda: None, _quiet(), lambda: 0)
    root = finder.find(model).root
    modules = root.info(set()).modules
    assert sorted(n for n, m in modules.items() if m.params) == ["0", "2"]
    assert modules["0"].params == 2 * 16 + 16 and modules["2"].params == 16 + 1
    assert modules["0"].type == "Linear" and modules["0"].weight_ndim2
    assert torch.equal(model[0].parametrizations.weight[0]._u, u)
    assert all(name in ("0", "2") for name, _ in root.params)


# ---- optimizers ----


def test_optimizer_watch_names_series_by_the_part_trained_and_describes_gone_optimizers():
    gan = GAN()
    reg = Registry()
    reg.register(gan)
    changes = []
    watch = OptimizerWatch(ParamSets(reg), lambda: changes.append(1), _quiet())
    opt_d = torch.optim.SGD(gan.discriminator.parameters(), lr=0.1)
    opt_g = torch.optim.Adam(gan.generator.parameters(), lr=0.01)
    watch.stepped(opt_d)
    watch.stepped(opt_d)
    watch.stepped(opt_g)
    assert changes == [1, 1]  # each optimizer once
    assert (watch.series(opt_d), watch.series(opt_g)) == ("GAN.discriminator.0", "GAN.generator.0")
    assert watch.alive(id(opt_d), {"GAN"}) and not watch.alive(id(opt_d), {"Other"})
    assert watch.alive(id(opt_d), set())  # no forward seen this step: not judged
    assert [d["type"] for d in watch.describe()] == ["SGD", "Adam"]  # in the order they appeared
    assert [d["roots"] for d in watch.describe()] == [["GAN"], ["GAN"]]  # the root models each one trains
    assert watch.describe()[1]["groups"][0]["betas"] == [0.9, 0.999]
    assert watch.describe()[0]["dtypes"] == ["float32"]  # Adam's state has its parameters' dtype
    del opt_g
    gc.collect()
    assert [d["type"] for d in watch.describe()] == ["SGD", "Adam"] and len(watch.optimizers) == 1


# ---- backward passes ----


def test_backward_watch_sums_each_pass_loss_and_keeps_a_scaled_loss_unscaled():
    steps, events = Steps(lambda step: True), []
    watch = BackwardWatch(steps, StepClock(), _quiet(), begin=lambda: events.append("begin"),
                          end=lambda scaled: events.append(scaled))
    backward = watch.wrap_backward(torch.autograd.backward)
    scale = watch.wrap_scale(lambda scaler, loss: loss * 1024)  # GradScaler.scale, as torch calls it
    w = torch.ones(3, requires_grad=True)
    backward((w * 2).sum())
    backward((w * 3).sum())
    backward(scale(None, (w * 4).sum()))
    assert events == ["begin", False, "begin", False, "begin", True]
    assert steps.buf.pending.item() == 6 + 9 + 12  # the scaled pass's loss as scale() received it
    assert w.grad.tolist() == [2 + 3 + 4 * 1024] * 3  # torch's own backward, untouched


# ---- forward observer ----


def test_forward_observer_alone_sees_the_data_and_attributes_activations_to_their_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    steps, guard, begins = Steps(lambda step: True), _quiet(), []
    observer = ForwardObserver(steps, RootFinder(Registry(), lambda: None, guard), guard,
                               begin=lambda: begins.append(1))
    with HookSet() as hooks:
        hooks.add(_module.register_module_forward_pre_hook(observer.pre_forward))
        hooks.add(_module.register_module_forward_hook(observer.post_forward, always_call=True))
        model(torch.randn(16, 4))
        with torch.no_grad():
            model(torch.full((2, 4), float("nan")))  # validation: not observed
    acts = _record(steps.buf).acts
    assert {("Sequential", "", "input"), ("Sequential", "0", "output"), ("Sequential", "0", "activation"),
            ("Sequential", "2", "output")} <= set(acts)
    assert acts[("Sequential", "0", "activation")].min >= 0 and acts[("Sequential", "", "input")].nonfinite == 0
    assert begins == [1] and not guard.messages


# ---- forward observer, pacer: through the installed probe ----


def test_forwards_in_worker_threads_are_part_of_the_call_that_started_them():
    """DataParallel runs replicas in threads while the main thread's call waits: a replica (a copy the
    registry never saw) must not become a root, and each thread keeps its own place in the forward."""

    class Parallel(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def forward(self, x):
            outs = [None, None]
            replica = copy.deepcopy(self.inner)

            def work(i):
                outs[i] = self.inner(x[i::2])
                replica(x[i::2])

            threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return torch.cat(outs)

    torch.manual_seed(0)
    model = Parallel()
    with Recorder() as rec:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            opt.zero_grad()
            nn.functional.mse_loss(model(torch.randn(16, 4)), torch.randn(16, 1)).backward()
            opt.step()
    assert not rec.probe.faults, rec.probe.faults
    assert [m.name for m in rec.probe.models()] == ["Parallel"] and len(rec.records) == 3  # also no dead root
    assert {("Parallel", "inner.0"), ("Parallel", "inner.2")} <= set(rec.records[0].grads)
    assert ("Parallel", "inner.0", "activation") in rec.records[0].acts  # attributed inside the worker
    assert rec.probe._forward._holder is None


def test_stop_requested_ends_training_when_an_optimizer_step_closes_a_step():
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder() as rec:
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        rec.probe.stop_requested = True
        model(torch.ones(1, 2)).sum().backward()
        before = model.weight.detach().clone()
        with pytest.raises(StopTraining):
            opt.step()
    assert not torch.equal(before, model.weight)  # the step itself was completed
    assert not rec.probe.stop_requested and [r.step for r in rec.records] == [0, 1]


def test_learning_rates_are_recorded_as_the_schedule_changes_them():
    """The lr in force at sampled steps, kept when it changed, thinned past LR_POINTS (first and latest kept),
    in the optimizer's description: advice quotes the lr in force when a symptom began."""
    import torch

    from neuraldbg_cli.probe.optimizers import LR_POINTS, OptimizerWatch

    watch = OptimizerWatch(ParamSets(Registry()), lambda: None, _quiet())
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.0)
    watch.optimizers[opt] = None
    for step in range(3 * LR_POINTS):
        opt.param_groups[0]["lr"] = min(step, 10) * 0.1  # a warm-up, then constant
        watch.record_lr(opt, step)
    (desc,) = watch.describe()
    assert desc["lr_at"][0] == [0, 0.0] and desc["lr_at"][-1] == [10, 1.0] and len(desc["lr_at"]) == 11
    for step in range(3 * LR_POINTS):
        opt.param_groups[0]["lr"] = float(step)
        watch.record_lr(opt, 100 + step)
    points = watch.describe()[0]["lr_at"]
    assert len(points) <= LR_POINTS and points[0] == [0, 0.0] and points[-1][0] == 100 + 3 * LR_POINTS - 1
