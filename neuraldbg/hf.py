"""A Hugging Face `TrainerCallback`: `Trainer(..., callbacks=[NeuraldbgCallback()])` observes `trainer.train()` like
`neuraldbg run` (the same probes, run directory and verdict, printed when training ends); `stop_on` ends training
through the trainer's own flag (`control.should_training_stop`). Keyword arguments are `neuraldbg.observe()`'s.
One process: with several, the main process observes."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from neuraldbg_cli.launch.api import Observation


class NeuraldbgCallback(TrainerCallback):
    def __init__(self, **observe: Any) -> None:
        self.observe = observe
        self.observation: Observation | None = None
        self.last: Observation | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        stale = self.observation
        if stale is not None and Observation.active is stale:  # the last train() raised (HF has no hook for it)
            stale.__exit__(RuntimeError, RuntimeError("the previous train() ended by an exception"), None)
        if getattr(state, "is_world_process_zero", True):
            model = kwargs.get("model")
            name = type(model).__name__ if model is not None else "trainer"
            self.observation = Observation(stop_by_flag=True, **{"name": name, **self.observe})
            self.observation.__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.observation is not None and self.observation.stop_wanted:
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        obs, self.observation = self.observation, None
        if obs is not None and Observation.active is obs:
            obs.__exit__(None, None, None)
        self.last = obs
