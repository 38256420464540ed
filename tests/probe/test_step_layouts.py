"""Step counts of training layouts tests/probe/test_step_clock.py leaves out, through the real CLI (CONTRACT.md: `step`
counts completed optimizer steps; a backward pass no optimizer step follows is not a step; optimizers trained in
separate phases count every update; several optimizers stepped in one iteration are one step)."""
import json
import textwrap

from conftest import explain_json, run_cli

HEAD = """
import sys
import torch
import torch.nn as nn
torch.manual_seed(0)
def mlp(i=4, o=1):
    return nn.Sequential(nn.Linear(i, 8), nn.Tanh(), nn.Linear(8, o))
def batch():
    x = torch.randn(16, 4)
    return x, x.sum(1, keepdim=True)
"""

GAN = """
g, d = mlp(2, 4), mlp(4, 1)
opt_g = torch.optim.Adam(g.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(d.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
def d_step():
    opt_d.zero_grad()
    fake = g(torch.randn(16, 2))
    loss = bce(d(torch.randn(16, 4) + 2.0), torch.ones(16, 1)) + bce(d(fake.detach()), torch.zeros(16, 1))
    loss.backward()
    opt_d.step()
    return fake
def g_backward(fake):
    opt_g.zero_grad()
    bce(d(fake), torch.ones(16, 1)).backward()
"""

SCRIPTS = {
    # 10 micro-batches, an optimizer step every 4th: the last 2 backward passes are followed by no step
    "accumulate_tail": """
m = mlp()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(10):
    x, y = batch()
    (nn.functional.mse_loss(m(x), y) / 4).backward()
    if (i + 1) % 4 == 0:
        opt.step()
        opt.zero_grad()
""",
    # 6 iterations of D then G; a 7th where D steps and G's backward runs, but G never steps
    "gan_tail": GAN + """
for it in range(7):
    fake = d_step()
    g_backward(fake)
    if it < 6:
        opt_g.step()
""",
    # G and D stepped in one iteration, 9 iterations
    "gan_same_iteration": GAN + """
for it in range(9):
    fake = d_step()
    g_backward(fake)
    opt_g.step()
""",
    # G stepped first, then D on G's output detached (PyTorch-GAN's gan.py): G's model runs in no D step
    "gan_g_first": GAN + """
for it in range(9):
    opt_g.zero_grad()
    fake = g(torch.randn(16, 2))
    bce(d(fake), torch.ones(16, 1)).backward()
    opt_g.step()
    opt_d.zero_grad()
    loss = bce(d(torch.randn(16, 4) + 2.0), torch.ones(16, 1)) + bce(d(fake.detach()), torch.zeros(16, 1))
    loss.backward()
    opt_d.step()
""",
    # layer-wise / phase training: optimizer A for 5 steps on loss A, then optimizer B for 4 steps on loss B
    "phases": """
enc, head = mlp(4, 4), mlp(4, 1)
opt_a = torch.optim.SGD(enc.parameters(), lr=0.01)
opt_b = torch.optim.SGD(head.parameters(), lr=0.01)
for i in range(5):
    x, _ = batch()
    opt_a.zero_grad()
    nn.functional.mse_loss(enc(x), x).backward()  # reconstruction
    opt_a.step()
for i in range(4):
    x, y = batch()
    opt_b.zero_grad()
    nn.functional.mse_loss(head(enc(x).detach()), y).backward()
    opt_b.step()
""",
    # PGD adversarial training (locuslab/fast_adversarial layout): 3 attack steps take the input's gradient with
    # loss.backward() (it reaches the weights too), zero_grad discards that, then the training step: 6 iterations,
    # and a final attack on test data that no optimizer step follows
    "pgd_attack": """
m = mlp(4, 3)
opt = torch.optim.SGD(m.parameters(), lr=0.05)
def attack(x, y):
    delta = torch.zeros_like(x).uniform_(-0.1, 0.1).requires_grad_(True)
    for _ in range(3):
        nn.functional.cross_entropy(m(x + delta), y).backward()
        delta.data = (delta + 0.03 * delta.grad.sign()).clamp(-0.1, 0.1)
        delta.grad.zero_()
    return delta.detach()
losses = []
for i in range(6):
    x, _ = batch()
    y = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
    delta = attack(x, y)
    loss = nn.functional.cross_entropy(m(x + delta), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
attack(*batch()[:1], torch.zeros(16, dtype=torch.long))
print("LOSSES", losses)
""",
}


def _run(tmp_path, name):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(SCRIPTS[name]))
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, script)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return explain_json(run_dir), rows, events


def _check(report, rows, events, n):
    assert report["steps_observed"] == n
    assert [r["step"] for r in rows] == list(range(n))
    assert all(0 <= e["step"] < n for e in events)


def test_trailing_micro_batches_without_a_step_are_no_step(tmp_path):
    _check(*_run(tmp_path, "accumulate_tail"), 2)


def test_gan_last_generator_backward_without_its_step_adds_no_step(tmp_path):
    _check(*_run(tmp_path, "gan_tail"), 7)  # the 7th iteration's D step is a step; G's backward after it is not


def test_gan_two_optimizers_stepped_in_one_iteration_are_one_step(tmp_path):
    report, rows, events = _run(tmp_path, "gan_same_iteration")
    _check(report, rows, events, 9)


def test_gan_generator_stepped_first_then_the_discriminator_on_its_detached_output_is_one_step(tmp_path):
    _check(*_run(tmp_path, "gan_g_first"), 9)


def test_phases_count_every_update(tmp_path):
    _check(*_run(tmp_path, "phases"), 9)


def test_attack_backward_passes_are_no_step_and_no_part_of_its_loss(tmp_path):
    """Backward passes for an input's gradient whose weight gradients a zero_grad then discards: the first one
    (before any optimizer step) is no forgotten optimizer.step(), and their losses are not the step's loss."""
    report, rows, events = _run(tmp_path, "pgd_attack")
    _check(report, rows, events, 6)
    losses = [r["loss"] for r in rows]
    assert all(abs(a - b) < 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, _printed_losses(tmp_path))), losses


def _printed_losses(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, tmp_path / "pgd_attack.py"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.split("LOSSES")[1].strip())


def test_clock_a_new_phase_closes_its_first_update_before_its_second():
    from neuraldbg_cli.probe.stepclock import StepClock

    c = StepClock()
    seen = []
    for key in "aaabbb":
        c.step_begin()
        seen.append((c.takes_over(key), c.step_end(key)))
    # b's first update closes nothing (it could be a GAN's second optimizer); its second step closes it first
    assert seen == [(False, True)] * 3 + [(False, False), (True, True), (False, True)]
    c = StepClock()
    for key in "dgdgdgdg":  # two optimizers in one iteration: never a takeover
        c.step_begin()
        assert not c.takes_over(key)
        c.step_end(key)
