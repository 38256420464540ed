"""Bug: a run killed with SIGKILL (meta.json still "running", no run_summary event) was explained as
"no_training_observed, 0 steps" however long it had trained. How far it got is now read from the last
complete row of stats.jsonl (its tail only)."""
import json
import shutil

from conftest import DEMO_HEALTHY, run_cli


def test_steps_of_a_killed_run(observe, tmp_path):
    run_dir = tmp_path / "r"
    shutil.copytree(observe(DEMO_HEALTHY, options=("--fail-on", "any")).run_dir, run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    for key in ("end", "exit_status", "steps_observed", "wall_s", "faults"):
        meta.pop(key, None)
    (run_dir / "meta.json").write_text(json.dumps({**meta, "status": "running"}))
    events = [line for line in (run_dir / "events.jsonl").read_text().splitlines() if "run_summary" not in line]
    (run_dir / "events.jsonl").write_text("".join(line + "\n" for line in events))
    last = json.loads((run_dir / "stats.jsonl").read_text().splitlines()[-1])["step"]
    with open(run_dir / "stats.jsonl", "a") as f:
        f.write('{"step": 99999, "loss": 0.1, "ac')  # the row being written when it was killed
    doc = json.loads(run_cli("explain", run_dir, "--format", "json").stdout)
    assert doc["steps_observed"] == last + 1 and doc["status"] == "healthy"
    assert any("cut short" in w for w in doc["warnings"])
