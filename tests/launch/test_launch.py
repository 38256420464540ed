"""The launcher behaves like `python SCRIPT ARGS`: argv, __main__, sys.path[0], output, exit status."""
import json

import torch
from conftest import ASSETS, run_cli, run_python


def test_argv_name_and_path_like_python(tmp_path):
    args = ["--lr", "0.1", "positional", "--quiet"]
    plain = run_python(ASSETS / "argv_echo.py", *args)
    observed = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", ASSETS / "argv_echo.py", *args)
    assert observed.returncode == 0, observed.stderr
    assert json.loads(observed.stdout) == json.loads(plain.stdout)


def test_module_mode(tmp_path):
    r = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", "-m", "argv_echo", "--x", "1", cwd=ASSETS)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["argv"][1:] == ["--x", "1"] and out["name"] == "__main__"


def test_exception_exit_status_and_traceback(tmp_path):
    r = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", ASSETS / "raise_error.py")
    assert r.returncode == 1
    assert "about to fail" in r.stdout
    assert "ValueError: boom from the user script" in r.stderr
    assert "neuraldbg_cli" not in r.stderr.split("ValueError")[0].split("Traceback")[-1]  # user frames only
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["exit_status"] == 1
    assert run_cli("explain", tmp_path / "r").returncode == 0


def test_sys_exit_status(tmp_path):
    r = run_cli("run", "--quiet", "--run-dir", tmp_path / "r", ASSETS / "exit4.py")
    assert r.returncode == 4 and "exiting with 4" in r.stdout


def test_fail_on_exits_3_and_explain_agrees(observe, tmp_path):
    obs = observe("vanishing.py", options=("--fail-on", "vanishing_gradient"))
    assert obs.proc.returncode == 3, obs.proc.stderr
    assert run_cli("explain", obs.run_dir, "--fail-on", "vanishing_gradient").returncode == 3
    assert run_cli("explain", obs.run_dir, "--fail-on", "dead_activation").returncode == 0
    assert run_cli("explain", obs.run_dir, "--fail-on", "any").returncode == 3


def test_fail_on_does_not_hide_the_scripts_own_failure(tmp_path):
    r = run_cli("run", "--quiet", "--fail-on", "any", "--run-dir", tmp_path / "r", ASSETS / "exit4.py")
    assert r.returncode == 4


def test_parameters_bit_identical_with_and_without_neuraldbg(tmp_path):
    assert run_python(ASSETS / "save_params.py", tmp_path / "plain.pt").returncode == 0
    r = run_cli("run", "--quiet", "--every", "1", "--run-dir", tmp_path / "r", ASSETS / "save_params.py",
                tmp_path / "observed.pt")
    assert r.returncode == 0, r.stderr
    plain, observed = torch.load(tmp_path / "plain.pt"), torch.load(tmp_path / "observed.pt")
    assert torch.equal(plain["rng"], observed["rng"])
    for k, v in plain["state"].items():
        assert torch.equal(v, observed["state"][k]), k


def test_live_events_and_verdict_on_stderr(observe):
    obs = observe("vanishing.py", quiet=False)  # (the session's shared loud run)
    r = obs.proc
    assert "gradient_health_transition healthy -> vanishing" in r.stderr
    assert "vanishing_gradient" in r.stderr and str(obs.run_dir) in r.stderr


def test_default_run_dir_and_latest(tmp_path):
    r = run_cli("run", "--quiet", ASSETS / "exit4.py", cwd=tmp_path)
    assert r.returncode == 4
    runs = [p for p in (tmp_path / "runs").iterdir() if p.name != "latest"]
    assert len(runs) == 1 and runs[0].name.endswith("-exit4")
    assert (tmp_path / "runs" / "latest").resolve() == runs[0].resolve()


def test_missing_script_is_one_line_exit_2(tmp_path):
    r = run_cli("run", tmp_path / "nope.py")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "not found" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_option_is_exit_2(tmp_path):
    r = run_cli("run", "--fail-on", "not_a_kind", ASSETS / "exit4.py")
    assert r.returncode == 2 and "unknown kind" in r.stderr and "Traceback" not in r.stderr
