"""Bug: before the first optimizer step (and on every step with gradient accumulation) gradients were read
right after a GradScaler-scaled backward: still scaled by 2**127, or inf on steps the scaler skips,
reported as exploding or non-finite. They are now read at the optimizer's step, unscaled, and steps the
scaler skips are not steps."""
import json


def test_scaled_gradients_are_not_reported(observe):
    obs = observe("zoo_amp.py")
    kinds = {h["kind"] for h in obs.report["hypotheses"]}
    assert not kinds & {"non_finite", "exploding_gradient"}, obs.report["hypotheses"]
    rows = [json.loads(line) for line in (obs.run_dir / "stats.jsonl").read_text().splitlines()]
    norms = [g[0] for row in rows for g in row.get("grads", {}).values()]
    assert norms and all(n is not None and 0 < n < 1e4 for n in norms), max(norms)
    assert obs.report["steps_observed"] == 40 - json.loads(obs.proc.stdout)["skipped"]
