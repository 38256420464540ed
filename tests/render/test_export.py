"""`neuraldbg export RUN_DIR --tensorboard DIR`: a real run exported, then read back with TensorBoard's own
reader; bad input is one stderr line and exit 2, tensorboard missing included."""
import json
import math
import shutil

import pytest
from conftest import ROOT, run_cli, run_patched

from neuraldbg_cli.render.export import _scalars


def _one_line_exit_2(r):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def exported(observe, tmp_path_factory):
    """(run_dir, EventAccumulator) for the vanishing-gradient run exported to TensorBoard."""
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = observe("vanishing.py").run_dir
    out = tmp_path_factory.mktemp("tb") / "logs"
    r = run_cli("export", run_dir, "--tensorboard", out)
    assert r.returncode == 0, r.stderr
    assert [p.suffix for p in out.iterdir()] == [".neuraldbg"]
    acc = EventAccumulator(str(out), size_guidance={"scalars": 0, "tensors": 0})  # 0: keep every point
    acc.Reload()
    return run_dir, acc


def _text(acc, tag):
    return {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)}


def test_scalars_are_the_run_statistics(exported):
    run_dir, acc = exported
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    loss = {e.step: e.value for e in acc.Scalars("loss")}
    assert loss.keys() == {r["step"] for r in rows}
    assert all(math.isclose(loss[r["step"]], r["loss"], rel_tol=1e-6) for r in rows)
    sampled = next(r for r in rows if "grads" in r)
    for key, (norm, weight) in sampled["grads"].items():
        module = key.split("|")[1]
        assert math.isclose(acc.Scalars(f"grad_norm/{module}")[0].value, norm, rel_tol=1e-6)
        assert math.isclose(acc.Scalars(f"weight_norm/{module}")[0].value, weight, rel_tol=1e-6)
    tags = acc.Tags()["scalars"]
    for prefix in ("update_ratio/", "dead_frac/", "saturated_frac/", "output_std/", "data_mean/"):
        assert any(t.startswith(prefix) for t in tags), (prefix, tags)


def test_events_and_verdict_are_text(exported):
    run_dir, acc = exported
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    text = _text(acc, "neuraldbg/events")
    assert events and text.keys() == {e["step"] for e in events}
    for e in events:
        assert f"`{e['type']}` **{e['module'] or e['site']}**: {e['from']} → {e['to']}" in text[e["step"]]
    verdict = run_cli("explain", run_dir, "--format", "json")
    top = json.loads(verdict.stdout)["hypotheses"][0]
    (step, body), = _text(acc, "neuraldbg/verdict").items()
    assert f"`{top['kind']}`" in body and top["summary"] in body and "problems_found" in body


def test_several_models_and_loss_series():
    row = {"step": 5, "loss": 1.0, "losses": {"G": 1.0, "D": 2.0},
           "acts": {"G||input": [0.0, 1.0, -1.0, 1.0, 0, 0, 0, 0, 0],
                    "G|net.1|activation": [0, 0, 0, 0, .5, .25, 0, 0, 0]},
           "grads": {"G|net.0": [0.1, 2.0], "D|fc": [None, 3.0]}, "updates": {"G|net.0": 0.002}}
    got = dict(_scalars(row, several_roots=True))
    assert got["loss/G"] == 1.0 and got["loss/D"] == 2.0 and "loss" not in got
    assert got["data_std/G/input"] == 1.0 and got["dead_frac/G/net.1"] == 0.25
    assert got["update_ratio/G/net.0"] == pytest.approx(0.001) and got["grad_norm/D/fc"] is None


def test_odd_rows_are_skipped(tmp_path):
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "sample_runs" / "vanishing", run_dir)
    with open(run_dir / "stats.jsonl", "a") as f:
        f.write('{"step": 18446744073709551615, "loss": 1.0}\n{"step": -1, "loss": 1.0}\n'
                '{"step": 3, "loss": "x", "acts": [1], "grads": {"a": "b", "R|m": [true, 1]}, "losses": {"a": null}}\n')
    r = run_cli("export", run_dir, "--tensorboard", tmp_path / "tb")
    assert r.returncode == 0 and not r.stderr, r.stderr


def test_missing_run_dir(tmp_path):
    _one_line_exit_2(run_cli("export", tmp_path / "missing", "--tensorboard", tmp_path / "tb"))


def test_no_destination():
    _one_line_exit_2(run_cli("export", ROOT / "sample_runs" / "vanishing"))


def test_destination_is_a_file(tmp_path):
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    (tmp_path / "f").write_text("x")
    _one_line_exit_2(run_cli("export", ROOT / "sample_runs" / "vanishing", "--tensorboard", tmp_path / "f" / "tb"))


def test_tensorboard_missing_is_one_line(tmp_path):
    r = run_patched("sys.modules['tensorboard'] = None  # as if not installed",
                    "export", ROOT / "sample_runs" / "vanishing", "--tensorboard", tmp_path / "tb")
    _one_line_exit_2(r)
    assert "neuraldbg[tensorboard]" in r.stderr
    assert not (tmp_path / "tb").exists()


def test_architecture_scalars():
    """The architecture statistics (tracewriter._stats_row: norms, loss_calls, resid, attn) become scalars of their
    own; rows written before a field grew (5 norm values, 3 loss-call values) still export."""
    row = {"step": 3, "loss": 1.0, "norms": {"Net|bn1": [0.0, 2.5, 1.1, 0.9, 1.0, 4096, 64], "Net|bn2": [1.0] * 5},
           "loss_calls": {"cross_entropy": [0.01, 0.3, 1e-7, [8, 4], [8]], "mse_loss": [0.0, 1.0, None]},
           "resid": {"Net|blocks.0": [2.0, 0.5, 2.1], "Net|blocks.1": [0.0, 0.5, 0.5]},
           "attn": {"Net|blocks.0.attn": [55.0, 0.1, 0.02]}}
    got = dict(_scalars(row, several_roots=False))
    assert got["norm_training/bn1"] == 0.0 and got["norm_shift/bn1"] == 2.5 and got["norm_gain/bn1"] == 0.9
    assert got["norm_gain/bn2"] == 1.0 and got["loss_input_max/mse_loss"] == 1.0
    assert got["loss_input_max/cross_entropy"] == 0.3 and got["loss_row_sum_dev/cross_entropy"] == 1e-7
    assert got["resid_branch_ratio/blocks.0"] == 0.25 and "resid_branch_ratio/blocks.1" not in got  # a zero skip
    assert got["attn_max_logit/blocks.0.attn"] == 55.0 and got["attn_entropy/blocks.0.attn"] == 0.02


def test_a_transformer_run_writes_residual_and_attention_statistics(observe):
    rows = [json.loads(line) for line in (observe("attn_lm.py", "--mode", "healthy").run_dir / "stats.jsonl")
            .read_text().splitlines()]
    sampled = [r for r in rows if "attn" in r]
    assert sampled and all(set(r["resid"]) == {"LM|blocks.0", "LM|blocks.1"} for r in sampled)
    assert set(sampled[0]["attn"]) == {"LM|blocks.0.attn", "LM|blocks.1.attn"}
    assert sampled[0]["loss_calls"]["cross_entropy"][3:] == [[512, 16], [512]]
    tags = {tag for r in sampled for tag, _ in _scalars(r, several_roots=False)}
    assert {"resid_branch_ratio/blocks.1", "attn_max_logit/blocks.0.attn", "attn_entropy/blocks.1.attn"} <= tags


def test_a_batchnorm_run_writes_its_norm_statistics(observe):
    rows = [json.loads(line) for line in (observe("bn_cnn.py", "--mode", "eval_start").run_dir / "stats.jsonl")
            .read_text().splitlines()]
    norms = next(r["norms"] for r in rows if "norms" in r)
    assert set(norms) == {"Sequential|1", "Sequential|4", "Sequential|9"}
    assert all(v[0] == 0.0 and v[4] == 1.0 for v in norms.values())  # eval mode, finite running statistics
