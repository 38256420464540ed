"""Child processes of the observed script that train (torch.multiprocessing.spawn DDP, Hogwild's
mp.Process, a Pool or ProcessPoolExecutor of trainers) are observed like the ranks of a torchrun job: each
writes its own trace into the parent's run directory, and `explain` merges them (trace.job.read_job).

The parent arms it (arm_parent): the child's environment names the run, and multiprocessing's bootstrap is
wrapped in every child (childboot). A child starts a ChildSession: the probe's hooks, but no file until it
trains; then it takes its name from its process group rank when it has joined one (mp.spawn DDP), else the
first free worker index, so a child that never trains (a tokenizer pool) leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.config import Settings
from neuraldbg_cli.launch import childboot
from neuraldbg_cli.launch.distributed import RankInfo
from neuraldbg_cli.launch.scriptexec import restore_sigterm
from neuraldbg_cli.launch.wiring import StageWiring, base_meta, now
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.trace.writer import META, rank_file

MAX_WORKERS = 4096  # worker indexes tried before a child gives up its trace
TERM_GRACE_S = 5.0  # a child told to terminate (SIGTERM) has this long to close its trace before it is ended
CHILD_WAIT_S = 30.0  # the parent waits at most this long, at its end, for its children's traces to close

_parent: Any = None  # the parent's Session, for the forked children that inherit it


def job_id(run_dir: Path, pid: int) -> str:
    return hashlib.sha1(f"{run_dir.resolve()}\0{pid}\0{time.time_ns()}".encode()).hexdigest()[:12]


def arm_parent(session: Any, job: str) -> HookSet:
    """Before the script runs: its children will find the run in their environment and observe themselves.
    Undone by the returned HookSet when the script ends."""
    global _parent
    import multiprocessing.spawn as mp_spawn

    _parent = session
    undo = HookSet()
    settings = session.settings.model_dump(mode="json")
    settings.update(run_dir=str(session.run_dir.resolve()), fail_on=[], stop_on=[])
    doc = {
        "run_dir": str(session.run_dir.resolve()),
        "job": job,
        "parent": os.getpid(),
        "argv": session.argv,
        "script": str(session.path or session.argv[0]),
        "settings": settings,
    }
    os.environ[childboot.ENV] = orjson.dumps(doc).decode()

    def forget() -> None:
        global _parent
        os.environ.pop(childboot.ENV, None)
        if _parent is session:
            _parent = None

    undo.on_remove(forget)
    childboot.boot()  # fork children inherit the wrapped bootstrap
    undo.on_remove(childboot.unboot)
    if "get_command_line" in mp_spawn.__dict__:  # spawn children import childboot before spawn_main
        undo.patch(mp_spawn, "get_command_line", _booting_command_line(mp_spawn.get_command_line))
    try:  # forkserver children are forked from a server that preloads childboot
        from multiprocessing import forkserver

        preload = forkserver._forkserver._preload_modules  # type: ignore[attr-defined]
        if childboot.__name__ not in preload:
            preload.append(childboot.__name__)

            def unload() -> None:
                if childboot.__name__ in preload:
                    preload.remove(childboot.__name__)

            undo.on_remove(unload)
    except (ImportError, AttributeError):
        pass
    return undo


def arm(session: Any) -> HookSet:
    """arm_parent for a script's session or an observe() block: the job's id goes in its meta; a failure is one
    warning (its children then train unobserved)."""
    try:
        session.meta["job"] = job_id(session.run_dir, session.pid)
        return arm_parent(session, session.meta["job"])
    except Exception as e:  # noqa: BLE001
        session._warn_once("child processes", e)
        return HookSet()


def collect(session: Any) -> None:
    """At the end of an armed session: wait for the traces of the children that trained, and count them in its
    meta (the job's meta)."""
    if "job" not in session.meta:
        return
    kids = wait_for_children(session.run_dir, session.pid)
    if kids:
        groups = {k["world_size"] for k in kids if isinstance(k.get("world_size"), int)}
        session.meta.update(children=len(kids), world_size=max(groups) if groups else len(kids))


def _booting_command_line(original: Any) -> Any:
    def get_command_line(**kwds: Any) -> list[str]:
        cmd = list(original(**kwds))
        try:
            at = cmd.index("-c") + 1
        except ValueError:  # a frozen executable: no -c to extend
            return cmd
        boot = "exec('try:\\n import neuraldbg_cli.launch.childboot as b; b.boot()\\nexcept Exception: pass'); "
        cmd[at] = boot + cmd[at]
        return cmd

    return get_command_line


def observed_here() -> bool:
    """Whether this process is already observed (by `neuraldbg run`, or as a training child of a script)."""
    return _parent is not None and _parent.pid == os.getpid() and getattr(_parent, "probe", None) is not None


def drop_parent_hooks() -> None:
    """In a forked child: the parent's probe hooks it inherited are removed (they would observe into the
    parent's state, whose files this process never writes), and SIGTERM does again what it did before
    neuraldbg's parent took it over (a Pool's terminate() kills its workers)."""
    session = _parent
    if session is None or os.getpid() == session.pid:
        return
    if getattr(session, "probe", None) is not None:
        session.probe.hooks.remove()
    before = getattr(session, "sigterm_before", None)
    if before is not None:
        restore_sigterm(before)


def wait_for_children(run_dir: Path, parent: int, timeout: float = CHILD_WAIT_S) -> list[dict[str, Any]]:
    """The parent's verdict should see its children's complete traces: wait while a child that wrote one is
    alive and has not closed it (children the script joined have). Returns the children's meta."""
    start = time.monotonic()
    while True:
        metas = []
        for path in sorted(run_dir.glob(rank_file(META, 0).replace(".rank0.", ".rank*."))):
            try:
                doc = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(doc, dict) and doc.get("parent_pid") == parent:
                metas.append(doc)
        running = [m for m in metas if m.get("status") == "running" and _alive(m.get("pid"))]
        if not running or time.monotonic() - start > timeout:
            return metas
        time.sleep(0.05)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:  # a zombie (exited, not yet joined) has ended
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class ChildSession(StageWiring):
    """One child process of the observed script, observed while its target runs."""

    def __init__(self, doc: dict[str, Any], target: str) -> None:
        super().__init__(Settings.model_validate(doc["settings"]), Path(doc["run_dir"]), None, bind=False)
        self.doc, self.target = doc, target
        self.pid = os.getpid()
        self.bound = False
        self.unplaced = False  # no free name for its trace: observed, not written
        self.index: int | None = None
        self.group = False
        self._sigterm: Any = None
        self.ending = self.terminated = False
        self.forked = False
        self.copies: list[str] = []  # models handed to it by its parent that fork copied instead of sharing
        self.sigterm_before: Any = None  # what SIGTERM did before this child took it (its forked children restore it)

    @classmethod
    def start(cls, env: str, target: str, process: Any = None) -> ChildSession:
        global _parent
        drop_parent_hooks()
        from neuraldbg_cli.probe.hooks import Probe

        session = cls(orjson.loads(env), target)
        session.forked = _parent is not None  # (a spawned child starts with none: it inherited nothing)
        session.copies = _unshared_models(process) if session.forked else []
        session.probe = Probe(session._on_steps, session._on_models, every=session.settings.every, warn=session._warn)
        try:
            session.probe.install()
        except Exception:
            session.probe.hooks.remove()
            raise
        session._catch_sigterm()
        session.sigterm_before = session._sigterm
        _parent = session  # its own forked children drop these hooks (drop_parent_hooks)
        return session

    def _warn(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ placed once it trains

    def _place(self) -> bool:
        """Name this child's trace: its process group rank, else the first free worker index."""
        if self.bound or self.unplaced:
            return self.bound
        rank, world = _group()
        self.group = rank is not None
        tries = [rank] if rank is not None else [_born(), *range(MAX_WORKERS)]
        for k in tries:
            info = RankInfo(rank=k, world_size=world or 0, local_rank=k, job=self.doc["job"])
            try:
                self._bind(info)
            except Exception:  # noqa: BLE001 - that name is taken (NeuraldbgError) or unwritable: the next
                continue
            self.bound, self.index = True, k
            self._write_meta(status="running")
            return True
        self.unplaced = True
        print(f"neuraldbg: child process {self.pid} found no free trace name in {self.run_dir}", file=sys.stderr)
        return False

    def _on_steps(self, records: list[Any]) -> None:
        if self._place():
            super()._on_steps(records)

    def _on_models(self) -> None:
        if self._place():
            super()._on_models()

    def _write_meta(self, **fields: Any) -> None:

        assert self.info is not None
        self.meta = self.meta or base_meta(
            self.settings,
            self.doc.get("argv", []),
            self.doc.get("script", ""),
            clock0=self.t0,  # the stats rows' times count from here (a clock every process here shares)
            parent_pid=self.doc.get("parent"),
            rank=self.info.rank,
            local_rank=self.info.local_rank,
            host=platform.node(),
            job=self.info.job,
            child={
                "target": self.target,
                "group": self.group,
                "forked": self.forked,
                **({"unshared_models": self.copies} if self.copies else {}),
            },
            **({"world_size": self.info.world_size} if self.group else {}),
        )
        self.meta.update(fields)
        try:
            self.writer.write_json("meta.json", self.meta)
        except Exception as e:  # noqa: BLE001
            self._warn_once("meta.json", e)

    # ------------------------------------------------------------------ the end

    def end(self, code: int | None) -> None:
        """The child's target returned (or it was terminated): the trace closed, the hooks removed. A SIGTERM
        that comes meanwhile (Pool.terminate right after the last task) waits for the trace to close."""
        if self.probe is None or self.ending or os.getpid() != self.pid:
            return
        self.ending = True
        try:
            self._finish(code)
        finally:
            self.probe = None
            self._restore_sigterm()
            if self.terminated:
                os.kill(os.getpid(), signal.SIGTERM)

    def _finish(self, code: int | None) -> None:
        if not self.bound:
            try:
                self.probe.close()
            except Exception:  # noqa: BLE001
                pass
        if self.bound:  # (also when the probe's last records placed it)
            self._close()
        else:
            return
        status = "finished" if code == 0 else "terminated" if code is None else "failed"
        self._write_meta(
            end=now(),
            wall_s=round(time.perf_counter() - self.t0, 3),
            exit_status=code if code is not None else -int(signal.SIGTERM),
            status=status,
            steps_observed=self.monitor.steps_seen,
            faults=self.warnings,
        )
        self.writer.close()

    def _catch_sigterm(self) -> None:
        """A Pool's workers end by SIGTERM (Pool.terminate): close the trace, then die of it as before."""

        def handler(signum: int, frame: Any) -> None:
            self.terminated = True
            if not self.ending:
                _deadline(TERM_GRACE_S)  # closing the trace must not keep the worker alive (Pool.terminate joins it)
                self.end(None)  # ends by re-sending the signal, with the default action back

        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self._sigterm = signal.signal(signal.SIGTERM, handler)
        except (ValueError, OSError):  # not the main thread
            self._sigterm = None

    def _restore_sigterm(self) -> None:
        if self._sigterm is not None:
            try:
                signal.signal(signal.SIGTERM, self._sigterm)
            except (ValueError, OSError):
                pass
            self._sigterm = None


def _deadline(seconds: float) -> None:
    """The process ends by SIGALRM's default action (in the kernel, whatever Python is waiting on) if it is still
    alive after `seconds`: a forked worker can block on a lock another thread of its parent held at the fork."""
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    except (ValueError, OSError, AttributeError):  # not the main thread; no SIGALRM (Windows)
        pass


def _unshared_models(process: Any) -> list[str]:
    """The models the parent handed this forked child (its target's arguments) whose parameters are not in
    shared memory: fork gave the child a private copy, so what the child trains never reaches the parent's
    model or the other children's (Hogwild without `model.share_memory()`)."""
    import torch

    args = [*getattr(process, "_args", ()), *getattr(process, "_kwargs", {}).values()]
    return [
        type(a).__name__
        for a in args
        if isinstance(a, torch.nn.Module)
        and any(p.requires_grad and not p.is_shared() and p.device.type == "cpu" for p in a.parameters())
    ]


def _group() -> tuple[int | None, int | None]:
    """This process's rank and world size in the default process group, or (None, None)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001
        pass
    return None, None


def _born() -> int:
    """The order in which the parent started this child (0 for its first): the worker index it asks for
    first, so that `child 1` of a script is worker 1 when every child trains."""
    import multiprocessing

    identity = getattr(multiprocessing.current_process(), "_identity", ())
    return identity[-1] - 1 if identity else 0
