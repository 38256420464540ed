"""`neuraldbg run` is `python` for the script: __file__, argv, sys.path[0], __spec__ and traceback paths as
python 3.11 gives them when run from a parent directory with a relative path; --quiet hides only the live
lines; a live line shows the metric that moved; a Conv1d's dead channels are read along the channel axis."""
import json
import runpy
import textwrap

import pytest
from conftest import ASSETS, run_cli, run_python

from neuraldbg_cli.launch.console import Console, live_line
from neuraldbg_cli.trace.events import SemanticEvent

WHOAMI = textwrap.dedent('''
    import json, os, sys
    main = sys.modules["__main__"]
    print(json.dumps({"file": __file__, "argv": sys.argv, "path0": sys.path[0], "name": __name__,
                      "spec": None if __spec__ is None else [__spec__.name, __spec__.origin],
                      "package": __package__, "main_file": main.__file__, "main_is_me": main.__dict__ is globals(),
                      "loader": type(__loader__).__name__, "exists": os.path.exists(__file__)}))
    def fail():
        raise ValueError("boom from " + __name__)
    fail()
''')


def _file_lines(stderr: str) -> list[str]:
    """The frames of the script's traceback (file and line), and the error itself."""
    return [ln for ln in stderr.splitlines() if ln.startswith('  File "') or ln.startswith("ValueError")]


def _tree(tmp_path):
    tmp_path.mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "whoami.py").write_text(WHOAMI)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "whoami.py").write_text(WHOAMI)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(WHOAMI)
    return tmp_path


@pytest.mark.parametrize("target", [["sub/whoami.py"], ["./sub/whoami.py"], ["-m", "pkg.whoami"], ["app"]],
                         ids=["relative", "dot-relative", "module", "directory"])
def test_identity_and_traceback_paths_like_python(tmp_path, target):
    cwd = _tree(tmp_path / "w")
    plain = run_python(*target, "--x", "1", cwd=cwd)
    observed = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", *target, "--x", "1", cwd=cwd)
    assert plain.returncode == observed.returncode == 1, observed.stderr
    assert observed.stdout == plain.stdout
    seen = json.loads(observed.stdout)
    assert seen["argv"][0] == (target[0] if target[0] != "-m" else str(cwd / "pkg" / "whoami.py"))
    assert seen["exists"] and seen["main_is_me"]
    # python shows runpy's frames before a module's or a directory's ("<frozen runpy>" from 3.11, runpy.py's path
    # on 3.10); neuraldbg leaves them out on every version
    runpy_frames = ("<frozen runpy>", f'"{runpy.__file__}"')
    assert _file_lines(observed.stderr) == [ln for ln in _file_lines(plain.stderr)
                                            if not any(f in ln for f in runpy_frames)]
    assert f'File "{cwd}' in observed.stderr  # absolute, as python 3.11 shows it


def test_file_next_to_the_script_after_chdir(tmp_path):
    """The usual `os.path.dirname(__file__)` data lookup keeps working when the script changes directory."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.txt").write_text("hello\n")
    (tmp_path / "sub" / "chdir_file.py").write_text(
        "import os\nhere = os.path.dirname(__file__)\nos.chdir(os.path.expanduser('~'))\n"
        "print(open(os.path.join(here, 'data.txt')).read().strip())\n")
    plain = run_python("sub/chdir_file.py", cwd=tmp_path)
    observed = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", "sub/chdir_file.py", cwd=tmp_path)
    assert plain.returncode == observed.returncode == 0, observed.stderr
    assert observed.stdout == plain.stdout == "hello\n"


def test_script_is_compiled_without_neuraldbgs_future_flags(tmp_path):
    """scriptexec.py uses `from __future__ import annotations`; the script must not inherit it."""
    script = tmp_path / "ann.py"
    script.write_text("def f(x: int) -> int: return x\nprint(f.__annotations__['x'] is int)\n")
    observed = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", script)
    assert observed.returncode == 0, observed.stderr
    assert observed.stdout == "True\n"


def test_quiet_hides_live_lines_only(observe):
    """README: --quiet turns the live event lines off; the verdict and the trace path still print. (The session's
    shared runs of vanishing.py, quiet and loud.)"""
    quiet, loud = observe("vanishing.py"), observe("vanishing.py", quiet=False)
    assert "neuraldbg: step " in loud.proc.stderr and "neuraldbg: step " not in quiet.proc.stderr
    for obs in (quiet, loud):
        r = obs.proc
        assert "neuraldbg: problems found" in r.stderr and "vanishing_gradient" in r.stderr, r.stderr
        assert f"neuraldbg: trace in {obs.run_dir}" in r.stderr


def test_quiet_healthy_run_prints_one_verdict_line_and_the_trace_path(tmp_path):
    r = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", ASSETS / "exit4.py")
    assert r.returncode == 4
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("neuraldbg:")]
    assert len(lines) == 2, r.stderr
    assert lines[1] == f"neuraldbg: trace in {tmp_path / 'r'} (neuraldbg explain {tmp_path / 'r'})"


def _ev(site, old, new, **metrics):
    return SemanticEvent(type="t", step=7, module="enc.0", site=site, to=new, metrics=metrics, from_=old)


@pytest.mark.parametrize("event, shown, hidden", [
    (_ev("output", "normal", "anomalous", std=1.02e6, baseline_std=1.1, mean=0.1), "std=1.02e+06, std_ratio=9.27e+05",
     "mean"),
    (_ev("output", "normal", "anomalous", std=1.02e6, std_ratio=5e5), "std=1.02e+06, std_ratio=5e+05", "baseline"),
    (_ev("output", "anomalous", "normal", std=1.0, std_ratio=0.9), "std=1, std_ratio=0.9", "mean"),
    (_ev("activation", "normal", "dead", dead_frac=0.875, std=0.1), "dead_frac=0.875", "std"),
    (_ev("gradient", "healthy", "vanishing", rms=2.94e-16, ratio_to_max=6.8e-15), "rms=2.94e-16, ratio_to_max=6.8e-15",
     "baseline"),
    (_ev("gradient", "healthy", "exploding", rms=1e4, baseline_rms=1.0), "rms=1e+04, rms_ratio=1e+04", "ratio_to_max"),
    (_ev("loss", "normal", "diverging", loss=56.0, rise_factor=12.0, best=4.0), "loss=56, rise_factor=12", "best"),
    (_ev("loss", "normal", "diverging", loss=56.0, recent=40.0, best=4.0, start=4.2), "loss=56, rise=10", "start"),
    (_ev("weights", "updating", "oversized", update_ratio=0.3, weight_norm=2.0), "(update_ratio=0.3)", "weight_norm"),
    (_ev("weights", "updating", "collapsing", weight_norm=1e-6, weight_ratio=1e-5, grad_rms=0.1),
     "weight_norm=1e-06, weight_ratio=1e-05", "grad"),
    (_ev("weights", "updating", "collapsing", weight_norm=1e-6, first_weight_norm=2.0),
     "weight_norm=1e-06, weight_ratio=5e-07", "first"),
    (_ev("weights", "updating", "collapsing", weight_norm=1e-6), "(weight_norm=1e-06)", "ratio"),  # tolerant
    (_ev("input", "normal", "non_finite", sum=float("nan")), "sum=nan", "std"),
    (_ev("somewhere", "a", "b", loss=3.0), "(loss=3)", "std"),  # unknown: the usual metric present
])
def test_live_line_shows_the_metric_that_moved(event, shown, hidden):
    line = live_line(event)
    assert line.startswith(f"neuraldbg: step 7 enc.0: t {event.from_} -> {event.to}")
    assert shown in line and hidden not in line.split("->")[1], line


def test_one_steps_same_transition_in_several_modules_is_one_line(capsys):
    """A gradient vanishing in 13 layers at once: one line (first and last module, how many, the metric at both
    ends), printed when the step's events end; another transition or step is a line of its own."""
    console = Console(quiet=False)
    for i in range(13):
        console.event(SemanticEvent(type="g", step=0, module=f"layers.{i}", site="gradient", to="vanishing",
                                    metrics={"rms": 10.0 ** (i - 16)}, from_="healthy"))
    console.event(SemanticEvent(type="l", step=0, module=None, site="loss", to="plateau", metrics={"loss": 0.7},
                                from_="normal"))
    assert capsys.readouterr().err.splitlines() == [
        "neuraldbg: step 0 layers.0 … layers.12 (13 modules): g healthy -> vanishing (rms=1e-16 … 0.0001)"]
    console.flush()
    assert capsys.readouterr().err.splitlines() == ["neuraldbg: step 0 loss: l normal -> plateau (loss=0.7)"]


def test_conv1d_dead_channels_found_through_the_cli(observe):
    """7 of 8 Conv1d channels dead under a ReLU: read along dim 1 of (N, C, L), not the length axis."""
    obs = observe("conv1d_dead.py")
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.top["kind"] == "dead_activation", obs.report
    assert obs.top["origin"]["module"] == "0"
    events = [json.loads(ln) for ln in (obs.run_dir / "events.jsonl").read_text().splitlines()]
    dead = [e for e in events if e["to"] == "dead"]
    assert dead and abs(dead[0]["metrics"]["dead_frac"] - 0.875) < 1e-6
