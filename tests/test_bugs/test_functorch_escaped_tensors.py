"""Bug: forward passes inside torch.func transforms (vmap over grad) were observed, so batched tensors
escaped the transform and the transfer failed with an internal error. Transforms are now skipped."""
import json


def test_vmap_grad_is_not_observed(observe):
    obs = observe("zoo_amp.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "internal error" not in obs.proc.stderr, obs.proc.stderr
    assert json.loads(obs.proc.stdout)["per_sample_grad"] == [8, 8, 16]
    assert "Sequential" not in (obs.run_dir / "model.json").read_text()  # the model only used under vmap
