"""Bug: when gradient observation was switched off after an internal error, every later sampled step read
as "no gradient anywhere": a no_gradient hypothesis at 0.9, and --fail-on turned a healthy run's exit
status into 3. Steps after such a fault are no longer judged on gradients."""
from conftest import FAULTS


def test_gradient_fault_raises_no_false_alarm(patched):
    obs = patched(FAULTS["grads+stats_writer"][0], "awkward.py", options=("--fail-on", "any"))
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "internal error in grads" in obs.proc.stderr
    assert not [h for h in obs.report["hypotheses"] if h["confidence"] >= 0.5], obs.report["hypotheses"]
