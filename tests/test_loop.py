"""The training-loop family (loop_misuse): gradients never zeroed between optimizer steps, told apart from intended
accumulation, GAN loops, zero_grad(set_to_none=False) and manual zeroing; the other loop bugs (zero_grad before
step, clipping after it, one-class batches, an lr collapsed early, a DistributedSampler's epoch never set); the
autograd graphs kept across steps (memory_growth); trained parameters outside every optimizer. The probe's checks
in-process, the classifier, machine and rule on hand-made records and events, the ranking, and real scripts
through the CLI."""
import json
import re

import pytest
import torch
import torch.nn as nn
from conftest import ASSETS, explain_json, run_cli, run_python

from neuraldbg_cli.config import KNOWN_KINDS, Thresholds, parse_fail_on
from neuraldbg_cli.probe.hooks import Probe
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.loop import ENDED, classify_loop, loop_misuse
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.reason.reasoner import rank
from neuraldbg_cli.trace.events import (
    EventType,
    Hypothesis,
    Kind,
    LoopState,
    LoopStats,
    Origin,
    SemanticEvent,
    StepRecord,
)

TH = Thresholds()
KEPT, NORMAL = LoopState.grads_not_zeroed.value, LoopState.normal.value


# ---------------------------------------------------------------- the probe, in-process


class Recorder:
    def __init__(self, every=1):
        self.records, self.faults = [], []
        self.probe = Probe(self.records.extend, lambda: None, every=every, warn=self.faults.append)

    def __enter__(self):
        self.probe.install()
        return self

    def __exit__(self, *exc):
        self.probe.close()
        assert not self.faults, self.faults

    def checks(self, k=0):
        """step -> LoopStats of optimizer k, for the steps that recorded an interval check (a backward pass
        since its last step)."""
        return {r.step: r.loop[k] for r in self.records if k in r.loop and r.loop[k].passes > 0}

    def clears(self, k=0):
        """The zeroed-before-step checks of optimizer k, in step order."""
        return [r.loop[k].cleared for r in self.records if k in r.loop and r.loop[k].cleared >= 0]


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _train(mode, steps=6, every=1, accum=1):
    """A classifier's loop, its gradients zeroed as `mode` says (see the branches)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    with Recorder(every) as rec:
        for _ in range(steps):
            if mode == "zero_grad":
                opt.zero_grad()
            elif mode == "keep_zeros":
                opt.zero_grad(set_to_none=False)
            elif mode == "grad_none":
                for p in model.parameters():
                    p.grad = None
            elif mode == "data_zero":
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.data.zero_()
            elif mode == "grad_zero":
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.zero_()
            for _ in range(accum):
                x = torch.randn(16, 8, generator=g)
                y = torch.randint(0, 3, (16,), generator=g)
                nn.functional.cross_entropy(model(x), y).backward()
            if mode == "clip_before":
                nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            if mode == "before_step":
                opt.zero_grad()
            elif mode == "before_step_keep_zeros":
                opt.zero_grad(set_to_none=False)
            opt.step()
            if mode == "clip_after":
                torch.nn.utils.clip_grad.clip_grad_value_(model.parameters(), 0.1)
            if mode == "after_step":
                opt.zero_grad()
        rec.described = rec.probe.optimizer_info()  # model.json's optimizers, while the optimizer lives
    return rec


def test_gradients_never_zeroed_are_kept_at_every_check():
    rec = _train("none")
    checks = rec.checks()
    assert sorted(checks) == [1, 2, 3, 4, 5]  # from the second step: the interval since the first
    assert all(c.kept == 1.0 and c.passes == 1 for c in checks.values())
    assert all(c.root == "Sequential" and c.module == "0" for c in checks.values())
    assert all(0 < c.stale for c in checks.values())
    first = checks[1]
    assert first.line > 0 and first.backward_line > 0 and first.line != first.backward_line


@pytest.mark.parametrize("mode", ["zero_grad", "keep_zeros", "grad_none", "data_zero", "grad_zero", "after_step"])
def test_every_way_of_zeroing_reads_zeroed(mode):
    checks = _train(mode).checks()
    assert sorted(checks) == [1, 2, 3, 4, 5], mode
    assert all(c.kept == 0.0 for c in checks.values()), (mode, checks)


@pytest.mark.parametrize("mode,kept", [("none", 1.0), ("zero_grad", 0.0), ("keep_zeros", 0.0), ("data_zero", 0.0)])
def test_the_device_path_reads_the_same(monkeypatch, mode, kept):
    """Off the CPU the checks stay on the device (0-d bools OR-ed over the passes, one 2-value part per check in the
    step's transfer): run that path on CPU tensors."""
    from neuraldbg_cli.probe import loopprobe

    monkeypatch.setattr(loopprobe, "_read_now", lambda t: False)
    checks = _train(mode).checks()
    assert sorted(checks) == [1, 2, 3, 4, 5]
    assert all(c.kept == kept for c in checks.values()), checks
    assert all(c.stale is not None and c.stale > 0 for c in checks.values() if kept)


@pytest.mark.parametrize("device_path", [False, True])
@pytest.mark.parametrize(
    "mode,cleared", [("before_step", 1.0), ("before_step_keep_zeros", 1.0), ("zero_grad", 0.0), ("none", 0.0)]
)
def test_a_zero_grad_between_backward_and_step_reads_cleared(monkeypatch, mode, cleared, device_path):
    """The gradient a backward pass of a sampled step left, gone (None, or all zeros) when the step begins; on the
    CPU read at once, off it one value in the step's transfer (run here on CPU tensors)."""
    from neuraldbg_cli.probe import loopprobe

    if device_path:
        monkeypatch.setattr(loopprobe, "_read_now", lambda t: False)
    clears = _train(mode).clears()
    # every sampled step after the first (the first step makes the optimizer known)
    assert clears == [cleared] * 5, (mode, clears)


@pytest.mark.parametrize("mode,clipped", [("clip_after", 1.0), ("clip_before", 0.0), ("zero_grad", None)])
def test_a_clip_right_after_the_step_reads_clipped_after(mode, clipped):
    """Every clipping call is judged (host only): after the latest step with no backward pass since, or not; the
    line and the max_norm go to model.json once found after the step."""
    rec = _train(mode)
    got = [r.loop[0].clipped for r in rec.records if 0 in r.loop and r.loop[0].clipped >= 0]
    if clipped is None:
        assert got == []
        return
    assert got and all(v == clipped for v in got), got
    assert len(got) == 5  # every call once the optimizer has stepped (the first step makes it known)
    desc = rec.described[0]
    assert ("clip_at" in desc) == bool(clipped), desc


def test_a_closure_that_clips_inside_the_step_is_not_after_it():
    """Lightning's automatic optimization: optimizer.step(closure), the closure runs the backward pass and clips:
    a backward pass came between the last step and the clip."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return loss

    with Recorder() as rec:
        for _ in range(5):
            opt.step(closure)
    got = [r.loop[0].clipped for r in rec.records if 0 in r.loop and r.loop[0].clipped >= 0]
    assert got and all(v == 0.0 for v in got), got


def test_a_gradient_all_zeros_after_the_step_tells_nothing(monkeypatch):
    """A gradient exactly 0 after the step (a loss multiplied by 0) cannot tell kept from zeroed: the CPU opens no
    interval, the device path records -1 (unknown), and neither is judged."""
    from neuraldbg_cli.probe import loopprobe

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    for on_device in (False, True):
        if on_device:
            monkeypatch.setattr(loopprobe, "_read_now", lambda t: False)
        with Recorder() as rec:
            for _ in range(4):
                (0 * nn.functional.cross_entropy(model(x), y)).backward()  # never zeroed, but always exactly 0
                opt.step()
        checks = rec.checks()
        assert (sorted(checks) == [1, 2, 3] and all(c.kept == -1.0 for c in checks.values())) if on_device else (
            not checks), checks
        assert all(classify_loop(c) is None for c in checks.values())


def test_accumulation_zeroed_after_the_step_is_zeroed_and_without_it_kept():
    zeroed = _train("after_step", accum=4).checks()
    assert zeroed and all(c.kept == 0.0 and c.passes == 4 for c in zeroed.values())
    kept = _train("none", accum=4).checks()
    assert kept and all(c.kept == 1.0 and c.passes == 4 for c in kept.values())


def test_only_sampled_steps_are_checked():
    checks = _train("none", steps=25, every=10).checks()
    # intervals that begin after a sampled step: steps 0-9 are sampled (warm-up), then 10 and 20
    assert sorted(checks) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 21]


def _gan(zero_d=True, steps=5):
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    D = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    with Recorder() as rec:
        for _ in range(steps):
            if zero_d:
                D.zero_grad()
            bce(D(torch.randn(32, 2) + 2), torch.ones(32, 1)).backward()
            fake = G(torch.randn(32, 4))
            bce(D(fake.detach()), torch.zeros(32, 1)).backward()
            opt_d.step()
            G.zero_grad()
            bce(D(fake), torch.ones(32, 1)).backward()  # also adds to D's gradients, after D's step
            opt_g.step()
    return rec


def test_gan_discriminator_polluted_by_the_generator_then_zeroed_is_zeroed():
    rec = _gan()
    d, g = rec.checks(0), rec.checks(1)
    assert d and g
    assert all(c.kept == 0.0 for c in [*d.values(), *g.values()]), (d, g)
    assert all(c.passes == 3 for c in d.values())  # G's pass through D, then D's two own


def test_gan_discriminator_never_zeroed_is_kept_and_names_its_own_backward():
    rec = _gan(zero_d=False)
    d, g = rec.checks(0), rec.checks(1)
    assert d and all(c.kept == 1.0 for c in d.values())
    assert g and all(c.kept == 0.0 for c in g.values())
    # the backward named is D's own first one (its real batch), not G's pass through D right after D's step
    lines = {c.backward_line for c in d.values()}
    assert len(lines) == 1 and lines != {c.backward_line for c in g.values()}


def test_sam_double_pass_is_zeroed():
    """Sharpness-aware minimisation: backward, climb, zero_grad, a second backward at the perturbed weights, back,
    the optimizer's step, zero_grad: two backward passes per step, each on zeroed gradients."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    with Recorder() as rec:
        for _ in range(6):
            x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
            nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                climb = [0.05 * p.grad / (p.grad.norm() + 1e-12) for p in model.parameters()]
                for p, e in zip(model.parameters(), climb):
                    p.add_(e)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                for p, e in zip(model.parameters(), climb):
                    p.sub_(e)
            opt.step()
            opt.zero_grad()
    checks = rec.checks()
    assert checks and all(c.kept == 0.0 and c.passes == 2 for c in checks.values()), checks


def test_a_closure_optimizer_is_not_judged():
    """LBFGS runs its backward passes inside step(): no pass falls between two of its steps."""
    model = _mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with Recorder() as rec:
        for _ in range(4):
            opt.step(closure)
    assert not rec.checks()


def test_the_check_keeps_nothing_that_makes_autograd_accumulate_out_of_place():
    """Autograd adds a backward pass into the .grad tensor in place unless something else refers to it; the
    check keeps a copy, never a view, so the gradient tensor stays the same object with the same storage."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with Recorder():
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        p = next(model.parameters())
        ptr = p.grad.data_ptr()
        for _ in range(3):
            nn.functional.cross_entropy(model(x), y).backward()
            assert p.grad.data_ptr() == ptr
            opt.step()


def test_model_json_names_the_lines_only_for_an_optimizer_that_keeps_its_gradients():
    for mode, named in (("none", True), ("zero_grad", False)):
        rec = _train(mode)
        (desc,) = rec.described
        assert ("step_at" in desc) is named, (mode, desc)
        if named:
            file, _, line = desc["step_at"].rpartition(":")
            assert file.endswith("test_loop.py") and int(line) == rec.checks()[1].line
            assert desc["backward_at"].endswith(f":{rec.checks()[1].backward_line}")


# ---------------------------------------------------------------- classifier, machine, rule, ranking


def _stats(kept, passes=1, stale=0.5):
    return LoopStats("Net", "fc1", kept, stale, passes, line=42, backward_line=40)


def test_classify_loop():
    assert classify_loop(_stats(1.0)) == KEPT
    assert classify_loop(_stats(0.0)) == NORMAL
    assert classify_loop(_stats(-1.0)) is None  # a gradient all zeros after the step: nothing to tell
    assert classify_loop(_stats(1.0, passes=0)) is None  # no backward pass between the steps
    assert classify_loop(_stats(float("nan"))) is None


def _monitor(kepts):
    events = []
    mon = Monitor(TH, events.append)
    for step, kept in enumerate(kepts, 1):
        rec = StepRecord(step=step, sampled=True)
        if kept is not None:
            rec.loop[0] = _stats(kept)
        mon.observe(rec)
    mon.finish()
    return [e for e in events if e.type == EventType.loop_health.value]


def test_the_machine_confirms_three_kept_checks_dated_at_the_first():
    evs = _monitor([0.0, 1.0, 1.0, 1.0, 1.0])
    assert [(e.from_, e.to, e.step, e.site, e.root, e.module) for e in evs] == [
        (NORMAL, KEPT, 2, "loop", "Net", "fc1")
    ]
    assert evs[0].metrics["line"] == 42 and evs[0].metrics["backward_line"] == 40
    assert evs[0].metrics["optimizer"] == 0 and evs[0].metrics["passes"] == 1
    assert not _monitor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # never three in a row
    assert not _monitor([0.0] * 6)
    assert len(_monitor([1.0, None, 1.0, None, 1.0])) == 1  # steps without a check do not break the run


def _ev(step, to, frm=NORMAL, optimizer=0, root="Net", module="conv1"):
    return SemanticEvent(
        type=EventType.loop_health.value, step=step, module=module, root=root, from_=frm, to=to, site="loop",
        metrics={"optimizer": optimizer, "line": 42.0, "backward_line": 40.0, "passes": 1.0, "stale_share": 0.55},
    )


OPTIMIZERS = [
    {"type": "Adam", "roots": ["Other"], "groups": []},
    {"type": "SGD", "roots": ["Net"], "groups": [], "step_at": "train.py:42", "backward_at": "train.py:40"},
]


def test_rule_names_the_optimizer_its_line_and_the_fix():
    h = loop_misuse(Context(events=[_ev(1, KEPT)], optimizers=OPTIMIZERS))
    assert h is not None and h.kind == Kind.loop_misuse and h.confidence >= 0.9
    assert h.origin.step == 1 and h.origin.module is None and h.origin.root == "Net"
    assert "never zeroed" in h.summary and "SGD.step() at train.py:42" in h.summary
    assert "zero_grad()" in h.suggestions[0] and "train.py:40" in h.suggestions[0]
    assert "accumulat" in h.suggestions[1]
    ev = h.evidence[0]
    assert ev["step_at"] == "train.py:42" and ev["optimizer_type"] == "SGD" and ev["module"] == "conv1"


def test_rule_without_the_lines_in_model_json_quotes_the_event_line():
    h = loop_misuse(Context(events=[_ev(1, KEPT)], optimizers=[{"type": "SGD", "roots": ["Net"], "groups": []}]))
    assert "SGD.step() at line 42" in h.summary and "line 40" in h.suggestions[0]


def test_rule_a_state_that_ended_is_not_present():
    h = loop_misuse(Context(events=[_ev(1, KEPT), _ev(30, NORMAL, frm=KEPT)], optimizers=OPTIMIZERS))
    assert h.confidence == ENDED < 0.5 and "to step 30" in h.summary
    assert loop_misuse(Context(events=[_ev(1, NORMAL, frm=KEPT)])) is None


def _h(kind, step, conf=0.9):
    return Hypothesis(kind=kind, confidence=conf, origin=Origin(step=step), summary=kind.value)


def test_loop_misuse_ranks_first_as_the_cause_of_what_it_produces():
    hyps = [
        _h(Kind.exploding_gradient, 20, 0.95),
        _h(Kind.loss_divergence, 19),
        _h(Kind.unstable_loss, 5),
        _h(Kind.non_finite, 40, 0.95),
        _h(Kind.dead_activation, 30),
        _h(Kind.loop_misuse, 1, 0.92),
    ]
    ordered = rank(hyps, slack=10, loss_window=10)
    assert ordered[0].kind == Kind.loop_misuse
    assert all(h.caused_by is not None for h in ordered[1:])
    assert {h.kind for h in ordered if h.caused_by == Kind.loop_misuse} >= {
        Kind.exploding_gradient, Kind.loss_divergence, Kind.unstable_loss
    }


def test_loop_misuse_explains_nothing_present_before_training():
    ordered = rank([_h(Kind.loop_misuse, 1, 0.92), _h(Kind.exploding_gradient, 0, 0.95)], slack=10)
    # a bug of the loop leads (a root), but the explosion present before any step is not its consequence
    assert [h.kind for h in ordered] == [Kind.loop_misuse, Kind.exploding_gradient]
    assert all(h.caused_by is None for h in ordered)


def test_fail_on_accepts_loop_misuse():
    assert "loop_misuse" in KNOWN_KINDS and parse_fail_on("loop_misuse,non_finite") == ["loop_misuse", "non_finite"]


# ---------------------------------------------------------------- real scripts through the CLI

def test_a_zero_grad_between_backward_and_step_is_named_with_the_order_to_restore(observe):
    """pytorch/examples' MNIST loop with optimizer.zero_grad() moved between loss.backward() and optimizer.step():
    the loop bug leads; the missing gradients and the stalled loss are its consequences, without the search for
    a detached graph that a missing gradient alone would suggest."""
    obs = observe("loop_mnist.py", "--zero", "before_step", "--epochs", "2")
    hyps = obs.report["hypotheses"]
    top = hyps[0]
    assert top["kind"] == "loop_misuse" and "between backward() and step()" in top["summary"], hyps
    assert "never between the two" in top["suggestions"][0]
    for h in hyps[1:]:
        if h["confidence"] >= 0.5:
            assert h.get("caused_by") == "loop_misuse", h
            assert not [t for t in h["suggestions"] if t.startswith("look for .detach()")], h


def test_a_clip_after_the_step_is_named_with_the_users_max_norm_as_the_fix(observe):
    obs = observe("loop_mnist.py", "--zero", "zero_grad", "--clip", "after", "--lr", "2", "--epochs", "1")
    top = obs.report["hypotheses"][0]
    assert top["kind"] == "loop_misuse" and "clipped after the optimizer step" in top["summary"], top
    assert "clip_grad_norm_(model.parameters(), 0.5)" in top["suggestions"][0]
    assert top["fixes"][0]["id"] == "clip_grad_norm" and top["fixes"][0]["params"] == {"max_norm": 0.5}
    healthy = observe("loop_mnist.py", "--zero", "zero_grad", "--clip", "before", "--lr", "2", "--epochs", "1")
    assert healthy.report["status"] == "healthy", healthy.report["hypotheses"]


def _class_call(one, first, classes=4, n=32):
    from neuraldbg_cli.trace.events import LossCallStats

    return LossCallStats("cross_entropy", None, (n, classes), (n,), None, "mean", "float32", classes, n,
                         one_class=one, first_target=first)


def _batches_events(calls):
    from neuraldbg_cli.reason.monitor import Monitor

    events = []
    mon = Monitor(TH, events.append)
    for step, c in enumerate(calls):
        mon.observe(StepRecord(step=step, sampled=True, loss=1.0, loss_calls={"cross_entropy": c}))
    mon.finish()
    return [e for e in events if e.site == "loop"]


def test_batches_of_one_class_each_spanning_several_are_sorted_data():
    sorted_ = [_class_call(1.0, float(i // 5)) for i in range(20)]  # 5 batches of class 0, then 5 of class 1...
    evs = _batches_events(sorted_)
    assert [e.to for e in evs] == ["single_class_batches"], evs
    # mixed batches, or a data set of one class only, say nothing
    assert _batches_events([_class_call(0.0, float(i % 4)) for i in range(20)]) == []
    assert _batches_events([_class_call(1.0, 0.0) for _ in range(20)]) == []
    # an odd single-class batch among mixed ones is chance, not sorting
    odd = [_class_call(1.0 if i % 7 == 0 else 0.0, float(i % 4)) for i in range(30)]
    assert _batches_events(odd) == []


def test_the_probe_reads_whether_a_batch_holds_one_class():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with Recorder() as rec:
        for y in (torch.zeros(16, dtype=torch.long), torch.arange(16) % 3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(16, 8)), y).backward()
            opt.step()
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long)).backward()
        opt.step()  # a batch of 4: too few targets to tell
    got = [r.loss_calls["cross_entropy"] for r in rec.records if "cross_entropy" in r.loss_calls]
    assert [(c.one_class, c.first_target) for c in got] == [(1.0, 0.0), (0.0, 0.0), (None, None)], got


def test_a_loader_over_label_sorted_data_is_named_and_its_shuffled_twin_is_quiet(observe):
    top = observe("loop_sorted.py").report["hypotheses"][0]
    assert top["kind"] == "loop_misuse" and "Every batch holds one class" in top["summary"], top
    assert "shuffle=True" in top["suggestions"][0]
    assert observe("loop_sorted.py", "--shuffle").report["status"] == "healthy"


def _lr_ctx(points, steps=200, plateau=False):
    from neuraldbg_cli.reason.families.context import Context

    evs = [SemanticEvent(type=EventType.run_summary.value, step=steps - 1, root=None, from_="running",
                         to="finished", site="run", metrics={"steps": float(steps)})]
    if plateau:
        evs.append(SemanticEvent(type=EventType.optimizer_instability.value, step=20, root=None, from_="normal",
                                 to="plateau", site="loss", metrics={}))
    opt = {"type": "SGD", "groups": [{"lr": points[-1][1]}], "lr_at": [list(p) for p in points]}
    return Context(events=evs, optimizers=[opt])


def test_an_lr_that_collapses_early_is_named_and_schedules_made_to_end_low_are_not():
    from neuraldbg_cli.reason.families.loop import loop_misuse

    per_batch = [(0, 0.05), (3, 5e-3), (6, 5e-4), (9, 5e-5), (20, 5e-8), (30, 5e-11)]  # StepLR(3) per batch
    h = loop_misuse(_lr_ctx(per_batch, plateau=True))
    assert h is not None and h.kind == Kind.loop_misuse and "collapsed early" in h.summary and h.confidence >= 0.9
    assert "once per epoch" in h.suggestions[0]
    assert loop_misuse(_lr_ctx(per_batch)).confidence >= 0.5  # most of the run learns nothing: counted anyway
    # per epoch (10 epochs of 20 batches): 1000x below its peak only at step 180, 90% of the run
    per_epoch = [(0, 0.05), (60, 5e-3), (120, 5e-4), (180, 5e-5)]
    assert loop_misuse(_lr_ctx(per_epoch)) is None
    # OneCycleLR per batch: up to its peak at 30%, down to 1/10000 of it at the very end
    onecycle = [(0, 2e-3), (30, 0.02), (60, 0.05), (120, 0.02), (180, 1e-3), (199, 2e-7)]
    assert loop_misuse(_lr_ctx(onecycle)) is None
    # cosine with warm restarts: near 0 early, then back up
    restarts = [(0, 0.05), (18, 1e-5), (20, 0.05), (38, 1e-5), (40, 0.05)]
    assert loop_misuse(_lr_ctx(restarts)) is None


@pytest.mark.parametrize("per,found", [("batch", True), ("epoch", False), ("onecycle", False)])
def test_a_scheduler_stepped_per_batch_with_epoch_sized_steps_is_named(observe, per, found):
    report = observe("loop_sched.py", "--per", per).report
    if not found:
        assert report["status"] == "healthy", report["hypotheses"]
        return
    top = report["hypotheses"][0]
    assert top["kind"] == "loop_misuse" and "collapsed early" in top["summary"], top
    frozen = [h for h in report["hypotheses"] if h["kind"] == "unchanged_weights"]
    assert all(h.get("caused_by") == "loop_misuse" for h in frozen), frozen


@pytest.mark.parametrize("per,counted", [("top_warmup", True), ("top", False), ("onecycle_first", False),
                                         ("amp_skip", None), ("epoch", None)])
def test_a_scheduler_stepped_before_the_optimizer_is_named_where_it_skips_a_value(observe, per, counted):
    """torch's own warning, with the line and what it cost: a warm-up stepped at the top of each epoch loses its
    first stage (counted); StepLR there (its first value unchanged) and a per-batch OneCycleLR stepped between
    backward() and step() (its next value 1.7% off) only shift the schedule by one step (a note). A GradScaler that
    skips the first steps makes torch warn too, but the order is right: nothing (None)."""
    report = observe("loop_sched.py", "--per", per).report
    early = [h for h in report["hypotheses"] if any(e.get("to") == "scheduler_before_step" for e in h["evidence"])]
    if counted is None:
        assert early == [] and report["status"] == "healthy", report["hypotheses"]
        return
    assert len(early) == 1 and early[0]["kind"] == "loop_misuse", early
    h = early[0]
    assert "loop_sched.py:" in h["suggestions"][0] and "after optimizer.step()" in h["suggestions"][0], h
    if counted:
        assert report["hypotheses"][0] is h and h["confidence"] >= 0.5, report["hypotheses"]
        assert "LambdaLR.step()" in h["summary"] and "before any backward pass" in h["summary"]
        assert "first value (lr=0.0166667) is never used" in h["summary"], h["summary"]
    else:
        assert h["confidence"] < 0.5 and report["status"] == "healthy", h
        assert "one step early" in h["summary"], h["summary"]


BROKEN = [
    ("loop_mnist.py", ("--zero", "none"), "loop_mnist.py:60"),
    ("loop_accumulation.py", ("--zero", "none"), "loop_accumulation.py:31"),
    ("loop_gan.py", ("--zero-d", "no"), "loop_gan.py:32"),
]
HEALTHY = [
    ("loop_mnist.py", ("--zero", "zero_grad")),
    ("loop_mnist.py", ("--zero", "keep_zeros")),
    ("loop_mnist.py", ("--zero", "grad_none")),
    ("loop_mnist.py", ("--zero", "data_zero")),
    ("loop_mnist.py", ("--zero", "model")),
    ("loop_accumulation.py", ()),
    ("loop_gan.py", ()),
]


def _line(script, text):
    """`script:N` of the first line of the asset's code that starts with `text`."""
    lines = (ASSETS / script).read_text().splitlines()
    return f"{script}:{next(i for i, s in enumerate(lines, 1) if s.strip().startswith(text))}"


@pytest.mark.parametrize("script,args,backward", BROKEN, ids=[f"{s}{' '.join(a)}" for s, a, _ in BROKEN])
def test_gradients_never_zeroed_is_the_first_hypothesis(observe, script, args, backward):
    obs = observe(script, *args)
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "loop_misuse" and top["rank"] == 1 and top["confidence"] >= 0.9, obs.report["hypotheses"]
    assert top["origin"]["step"] == 1 and top["origin"]["module"] is None
    assert obs.report["status"] == "problems_found"
    step = _line(script, "optimizerD.step()" if script == "loop_gan.py" else "optimizer.step()")
    assert re.search(rf"step\(\) at \S*{re.escape(step)} ", top["summary"]), top["summary"]
    assert backward in top["suggestions"][0], top["suggestions"]
    for h in obs.report["hypotheses"][1:]:  # what it produced is its consequence
        assert h["confidence"] < 0.5 or h.get("caused_by") == "loop_misuse", h


def test_the_asset_lines_are_the_ones_named():
    assert _line("loop_mnist.py", "loss.backward()") == BROKEN[0][2]
    assert _line("loop_accumulation.py", "loss.backward()") == BROKEN[1][2]
    assert _line("loop_gan.py", "errD_real.backward()") == BROKEN[2][2]


@pytest.mark.parametrize("script,args", HEALTHY, ids=[f"{s}{' '.join(a)}" for s, a in HEALTHY])
def test_healthy_twins_are_quiet(observe, script, args):
    obs = observe(script, *args)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]
    assert not [h for h in obs.report["hypotheses"] if h["confidence"] >= 0.5]
    assert not [e for e in obs.run_dir.joinpath("events.jsonl").read_text().splitlines() if "loop_health" in e]
    model = json.loads(obs.run_dir.joinpath("model.json").read_text())
    assert all("step_at" not in o for o in model["optimizers"])  # model.json as before when nothing is kept


def test_fail_on_loop_misuse_exits_3(observe):
    obs = observe("loop_mnist.py", "--zero", "none")
    assert run_cli("explain", obs.run_dir, "--fail-on", "loop_misuse").returncode == 3
    healthy = observe("loop_mnist.py", "--zero", "zero_grad")
    assert run_cli("explain", healthy.run_dir, "--fail-on", "loop_misuse").returncode == 0


def test_verify_zero_grad_cures_it(tmp_path):
    """`verify` applies the zero_grad fix from outside the script (the gradients set to None after each optimizer
    step): the trial no longer shows loop_misuse and its loss is lower."""
    run_dir = tmp_path / "run"
    r = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / "loop_mnist.py", "--zero", "none", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (top,) = [h for h in explain_json(run_dir)["hypotheses"] if h["kind"] == "loop_misuse"]
    assert [f["id"] for f in top["fixes"]] == ["zero_grad"] and "zero_grad()" in top["fixes"][0]["text"]
    v = run_cli("verify", run_dir, "--fix", "zero_grad", timeout=400)
    assert v.returncode == 0, v.stdout + v.stderr
    doc = json.loads((run_dir / "verify.json").read_text())
    (entry,) = [f for f in doc["fixes"] if f["kind"] == "loop_misuse"]
    assert entry["id"] == "zero_grad" and entry["status"] == "verified", entry
    assert entry["metric"]["trial"] < entry["metric"]["control"]
    trial = json.loads((run_dir / "verify" / "zero_grad" / "trial.json").read_text())
    assert trial["fix"]["applied"] > 0, trial


def test_verify_judges_a_gans_two_objectives_each_against_its_own_control(tmp_path):
    """A GAN whose discriminator is never zeroed, verified end to end: the trial and the control report each
    model's loss (the generator's and the discriminator's, a game's payoffs), the fix is judged on each against its
    own control level, and a level that moved within the margin is no evidence of a cure: the summed number alone
    would not say which side moved."""
    run_dir = tmp_path / "run"
    r = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / "loop_gan.py", "--zero-d", "no", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    v = run_cli("verify", run_dir, "--fix", "zero_grad", timeout=400)
    assert v.returncode == 0, v.stdout + v.stderr
    (entry,) = json.loads((run_dir / "verify.json").read_text())["fixes"]
    objectives = entry["metric"]["objectives"]
    assert sorted(objectives) == ["Sequential", "Sequential#1"], entry  # D's loss (errD, ~1.2) and G's (~0.6)
    assert all(set(o) == {"control", "trial"} for o in objectives.values()), objectives
    assert "loop_misuse gone" in entry["reason"] and "each objective: Sequential " in entry["reason"], entry
    assert entry["status"] != "verified" and "no objective improved beyond noise" in entry["reason"], entry
    text = run_cli("explain", run_dir).stdout
    assert "fix zero_grad: not verified ✗ (loop_misuse gone, but no objective improved beyond noise" in text, text


def test_verify_scheduler_per_epoch_cures_the_collapsed_lr(tmp_path):
    """`verify` steps a scheduler that the script steps per batch once per epoch instead (its calls within a
    pass over the DataLoader held back, one step as the next pass begins): the control collapses again, the
    trial learns; the control runs long enough for the collapse to lie in its first 30% (the rule's window)."""
    run_dir = tmp_path / "run"
    r = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / "loop_sched.py", "--per", "batch", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (top,) = [h for h in explain_json(run_dir)["hypotheses"] if h["kind"] == "loop_misuse"]
    assert [f["id"] for f in top["fixes"]] == ["scheduler_per_epoch"]
    v = run_cli("verify", run_dir, timeout=400)
    assert v.returncode == 0, v.stdout + v.stderr
    doc = json.loads((run_dir / "verify.json").read_text())
    (entry,) = [f for f in doc["fixes"] if f["kind"] == "loop_misuse"]
    assert entry["id"] == "scheduler_per_epoch" and entry["status"] == "verified", entry
    assert doc["steps"] >= top["origin"]["step"] / 0.3
    trial = json.loads((run_dir / "verify" / "scheduler_per_epoch" / "trial.json").read_text())
    assert trial["fix"]["applied"] > 0, trial  # the per-batch calls held back


def test_verify_clipping_before_the_step_cures_the_clip_after_it(tmp_path):
    """`verify` clips before each optimizer step (a step pre-hook, at the script's own max_norm) while the script
    still clips after it: the trial's loop is as the fix says, the dead units and the missing gradients the
    unclipped lr-2 steps caused are gone, and the loss is far lower."""
    run_dir = tmp_path / "run"
    r = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / "loop_mnist.py", "--zero", "zero_grad", "--clip", "after",
                "--lr", "2", "--epochs", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    top = explain_json(run_dir)["hypotheses"][0]
    assert top["kind"] == "loop_misuse" and [(f["id"], f["params"]) for f in top["fixes"]] == [
        ("clip_grad_norm", {"max_norm": 0.5})], top
    v = run_cli("verify", run_dir, "--fix", "clip_grad_norm", timeout=400)
    assert v.returncode == 0, v.stdout + v.stderr
    (entry,) = [f for f in json.loads((run_dir / "verify.json").read_text())["fixes"] if f["kind"] == "loop_misuse"]
    assert entry["status"] == "verified" and entry["metric"]["trial"] < 0.1 * entry["metric"]["control"], entry


def test_scheduler_per_epoch_fix_leaves_a_per_epoch_schedule_as_it_was():
    """In process: the fix on a scheduler already stepped once per epoch gives the same lrs, epoch by epoch."""
    import torch
    from torch.utils.data import DataLoader

    from neuraldbg_cli.probe.hookset import HookSet
    from neuraldbg_cli.verify.fixes import install

    def lrs(per_batch: bool, fixed: bool) -> list[float]:
        hooks = HookSet()
        if fixed:
            applied = install("scheduler_per_epoch", {}, hooks)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        seen = []
        with hooks:
            for _ in range(6):
                for _ in DataLoader(list(range(8)), batch_size=2):
                    opt.step()
                    if per_batch:
                        sched.step()
                seen.append(opt.param_groups[0]["lr"])
                if not per_batch:
                    sched.step()
        if fixed:
            assert applied.count == (6 * 3 if per_batch else 0)  # 4 calls per epoch: 3 held back
        return seen

    as_meant = lrs(per_batch=False, fixed=False)
    assert lrs(per_batch=False, fixed=True) == as_meant
    assert lrs(per_batch=True, fixed=True) == as_meant  # the fix turns per-batch stepping into the schedule meant
    assert lrs(per_batch=True, fixed=False) != as_meant


# ---------------------------------------------------------------- graphs kept alive across steps (memory_growth)


def _keep(mode, steps=30, every=10):
    """A loop that keeps each step's loss as `mode` says; the loop runs inside this function (its frame's
    f_locals is the snapshot the keeper search must not leave holding this step's tensors)."""
    from collections import deque

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    total, losses, outputs, window = 0.0, [], [], deque(maxlen=5)
    with Recorder(every) as rec:
        for _ in range(steps):
            x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            if mode == "outputs":  # the batch's outputs kept for an epoch metric, undetached
                outputs.append(out)
            elif mode == "sum":
                total += loss
            elif mode == "item":
                total += loss.item()
            elif mode == "detach":
                total = total + loss.detach()
            elif mode == "append":
                losses.append(loss)
            elif mode == "window":
                window.append(loss)
        rec.keeper = rec.probe._graphs.keeper
    rec.graphs = {r.step: r.graphs for r in rec.records if r.graphs is not None}
    return rec


@pytest.mark.parametrize("mode,name,how", [("sum", "total", "sum"), ("append", "losses", "append")])
def test_a_loss_kept_with_its_graph_every_step_is_alive_at_later_steps(mode, name, how):
    rec = _keep(mode)
    g = rec.graphs
    assert sorted(g) == [*range(10), 10, 20]  # sampled steps only
    assert [g[s].alive for s in (1, 5, 9, 10, 20)] == [1, 5, 9, 10, 11]  # every earlier sampled step
    assert all(g[s].oldest == 0 and g[s].kept_loss == g[s].alive for s in (1, 20))
    assert rec.keeper is not None and (rec.keeper.name, rec.keeper.how, rec.keeper.expr) == (name, how, "loss")
    assert rec.keeper.line == next(i for i, s in enumerate(open(__file__).read().splitlines(), 1)
                                   if s.strip().startswith(f"{name}{' +=' if how == 'sum' else '.append'}"))


def test_outputs_kept_with_their_graph_are_alive_though_the_loss_is_not():
    rec = _keep("outputs")
    g = rec.graphs
    assert [g[s].alive for s in (5, 20)] == [5, 11] and g[20].kept_loss == 0, g
    assert rec.keeper is not None and (rec.keeper.name, rec.keeper.how, rec.keeper.expr) == ("outputs", "append", "out")


@pytest.mark.parametrize("mode", ["item", "detach", "none", "window"])
def test_a_number_a_detached_total_or_the_last_few_losses_keep_no_graph_for_long(mode):
    rec = _keep(mode)
    g = rec.graphs
    assert g[20].alive == 0 and g[20].oldest == -1, g[20]  # sampled every 10 steps: none of them still alive
    if mode == "window":  # the last 5 losses: alive while in the window, never older than it
        assert g[9].alive == 5 and g[9].oldest == 4
    else:
        assert all(r.alive == 0 for r in g.values()), g
    # the keeper search (run in the window's first steps) read the loop's frame: nothing of it stays alive
    assert rec.keeper is None


def test_a_recurrent_state_carried_undetached_is_the_keeper_and_its_detached_twin_keeps_nothing():
    rnn, head = nn.GRUCell(4, 8), nn.Linear(8, 1)
    torch.manual_seed(0)

    def loop(detach):
        h = torch.zeros(2, 8)
        with Recorder(10) as rec:
            for _ in range(12):
                if detach:
                    h = h.detach()
                h = rnn(torch.randn(2, 4), h)
                loss = head(h).pow(2).mean()
                loss.backward(retain_graph=not detach)
                for p in (*rnn.parameters(), *head.parameters()):
                    p.data.add_(p.grad, alpha=-0.01)
                    p.grad = None
            rec.keeper = rec.probe._graphs.keeper
        return rec

    kept = loop(False)
    g = {r.step: r.graphs for r in kept.records if r.graphs is not None}
    assert g[9].alive == 9 and g[9].reached == 8 and g[9].retained  # this step's graph continues the last one
    assert kept.keeper is not None and (kept.keeper.name, kept.keeper.how) == ("h", "carried")
    free = loop(True)
    assert all(r.graphs.alive == 0 and r.graphs.reached == -1 for r in free.records if r.graphs is not None)
    assert free.keeper is None


def _graph_events(readings):
    """The loop observer's events for (step, alive, oldest) readings."""
    from neuraldbg_cli.trace.events import GraphStats

    events = []
    mon = Monitor(TH, events.append)
    for step, alive, oldest in readings:
        mon.observe(StepRecord(step=step, sampled=True, graphs=GraphStats(alive, oldest, alive, -1, 1e8, False)))
    mon.finish()
    return [e for e in events if e.type == EventType.loop_health.value]


def test_graphs_kept_needs_several_alive_reaching_far_back():
    grow = [(s, min(s, 9 + s // 10), 0) for s in [*range(10), *range(10, 80, 10)]]
    (ev,) = [e for e in _graph_events(grow) if e.to == "graphs_kept"]
    assert ev.step == 20 and ev.metrics["since"] == 0  # 4+ alive and 20 steps back: from step 20, since step 0
    window = [(s, min(s, 5), max(0, s - 5)) for s in range(80)]  # the last five losses kept: never far back
    assert not [e for e in _graph_events(window) if e.to == "graphs_kept"]
    epoch = [(s, min(s % 100, 3), 0) for s in range(0, 200, 10)]  # a few alive only
    assert not [e for e in _graph_events(epoch) if e.to == "graphs_kept"]


def _memory_ctx(keeper=None, reached=None, kept=11.0):
    ev = SemanticEvent(type=EventType.loop_health.value, step=20, module=None, root=None, from_="normal",
                       to="graphs_kept", site="loop", metrics={"alive": 11.0, "since": 0.0, "kept_loss": kept,
                                                               "reached": reached, "memory": 2e8,
                                                               "retain_graph": 0.0})
    summary = SemanticEvent(type=EventType.run_summary.value, step=99, module=None, root=None, from_="running",
                            to="finished", site="run", metrics={"steps": 100.0, "graphs_step": 90.0,
                                                                "graphs_alive": 18.0, "graphs_since": 0.0,
                                                                "graphs_memory": 3e8, "graphs_memory_first": 2e8})
    facts = {"kept_graphs": keeper} if keeper else {}
    return Context([ev, summary], models=[{"name": "Net", "facts": facts}])


def test_memory_growth_names_the_keeper_its_line_and_the_fix():
    from neuraldbg_cli.reason.families.loop import memory_growth

    h = memory_growth(_memory_ctx({"name": "total", "how": "sum", "expr": "loss", "at": "train.py:41"}))
    assert h.kind == Kind.memory_growth and h.confidence >= 0.9 and h.origin.step == 0
    assert "at step 90 the graphs of 18 earlier sampled steps, back to step 0" in h.summary
    assert "`total` at train.py:41 keeps them" in h.summary and "190.7 MB to 286.1 MB" in h.summary
    assert h.suggestions[0].startswith("accumulate a number, not the tensor: `total += loss.item()` (train.py:41)")
    carried = memory_growth(_memory_ctx({"name": "hidden", "how": "carried", "expr": "model(x, hidden)",
                                         "at": "lm.py:9"}))
    assert "continues the previous step's" in carried.summary
    assert "`hidden = hidden.detach()` before lm.py:9" in carried.suggestions[0]
    outputs = memory_growth(_memory_ctx({"name": "preds", "how": "append", "expr": "out", "at": "t.py:5"}, kept=0))
    assert "tensors of every step are kept" in outputs.summary
    assert outputs.suggestions[0] == "keep the values without their graph: `preds.append(out.detach())` (t.py:5)"
    unplaced = memory_growth(_memory_ctx(reached=19.0))
    assert "hidden = hidden.detach()" in unplaced.suggestions[0] and "keeps them" not in unplaced.summary
    assert memory_growth(Context([])) is None


def test_memory_growth_is_a_root_and_a_fail_on_kind():
    from neuraldbg_cli.reason.families.causes import is_root_kind

    assert "memory_growth" in KNOWN_KINDS and parse_fail_on("memory_growth") == ["memory_growth"]
    assert is_root_kind(Hypothesis(kind=Kind.memory_growth, confidence=0.9, origin=Origin(module=None, step=0),
                                   summary="", evidence=[], propagation=[], suggestions=[]))


MEMORY = [("tensor", "running_loss", "running_loss += loss"), ("hidden", "hidden", "output, hidden = model(x, hidden)")]


@pytest.mark.parametrize("keep,name,text", MEMORY, ids=[m[0] for m in MEMORY])
def test_graphs_kept_across_steps_are_named_with_the_line_and_the_fix(observe, keep, name, text):
    obs = observe("loop_memory.py", "--keep", keep)
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "memory_growth" and top["confidence"] >= 0.9 and top["origin"]["step"] == 0, top
    line = _line("loop_memory.py", text)
    assert f"`{name}` at tests/assets/{line} keeps them" in top["summary"], top["summary"]
    fix = "running_loss += loss.item()" if keep == "tensor" else "hidden = hidden.detach()"
    assert fix in top["suggestions"][0], top["suggestions"]
    rss = [float(m) for m in re.findall(r"rss ([\d.]+) MB", obs.proc.stdout)]
    assert len(rss) == 3 and rss[2] > rss[0], obs.proc.stdout  # the harm, as the plain script shows it
    assert run_cli("explain", obs.run_dir, "--fail-on", "memory_growth").returncode == 3


@pytest.mark.parametrize("keep", ["item", "detach"])
def test_a_logged_number_and_truncated_bptt_are_quiet(observe, keep):
    obs = observe("loop_memory.py", "--keep", keep)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert not [h for h in obs.report["hypotheses"] if h["kind"] == "memory_growth"], obs.report["hypotheses"]
    assert not [h for h in obs.report["hypotheses"] if h["confidence"] >= 0.5], obs.report["hypotheses"]
    assert run_cli("explain", obs.run_dir, "--fail-on", "memory_growth").returncode == 0


@pytest.mark.parametrize("keep", ["tensor", "hidden"])
def test_the_observed_run_trains_the_same(observe, keep):
    """The losses the script prints are the same with and without neuraldbg (the tags sit in graph metadata)."""
    plain = run_python(ASSETS / "loop_memory.py", "--keep", keep)
    losses = lambda out: re.findall(r"loss ([\d.]+)", out)  # noqa: E731
    assert losses(plain.stdout) == losses(observe("loop_memory.py", "--keep", keep).proc.stdout) != []


# ---------------------------------------------------------------- DistributedSampler.set_epoch never called


def _sampler_epochs(set_epoch, shuffle=True, epochs=3):
    """A loop over a DataLoader with a DistributedSampler (rank 0 of 2, given explicitly: no process group)."""
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    original = DistributedSampler.__iter__
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=shuffle, seed=0)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    with Recorder(10) as rec:
        assert DistributedSampler.__iter__ is not original
        for epoch in range(epochs):
            if set_epoch:
                sampler.set_epoch(epoch)
            for x, y in loader:
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        rec.sampler_at = rec.probe.models()[0].facts.get("sampler_at")
    assert DistributedSampler.__iter__ is original  # the patch is removed on exit
    return rec


def test_the_probe_reads_each_iteration_of_a_distributed_sampler():
    fixed = _sampler_epochs(False)
    seen = [s for r in fixed.records for s in r.samplers.values()]
    assert [(s.iterations, s.epoch, s.epochs, s.shuffle) for s in seen] == [(1, 0, 1, True), (2, 0, 1, True),
                                                                             (3, 0, 1, True)]
    line = next(i for i, s in enumerate(open(__file__).read().splitlines(), 1) if s.strip() == "for x, y in loader:")
    assert all(s.line == line for s in seen) and fixed.sampler_at.endswith(f"test_loop.py:{line}")
    given = _sampler_epochs(True)
    assert [(s.iterations, s.epoch, s.epochs) for r in given.records for s in r.samplers.values()] == [
        (1, 0, 1), (2, 1, 2), (3, 2, 3)]
    assert given.sampler_at is None


def _sampler_rule(stats):
    from neuraldbg_cli.trace.events import SamplerStats

    events = []
    mon = Monitor(TH, events.append)
    for step, s in enumerate(stats):
        mon.observe(StepRecord(step=step * 10, sampled=True, samplers={0: SamplerStats(*s, line=7)} if s else {}))
    mon.finish()
    return loop_misuse(Context(events))


def test_a_shuffling_sampler_iterated_again_at_the_same_epoch_is_named():
    # (iterations, epoch, distinct epochs, shuffle) at each epoch's start, then a few steps without an iteration
    h = _sampler_rule([(1, 0, 1, True), None, (2, 0, 1, True), None, (3, 0, 1, True), None])
    assert h is not None and h.kind == Kind.loop_misuse and h.confidence >= 0.8 and h.origin.step == 20
    assert "iterated 3 times (epochs) and its epoch was 0 every time" in h.summary and "line 7" in h.summary
    assert h.suggestions[0].startswith("call sampler.set_epoch(epoch) at the start of each epoch")
    assert _sampler_rule([(1, 0, 1, True), None, (2, 1, 2, True), None, (3, 2, 3, True), None]) is None
    assert _sampler_rule([(1, 0, 1, False), None, (2, 0, 1, False), None, (3, 0, 1, False), None]) is None
    assert _sampler_rule([(1, 0, 1, True), None, None, None]) is None  # one epoch: nothing to compare


def test_an_unshuffled_sampler_is_not_judged():
    rec = _sampler_epochs(False, shuffle=False)
    assert rec.sampler_at is None and all(not s.shuffle for r in rec.records for s in r.samplers.values())


# ---------------------------------------------------------------- trained parameters outside every optimizer


def test_parameters_outside_every_optimizer_are_named_with_the_optimizer_that_leaves_them_out(observe):
    obs = observe("loop_outside.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "unchanged_weights" and top["origin"]["module"] == "head", top
    assert "head is in no optimizer: Adam trains body.0 of Net only." in top["summary"], top["summary"]
    tip = top["suggestions"][0]
    assert tip.startswith("head get gradients but are not in any optimizer (Adam trains body.0 of Net only)")
    assert "`optimizer.add_param_group({'params': model.head.parameters()})`" in tip, tip
    healthy = observe("loop_outside.py", "--all")
    assert healthy.report["status"] == "healthy", healthy.report["hypotheses"]


def test_a_module_path_is_written_as_python_reaches_it():
    from neuraldbg_cli.reason.families.weights import _attr_path

    assert [_attr_path(m) for m in ("head", "layers.0.fc", "0")] == [".head", ".layers[0].fc", "[0]"]


def test_the_keeper_is_found_in_the_caller_when_a_helper_runs_the_step():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)

    def train_step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with Recorder(10) as rec:
        total = 0
        for _ in range(12):
            total = total + train_step(torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g))
        keeper = rec.probe._graphs.keeper
    assert keeper is not None and (keeper.name, keeper.how) == ("total", "sum"), keeper
    assert keeper.expr.startswith("train_step(") and keeper.file.endswith("test_loop.py")


def test_one_data_order_every_epoch_explains_no_blow_up_and_memory_growth_is_a_root():
    sampler = _h(Kind.loop_misuse, 8, 0.85)
    sampler.evidence = [{"type": "loop_health", "to": "sampler_epoch_fixed", "step": 8}]
    ordered = rank([_h(Kind.exploding_gradient, 20, 0.95), sampler], slack=10, loss_window=10)
    assert all(h.caused_by is None for h in ordered), [(h.kind, h.caused_by) for h in ordered]
    never = _h(Kind.loop_misuse, 1, 0.92)
    never.evidence = [{"type": "loop_health", "to": "grads_not_zeroed", "step": 1}]
    ordered = rank([_h(Kind.exploding_gradient, 20, 0.95), never], slack=10, loss_window=10)
    assert [h.caused_by for h in ordered] == [None, Kind.loop_misuse]
    ordered = rank([_h(Kind.loss_plateau, 0, 0.95), _h(Kind.memory_growth, 0, 0.9)], slack=10, loss_window=10)
    assert ordered[0].kind == Kind.memory_growth  # a root comes before a state of the network


@pytest.mark.parametrize("finetune", ["before", "after", "head"])
def test_an_optimizer_holding_only_frozen_parameters_is_named_and_intended_freezing_is_quiet(observe, finetune):
    """The fine-tuning recipe (freeze the model, replace its head) with the optimizer built before it: it holds
    only frozen parameters and trains nothing (named first, with the head left out after it). Built after it, over
    model.parameters() (the frozen body in it) or over the head: healthy, whatever it holds frozen."""
    report = observe("loop_outside.py", "--finetune", finetune).report
    if finetune != "before":
        assert report["status"] == "healthy", report["hypotheses"]
        return
    top, kinds = report["hypotheses"][0], [h["kind"] for h in report["hypotheses"] if h["confidence"] >= 0.5]
    assert top["kind"] == "loop_misuse" and "Adam steps only frozen parameters" in top["summary"], top
    assert "loop_outside.py:" in top["summary"] and "requires_grad" in top["suggestions"][0], top
    assert top["evidence"][0]["to"] == "steps_frozen_only" and kinds[:2] == ["loop_misuse", "unchanged_weights"]
