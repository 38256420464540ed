"""neuraldbg from Python: `observe()` around training in a notebook or a program (the same probes, run directory
and verdict as `neuraldbg run`), `%load_ext neuraldbg` for the `%%neuraldbg` cell magic, and the trainers'
callbacks in `neuraldbg.lightning` and `neuraldbg.hf`."""

from neuraldbg_cli.launch.api import Observation, observe
from neuraldbg_cli.launch.notebook import load_ipython_extension

__all__ = ["Observation", "observe", "load_ipython_extension"]
