"""--stop-on through the real CLI: a doomed run ends within a few steps of the onset, after a complete optimizer
step, with a complete trace, the verdict and exit 3; a healthy run is not touched."""
from __future__ import annotations

import json

from conftest import ASSETS, DEMO_HEALTHY, explain_json, run_cli


def test_exploding_run_stops_within_a_few_steps_of_the_onset(tmp_path):
    run_dir = tmp_path / "r"
    r = run_cli("run", "--stop-on", "non_finite,exploding_gradient", "--run-dir", run_dir, "-q",
                ASSETS / "stop_guarded.py")
    assert r.returncode == 3, r.stderr
    assert "cleanup ran" in r.stdout  # the script's finally block ran, as for any exit
    assert "swallowed" not in r.stdout and "ran all 500 steps" not in r.stdout  # `except Exception` let it by
    assert "stopping the run after step" in r.stderr and "problems found" in r.stderr
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "stopped" and meta["exit_status"] == 3
    report = explain_json(run_dir)
    onset = min(h["origin"]["step"] for h in report["hypotheses"] if h["kind"] == "exploding_gradient")
    assert meta["stopped_at"] - onset <= 5 and meta["steps_observed"] <= 10  # of 500
    assert set(meta["stopped_by"]) <= {"non_finite", "exploding_gradient"}
    assert report["hypotheses"][0]["kind"] == "exploding_gradient"
    assert any("stopped by --stop-on" in w for w in report["warnings"])
    last = (run_dir / "events.jsonl").read_bytes().splitlines()[-1]
    assert json.loads(last)["type"] == "run_summary"  # the trace was closed properly


def test_healthy_run_is_not_stopped(tmp_path):
    run_dir = tmp_path / "h"
    r = run_cli("run", "--stop-on", "any", "--run-dir", run_dir, "-q", DEMO_HEALTHY)
    assert r.returncode == 0, r.stderr
    assert "stopping" not in r.stderr
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"


def test_unknown_stop_on_kind_is_one_line_exit_2(tmp_path):
    r = run_cli("run", "--stop-on", "exploding", ASSETS / "exploding.py", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--stop-on" in r.stderr
