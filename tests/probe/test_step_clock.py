"""Steps are optimizer steps, everywhere (CONTRACT.md): gradient accumulation, closures (LBFGS), several
optimizers in one iteration, no optimizer at all, a forgotten optimizer.step(); the loss of a step is the sum
of its micro-batch losses; buffers stay bounded when no step closes; update norms are the real change."""
import json
import textwrap

import pytest
import torch
import torch.nn as nn

from neuraldbg_cli.probe.records import MAX_CHECKS
from neuraldbg_cli.probe.stepclock import ACCUMULATION_LIMIT, CLOSE, READ, StepClock, series_name
from conftest import explain_json, run_cli
from tests.probe.test_probes import Recorder

HEAD = """
import json, sys
import torch
import torch.nn as nn
torch.manual_seed(0)
log = []
def mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
def batch():
    x = torch.randn(16, 4)
    return x, x.sum(1, keepdim=True)
"""
TAIL = """
json.dump(log, open(sys.argv[1], "w"))
"""

SCRIPTS = {
    # k micro-batches per optimizer step, each loss divided by k before backward (HF Trainer, typical loops)
    "accumulate": """
k = int(sys.argv[2])
m = mlp()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
for step in range(5):
    total = 0.0
    for micro in range(k):
        x, y = batch()
        loss = nn.functional.mse_loss(m(x), y) / k
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad()
    log.append(total)
""",
    # manual SGD, no optimizer object (pytorch/examples word_language_model's default)
    "manual_sgd": """
m = mlp()
for step in range(6):
    m.zero_grad()
    x, y = batch()
    loss = nn.functional.mse_loss(m(x), y)
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(p.grad, alpha=-0.01)
    log.append(loss.item())
""",
    # LBFGS: the closure runs several forward/backward passes inside one step(); the step's loss is the first
    "lbfgs": """
m = mlp()
x, y = batch()
opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=5)
for step in range(3):
    values = []
    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(m(x), y)
        loss.backward()
        values.append(loss.item())
        return loss
    opt.step(closure)
    assert len(values) > 1
    log.append(values[0])
""",
    # DCGAN layout: separate G and D, D stepped then G, in every iteration
    "gan": """
class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
    def forward(self, z):
        return self.net(z)
class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    def forward(self, x):
        return self.net(x)
g, d = G(), D()
opt_g = torch.optim.Adam(g.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(d.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(7):
    real = torch.randn(16, 4) + 2.0
    d.zero_grad()
    err_real = bce(d(real), torch.ones(16, 1))
    err_real.backward()
    fake = g(torch.randn(16, 2))
    err_fake = bce(d(fake.detach()), torch.zeros(16, 1))
    err_fake.backward()
    opt_d.step()
    g.zero_grad()
    err_g = bce(d(fake), torch.ones(16, 1))
    err_g.backward()
    opt_g.step()
    log.append([err_real.item() + err_fake.item(), err_g.item()])
""",
    # the optimizer is built and its zero_grad called, but optimizer.step() is missing
    "forgotten": """
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for step in range(30):
    opt.zero_grad()
    x, y = batch()
    loss = nn.functional.mse_loss(m(x), y)
    loss.backward()
    log.append(loss.item())
""",
    # SAM (davda54/sam layout): climb along the gradient, zero_grad, a second pass there, back, the optimizer's step
    "sam": """
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.05)
for step in range(6):
    x, y = batch()
    loss = nn.functional.mse_loss(m(x), y)
    loss.backward()
    with torch.no_grad():
        eps = [0.05 * p.grad / (p.grad.norm() + 1e-12) for p in m.parameters()]
        for p, e in zip(m.parameters(), eps):
            p.add_(e)
    opt.zero_grad()
    nn.functional.mse_loss(m(x), y).backward()
    with torch.no_grad():
        for p, e in zip(m.parameters(), eps):
            p.sub_(e)
    opt.step()
    opt.zero_grad()
    log.append(loss.item())
""",
    # a NaN guard: a non-finite loss's gradients are zeroed and the iteration skipped (no optimizer step)
    "nan_skip": """
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for step in range(8):
    x, y = batch()
    loss = nn.functional.mse_loss(m(x), y)
    if step == 4:
        loss = loss * float("nan")
    loss.backward()
    if not torch.isfinite(loss):
        opt.zero_grad()
        continue
    opt.step()
    opt.zero_grad()
    log.append(loss.item())
""",
    # the gradients zeroed between backward() and step() (a bug): nothing reaches the weights
    "zero_before_step": """
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for step in range(6):
    x, y = batch()
    loss = nn.functional.mse_loss(m(x), y)
    loss.backward()
    opt.zero_grad()
    opt.step()
    log.append(loss.item())
""",
    # neither optimizer.step() nor zero_grad(): gradients pile up; backward passes past the limit are steps
    "forgotten_no_zero_grad": f"""
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for step in range({ACCUMULATION_LIMIT + 20}):
    x, y = batch()
    nn.functional.mse_loss(m(x), y).backward()
""",
}


def _run(tmp_path, name, *args):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(SCRIPTS[name]) + TAIL)
    run_dir, log = tmp_path / "trace", tmp_path / "log.json"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, script, log, *args)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    logged = json.loads(log.read_text()) if log.exists() else []
    return explain_json(run_dir), rows, logged


@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_is_one_step_from_the_first_and_its_loss_is_the_sum(tmp_path, k):
    report, rows, logged = _run(tmp_path, "accumulate", str(k))
    assert report["steps_observed"] == 5
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["loss"] for r in rows] == pytest.approx(logged, rel=1e-5)


def test_without_an_optimizer_each_backward_pass_is_a_step(tmp_path):
    report, rows, logged = _run(tmp_path, "manual_sgd")
    assert report["steps_observed"] == 6
    assert [r["loss"] for r in rows] == pytest.approx(logged, rel=1e-5)


def test_lbfgs_closure_is_one_step_with_the_first_closure_loss(tmp_path):
    report, rows, logged = _run(tmp_path, "lbfgs")
    assert report["steps_observed"] == 3
    assert [r["loss"] for r in rows] == pytest.approx(logged, rel=1e-5)
    assert all(len(r["grads"]) == 2 and all(v[0] is not None for v in r["grads"].values()) for r in rows)


def test_gan_two_optimizers_in_one_iteration_are_one_step_each_with_its_own_loss(tmp_path):
    report, rows, logged = _run(tmp_path, "gan")
    assert report["steps_observed"] == 7
    # D leads (it steps first): its loss is each row's "loss". Until G is seen to step after D in every
    # iteration, D's step closes the step and G's lands in the next one; from the third on a step is D then G
    assert [r["loss"] for r in rows] == pytest.approx([d for d, _ in logged], rel=1e-5)
    assert all(set(r["losses"]) == {"D", "G"} for r in rows[1:])
    g_losses = [r["losses"]["G"] for r in rows[1:]]
    assert g_losses == pytest.approx([logged[0][1]] + [g for _, g in logged[2:]], rel=1e-5)


def test_forgotten_step_counts_backward_passes_and_is_found(tmp_path):
    report, rows, logged = _run(tmp_path, "forgotten")
    assert report["steps_observed"] == 30
    assert [r["loss"] for r in rows] == pytest.approx(logged, rel=1e-5)
    assert report["hypotheses"] and report["hypotheses"][0]["kind"] == "unchanged_weights"


def test_sam_two_passes_per_step_are_one_step_from_the_first(tmp_path):
    """SAM zeroes the first pass's gradients after changing the weights, before any optimizer has stepped: that
    zero_grad is no forgotten step, the optimizer's step ends the step."""
    report, rows, logged = _run(tmp_path, "sam")
    assert report["steps_observed"] == 6 == len(logged)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]


def test_a_skipped_nan_loss_still_shows_although_its_gradients_were_discarded(tmp_path):
    """A zero_grad that discards every gradient drops the passes' losses from the step's loss (an attack's), but
    a NaN/Inf among them is never dropped: the guarded NaN is still reported, at the step that took it."""
    report, rows, logged = _run(tmp_path, "nan_skip")
    assert report["steps_observed"] == 7 == len(logged)
    assert any(h["kind"] == "non_finite" for h in report["hypotheses"]), report["hypotheses"]
    finite = [r["loss"] for r in rows if r["step"] != 4]
    assert finite == pytest.approx(logged[:4] + logged[5:], rel=1e-5)


def test_gradients_zeroed_before_the_step_keep_their_loss(tmp_path):
    """No backward pass follows the zero_grad that discarded the step's gradients: its loss stays the step's."""
    report, rows, logged = _run(tmp_path, "zero_before_step")
    assert [r["loss"] for r in rows if r["loss"] is not None] == pytest.approx(logged, rel=1e-5)


def test_forgotten_step_without_zero_grad_still_advances(tmp_path):
    report, rows, _ = _run(tmp_path, "forgotten_no_zero_grad")
    assert report["steps_observed"] == 21  # the first ACCUMULATION_LIMIT passes, then one step per pass


# ---- in-process: buffers, update norms, wrapper optimizers ----


def test_checks_stay_bounded_when_no_step_closes():
    """Grad-enabled forwards with no backward (an evaluation that forgot no_grad) never close a step: its
    checks are folded past MAX_CHECKS, and a NaN made in a folded check is still seen."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    x = torch.randn(4, 4)
    n = 0
    with Recorder() as rec:
        torch.optim.SGD(model.parameters(), lr=0.1)
        while len(rec.probe._buf.checks) < MAX_CHECKS:
            model(x)
            n += 1
        for _ in range(2 * n):
            model(x)
        size = len(rec.probe._buf.checks)
        model(torch.full((4, 4), float("nan")))
    assert size <= MAX_CHECKS + 8, size
    assert len(rec.records) == 1 and not rec.probe.faults
    assert rec.records[0].acts[("Sequential", "0", "output")].nonfinite >= 1  # seen though folded


def test_update_norm_is_the_change_of_a_plain_sgd_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8192))  # 65K weights: read off a sample
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 8192)
    changes = []
    with Recorder(every=100) as rec:
        for _ in range(12):
            before = [p.detach().clone() for p in model.parameters()]
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            deltas = [(p.detach() - b).reshape(-1) for p, b in zip(model.parameters(), before)]
            changes.append({"0": torch.cat(deltas[:2]).norm().item(), "2": torch.cat(deltas[2:]).norm().item()})
    assert not rec.probe.faults, rec.probe.faults
    for r, change in zip(rec.records, changes):
        if not r.sampled:
            assert all(g.update_norm is None for g in r.grads.values())
            continue
        assert r.grads[("Sequential", "0")].update_norm == pytest.approx(change["0"], rel=1e-4)
        assert r.grads[("Sequential", "2")].update_norm == pytest.approx(change["2"], rel=0.1)
    assert sum(r.sampled for r in rec.records) == 10 and not rec.records[11].sampled


def test_an_optimizer_wrapping_another_steps_once():
    """accelerate's AcceleratedOptimizer and similar wrappers are Optimizers whose step() steps the inner."""

    class Wrapper(torch.optim.Optimizer):
        def __init__(self, inner):
            self.inner = inner
            super().__init__(inner.param_groups[0]["params"], {})
            self.param_groups = inner.param_groups

        def step(self, closure=None):
            return self.inner.step(closure)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with Recorder() as rec:
        opt = Wrapper(torch.optim.SGD(model.parameters(), lr=0.01))
        for _ in range(4):
            for _ in range(2):
                nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    assert [r.step for r in rec.records] == [0, 1, 2, 3]
    assert all(len(r.grads) == 2 and r.loss is not None for r in rec.records)


def test_a_last_forward_without_training_is_no_step_unless_it_makes_a_nan():
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for tail, steps in ((x, 3), (torch.full_like(x, float("nan")), 4)):
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        with Recorder() as rec:
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for _ in range(3):
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            model(tail)  # a final evaluation that forgot no_grad
        assert len(rec.records) == steps


# ---- the clock alone ----


def test_series_of_two_optimizers_of_one_model_are_its_parts():
    owners = (("GAN", "generator.0"), ("GAN", "generator.0"), ("GAN", "generator.2"), ("GAN", "discriminator.0"),
              ("GAN", "discriminator.2"))
    assert series_name(owners[3:], owners) == "GAN.discriminator"
    assert series_name(owners[:3], owners) == "GAN.generator"
    assert series_name(owners, owners) == "GAN" and series_name((), owners) == ""
    assert series_name(owners[2:], owners) == "GAN"  # no common part: the model


def _steps(clock, keys, live=lambda key: True):
    out = []
    for key in keys:
        clock.step_begin()
        out.append(clock.step_end(key, live))
    return out


def test_clock_gan_d_then_g_is_one_step_once_the_order_is_seen():
    c = StepClock()
    assert _steps(c, "dgdgdgdg") == [True, False, True, False, False, True, False, True]
    assert c.lead == "d"
    assert _steps(c, "ddd") == [False, True, True]  # G stopped: D paces again
    # a new phase: only "h" steps from now on; it takes over at its second step, or at once when "d" is gone
    assert _steps(c, "hh") == [False, True] and c.lead == "h"
    assert _steps(c, "k", live=lambda key: key != "h") == [True] and c.lead == "k"
    # G first, then D on G's output detached: G's model runs in no D step, yet G is no finished phase after one
    # step (it steps again next iteration): one step per iteration, paced by D once the order is seen
    c = StepClock()
    assert _steps(c, "gdgdgdgd", live=lambda key: key != "g") == [True, False, True, False, False, True, False, True]


def test_clock_an_optimizer_stepped_every_nth_iteration_never_paces():
    c = StepClock()
    assert _steps(c, "dddgdddgdddg") == [True] * 3 + [False] + [True] * 3 + [False] + [True] * 3 + [False]


def test_clock_nested_steps_count_once_and_closure_losses_after_the_first_are_not_taken():
    c = StepClock()
    assert c.take_loss()  # a backward before any step
    assert c.step_begin() and not c.step_begin()
    assert c.take_loss() and not c.take_loss()  # closure: the first value only
    assert c.backward_end(True) == ""
    assert c.step_end("inner") is None and c.step_end("outer") is True


def test_clock_zero_grad_ends_a_forgotten_step_only_before_any_step():
    c = StepClock()
    assert c.backward_end(True) == ""
    assert not c.zero_grad(lambda: False)  # nothing to discard (the gradients of another model)
    assert c.zero_grad(lambda: True)
    c.backward_end(True)
    c.step_begin()
    c.step_end("opt")
    c.backward_end(True)
    assert not c.zero_grad(lambda: True)  # actor-critic: zeroing the other model between two backward passes


def test_clock_a_zero_grad_after_a_weight_change_ends_no_step_once():
    """SAM's climb (weights changed, then zero_grad) lets the step go on to its optimizer step; the same again
    with no optimizer step between is manual updates: that zero_grad and each one after it end a step."""
    c = StepClock()
    c.backward_end(True)
    assert not c.zero_grad(lambda: True, lambda: True)  # SAM's first_step
    c.backward_end(True)
    c.step_begin()
    assert c.step_end("opt") is True  # the optimizer's step ends step 0
    manual = StepClock()
    manual.backward_end(True)
    assert not manual.zero_grad(lambda: True, lambda: True)
    manual.backward_end(True)
    assert manual.zero_grad(lambda: True, lambda: True)  # no optimizer step came: manual updates
    manual.backward_end(True)
    assert manual.zero_grad(lambda: True, lambda: True)
    plain = StepClock()  # nothing changed the weights: a forgotten optimizer.step()
    plain.backward_end(True)
    assert plain.zero_grad(lambda: True, lambda: False)


def test_clock_counts_backward_passes_without_optimizer_and_past_the_limit():
    c = StepClock(limit=3)
    assert c.backward_end(False) == READ and c.due() and not c.due()
    assert [c.backward_end(True) for _ in range(3)] == ["", "", CLOSE]
    assert c.backward_end(True) == READ and c.due()
    c.step_begin()
    c.step_end("opt")
    assert c.backward_end(True) == ""  # an optimizer step: accumulating again
