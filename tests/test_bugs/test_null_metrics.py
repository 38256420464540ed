"""Bug: an event whose metrics are null (a NaN is written as null) crashed the data_anomaly and loss rules
while formatting their summary (TypeError). Null metrics now fall back to the defaults."""
import json

from conftest import run_cli


def test_null_metrics_do_not_crash_explain(tmp_path):
    events = [{"type": "data_anomaly", "step": 0, "module": None, "root": "Net", "from": "normal",
               "to": "extreme_scale", "metrics": {"mean": None, "std": None}, "site": "input"},
              {"type": "optimizer_instability", "step": 40, "module": None, "from": "normal", "to": "plateau",
               "metrics": {"loss": None, "start": None, "best": None, "recent": None}, "site": "loss"}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    r = run_cli("explain", tmp_path, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert {h["kind"] for h in json.loads(r.stdout)["hypotheses"]} == {"data_anomaly", "loss_plateau"}
