"""Bug: an error while installing the probes escaped as a traceback and the script never ran. The script
now runs unobserved, with one warning and its own exit status."""
from conftest import FAULTS


def test_script_runs_when_installation_fails(observe, patched):
    obs = patched(FAULTS["install"][0], "awkward.py", options=("--fail-on", "any"))
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.proc.stdout == observe("awkward.py", options=("--fail-on", "any")).proc.stdout
    assert obs.proc.stderr.count("internal error in probe installation") == 1
    assert (obs.run_dir / "stats.jsonl").read_text() == ""  # no hook stayed installed
