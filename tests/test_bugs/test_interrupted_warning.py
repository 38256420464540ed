"""Bug: explain said nothing about a run that ended with SIGTERM (143), Ctrl-C (130) or a failing script:
its report read like a complete run. It now warns that it explains what was observed up to then."""
import json
import shutil

import pytest
from conftest import run_cli


@pytest.mark.parametrize("status, words", [(143, "terminated (SIGTERM)"), (130, "interrupted (Ctrl-C)"),
                                           (1, "failed, exit status 1")])
def test_warning_for_an_ended_run(observe, tmp_path, status, words):
    run_dir = tmp_path / "r"
    shutil.copytree(observe("vanishing.py").run_dir, run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({**meta, "exit_status": status, "status": "failed"}))
    doc = json.loads(run_cli("explain", run_dir, "--format", "json").stdout)
    assert any(words in w and "up to then" in w for w in doc["warnings"]), doc["warnings"]
