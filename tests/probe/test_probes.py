"""Probes in-process: naming, attribution, step counting, and that hooks leave nothing behind."""
import torch
import torch.nn as nn

from neuraldbg_cli.probe.hooks import Probe
from neuraldbg_cli.trace.events import ActStats


class Recorder:
    def __init__(self, every=1):
        self.records = []
        self.probe = Probe(self.records.extend, lambda: None, every=every, warn=lambda m: None)

    def __enter__(self):
        self.probe.install()
        return self

    def __exit__(self, *exc):
        self.probe.close()

    def sites(self):
        return {k for r in self.records for k in r.acts}


def _train(model, x, y, steps=3, opt=None):
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def test_steps_count_optimizer_steps_and_losses_are_recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with Recorder() as rec:
        _train(model, torch.randn(16, 4), torch.randn(16, 1), steps=5)
    assert [r.step for r in rec.records] == [0, 1, 2, 3, 4]
    assert all(r.loss is not None and r.loss > 0 for r in rec.records)
    assert rec.probe.roots[0].name == "Sequential"


def test_functional_activation_is_attributed_to_the_layer_before_it():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    with Recorder() as rec:
        _train(Net(), torch.randn(16, 4), torch.randn(16, 1))
    assert ("Net", "fc1", "activation") in rec.sites()
    stats = next(r.acts[("Net", "fc1", "activation")] for r in rec.records)
    assert isinstance(stats, ActStats) and stats.min >= 0


def test_functional_activation_after_a_dropout_or_pooling_names_the_layer_with_the_units():
    """Dropout, pooling and Flatten pass a layer's units on: an F.relu after them is the layer's activation."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.drop, self.fc2 = nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 6)
            self.pool, self.fc3 = nn.MaxPool1d(2), nn.Linear(3, 1)

        def forward(self, x):
            h = torch.relu(self.drop(self.fc1(x)))
            return self.fc3(torch.relu(self.pool(self.fc2(h).unsqueeze(1)).squeeze(1)))

    with Recorder() as rec:
        _train(Net(), torch.randn(16, 4), torch.randn(16, 1))
    sites = rec.sites()
    assert {("Net", "fc1", "activation"), ("Net", "fc2", "activation")} <= sites
    assert not {("Net", "drop", "activation"), ("Net", "pool", "activation")} & sites


def test_shared_activation_module_points_at_each_layer():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.act = nn.Linear(4, 8), nn.Linear(8, 8), nn.Sigmoid()

        def forward(self, x):
            return self.act(self.b(self.act(self.a(x))))

    with Recorder() as rec:
        _train(Net(), torch.randn(16, 4), torch.randn(16, 8))
    assert {("Net", "a", "activation"), ("Net", "b", "activation")} <= rec.sites()


def test_parts_called_alone_are_named_from_the_model_that_holds_them():
    class GAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.generator = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
            self.discriminator = nn.Sequential(nn.Linear(4, 1))

    gan = GAN()
    with Recorder() as rec:
        opt = torch.optim.SGD(gan.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            gan.discriminator(gan.generator(torch.randn(8, 2))).mean().backward()
            opt.step()
    assert [r.name for r in rec.probe.roots] == ["GAN"]
    names = {k[1] for r in rec.records for k in r.grads}
    assert {"generator.0", "discriminator.0"} <= names


def test_validation_under_no_grad_is_not_observed():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with Recorder() as rec:
        with torch.no_grad():
            model(torch.full((4, 4), float("nan")))
        _train(model, torch.randn(16, 4), torch.randn(16, 1), steps=2)
    for r in rec.records:
        for s in r.acts.values():
            assert (s.nonfinite == 0) if isinstance(s, ActStats) else s == s  # no NaN from validation


def test_nan_made_by_a_container_is_seen_at_the_container():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.log(self.lin(x) * 0)  # -inf made by the block's own code, not by `lin`

    model = nn.Sequential(Block(), nn.Linear(4, 1))
    with Recorder() as rec:
        _train(model, torch.randn(8, 4), torch.randn(8, 1), steps=1)
    first = rec.records[0].acts
    assert first[("Sequential", "0", "output")] != first[("Sequential", "0", "output")] or \
        first[("Sequential", "0", "output")] in (float("inf"), float("-inf"))
    lin = first[("Sequential", "0.lin", "output")]
    assert isinstance(lin, ActStats) and lin.nonfinite == 0


def test_no_hooks_or_patches_left_after_close():
    original = torch.autograd.backward
    init = torch.optim.Optimizer.__init__
    with Recorder():
        assert torch.autograd.backward is not original
    assert torch.autograd.backward is original and torch.optim.Optimizer.__init__ is init


def test_gradient_norms_between_samples_are_close_and_embeddings_exact():
    """Between samples a big dense gradient is read off an even sample of it; an embedding's, whose rows
    are mostly zero, always whole (a sample could miss every row of the batch)."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5000, 64)
            self.fc = nn.Linear(64, 4096)

        def forward(self, idx):
            return self.fc(self.emb(idx).mean(1))

    model = Net()
    idx, y = torch.randint(0, 5000, (8, 3)), torch.randn(8, 4096)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay put: every step has the same gradient
    with Recorder(every=100) as rec:
        _train(model, idx, y, steps=12, opt=opt)
    exact = {("Net", n): torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in m.parameters()])).item()
             for n, m in (("emb", model.emb), ("fc", model.fc))}
    assert not rec.probe.faults, rec.probe.faults
    sampled, unsampled = rec.records[0], rec.records[11]  # steps 0-9 are sampled, 11 is not
    assert sampled.sampled and not unsampled.sampled
    for key, value in exact.items():
        assert abs(sampled.grads[key].norm - value) <= 1e-4 * value
    assert abs(unsampled.grads[("Net", "fc")].norm - exact[("Net", "fc")]) <= 0.05 * exact[("Net", "fc")]
    assert unsampled.grads[("Net", "fc")].norm != sampled.grads[("Net", "fc")].norm  # read off a sample indeed
    assert abs(unsampled.grads[("Net", "emb")].norm - exact[("Net", "emb")]) <= 1e-4 * exact[("Net", "emb")]


def test_cpu_steps_are_read_as_they_end():
    """On the CPU a step's values are read when it ends (no device sync to save), so no small tensors
    outlive their step (they pinned glibc's heap: +25-60 MB RSS); a GPU's wait for the next sampled step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with Recorder(every=10) as rec:
        for i in range(25):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            assert len(rec.records) == i + 1 and not rec.probe.outbox.pending
    assert [r.sampled for r in rec.records[10:22]] == [True] + [False] * 9 + [True, False]
    assert all(len(r.grads) == 2 and r.loss is not None for r in rec.records)


# ---- the CPU's held non-finite checks (StepBuffer.watch): outputs checked only when their loss is not finite ----


class _Blowup(nn.Module):
    """A middle layer that makes Inf on the steps listed in `at` (its own code, not its Linear's)."""

    def __init__(self, at):
        super().__init__()
        self.lin, self.at, self.calls = nn.Linear(4, 4), set(at), 0

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        return y / 0 if self.calls - 1 in self.at else y


def _nonfinite_sites(rec, step):
    acts = next(r for r in rec.records if r.step == step).acts
    bad = lambda v: v.nonfinite > 0 if isinstance(v, ActStats) else not torch.isfinite(torch.tensor(v))  # noqa: E731
    return [k[1] for k, v in acts.items() if bad(v)]


def test_nan_between_samples_is_named_at_the_layer_that_made_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _Blowup(at=[14]), nn.Linear(4, 1))
    with Recorder(every=100) as rec:  # steps 10.. are not sampled
        _train(model, torch.randn(8, 4), torch.randn(8, 1), steps=16)
    assert not any(_nonfinite_sites(rec, s) for s in range(14))
    sites = _nonfinite_sites(rec, 14)
    assert sites and sites[0] == "1" and "0" not in sites and "1.lin" not in sites  # the first one: the block


def test_finite_losses_check_no_output_and_a_skipped_nan_loss_is_still_seen(monkeypatch):
    from neuraldbg_cli.probe import tensorstats as ts

    calls = []
    cheap = ts.cheap
    monkeypatch.setattr(ts, "cheap", lambda x: calls.append(1) or cheap(x))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _Blowup(at=[12]), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with Recorder(every=100) as rec:
        for i in range(16):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            if i == 10:
                calls.clear()
            if not torch.isfinite(loss):  # the script skips a NaN batch: no backward, no step
                continue
            loss.backward()
            opt.step()
    # only the skipped forward's six checks (input, target, 0, 1.lin, 1, 2) were reduced, when the next forward
    # began; the five steps with a finite loss reduced none (30 reductions before)
    assert len(calls) == 6
    assert any("1" in _nonfinite_sites(rec, r.step) for r in rec.records if r.step >= 10)


def test_an_evaluation_with_gradients_on_is_checked_when_the_step_closes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _Blowup(at=[14]), nn.Linear(4, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder(every=100) as rec:
        for i in range(14):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        model(x)  # a last forward with gradients on and no backward (call 14 makes Inf)
    assert "1" in _nonfinite_sites(rec, rec.records[-1].step)



def test_a_layer_unfrozen_midway_joins_within_ten_steps():
    """Staged fine-tuning: parameters unfrozen after the model was first seen join at the next re-scan, a
    sampled step, and after the first 10 steps at most one in 10 (stepcloser.RESCAN_EVERY): under --every 1 that
    is 10 times fewer walks over the model than sampled steps."""
    for every, unfreeze in ((1, 23), (10, 23), (1, 5)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        model[0].requires_grad_(False)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)  # it holds the frozen layer too: SGD skips it
        x = torch.randn(64, 4)
        with Recorder(every=every) as r:
            for step in range(40):
                if step == unfreeze:
                    model[0].requires_grad_(True)
                opt.zero_grad()
                nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
                opt.step()
        first = min(rec.step for rec in r.records if ("Sequential", "0") in rec.grads)
        assert unfreeze <= first <= max(unfreeze, 9) + 10 and first <= 33, (every, unfreeze, first)
        assert ("Sequential", "2") in r.records[0].grads  # trainable from the start
        if unfreeze < 10:  # every step of the first 10 re-scans
            assert first == unfreeze
