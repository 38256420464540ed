"""Architecture-aware kinds through the real CLI: normalisation layers (tests/assets/bn_cnn.py, one layout per
--mode) and the loss call (loss_*.py, each with a --fixed 1 twin that must stay quiet)."""
import pytest


def _kinds(report, least=0.5):
    return {h["kind"]: h for h in report["hypotheses"] if h["confidence"] >= least}


@pytest.mark.parametrize("mode,args", [("healthy", ()), ("frozen_bn", ()), ("groupnorm", ("--steps", "200"))])
def test_batchnorm_used_right_is_quiet(observe, mode, args):
    obs = observe("bn_cnn.py", "--mode", mode, *args)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "normalization_fault" not in _kinds(obs.report, 0.0), obs.report["hypotheses"]
    if mode != "groupnorm":  # (batch 4: its loss is noisy, judged only for the norm)
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
