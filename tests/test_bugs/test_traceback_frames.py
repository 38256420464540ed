"""Bug: a Ctrl-C that landed inside a hook of neuraldbg printed a traceback full of neuraldbg frames, and
an error inside loss.backward() showed neuraldbg's backward wrapper. The script's traceback now shows
only what python would show."""
import json

from conftest import ASSETS, run_cli, run_python

CTRL_C_IN_HOOK = """
from neuraldbg_cli.probe import hooks as probes
def interrupted(*a, **k):
    raise KeyboardInterrupt
from neuraldbg_cli.probe import tensorstats
tensorstats.full = interrupted
"""


def test_ctrl_c_inside_a_hook(patched):
    obs = patched(CTRL_C_IN_HOOK, "awkward.py")
    assert obs.proc.returncode == 130, obs.proc.stderr
    assert "KeyboardInterrupt" in obs.proc.stderr and "awkward.py" in obs.proc.stderr
    assert "neuraldbg_cli" not in obs.proc.stderr and "internal error" not in obs.proc.stderr, obs.proc.stderr
    assert json.loads((obs.run_dir / "meta.json").read_text())["exit_status"] == 130


def test_error_inside_backward_has_pythons_traceback(tmp_path):
    plain = run_python(ASSETS / "backward_twice.py")
    observed = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", ASSETS / "backward_twice.py")
    assert plain.returncode == observed.returncode == 1
    assert "Trying to backward through the graph a second time" in plain.stderr
    script_part = observed.stderr.split("\nneuraldbg: ", 1)[0] + "\n"  # then the verdict, also under --quiet
    assert script_part == plain.stderr
