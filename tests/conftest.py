"""Test helpers: run the real CLI in a subprocess (`python -m neuraldbg_cli`) on small CPU scripts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).resolve().parent / "assets"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    env.pop("NEURALDBG_THRESHOLDS", None)
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(**env), timeout=timeout)


def run_python(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=cli_env(), timeout=timeout)


def explain_json(run_dir: Path) -> dict:
    r = run_cli("explain", run_dir, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class Observed:
    def __init__(self, proc: subprocess.CompletedProcess, run_dir: Path) -> None:
        self.proc, self.run_dir = proc, run_dir
        self._report: dict | None = None

    @property
    def report(self) -> dict:
        if self._report is None:
            self._report = explain_json(self.run_dir)
        return self._report

    @property
    def top(self) -> dict:
        hyps = self.report["hypotheses"]
        assert hyps, f"no hypothesis; stderr:\n{self.proc.stderr}"
        return hyps[0]


_cache: dict[tuple, Observed] = {}


@pytest.fixture(scope="session")
def observe(tmp_path_factory):
    """observe('vanishing.py', '--steps', '30') -> Observed; cached per (script, args) for the session."""

    def _observe(script: str, *args: str, options: tuple[str, ...] = ()) -> Observed:
        key = (script, args, options)
        if key not in _cache:
            run_dir = tmp_path_factory.mktemp("run") / "trace"
            proc = run_cli("run", "--quiet", "--run-dir", run_dir, *options, ASSETS / script, *args)
            _cache[key] = Observed(proc, run_dir)
        return _cache[key]

    return _observe


@pytest.fixture(autouse=True)
def _no_global_hooks_left():
    """Like PyTorch's TestModuleGlobalHooks.tearDown: nothing of ours may stay registered."""
    yield
    if "torch" in sys.modules:
        from torch.nn.modules import module as m
        from torch.optim import optimizer as o

        assert not m._global_forward_hooks and not m._global_forward_pre_hooks
        assert not o._global_optimizer_pre_hooks and not o._global_optimizer_post_hooks
