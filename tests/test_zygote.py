"""The tests' warm interpreter (tests/zygote.py) must run the CLI as a new `python -m neuraldbg_cli` does: the same
exit status, output and trace for a training run, an exception out of the script, and a script that exits with
its own status."""
import json

import pytest
from conftest import ASSETS, run_cli


def _trace(run_dir):
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    meta = json.loads((run_dir / "meta.json").read_text())
    return events, {k: meta.get(k) for k in ("argv", "script", "exit_status", "status", "settings")}


@pytest.mark.parametrize(("script", "seeded"), [("exploding.py", True), ("raise_error.py", False), ("exit4.py", True)])
def test_the_forked_cli_runs_as_a_new_interpreter_does(tmp_path, monkeypatch, script, seeded):
    got = {}
    for way in ("fork", "new"):
        if way == "new":
            monkeypatch.setenv("NEURALDBG_TEST_FORK", "0")
        run_dir = tmp_path / way
        r = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / script, cwd=tmp_path)
        events, meta = _trace(run_dir)
        meta["settings"].pop("run_dir")
        if not seeded:  # the script draws other weights each time: the same events, other numbers
            events = [{k: v for k, v in e.items() if k != "metrics"} for e in events]
        got[way] = (r.returncode, r.stdout.replace(str(run_dir), "RUN"), r.stderr.replace(str(run_dir), "RUN"),
                    events, meta)
    assert got["fork"] == got["new"]
