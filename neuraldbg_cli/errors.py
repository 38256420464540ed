"""One exception for everything the user did wrong, and the exit codes of the contract."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # script succeeded and no --fail-on kind matched
    USAGE = 2  # neuraldbg misused or given bad input: one line on stderr, no traceback
    FAIL_ON = 3  # script succeeded but a --fail-on kind was found


class NeuraldbgError(Exception):
    """Bad input or misuse. The message is one actionable line shown to the user as-is."""


class StopTraining(SystemExit):
    """--stop-on: raised out of optimizer.step() once the step is complete, to end a doomed run. A SystemExit
    (what sys.exit raises), so that the script's `except Exception` handlers let it through and its `finally`
    blocks and context managers still run, as for any exit."""

    def __init__(self) -> None:
        super().__init__(int(ExitCode.FAIL_ON))
