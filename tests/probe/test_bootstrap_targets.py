"""A loss target computed in a step in which a model ran outside training (a DQN's r + gamma * max Q_target(s')
under no_grad) is made from that model's output and moves as the model learns, by design: no data shift. The
same target drift from the data itself (no model run without gradients) is still a shift. Real training through
the CLI."""
import textwrap

from conftest import explain_json, run_cli

HEAD = """
import copy
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)
q = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(q.parameters(), lr=3e-3)
states = torch.randn(512, 4)
"""

# TD learning with a target network synced every 20 steps: reward 1 per step and gamma 0.97, so the
# bootstrapped targets climb from ~1 towards 1 / (1 - gamma) as the Q-values grow
DQN = """
target = copy.deepcopy(q)
for step in range(300):
    idx = torch.randint(0, 512, (64,))
    s, s2 = states[idx], states[(idx + 1) % 512]
    a = torch.randint(0, 2, (64, 1))
    qsa = q(s).gather(1, a).squeeze(1)
    with torch.no_grad():
        y = 1.0 + 0.97 * target(s2).max(1).values
    loss = F.smooth_l1_loss(qsa, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        target.load_state_dict(q.state_dict())
print("mean target", y.mean().item())
"""

# the same regression, but the targets are data whose unit changes at step 150 (x30): a real shift
SHIFT = """
ys = torch.randn(512) * 0.1 + 1.0
for step in range(300):
    idx = torch.randint(0, 512, (64,))
    y = ys[idx] * (30.0 if step >= 150 else 1.0)
    loss = F.smooth_l1_loss(q(states[idx])[:, 0], y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _kinds(tmp_path, body):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, script)
    assert proc.returncode == 0, proc.stderr
    return {h["kind"]: h for h in explain_json(run_dir)["hypotheses"]}, proc.stdout


def test_bootstrapped_td_targets_are_no_data_shift(tmp_path):
    kinds, out = _kinds(tmp_path, DQN)
    assert float(out.split("mean target")[1]) > 5  # the targets really did climb (from ~1)
    assert "data_anomaly" not in kinds


def test_targets_shifting_in_the_data_still_are(tmp_path):
    kinds, _ = _kinds(tmp_path, SHIFT)
    assert kinds["data_anomaly"]["confidence"] >= 0.5
    assert kinds["data_anomaly"]["origin"]["step"] == 150
