"""What a training step is, decided from the order of backward passes, optimizer steps and zero_grad calls
(no torch here: the probe feeds it events and acts on its answers).

A step is a completed optimizer step (CONTRACT.md): backward passes accumulate into the current step until an
optimizer step closes it, so k micro-batches of gradient accumulation are one step from the very first; a
closure optimizer (LBFGS) runs many backward passes inside one `step()`, which is one step; several optimizers
stepped in one iteration (a GAN's D then G) are one step (see `_paces`). Without an optimizer (manual SGD) each
backward pass is a step. An optimizer that exists but is never stepped (a forgotten `optimizer.step()`) must not
make the whole run one step: a `zero_grad()` that discards the gradients of a backward pass no optimizer step
used, before any optimizer has stepped, ends that step; failing that, `ACCUMULATION_LIMIT` backward passes
without a step do. Once, a zero_grad that follows an in-place change of the parameters does not end it: the
gradients were used, by a sharpness-aware minimiser's climb (SAM: perturb the weights, zero_grad, a second
forward/backward, then the optimizer's step) whose optimizer step then ends the step; a second time with no
optimizer step between, they were manual updates, and each such zero_grad ends a step from then on."""

from __future__ import annotations

from collections.abc import Callable, Hashable

# Backward passes one step may accumulate before, no optimizer step having come, they are counted one a step.
# Only reached by a script that neither steps an optimizer nor zeroes its gradients (a forgotten step is
# normally ended by its zero_grad, see `zero_grad`). Real accumulation stays under it: single-GPU recipes of
# large models accumulate up to 64-128 micro-batches per step (nanoGPT 40, LLM fine-tuning 32-128); one step's
# buffers are bounded whatever the count (losses summed, checks folded), so a high limit only delays counting.
ACCUMULATION_LIMIT = 256

READ, CLOSE = "read", "close"  # backward_end: read the gradients now (a backward-counted step) / close the step


class StepClock:
    """State machine over backward passes, zero_grad calls and optimizer steps; the probe closes a step when
    it says so. `counting`: backward passes are steps (no optimizer, or the accumulation limit was hit)."""

    def __init__(self, limit: int = ACCUMULATION_LIMIT) -> None:
        self.limit = limit
        self.depth = 0  # optimizer step() nesting (a wrapper optimizer stepping the one inside, super().step())
        self.stepped = False  # some optimizer step has completed
        self.backwards = 0  # backward passes since the last optimizer step or step close
        self.fallback = False  # counting backward passes although an optimizer exists (limit hit), until one steps
        self.done = False  # a backward-counted step is complete: it closes when the next pass or zero_grad begins
        self.taken = False  # inside an optimizer step: a backward's loss was taken (LBFGS: the first closure value)
        self.perturbed = False  # a zero_grad after an in-place change of the parameters was let go (see zero_grad)
        self.lead: Hashable | None = None  # the optimizer that steps first in an iteration (see _paces)
        self._lead_steps = 0  # steps of the lead since it took the lead
        self._known: set[Hashable] = set()  # every optimizer that has stepped
        self._pacer: Hashable | None = None  # the one whose step closes the training step
        self._waiting: dict[Hashable, int] = {}  # steps of each other optimizer since the lead's last
        self._streak: dict[Hashable, int] = {}  # lead intervals in a row in which each other optimizer stepped
        self._interval: list[Hashable] = []  # other optimizers stepped since the lead's last step, in order

    def due(self) -> bool:
        """A forward or backward pass begins: close a completed backward-counted step now. Closing it lazily
        lets a manual update or an optimizer.step() right after the backward still belong to it."""
        if self.done and not self.depth:
            self.done = False
            self.backwards = 0
            return True
        return False

    def take_loss(self) -> bool:
        """Whether the loss of a backward pass beginning now counts: outside an optimizer step always; inside
        one (a closure) only the first, which is the loss at the step's starting point."""
        if not self.depth:
            return True
        if self.taken:
            return False
        self.taken = True
        return True

    def backward_end(self, has_optimizer: bool) -> str:
        """A backward pass ended: READ (a backward-counted step: read its gradients now, a zero_grad may
        follow), CLOSE (the accumulation limit is hit: close the step now), or "" (accumulate)."""
        if self.depth:  # a closure's backward inside an optimizer step
            return ""
        self.backwards += 1
        if not has_optimizer or self.fallback:
            self.done = True
            return READ
        if self.backwards >= self.limit:
            self.fallback = True
            self.backwards = 0
            return CLOSE
        return ""

    def zero_grad(self, discards: Callable[[], bool], changed: Callable[[], bool] = lambda: False) -> bool:
        """A zero_grad() begins; True: close the step first (its gradients are still there to read).
        `discards()` tells whether it clears gradients at all. Before any optimizer has stepped, clearing the
        gradients of backward passes no step used ends a step (the forgotten optimizer.step()), except the
        first time the parameters were `changed()` in place since those passes (SAM's climb: see the module
        docstring); afterwards optimizer steps pace alone (an actor-critic zeroes one model's gradients
        between two backward passes)."""
        if self.depth:
            return False
        if self.done:
            return self.due()
        if not self.stepped and self.backwards and discards():
            if not self.perturbed and changed():
                self.perturbed = True
                return False
            self.backwards = 0
            return True
        return False

    def step_begin(self) -> bool:
        """An optimizer step begins; True for the outermost one."""
        self.depth += 1
        if self.depth == 1:
            self.taken = False
            return True
        return False

    def takes_over(self, key: Hashable) -> bool:
        """An outermost optimizer step begins: whether it is one that already stepped since the lead's last step,
        without closing a step, and now steps again while the lead does not (see `_paces`: it takes over, a new
        phase). Its previous update was then an optimizer step of its own, which no step close counted: the
        probe closes that step before this one begins, so a phase of M updates counts M steps, not M - 1."""
        return self.lead is not None and key not in (self.lead, self._pacer) and self._waiting.get(key, 0) >= 1

    def step_end(self, key: Hashable, live: Callable[[Hashable], bool] = lambda k: True) -> bool | None:
        """An optimizer step ended: None for an inner one, else whether it closes the training step.
        `live(key)`: whether that optimizer still exists (a garbage-collected pacer is replaced at once)."""
        self.depth = max(0, self.depth - 1)
        if self.depth:
            return None
        self.stepped = True
        self.backwards = 0
        self.fallback = False
        paces = self._paces(key, live)
        if paces:
            self.done = False
        return paces

    def _paces(self, key: Hashable, live: Callable[[Hashable], bool]) -> bool:
        """Whether this optimizer's step ends the training step. The first optimizer to step leads and paces.
        Another one (a GAN's G after D, a critic after an actor) steps within the same training step; once it
        has stepped between the lead's steps twice in a row, the iteration is lead-then-it and the last such
        one paces, so a step holds one iteration's steps (an optimizer stepped less often, a WGAN's G every
        n-th D step, never does; one that stops stepping hands pacing back to the lead). An optimizer that
        steps twice while the lead does not, or at its first step after the lead is gone, takes over (a new phase
        or trial). Gone is judged at that first step only, and never of a lead with one step (no phase): a GAN
        that steps G first, then D on G's output detached, runs no G in D's steps (its model is not active
        there), though G steps again between them."""
        first = key not in self._known
        self._known.add(key)
        gone = first and self.lead is not None and self._lead_steps >= 2 and not live(self.lead)
        if self.lead is None or (key != self.lead and (self._waiting.get(key, 0) >= 1 or gone)):
            self._lead_steps = self._waiting.get(key, 0) + 1  # its steps since the last lead's
            self.lead = self._pacer = key
            self._waiting.clear()
            self._streak.clear()
            self._interval.clear()
            return True
        if key != self.lead:
            self._waiting[key] = self._waiting.get(key, 0) + 1
            if key not in self._interval:
                self._interval.append(key)
            return key == self._pacer
        self._lead_steps += 1
        seen = self._interval
        self._streak = {k: self._streak.get(k, 0) + 1 for k in seen}
        if self._pacer not in self._streak:
            self._pacer = key
        if self._pacer == key:
            regular = [k for k in seen if self._streak[k] >= 2]
            if regular:
                self._pacer = regular[-1]
        self._interval = []
        self._waiting.clear()
        return self._pacer == key


def series_name(owners: tuple, all_owners: tuple) -> str:
    """The loss series of an optimizer, from the (root, module) owners of its parameters and of every
    observed parameter: the root model it trains ("" when unknown). When it trains only the part of that
    model under one submodule (a GAN built as one module, with a G and a D optimizer), the part is named
    too ("GAN.discriminator"), so that two optimizers of one model keep separate series."""
    if not owners:
        return ""
    root = owners[0][0]
    mine = [m for r, m in owners if r == root]
    if len(mine) >= sum(1 for r, _ in all_owners if r == root):
        return root
    prefix: list[str] = []
    for segments in zip(*(m.split(".") for m in mine)):
        if len(set(segments)) != 1 or not segments[0]:
            break
        prefix.append(segments[0])
    return ".".join([root, *prefix])
