"""Bug: after model A finished training, its leftover .grad stayed non-zero while its weights stayed
the same, so A read as unchanged_weights while model B trained; and B's loss, appended to A's curve,
read as an oscillating loss. Models whose forward did not run in a step are no longer judged in that
step, and the loss curve starts afresh when another model takes over."""


def test_a_finished_model_is_not_reported(observe):
    obs = observe("two_models.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert [m["name"] for m in obs.report["models"]] == ["Sequential", "Sequential#1"]
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]
