"""A warm interpreter that runs the CLI in a forked child per request, for the tests: `python -m neuraldbg_cli ...`
costs 2-3 s of start-up before any training (Python, torch, and the torch._dynamo import an optimizer's
construction triggers); a fork of this process, which has imported them once, costs milliseconds. The child is the
CLI as `python -m neuraldbg_cli` runs it (runpy, `__main__`, the normal interpreter exit with its atexit handlers),
in the caller's working directory, with stdin from /dev/null and stdout/stderr to files.

Protocol, one request at a time: a JSON line [argv, cwd, environment, out_path, err_path] on stdin (the environment
as the caller's would be now: only what Python and torch read at start-up, OMP_NUM_THREADS above all, is this
process's, which the tests set alike); the answer is a line "pid N"
once the child runs, then "rc N" when it ended (-N: killed by signal N, as subprocess reports it)."""
import json
import os
import runpy
import sys
import tempfile

import torch  # noqa: F401  (what every run imports anyway: paid once here)
import torch._dynamo  # noqa: F401
import neuraldbg_cli.launch.cli  # noqa: F401


def child(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # read TMPDIR again
    fd_in = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd_in, 0)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = ["neuraldbg_cli", *argv]
    sys.path[0] = os.getcwd()  # as `python -m` puts it (here it was this file's folder)
    runpy.run_module("neuraldbg_cli", run_name="__main__", alter_sys=True)


def serve() -> None:
    answer = sys.stdout
    for line in sys.stdin:
        argv, cwd, env, out, err = json.loads(line)
        answer.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(argv, cwd, env, out, err)
            return  # the child ends as an interpreter does: SystemExit and exceptions unwind from here
        print(f"pid {pid}", file=answer, flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"rc {os.waitstatus_to_exitcode(status)}", file=answer, flush=True)


if __name__ == "__main__":
    serve()
