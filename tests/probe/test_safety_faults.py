"""Faults inside neuraldbg never reach the user: an exception in a hook, the monitor or the writer (a full
disk) is reported once on stderr and in meta.json's "faults", that observation is switched off, and the
script trains on with unchanged output and exit status (even with --fail-on any)."""
import json

import pytest
from conftest import FAULTS, run_cli

HEALTHY = ("awkward.py",)
OPTIONS = ("--fail-on", "any")


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_is_contained(observe, patched, fault):
    patch, parts = FAULTS[fault]
    reference = observe(*HEALTHY, options=OPTIONS).proc
    obs = patched(patch, *HEALTHY, options=OPTIONS)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.proc.stdout == reference.stdout  # the same training
    assert "Traceback" not in obs.proc.stderr
    for part in parts:
        assert obs.proc.stderr.count(f"internal error in {part} (") == 1, obs.proc.stderr
    assert obs.proc.stderr.count("internal error") == len(parts), obs.proc.stderr
    faults = json.loads((obs.run_dir / "meta.json").read_text())["faults"]
    assert all(any(f"internal error in {part} (" in f for f in faults) for part in parts), faults
    r = run_cli("explain", obs.run_dir, "--format", "json")
    assert r.returncode == 0, r.stderr


def test_cut_line_left_by_a_full_disk_is_read_as_cut_short(patched):
    obs = patched(FAULTS["forward+transfer+events_writer"][0], *HEALTHY, options=OPTIONS)
    doc = json.loads(run_cli("explain", obs.run_dir, "--format", "json").stdout)
    assert any("cut short" in w for w in doc["warnings"]), doc["warnings"]
    assert not any("not valid JSON" in w for w in doc["warnings"])  # nothing appended after the cut line


def test_script_exit_status_survives_a_fault(patched):
    obs = patched(FAULTS["grads+stats_writer"][0], "zoo_crash.py", "exit")  # trains 30 steps, then sys.exit(7)
    assert obs.proc.returncode == 7, obs.proc.stderr
    assert obs.proc.stderr.count("internal error") == 2, obs.proc.stderr
    doc = json.loads(run_cli("explain", obs.run_dir, "--format", "json").stdout)
    assert any("failed, exit status 7" in w for w in doc["warnings"]), doc["warnings"]


@pytest.mark.parametrize("where", ["below_a_file", "is_a_file"])
def test_unwritable_run_dir_is_one_line_exit_2(tmp_path, where):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run_dir = blocker / "run" if where == "below_a_file" else blocker
    (tmp_path / "never_run.py").write_text("raise SystemExit('must not run')")
    r = run_cli("run", "--run-dir", run_dir, tmp_path / "never_run.py")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and str(blocker) in r.stderr and not r.stdout
