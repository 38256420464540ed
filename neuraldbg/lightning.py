"""A Lightning callback: `Trainer(callbacks=[NeuraldbgCallback()])` observes `trainer.fit()` like `neuraldbg run`
(the same probes, run directory and verdict, printed when training ends); `stop_on` ends the fit through the
trainer's own flag (`trainer.should_stop`). Keyword arguments are `neuraldbg.observe()`'s. One process: with
several devices, rank 0 observes."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from neuraldbg_cli.launch.api import Observation


class NeuraldbgCallback(Callback):
    def __init__(self, **observe: Any) -> None:
        self.observe = observe
        self.observation: Observation | None = None
        self.last: Observation | None = None  # the ended observation (its report, run_dir)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if getattr(trainer, "global_rank", 0) == 0:
            self.observation = Observation(stop_by_flag=True, **{"name": type(pl_module).__name__, **self.observe})
            self.observation.__enter__()

    def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        if self.observation is not None and self.observation.stop_wanted:
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._end(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end(exception)

    def _end(self, exc: BaseException | None) -> None:
        obs, self.observation = self.observation, None
        if obs is not None and Observation.active is obs:
            obs.__exit__(type(exc) if exc is not None else None, exc, None)
        self.last = obs
