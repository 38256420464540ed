"""Bug: a meta.json or model.json with fields of the wrong type (hand-edited, corrupt) crashed explain and
report with a traceback. Such fields are now dropped with a warning and the rest is explained."""
import json
import shutil

from conftest import run_cli


def test_mistyped_fields_are_ignored_with_a_warning(observe, tmp_path):
    run_dir = tmp_path / "r"
    shutil.copytree(observe("vanishing.py").run_dir, run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta.update(exit_status="zero", steps_observed="many", settings={"every": "often"}, status=5)
    (run_dir / "meta.json").write_text(json.dumps(meta))
    (run_dir / "model.json").write_text(json.dumps({
        "models": [{"name": 5, "n_modules": "x", "n_params": 2**70, "order": 7, "modules": [1]}, 3],
        "optimizers": {"type": "SGD"}}))
    r = run_cli("explain", run_dir, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["hypotheses"][0]["kind"] == "vanishing_gradient"
    assert any("'steps_observed' has the wrong type" in w for w in doc["warnings"])
    assert any("model.json" in w for w in doc["warnings"])
    r = run_cli("report", run_dir)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
