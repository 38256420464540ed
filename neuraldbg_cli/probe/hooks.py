"""Torch side of neuraldbg: global hooks that observe every nn.Module, optimizer and backward pass.

Design (why it is cheap): every statistic is a 0-d tensor computed on the tensor's own device (see
tensorstats) and kept in a per-step buffer; the buffers go to the host in one `torch.stack(...).tolist()`
per sampled step (or every `every` steps), never one `.item()` per module.

`Probe` builds the parts and installs their hooks, each part doing one job:
    observer     forward passes: roots entered, which call is what (layerreader: data, targets, layer outputs
                 and activations; archreader: what layers are)
    rootfinder   which root model a call trains (over registry, roots: the models, held weakly)
    backward     backward passes and GradScaler.scale: each pass's loss, when passes begin and end
    pacer        what a step is (stepclock decides), when gradients are read; stepcloser closes steps;
                 loopprobe whether gradients are zeroed between an optimizer's steps
    gradreader   gradient, weight and update norms, checksums (over paramsets: which parameters)
    optimizers   the optimizers of the run, their loss series and description
    records      the step under way, the buffers, their trip to the host (outbox)
    guard        faults become one warning and switch that observation off; forks observe nothing
hookset undoes every hook. These parts, with tensorstats, roots, registry and provenance, are the probe
side (with verify's fixes and write guard, the only modules that import torch)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer

from neuraldbg_cli.config import SAMPLE_WARMUP
from neuraldbg_cli.probe.backward import BackwardWatch
from neuraldbg_cli.probe.gradreader import GradReader
from neuraldbg_cli.probe.graphwatch import GraphWatch, Keeper
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.probe.loopprobe import LoopSite, LoopWatch
from neuraldbg_cli.probe.lossprobe import EXTRA_LOSSES
from neuraldbg_cli.probe.observer import ForwardObserver
from neuraldbg_cli.probe.optimizers import OptimizerWatch, optimizer_facts
from neuraldbg_cli.probe.pacer import StepPacer
from neuraldbg_cli.probe.paramsets import ParamSets
from neuraldbg_cli.probe.provenance import FLOAT_TARGET_LOSSES, wrap_loss
from neuraldbg_cli.probe.records import Outbox, StepBuffer, Steps
from neuraldbg_cli.probe.registry import Registry
from neuraldbg_cli.probe.rootfinder import RootFinder
from neuraldbg_cli.probe.roots import Root
from neuraldbg_cli.trace.events import ModelInfo, StepRecord


def _distributed_sampler() -> type | None:
    """torch.utils.data.distributed.DistributedSampler, if this torch has it (imported by torch.utils.data)."""
    try:
        from torch.utils.data.distributed import DistributedSampler
    except ImportError:  # a torch built without it
        return None
    return DistributedSampler


def every_n(n: int, warmup: int = SAMPLE_WARMUP) -> Callable[[int], bool]:
    """Schedule: the first `warmup` steps (most failures start at initialisation), then every n-th."""
    return lambda step: step < warmup or step % n == 0


class Probe:
    """Installs the global hooks; turns what it sees into StepRecords handed to `on_steps` (in batches
    on a GPU, a step at a time on the CPU: see records.Outbox), after `on_models()` when the models'
    description changed."""

    def __init__(
        self,
        on_steps: Callable[[list[StepRecord]], None],
        on_models: Callable[[], None],
        every: int = 10,
        warn: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    ) -> None:
        self._guard = guard = Guard(warn)
        self.faults = guard.messages
        self.reg = Registry(self._forget_params)  # the root models, held weakly (see registry)
        self._pinfo = self.reg.pinfo  # id(param) -> (root name, module name), for live parameters only
        self._steps = steps = Steps(every_n(every))
        self.outbox = Outbox(on_steps, on_models, every, guard)
        self._sets = ParamSets(self.reg)
        self._grads = GradReader(self._sets)
        self._finder = RootFinder(self.reg, self.outbox.models_changed, guard, lambda: steps.step)
        self._opts = OptimizerWatch(self._sets, self.outbox.models_changed, guard)
        self._loop = LoopWatch(self._sets, guard, self._loop_kept)
        self._pacer = pacer = StepPacer(
            steps, guard, self._sets, self._grads, self._opts, self._finder, self.outbox, self._loop
        )
        self._forward = ForwardObserver(
            steps, self._finder, guard, begin=pacer.close_due, models_changed=self.outbox.models_changed
        )
        self._graphs = GraphWatch(guard, self._keeper_found)
        self._backward = BackwardWatch(
            steps, pacer.clock, guard, begin=pacer.backward_begin, end=pacer.backward_end, graphs=self._graphs
        )
        self.hooks = HookSet()

    def install(self) -> HookSet:
        h, fwd, pacer = self.hooks, self._forward, self._pacer
        h.add(_module.register_module_forward_pre_hook(fwd.pre_forward))
        h.add(_module.register_module_forward_hook(fwd.post_forward, always_call=True))
        h.add(_optimizer.register_optimizer_step_pre_hook(pacer.pre_step))
        h.add(_optimizer.register_optimizer_step_post_hook(pacer.post_step))
        h.patch(torch.autograd, "backward", self._backward.wrap_backward(torch.autograd.backward))
        h.patch(torch.optim.Optimizer, "__init__", self._opts.wrap_init(torch.optim.Optimizer.__init__))
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            if "zero_grad" in owner.__dict__:
                h.patch(owner, "zero_grad", pacer.wrap_zero_grad(owner.__dict__["zero_grad"]))
        # gradient clipping (the loop checks it comes before the step), where the script may have it from
        for space in (torch.nn.utils, torch.nn.utils.clip_grad):
            for name, at in (("clip_grad_norm_", 1), ("clip_grad_value_", None)):
                if name in space.__dict__:
                    h.patch(space, name, pacer.wrap_clip(space.__dict__[name], at))
        # a DistributedSampler's epoch at each epoch's iteration (set_epoch never called: the same order each epoch)
        sampler = _distributed_sampler()
        if sampler is not None and "__iter__" in sampler.__dict__:
            h.patch(sampler, "__iter__", pacer.wrap_sampler_iter(sampler.__dict__["__iter__"]))
        # an lr scheduler's first step() (the loop checks it comes after the optimizer's first step)
        sched = getattr(getattr(torch.optim, "lr_scheduler", None), "LRScheduler", None)
        if sched is not None and "step" in sched.__dict__:
            h.patch(sched, "step", pacer.wrap_scheduler_step(sched.__dict__["step"]))
        scaler = getattr(torch.amp, "GradScaler", None)
        if scaler is not None and "scale" in scaler.__dict__:
            h.patch(scaler, "scale", self._backward.wrap_scale(scaler.scale))
        if "compile" in torch.nn.Module.__dict__:
            h.patch(torch.nn.Module, "compile", self._finder.wrap_compile(torch.nn.Module.compile))
        if "_has_any_global_hook" in _module.__dict__:
            h.patch(_module, "_has_any_global_hook", fwd.foreign_hooks)
        fwd.losses_on = True  # off at removal: `from torch.nn.functional import mse_loss` kept our wrapper
        h.add(SimpleNamespace(remove=lambda: setattr(fwd, "losses_on", False)))
        for name in (*FLOAT_TARGET_LOSSES, *EXTRA_LOSSES):
            if name in F.__dict__:
                h.patch(F, name, wrap_loss(F.__dict__[name], partial(fwd.loss_call, name)))
        # attention: nn.MultiheadAttention calls the first, which calls the second when it needs no weights
        for name, source in (("multi_head_attention_forward", "mha"), ("scaled_dot_product_attention", "sdpa")):
            if name in F.__dict__:
                h.patch(F, name, wrap_loss(F.__dict__[name], partial(fwd.attention_call, source)))
        return h

    def close(self) -> None:
        """Finish the current step, hand over everything pending, remove all hooks (also when that fails)."""
        with self.hooks:
            self._pacer.finish()
            self.flush()

    def flush(self) -> None:
        self.outbox.flush()

    def _loop_kept(self, site: LoopSite | None) -> None:
        """An optimizer's gradients were found kept across its steps (or, `site` None, a sampler's epoch unchanged):
        model.json names the lines of its step() and backward() calls (of the loop over the sampler), announced
        before the records that show it reach the monitor."""
        if site is not None:
            self._opts.notes[site.opt_id] = site.note()
        self.outbox.models_changed()

    def _keeper_found(self, keeper: Keeper) -> None:
        """The script's variable that keeps the steps' graphs alive was found: model.json names it (`kept_graphs`
        among the facts of each model), announced before the records that show the graphs kept."""
        self.outbox.models_changed()

    def _forget_params(self) -> None:
        """A root model died (called from a weakref callback, so plain assignments only): drop the caches
        that hold its parameters, so that nothing keeps their memory."""
        self._sets.forget()
        self._grads.forget()

    # ---- state, for the session and tests ----

    @property
    def step(self) -> int:
        return self._steps.step

    @property
    def _buf(self) -> StepBuffer:
        return self._steps.buf

    @property
    def roots(self) -> list[Root]:
        """The live root models; a model that is gone leaves (models() still describes it)."""
        return self._finder.live

    @property
    def stop_requested(self) -> bool:
        """--stop-on: end the training when the next optimizer step closes a step (StopTraining)."""
        return self._pacer.stop_requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        self._pacer.stop_requested = value

    @property
    def pacer(self) -> StepPacer:
        """The step pacer: a verify trial sets its `max_steps` and reads `limit_reached`."""
        return self._pacer

    # ---- description for the run directory ----

    def models(self) -> list[ModelInfo]:
        """Every root model seen, also those gone since (the trace names them); the optimizers that train each
        are among its facts."""
        optimized, described = self._opts.optimized_ids(), self._opts.describe()
        infos = [root.info(optimized) for root in self.reg.roots if not root.absorbed]
        keeper = self._graphs.keeper
        for info in infos:
            trained_by = optimizer_facts(described, info.name)
            if trained_by:
                info.facts["optimizers"] = trained_by
            if self._loop.sampler_at:
                info.facts["sampler_at"] = self._loop.sampler_at
            if self._loop.scheduler_early is not None:
                info.facts["scheduler_early"] = self._loop.scheduler_early
            if keeper is not None:
                info.facts["kept_graphs"] = {
                    "name": keeper.name,
                    "how": keeper.how,
                    "expr": keeper.expr,
                    "at": f"{keeper.file}:{keeper.line}",
                }
        return infos

    def optimizer_info(self) -> list[dict[str, Any]]:
        """Every optimizer the run used, also those already garbage-collected (a pre-training phase's)."""
        return self._opts.describe()
