"""`neuraldbg run torchrun ...`: torchrun itself under neuraldbg (JobLauncher), and `start`, which picks it or
an observed Session for what `neuraldbg run ARGS` runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from neuraldbg_cli.config import Settings
from neuraldbg_cli.launch.console import verdict
from neuraldbg_cli.launch.distributed import is_launcher, launcher_argv, parse_launch, settings_env
from neuraldbg_cli.launch.scriptexec import exit_code, print_user_traceback, resolve_target
from neuraldbg_cli.launch.session import Session, prepare_run_dir
from neuraldbg_cli.trace.writer import point_latest


class JobLauncher:
    """`neuraldbg run torchrun ...` (or `-m torch.distributed.run`): torchrun runs here unobserved (it trains
    nothing) and starts every rank under neuraldbg, all writing to one run directory; then the merged verdict,
    as for a single process."""

    def __init__(self, settings: Settings, argv: list[str]) -> None:
        self.settings, self.argv = settings, argv
        _, module, script, _ = parse_launch(argv)  # the ranks' script names the run directory
        self.run_dir = prepare_run_dir(settings, script.rsplit(".", 1)[-1] if module else Path(script).stem)

    def run(self) -> int:
        from torch.distributed.run import main as torchrun_main

        saved_argv, saved_env = sys.argv, dict(os.environ)
        os.environ.update(settings_env(self.settings.model_dump(mode="json"), self.run_dir))
        try:  # (torchrun handles SIGTERM itself: it stops the ranks, whose traces close as usual)
            sys.argv = launcher_argv(self.argv)
            torchrun_main()
            code = 0
        except SystemExit as e:
            code = exit_code(e)
        except KeyboardInterrupt:
            code = 130
        except BaseException as e:  # noqa: BLE001 - torchrun's own error (a failed rank): as torchrun prints it
            print_user_traceback(e)
            code = 1
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
        if self.settings.run_dir is None:
            point_latest(self.run_dir)
        return verdict(self.run_dir, self.settings, code)


def start(settings: Settings, args: list[str]) -> Any:
    """What `neuraldbg run ARGS` runs: a Session, or a JobLauncher for torchrun itself."""
    mode, path, argv = resolve_target(args)
    return JobLauncher(settings, argv) if is_launcher(mode, path, argv) else Session(settings, args)
