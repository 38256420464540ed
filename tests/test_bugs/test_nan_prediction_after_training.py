"""Bug: a run whose weights went NaN and that predicts once after training (`model(x)` outside any step, as
many tutorials end) reported one step too many (51 for 50 optimizer steps): the NaN its last forward made
kept that forward as a step so the NaN could be reported. It is now kept as a tail: reported, never counted."""
import json

from conftest import run_cli

SCRIPT = """
import sys
import torch
torch.manual_seed(0)
x = torch.randn(64, 1); y = 3 * x + 1
model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=float(sys.argv[1]))
for i in range(50):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
print("prediction", model(torch.tensor([[4.0]])).item())
"""


def test_a_prediction_after_training_is_no_step(tmp_path):
    script = tmp_path / "predict.py"
    script.write_text(SCRIPT)
    for lr, nan in (("0.1", False), ("5", True)):
        run_dir = tmp_path / f"run{lr}"
        proc = run_cli("run", "--quiet", "--run-dir", run_dir, script, lr, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert ("prediction nan" in proc.stdout) == nan
        doc = json.loads(run_cli("explain", run_dir, "--format", "json").stdout)
        assert doc["steps_observed"] == 50
        assert any(h["kind"] == "non_finite" for h in doc["hypotheses"]) == nan
