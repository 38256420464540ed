"""Healthy training must stay silent: no hypothesis at confidence >= 0.5, status healthy, exit 0."""
import pytest
from conftest import ASSETS, DEMO_HEALTHY, run_cli

HEALTHY = [DEMO_HEALTHY, "healthy_cnn_bn.py", "awkward.py"]


@pytest.mark.parametrize("script", HEALTHY)
def test_no_false_alarm(observe, script):
    obs = observe(script, options=("--fail-on", "any"))
    assert obs.proc.returncode == 0, obs.proc.stderr
    strong = [h for h in obs.report["hypotheses"] if h["confidence"] >= 0.5]
    assert not strong, strong
    assert obs.report["status"] == "healthy"
    assert obs.report["steps_observed"] > 10


def test_awkward_models_are_observed(observe):
    """In-place ReLU, LSTM tuple outputs, dict outputs and a shared module: all named and traced."""
    obs = observe("awkward.py", options=("--fail-on", "any"))
    assert "Traceback" not in obs.proc.stderr
    import json

    model = json.loads((obs.run_dir / "model.json").read_text())["models"][0]
    assert {"fc", "relu", "lstm", "shared", "head"} <= set(model["order"])
    assert model["name"] == "DictNet"


def test_inference_only_script(tmp_path):
    r = run_cli("run", "--run-dir", tmp_path / "run", ASSETS / "inference_only.py")
    assert r.returncode == 0, r.stderr
    r = run_cli("explain", tmp_path / "run", "--format", "json")
    import json

    assert json.loads(r.stdout)["status"] == "no_training_observed"
