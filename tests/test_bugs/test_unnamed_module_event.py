"""Bug: a parameter_update event with "module": null (allowed by the contract) crashed the unchanged_weights
rule (TypeError joining names). Unnamed modules are left out of the suggestion."""
import json

from conftest import run_cli


def test_parameter_update_without_module(tmp_path):
    event = {"type": "parameter_update", "step": 0, "module": None, "from": "updating", "to": "unchanged",
             "metrics": {}, "site": "weights"}
    (tmp_path / "events.jsonl").write_text(json.dumps(event) + "\n")
    (tmp_path / "model.json").write_text(json.dumps({"models": [], "optimizers": [{"type": "SGD", "groups": []}]}))
    r = run_cli("explain", tmp_path, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hypotheses"][0]["kind"] == "unchanged_weights"
