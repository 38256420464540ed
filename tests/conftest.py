"""Test helpers: run the real CLI in a subprocess (`python -m neuraldbg_cli`) on small CPU scripts."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).resolve().parent / "assets"
DEMO_HEALTHY = str(ROOT / "scripts" / "demo_healthy.py")  # the README's healthy demo doubles as a control


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    env.pop("NEURALDBG_THRESHOLDS", None)
    env.update(extra)
    return env


def sigint_default():
    """A child's SIGINT as a terminal's Ctrl-C finds it, even when the test run itself ignores SIGINT (a shell's
    background job does, and a Python child keeps an ignored SIGINT ignored: it would never see the signal)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """`python -m neuraldbg_cli ARGS`; `run` through the warm interpreter (tests/zygote.py: the same CLI in a
    forked child, without paying the start-up again) unless `env` sets what only a new interpreter reads, or
    NEURALDBG_TEST_FORK=0."""
    argv = [str(a) for a in args]
    at_start = any(k.startswith(("PYTHON", "OMP_", "MKL_", "LD_")) for k in env)
    if argv and argv[0] == "run" and not at_start and os.environ.get("NEURALDBG_TEST_FORK") != "0":
        return _Zygote.get().run(argv, Path(cwd or os.getcwd()), timeout, env)
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", *argv], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(**env), timeout=timeout)


class _Zygote:
    """One warm interpreter per test process (tests/zygote.py), started on first use."""

    _it: "_Zygote | None" = None

    def __init__(self) -> None:
        import atexit
        import shutil
        import tempfile

        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("zygote.py"))], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=cli_env(), bufsize=0)
        self.pending = b""  # what was read of the answers past the last whole line
        self.tmp = Path(tempfile.mkdtemp(prefix="ndbg-zygote-"))
        atexit.register(shutil.rmtree, self.tmp, True)

    @classmethod
    def get(cls) -> "_Zygote":
        if cls._it is None or cls._it.proc.poll() is not None:
            cls._it = cls()
        return cls._it

    def run(self, argv: list[str], cwd: Path, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
        import signal
        import time

        out, err = self.tmp / "stdout", self.tmp / "stderr"
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps([argv, str(cwd), cli_env(**env), str(out), str(err)]).encode() + b"\n")
        self.proc.stdin.flush()
        pid, rc, deadline = None, None, time.monotonic() + timeout
        while rc is None:
            line = self._line(deadline)
            if line is None:  # past the deadline: the child and this interpreter go
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                self.proc.kill()
                type(self)._it = None
                raise subprocess.TimeoutExpired(["neuraldbg", *argv], timeout)
            word, _, value = line.partition(" ")
            pid, rc = (int(value), rc) if word == "pid" else (pid, int(value))
        return subprocess.CompletedProcess([sys.executable, "-m", "neuraldbg_cli", *argv], rc, out.read_text(),
                                           err.read_text())

    def _line(self, deadline: float) -> str | None:
        """The next answer line, or None at the deadline. Read from the pipe itself (a buffered reader may hold
        the second of two lines that came together, which select would never report)."""
        import select
        import time

        assert self.proc.stdout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                type(self)._it = None
                raise RuntimeError("the test zygote died")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode()


def run_python(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=cli_env(), timeout=timeout)


def isolations() -> list[str]:
    """The isolations verify's trials can run under here: the write guard always, the overlay where allowed."""
    from neuraldbg_cli.verify import overlay

    return ["guard", *(["overlay"] if overlay.available() == "" else [])]


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


def _shared_dir(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session sees (their base temp folders' parent), else the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def observe(tmp_path_factory):
    """observe('vanishing.py', '--steps', '30') -> Observed; cached per (script, args) for the session, across the
    xdist workers too (the first worker to ask runs it under a file lock; the others read its result). A test
    must not change what is in the run directory."""
    import filelock

    shared = _shared_dir(tmp_path_factory) / "observed"
    shared.mkdir(exist_ok=True)

    def _observe(script: str, *args: str, options: tuple[str, ...] = (), quiet: bool = True) -> Observed:
        key = (script, args, options, quiet)
        if key not in _cache:
            name = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
            run_dir, done = shared / name / "trace", shared / name / "proc.json"
            with filelock.FileLock(str(shared / f"{name}.lock")):
                if done.exists():
                    doc = json.loads(done.read_text())
                    proc = subprocess.CompletedProcess(doc["args"], doc["returncode"], doc["stdout"], doc["stderr"])
                else:
                    run_dir.parent.mkdir(exist_ok=True)
                    proc = run_cli("run", *(["--quiet"] if quiet else []), "--run-dir", run_dir, *options,
                                   ASSETS / script, *args)
                    done.write_text(json.dumps({"args": [str(a) for a in proc.args], "returncode": proc.returncode,
                                                "stdout": proc.stdout, "stderr": proc.stderr}))
            _cache[key] = Observed(proc, run_dir)
        return _cache[key]

    return _observe


def run_patched(patch: str, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """`neuraldbg ARGS` in a subprocess after running `patch` (Python code that monkeypatches neuraldbg_cli,
    e.g. to inject a fault); `boom` (raises RuntimeError) is predefined for it."""
    code = "\n".join(["import sys", "def boom(*a, **k):", "    raise RuntimeError('injected fault')", patch,
                       "from neuraldbg_cli.launch.cli import main", "sys.argv = ['neuraldbg', *sys.argv[1:]]", "main()"])
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env=cli_env(**env), timeout=timeout)


_patched_cache: dict[tuple, Observed] = {}


@pytest.fixture(scope="session")
def patched(tmp_path_factory):
    """patched(PATCH, 'script.py', *args, options=()) -> Observed: `run` with PATCH applied, cached per session."""

    def _patched(patch: str, script: str, *args: str, options: tuple[str, ...] = ()) -> Observed:
        key = (patch, script, args, options)
        if key not in _patched_cache:
            run_dir = tmp_path_factory.mktemp("run") / "trace"
            proc = run_patched(patch, "run", "--quiet", "--run-dir", run_dir, *options, ASSETS / script, *args)
            _patched_cache[key] = Observed(proc, run_dir)
        return _patched_cache[key]

    return _patched


# Under pytest-xdist (`-n 2 --dist loadgroup`, the README's test command) each worker has its own copy of the
# session caches above, so the tests that share an expensive run are kept on one worker: the 2-rank torchrun
# jobs (test_distributed.py, cached per mode; one job at a time also keeps 4 ranks off 2 cores) and the
# torch.compile run (the tests using `compiled`, named below: one missing here only costs a second run).
# loadgroup hands out the largest group first, so these long runs start first. The groups are given to the
# scheduler by test id rather than as xdist_group marks: with pytest >= 9.2, xdist 3.8 drops those marks
# silently (pytest-xdist issue 1386) and would spread the groups over both workers.
_DISTRIBUTED = "tests/launch/test_distributed.py"
_COMPILED = ("tests/test_bugs/test_compile_global_hook_warning.py", "tests/test_bugs/test_compile_recompiles.py",
             "tests/test_bugs/test_compile_wrapper_names.py", "tests/test_bugs/test_module_compile_observed.py",
             "tests/probe/test_safety_zoo.py::test_torch_compile")


def _group(nodeid: str) -> str | None:
    if nodeid.startswith(_DISTRIBUTED + "::"):
        return "distributed"
    if any(nodeid == c or nodeid.startswith(c + "::") for c in _COMPILED):
        return "compiled"
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or super()._split_scope(nodeid)

    return Scheduling(config, log)


@pytest.fixture(autouse=True)
def _no_global_hooks_left():
    """Like PyTorch's TestModuleGlobalHooks.tearDown: nothing of ours may stay registered."""
    yield
    if "torch" in sys.modules:
        from torch.nn.modules import module as m
        from torch.optim import optimizer as o

        assert not m._global_forward_hooks and not m._global_forward_pre_hooks
        assert not o._global_optimizer_pre_hooks and not o._global_optimizer_post_hooks


COUNT_ROOT_CALLS = """
import atexit, collections
from neuraldbg_cli.probe import observer
calls = collections.Counter()
_enter_root = observer.ForwardObserver.enter_root
def _counting(self, module, args):
    calls[type(module).__name__] += 1
    return _enter_root(self, module, args)
observer.ForwardObserver.enter_root = _counting
atexit.register(lambda: print("ROOT_CALLS", dict(calls), file=sys.stderr))
"""


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """zoo_compile.py without and with neuraldbg (warnings shown, outermost-module hook calls counted):
    (plain process, Observed)."""
    plain = run_python(ASSETS / "zoo_compile.py")
    run_dir = tmp_path_factory.mktemp("run") / "trace"
    proc = run_patched(COUNT_ROOT_CALLS, "run", "--quiet", "--run-dir", run_dir, ASSETS / "zoo_compile.py",
                       PYTHONWARNINGS="default")
    return plain, Observed(proc, run_dir)


# Faults injected into neuraldbg (see run_patched): name -> (patch, the parts reported as internal errors)
FAULTS = {
    "forward+transfer+events_writer": ("""
from neuraldbg_cli.probe import hooks as probes
from neuraldbg_cli.trace import writer as tracewriter
from neuraldbg_cli.probe import tensorstats
tensorstats.full = tensorstats.cheap = tensorstats.host_values = boom
def half_a_line_then_disk_full(self, ev):
    tracewriter._write_all(self._events, b'{"schema": "neuraldbg.event/1", "type": "cut')
    raise OSError(28, 'No space left on device')
tracewriter.RunWriter.event = half_a_line_then_disk_full
""", ["forward", "transfer", "events.jsonl"]),
    "grads+stats_writer": ("""
from neuraldbg_cli.probe import gradreader
from neuraldbg_cli.trace import writer as tracewriter
gradreader.GradReader.norms = boom
def disk_full(*a, **k):
    raise OSError(28, 'No space left on device')
tracewriter.RunWriter.stats = disk_full
""", ["grads", "stats.jsonl"]),
    "monitor+model_description": ("""
from neuraldbg_cli.reason import monitor
from neuraldbg_cli.probe import hooks as probes
monitor.Monitor.observe = boom
probes.Probe.models = boom
""", ["monitor", "model description"]),
    "install": ("""
from neuraldbg_cli.probe import hooks as probes
_install = probes.Probe.install
def install(self):
    _install(self)
    boom()
probes.Probe.install = install
""", ["probe installation"]),
}
