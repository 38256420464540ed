"""Crash-safe trace: a script that raises, calls sys.exit(n) or os._exit(n), or is hit by SIGINT, SIGTERM or
SIGKILL at a random moment while events are being written leaves a trace whose complete lines are all
valid JSON, whose meta.json records the end when the process could, and which explain/events/report
accept, saying the run was cut short."""
import json
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import ASSETS, cli_env, run_cli, sigint_default


def _start(run_dir, *args):
    return subprocess.Popen([sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--every", "1", "--run-dir",
                             str(run_dir), str(ASSETS / "zoo_crash.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
                            preexec_fn=sigint_default)


def _wait_for_events(proc, run_dir, n=2, timeout=120):
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists() and events.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no events after {timeout} s")


def _check_trace(run_dir, warning):
    for name in ("events.jsonl", "stats.jsonl"):
        for line in (run_dir / name).read_bytes().split(b"\n")[:-1]:  # what follows the last \n may be cut
            json.loads(line)
    r = run_cli("explain", run_dir, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert any(warning in w for w in doc["warnings"]), doc["warnings"]
    assert doc["steps_observed"] > 0 and doc["status"] != "no_training_observed"
    for command in ("events", "report"):
        r = run_cli(command, run_dir)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return doc


@pytest.mark.parametrize("sig, status, warning", [
    ("SIGINT", 130, "interrupted (Ctrl-C), exit status 130"),
    ("SIGTERM", 143, "terminated (SIGTERM), exit status 143"),
    ("SIGKILL", -9, "cut short"),
])
def test_signal_at_a_random_moment(tmp_path, sig, status, warning):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    _wait_for_events(proc, run_dir)
    delay = random.uniform(0, 1.0)
    time.sleep(delay)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, (delay, err)
    assert "internal error" not in err and "neuraldbg_cli" not in err, (delay, err)
    meta = json.loads((run_dir / "meta.json").read_text())
    if status > 0:
        assert meta["exit_status"] == status and meta["end"], meta
    else:
        assert meta["status"] == "running" and "exit_status" not in meta
    _check_trace(run_dir, warning)


@pytest.mark.parametrize("mode, status, warning", [
    ("raise_nan", 1, "failed, exit status 1"),
    ("os_exit", 5, "cut short"),
])
def test_script_ending_early(tmp_path, mode, status, warning):
    run_dir = tmp_path / "run"
    proc = _start(run_dir, mode)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    doc = _check_trace(run_dir, warning)
    if mode == "raise_nan":  # the NaN that crashed the script is in the trace
        assert "FloatingPointError: loss is nan at step 25" in err
        assert any(h["kind"] == "non_finite" or h["kind"] == "data_anomaly" and h["origin"]["step"] == 25
                   for h in doc["hypotheses"]), doc["hypotheses"]
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        assert any(e["to"] == "non_finite" and e["step"] == 25 for e in events)
