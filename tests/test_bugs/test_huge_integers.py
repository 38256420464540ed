"""Bug: counts beyond 64 bits (a run_summary "steps" of 1.8e19, model.json n_params 2**70) made the JSON
report fail with a traceback (orjson: Integer exceeds 64-bit range). They are now dropped or capped."""
import json

from conftest import run_cli


def test_huge_counts(tmp_path):
    summary = {"type": "run_summary", "step": 0, "module": None, "from": "running", "to": "finished",
               "metrics": {"steps": 1.8446744073709552e19}, "site": "run"}
    (tmp_path / "events.jsonl").write_text(json.dumps(summary) + "\n")
    (tmp_path / "model.json").write_text(json.dumps({"models": [{"name": "Net", "n_params": 2**70,
                                                                 "n_modules": 10**20}]}))
    for fmt in ("json", "text", "junit", "github"):
        r = run_cli("explain", tmp_path, "--format", fmt)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(run_cli("explain", tmp_path, "--format", "json").stdout)
    assert doc["steps_observed"] == 2**63 - 1 and doc["models"][0]["parameters"] == 0
