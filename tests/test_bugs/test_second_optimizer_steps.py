"""Bug: a step ended only when an optimizer's step count overtook the highest count so far, so after
pre-training, a new optimizer never ended a step: fine-tuning collapsed into one step whose buffer grew
with every forward pass (unbounded memory), and nothing more was written. Now an optimizer that keeps
stepping while the first one does not takes over."""
import json


def test_fine_tuning_with_a_new_optimizer_is_observed(observe):
    obs = observe("zoo_two_phases.py", "--steps", "30")
    assert obs.proc.returncode == 0, obs.proc.stderr
    rows = (obs.run_dir / "stats.jsonl").read_text().splitlines()
    assert len(rows) >= 58 and obs.report["steps_observed"] >= 58
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]
    assert {o["type"] for o in json.loads((obs.run_dir / "model.json").read_text())["optimizers"]} == {"SGD", "Adam"}
