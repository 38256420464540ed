"""Architecture-aware kinds through the real CLI: normalisation layers (tests/assets/bn_cnn.py, one layout per
--mode) and the loss call (loss_*.py, each with a --fixed 1 twin that must stay quiet)."""
import pytest


def _kinds(report, least=0.5):
    return {h["kind"]: h for h in report["hypotheses"] if h["confidence"] >= least}


@pytest.mark.parametrize(
    "mode,args",
    [
        ("healthy", ("--steps", "120")),  # running statistics judged for drift from step 29 on
        ("frozen_bn", ()),
        ("groupnorm", ("--steps", "200")),
        ("slimming", ("--lam", "1e-4", "--steps", "200")),  # an L1 penalty on the gains of the usual size
    ],
)
def test_batchnorm_used_right_is_quiet(observe, mode, args):
    obs = observe("bn_cnn.py", "--mode", mode, *args)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "normalization_fault" not in _kinds(obs.report, 0.0), obs.report["hypotheses"]
    if mode != "groupnorm":  # (batch 2: its loss is noisy, judged only for the norm)
        assert obs.report["status"] == "healthy", obs.report["hypotheses"]


def test_batchnorm_left_in_eval_mode_is_the_cause_of_the_plateau(observe):
    hyps = observe("bn_cnn.py", "--mode", "eval_start").report["hypotheses"]
    top = hyps[0]
    assert top["kind"] == "normalization_fault" and top["confidence"] >= 0.5, hyps
    assert top["origin"]["module"] == "1" and top["origin"]["step"] == 0
    assert "eval mode" in top["summary"] and "never updated" in top["summary"]
    assert any("model.train()" in s for s in top["suggestions"])
    assert set(top["propagation"]) == {"1", "4", "9"}
    assert all(h.get("caused_by") == "normalization_fault" for h in hyps[1:]), hyps


def test_a_non_finite_batch_poisons_running_stats_as_lasting_damage(observe):
    hyps = observe("bn_cnn.py", "--mode", "poison").report["hypotheses"]
    kinds = _kinds({"hypotheses": hyps})
    assert hyps[0]["kind"] == "data_anomaly" and hyps[0]["origin"]["step"] == 25
    norm = kinds["normalization_fault"]
    assert norm["confidence"] >= 0.85 and norm["caused_by"] == "data_anomaly"
    assert norm["origin"]["step"] == 25 and "step 25" in norm["summary"]
    assert any("reset_running_stats" in s for s in norm["suggestions"])


def test_too_few_values_per_channel(observe):
    top = observe("bn_cnn.py", "--mode", "tiny_batch", "--steps", "200").top
    assert top["kind"] == "normalization_fault" and top["origin"]["module"] == "9"
    assert "4 value(s)" in top["summary"]
    assert any("GroupNorm" in s for s in top["suggestions"]) and any("SyncBatchNorm" in s for s in top["suggestions"])


def test_momentum_in_another_frameworks_convention(observe):
    top = observe("bn_cnn.py", "--mode", "momentum").top
    assert top["kind"] == "normalization_fault" and "momentum=0.9" in top["summary"]
    assert any("momentum=0.1" in s for s in top["suggestions"])


def test_running_stats_that_fit_no_training_batch_drift(observe):
    """Two sources in turn, one normalised and one raw: train mode hides it, eval mode's statistics fit neither."""
    obs = observe("bn_cnn.py", "--mode", "two_sources", "--steps", "120")
    top = obs.top
    assert top["kind"] == "normalization_fault" and top["confidence"] >= 0.6, obs.report["hypotheses"]
    assert top["origin"]["module"] == "1" and 30 <= top["origin"]["step"] <= 40  # its statistics forgot 0/1 at 29
    assert "disagree with the training batches" in top["summary"] and "i.i.d. batch of 64" in top["summary"]
    assert any("preprocessing" in s for s in top["suggestions"]) and any("update_bn" in s for s in top["suggestions"])
    drift = top["evidence"][0]
    assert drift["to"] == "drift" and drift["drift"] > 1 and drift["batch"] == 64 and drift["calls"] == 1


def test_a_penalty_that_collapses_the_gains(observe):
    obs = observe("bn_cnn.py", "--mode", "slimming", "--steps", "200")
    top = obs.top
    assert top["kind"] == "normalization_fault" and top["confidence"] >= 0.6, obs.report["hypotheses"]
    assert top["origin"]["module"] == "1" and 90 <= top["origin"]["step"] <= 110
    assert "gain collapsed toward 0" in top["summary"] and set(top["propagation"]) == {"1", "4"}
    assert any("L1" in s for s in top["suggestions"])


@pytest.mark.parametrize(
    "script,words",
    [("loss_broadcast_mse.py", ["[256, 1]", "[256]", "broadcast"]), ("loss_softmax_ce.py", ["probabilities", "softmax"])],
)
def test_loss_misuse_is_the_top_cause_and_its_fix_is_exact(observe, script, words):
    obs = observe(script)
    top = obs.top
    assert top["kind"] == "loss_misuse" and top["confidence"] >= 0.8, obs.report["hypotheses"]
    assert all(w in top["summary"] for w in words), top["summary"]
    assert all(h.get("caused_by") == "loss_misuse" for h in obs.report["hypotheses"][1:])


@pytest.mark.parametrize("script", ["loss_broadcast_mse.py", "loss_softmax_ce.py"])
def test_the_fixed_loss_call_is_quiet(observe, script):
    assert observe(script, "--fixed", "1").report["status"] == "healthy"
