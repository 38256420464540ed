"""Bug: with float norms as the weights' fingerprint, lr=1e-6 updates vanished below the norms' resolution
and healthy-but-slow layers were reported as unchanged_weights. The bit checksum sees every update; and
weights that something puts back after each step are unchanged however far the optimizer moved them."""


def test_tiny_lr_is_not_unchanged_weights(observe):
    obs = observe("tiny_lr.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "unchanged_weights" not in [h["kind"] for h in obs.report["hypotheses"]], obs.report["hypotheses"]


def test_weights_put_back_after_each_step_are_unchanged(observe):
    obs = observe("reset_weights.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "unchanged_weights", obs.report["hypotheses"]
    assert top["origin"]["module"] in {"0", "2"} and top["origin"]["step"] <= 3
