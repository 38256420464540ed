"""A script that updates its weights itself (no torch.optim): on sampled steps the probe measures the update
(its size against the weights, and its cosine with the gradient it followed); an update that adds the gradient
(`p += lr * p.grad`, gradient ascent) is named as the root of the climb, with the sign's fix and no step-size
advice (a smaller step only slows a climb). A textbook descent raises nothing."""
import json

import pytest

from conftest import explain_json, run_cli


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("zero_after", ["0", "1"])
def test_a_manual_ascent_is_named_as_the_root_with_the_sign_fix(observe, zero_after):
    obs = observe("manual_update.py", "--sign", "1", "--zero-after", zero_after)
    assert obs.proc.returncode == 0, obs.proc.stderr[-2000:]
    up = [e for e in _events(obs.run_dir) if e["type"] == "parameter_update" and e["to"] == "ascending"]
    assert up and all(e["metrics"]["update_cos"] > 0.9 for e in up), up
    assert min(e["step"] for e in up) == 0
    top = obs.report["hypotheses"][0]
    assert top["kind"] in ("loss_divergence", "unstable_loss", "exploding_gradient"), top
    assert "manual update climbs the loss" in top["summary"], top
    assert top["suggestions"][0].startswith("make the manual update subtract the gradient")
    for h in obs.report["hypotheses"]:
        assert not [t for t in h["suggestions"] if t.startswith(("lr=", "clip gradients", "lower the learning"))], h
        assert "learning rate is too large" not in h["summary"]


@pytest.mark.parametrize("zero_after", ["0", "1"])
def test_a_manual_descent_is_healthy(observe, zero_after):
    obs = observe("manual_update.py", "--zero-after", zero_after)
    assert obs.proc.returncode == 0, obs.proc.stderr[-2000:]
    assert not [e for e in _events(obs.run_dir) if e["type"] == "parameter_update"]
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]


def test_the_update_is_measured_as_large_as_it_is(tmp_path):
    """A manual step 200x too large is an oversized update, as an optimizer's would be: the lr is named; its
    direction was measured going down the gradient, so the advice does not ask to check the sign."""
    run_dir = tmp_path / "r"
    r = run_cli("run", "--quiet", "--run-dir", run_dir, "tests/assets/manual_update.py", "--lr", "2.0")
    assert r.returncode == 0, r.stderr[-2000:]
    big = [e for e in _events(run_dir) if e["type"] == "parameter_update" and e["to"] == "oversized"]
    assert big, _events(run_dir)
    top = explain_json(run_dir)["hypotheses"][0]
    assert "learning rate is too large" in top["summary"], top
    assert "manual update's step size smaller" in top["suggestions"][0]
    assert "subtracts" not in top["suggestions"][0]


def test_an_ascent_that_begins_late_is_no_flipped_sign():
    """Momentum carried up a gradient that turned (an overshoot, later in the run) is not a sign error: only
    updates that climb from the first samples name it."""
    from neuraldbg_cli.config import Thresholds
    from neuraldbg_cli.reason.families.context import Context
    from neuraldbg_cli.reason.families.settings import manual_ascent
    from neuraldbg_cli.trace.events import SemanticEvent

    def up(step):
        return SemanticEvent(type="parameter_update", step=step, module="fc", root="Net", from_="updating",
                             to="ascending", site="weights", metrics={"update_cos": 0.9})

    assert manual_ascent(Context(events=[up(0)], thresholds=Thresholds())) is not None
    assert manual_ascent(Context(events=[up(40)], thresholds=Thresholds())) is None


def test_a_manual_loop_that_never_zeroes_its_gradients_is_a_loop_bug(observe):
    """`w.grad.zero_()` left out of a manual loop: at the next backward pass the gradient is still there, bit for
    bit, after the weights moved, so each update applies the sum of every gradient so far."""
    obs = observe("manual_update.py", "--zero-after", "-1")
    top = obs.report["hypotheses"][0]
    assert top["kind"] == "loop_misuse" and "never zeroed between manual updates" in top["summary"], top
    assert top["confidence"] >= 0.5 and "p.grad.zero_()" in top["suggestions"][0]


def test_micro_batches_accumulated_before_a_manual_update_are_no_loop_bug(observe):
    """Two backward passes per update, zeroed before the first: the gradient is still there at the second pass,
    but the weights did not move in between (accumulation on purpose)."""
    obs = observe("manual_update.py", "--accumulate", "2")
    assert obs.proc.returncode == 0, obs.proc.stderr[-2000:]
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]
