"""Runs SCRIPT / -m MODULE exactly like python would: sys.argv, `__main__`, `__file__`, sys.path[0], the exit
status (exception -> 1, sys.exit(n) -> n, Ctrl-C -> 130, SIGTERM -> 143) and the traceback python prints."""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import marshal
import os
import pkgutil
import runpy
import signal
import sys
import traceback
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from neuraldbg_cli.errors import NeuraldbgError

if TYPE_CHECKING:  # types only
    from importlib.abc import InspectLoader


class _Terminated(SystemExit):
    """SIGTERM turned into an exit so the trace and meta.json are closed properly (status 143)."""


def resolve_target(args: list[str]) -> tuple[str, Path | None, list[str]]:
    """('script'|'module', path, argv for the script). Raises NeuraldbgError for a missing target."""
    if not args:
        raise NeuraldbgError("neuraldbg: missing SCRIPT; usage: neuraldbg run [OPTIONS] SCRIPT [ARGS...] or -m MODULE")
    if args[0] == "-m":
        if len(args) < 2:
            raise NeuraldbgError("neuraldbg: -m needs a module name, e.g. neuraldbg run -m mypkg.train")
        name = args[1]
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as e:
            raise NeuraldbgError(f"neuraldbg: cannot find module {name!r}: {e}") from None
        if spec is None:
            raise NeuraldbgError(f"neuraldbg: no module named {name!r} (is it on PYTHONPATH / installed?)")
        return "module", None, [name, *args[2:]]
    path = Path(args[0])
    if not path.exists():
        raise NeuraldbgError(f"neuraldbg: script {args[0]} not found")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise NeuraldbgError(f"neuraldbg: {args[0]} is a directory without __main__.py")
    return "script", path, list(args)


def execute(mode: str, argv: list[str]) -> int:
    """Run the target as __main__; return the exit status python would have given."""
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    try:
        if mode == "module":
            sys.argv = list(argv)
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            run_script(argv[0])
        return 0
    except SystemExit as e:
        return exit_code(e)
    except KeyboardInterrupt as e:
        print_user_traceback(e)
        return 130
    except BaseException as e:  # noqa: BLE001 - the script's own exception: report it like python
        print_user_traceback(e)
        return 1
    finally:
        sys.stdout.flush()
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


def _python_abspath(typed: str) -> str:
    """The script path as python 3.9+ keeps it: joined to the working directory, not normalised
    (`python ./x.py` gives `/cwd/./x.py`)."""
    if typed in ("", "."):
        return os.getcwd()
    return typed if os.path.isabs(typed) else os.path.join(os.getcwd(), typed)


def run_script(typed: str) -> None:
    """Run a script file, or a directory / zip file with a __main__.py, as `python TYPED` does: `__file__`
    and the code's file name (tracebacks) absolute, so a script that changes directory still finds files
    next to it; sys.argv[0] left as typed; sys.path[0] the script's real directory, or the directory / zip
    itself. (runpy.run_path keeps a relative `__file__` and sets sys.argv[0] to the path it is given.)"""
    path = _python_abspath(typed)
    importer = pkgutil.get_importer(path)
    if importer is None:  # a plain source or .pyc file
        sys.path[0] = os.path.dirname(os.path.realpath(typed))
        code, loader = _file_code(path)
        _exec_as_main(code, __file__=path, __cached__=None, __loader__=loader)
        return
    sys.path[0] = path
    spec = importer.find_spec("__main__")
    if spec is None or spec.loader is None:
        print(f"{sys.executable}: can't find '__main__' module in {path!r}", file=sys.stderr)
        raise SystemExit(1)
    loader = cast("InspectLoader", spec.loader)  # a path entry's (source, .pyc, zip): each has get_code
    _exec_as_main(
        loader.get_code("__main__"),
        __file__=spec.origin,
        __cached__=spec.cached,
        __loader__=spec.loader,
        __spec__=spec,
        __package__=spec.parent,
    )


def _file_code(path: str) -> tuple[Any, Any]:
    """The code of a script (compiled without this module's `from __future__` flags) and its loader."""
    with io.open_code(path) as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        return marshal.loads(data[16:]), importlib.machinery.SourcelessFileLoader("__main__", path)
    return compile(data, path, "exec", dont_inherit=True), importlib.machinery.SourceFileLoader("__main__", path)


def _exec_as_main(code: Any, **dunders: Any) -> None:
    """Execute `code` as the module `__main__` (so pickling a class the script defines works), then put
    neuraldbg's own `__main__` back, as runpy does."""
    main = types.ModuleType("__main__")
    main.__dict__.update(dunders, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def exit_code(e: SystemExit) -> int:
    if isinstance(e, _Terminated):
        return 143
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def print_user_traceback(e: BaseException) -> None:
    """Like python's own report: through sys.excepthook, without neuraldbg's and runpy's frames. Our frames
    in the middle (the backward wrapper) are left out too; a Ctrl-C that lands inside one of our hooks
    ends the traceback where the script's code called into them."""
    tb = e.__traceback__
    ours = (str(Path(__file__).parent.parent), runpy.__file__, "<frozen runpy>")  # the whole package
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(ours):
        tb = tb.tb_next
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(ours[0] + os.sep):
            kept.append(tb)
        elif isinstance(e, KeyboardInterrupt):
            break
        tb = tb.tb_next
    for frame, after in zip(kept, [*kept[1:], None]):
        frame.tb_next = after
    tb = kept[0] if kept else None
    e.__traceback__ = tb
    sys.stdout.flush()
    try:
        sys.excepthook(type(e), e, tb)
    except Exception:  # noqa: BLE001
        traceback.print_exception(type(e), e, tb)
    sys.stderr.flush()


def install_sigterm() -> Any:
    def handler(signum: int, frame: Any) -> None:
        raise _Terminated(143)

    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main thread
        pass
    return None


def restore_sigterm(previous: Any) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGTERM, previous)
        except (ValueError, OSError):
            pass
