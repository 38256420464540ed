"""Autograd graphs kept alive across steps (families/loop.py judges it as memory_growth): the loss summed as a
tensor for logging (`total += loss`), losses or outputs appended to a list undetached, a recurrent state carried
into the next step without `.detach()` (run with `backward(retain_graph=True)`).

How it is seen without a reference to any graph: at the loss capture of a sampled step (the backward pass's own
tensor), the first NODES nodes of its graph, breadth first from the loss, get a token in their `metadata` dict
(a graph node cannot be weakly referenced; its metadata dict lives exactly as long as the node). The probe keeps
only a weak reference to each step's token, so a token alive at a later step means a node of that step's graph
still is, and something in the script holds it. At the same walk, a node already holding an earlier step's token
(parameters' AccumulateGrad nodes are never tagged: they outlive the graphs) means this step's graph
continues an earlier one (`reached`). Healthy loops keep at most the last few steps' graphs (the `loss` variable
until it is reassigned, a short window); a kept graph of every step makes the alive steps grow with the run.

Once the graphs of several earlier steps are alive, the keeper is looked for once: the script's variables at the
backward call that the loop carries from one iteration to the next (assigned in the loop and read before, or
appended to), whose tensors' graphs hold an earlier step's token; `ast` of the loop gives the line and the fix.

Cost: sampled steps only, at each backward pass: at most NODES graph nodes visited on the host (no tensor op, no
device sync), weak references counted; the memory in use read once per sampled step (the device allocator's
counter or the process's resident set, a file read on Linux)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import sys
import weakref
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.provenance import _INSIDE
from neuraldbg_cli.probe.records import StepBuffer
from neuraldbg_cli.trace.events import GraphStats

NODES = 48  # graph nodes tagged per backward pass, breadth first from the loss (the loss's own node first)
KEPT = 64  # tokens remembered (the oldest alive always among them)
SEARCH_AT = 3  # earlier steps alive before the keeper is looked for
SEARCH_NODES = 8192  # distinct nodes walked per variable when looking for the keeper
TRIES = 3  # keeper searches per run (each at a sampled step)
FRAMES = 3  # the script's frames searched, from the backward call's outward
KEY = "neuraldbg"
# neuraldbg's package and the standard library: frames that run the script, not the script's own
_OUTSIDE = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.__file__))


class _Token:
    """One sampled step's mark on its graph's nodes (held by the nodes' metadata, weakly by the probe)."""

    __slots__ = ("step", "__weakref__")

    def __init__(self, step: int) -> None:
        self.step = step


class Keeper(NamedTuple):
    """The script's variable that holds the old graphs: its name, how it holds them (`sum`: a tensor added to,
    `append`: a container appended to, `carried`: a state fed back into the next step), the file and line of that
    statement, and the expression added or appended (for the fix)."""

    name: str
    how: str
    file: str
    line: int
    expr: str


def _memory(t: torch.Tensor) -> float:
    """Memory in use where `t` lives: the device allocator's bytes (no sync), else the process's resident set."""
    try:
        if t.is_cuda:
            return float(torch.cuda.memory_allocated(t.device))
        with open("/proc/self/statm", "rb") as f:
            return float(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError, RuntimeError):
        return float("nan")


def _leaf(node: Any) -> bool:
    """A parameter's AccumulateGrad node: shared by every graph alive at once and kept by the parameter past
    them (measured), so it tells nothing of steps."""
    return hasattr(node, "variable")


class GraphWatch:
    """`capture(buf, loss, retain)` at each backward pass of a sampled step (the loss capture); `keeper`, once
    found, is the script's variable that holds the graphs (`on_keeper(keeper)` is called then)."""

    def __init__(self, guard: Guard, on_keeper: Callable[[Keeper], None]) -> None:
        self._guard, self._on_keeper = guard, on_keeper
        self._tokens: list[tuple[weakref.ref, weakref.ref | None]] = []  # (any node's token, the loss node's)
        self._step = -1  # the step whose token the capture uses
        self._token: _Token | None = None
        self._reading: GraphStats | None = None  # this step's, in its buffer at `_slot`
        self._slot = 0
        self._tries = TRIES
        self.keeper: Keeper | None = None

    def capture(self, buf: StepBuffer, loss: torch.Tensor | None, retain: bool) -> None:
        """A backward pass of a sampled step begins from `loss`: at the step's first pass, count the earlier steps
        still alive and put the reading in the step's buffer; at every pass, tag this graph's first nodes (a
        later pass that reaches an earlier step updates the reading)."""
        if not buf.sampled or loss is None or loss.grad_fn is None or "graphs" in self._guard.off:
            return
        try:
            if self._step != buf.step:
                self._first(buf, loss)
            token = self._token
            if token is None:
                return
            reached = self._tag(loss.grad_fn, token)
            lay = self._reading
            if lay is None:
                return
            if reached < 0 or 0 <= lay.reached <= reached:
                reached = lay.reached
            now = dataclasses.replace(lay, retained=lay.retained or retain, reached=reached)
            if now != lay:
                self._reading = now
                buf.layout[self._slot] = buf.layout[self._slot]._replace(extra=now)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("graphs", e)

    def _first(self, buf: StepBuffer, loss: torch.Tensor) -> None:
        """The step's first backward pass: its token (before counting: the previous one is then held by its
        graph's nodes only), the earlier steps alive, the keeper looked for, the reading in the buffer."""
        self._step, self._token = buf.step, _Token(buf.step)
        alive, steps, kept_loss, tok = [], [], 0, None
        for t, n in self._tokens:
            tok = t()
            if tok is not None:
                alive.append((t, n))
                steps.append(tok.step)
                kept_loss += n is not None and n() is not None
        tok = None  # (no token held past the count)
        if len(alive) >= SEARCH_AT and self.keeper is None and self._tries > 0:
            self._tries -= 1
            self._search(loss, buf.step)
        lay = GraphStats(len(steps), steps[0] if steps else -1, kept_loss, -1, _memory(loss), False)
        self._slot = len(buf.layout)
        buf.extend("graphs", None, [], lay)
        self._reading = lay
        alive.append((weakref.ref(self._token), self._loss_token(loss.grad_fn)))
        if len(alive) > KEPT:  # keep the oldest (the onset), drop the next oldest
            del alive[1]
        self._tokens = alive

    def _loss_token(self, node: Any) -> weakref.ref | None:
        """A weak reference to the token on the loss's own node, a token of its own (alive: the loss is kept)."""
        own = _Token(self._step)
        try:
            node.metadata[KEY + ".loss"] = own
        except (AttributeError, RuntimeError, TypeError):
            return None
        return weakref.ref(own)

    def _tag(self, root: Any, token: _Token) -> int:
        """Tag up to NODES nodes breadth first from `root`; the earliest earlier step whose token a node holds.
        (Written for few calls per node: edges are queued as they are, a node's class compared by name.)"""
        reached, n = -1, 0
        queue: deque[tuple[Any, int]] = deque(((root, 0),))
        while queue and n < NODES:
            node = queue.popleft()[0]
            if node is None or node.__class__.__name__ == "AccumulateGrad":  # (not tagged: see _leaf)
                continue
            md = node.metadata
            old = md.get(KEY)
            if old is not None:
                if old is not token and (reached < 0 or old.step < reached):
                    reached = old.step
                continue
            md[KEY] = token
            n += 1
            queue.extend(node.next_functions)
        return reached

    # ---- the keeper: which variable of the loop holds the graphs ----

    def _search(self, loss: torch.Tensor, step: int) -> None:
        """Once enough earlier graphs are alive: the loop-carried variable that holds one, in the frame of the
        backward call or, when a helper runs the step (`total += train_step(batch)`), in its callers'."""
        for frame in _script_frames(FRAMES):
            found = _carried(frame.f_code.co_filename, frame.f_lineno)
            if not found:
                continue
            scope = frame.f_locals
            try:
                for name, (how, line, expr) in found.items():
                    value = scope.get(name, frame.f_globals.get(name))
                    if value is None or value is loss or not _holds_old(value, step):
                        continue
                    self.keeper = Keeper(name, how, _shown(frame.f_code.co_filename), line, expr)
                    self._on_keeper(self.keeper)
                    return
            finally:
                value = None
                _release(frame, scope)


def _release(frame: FrameType, scope: Any) -> None:
    """A function frame's `f_locals` (before Python 3.13) is a snapshot the frame keeps until it ends: it would
    hold this step's loss and outputs alive for the rest of the loop. Emptied: the frame's own variables are
    untouched (a tracer or `locals()` refreshes the snapshot from them first). A module's or an exec's namespace
    is the real one: left alone."""
    if type(scope) is dict and frame.f_code.co_flags & inspect.CO_OPTIMIZED and scope is not frame.f_globals:
        scope.clear()


def _script_frames(most: int) -> list[FrameType]:
    """The script's frames around the call being observed, innermost first (past torch's and neuraldbg's own)."""
    frame: FrameType | None = sys._getframe(1)
    out: list[FrameType] = []
    for _ in range(48):
        if frame is None or len(out) >= most:
            break
        file = frame.f_code.co_filename
        if out and file.startswith(_OUTSIDE):  # what runs the script (neuraldbg's launcher, runpy): its end
            break
        if not file.startswith(_INSIDE):
            out.append(frame)
        frame = frame.f_back
    return out


def _shown(file: str) -> str:
    """The file as the trace shows it: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return rel if not rel.startswith("..") else file


def _holds_old(value: Any, step: int, depth: int = 0) -> bool:
    """Whether `value` (a tensor, or a list/tuple/dict of them) holds a graph with a node of a step before `step`."""
    if isinstance(value, torch.Tensor):
        return value.grad_fn is not None and _reaches(value.grad_fn, step)
    if depth > 1:
        return False
    items: Any = None
    if isinstance(value, (list, tuple)):
        items = [*value[-4:], *value[:2]] if len(value) > 6 else value
    elif isinstance(value, dict):
        items = list(value.values())[-4:]
    return bool(items) and any(_holds_old(v, step, depth + 1) for v in items)


def _reaches(root: Any, step: int) -> bool:
    """A node within SEARCH_NODES of `root` holds the token of a step before `step` (AccumulateGrad aside)."""
    queue, seen = deque([root]), {root}
    while queue and len(seen) < SEARCH_NODES:
        node = queue.popleft()
        if _leaf(node):
            continue
        old = node.metadata.get(KEY)
        if old is not None and old.step < step:
            return True
        for nx, _ in node.next_functions:
            if nx is not None and nx not in seen:
                seen.add(nx)
                queue.append(nx)
    return False


def _carried(file: str, line: int) -> dict[str, tuple[str, int, str]]:
    """The variables the innermost loop around `line` of `file` carries from one iteration to the next: name ->
    (how, line, expression): `sum` (`x += e`, `x = x + e`), `append` (`x.append(e)`, `x.extend(e)`), `carried`
    (assigned from an expression that reads it: `out, hidden = model(data, hidden)`). Empty when the source
    cannot be read."""
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return {}
    loop = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if loop is None or node.lineno > loop.lineno:
                loop = node
    if loop is None:
        return {}
    out: dict[str, tuple[str, int, str]] = {}
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add):
            out.setdefault(node.target.id, ("sum", node.lineno, ast.unparse(node.value)))
        elif isinstance(node, ast.Assign):
            reads = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            for target in node.targets:
                names = [t for t in ast.walk(target) if isinstance(t, ast.Name)]
                for t in names:
                    if t.id not in reads:
                        continue
                    v = node.value
                    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
                        other = v.right if isinstance(v.left, ast.Name) and v.left.id == t.id else v.left
                        out.setdefault(t.id, ("sum", node.lineno, ast.unparse(other)))
                    else:
                        out.setdefault(t.id, ("carried", node.lineno, ast.unparse(v)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and isinstance(node.func.value, ast.Name)
            and node.args
        ):
            out.setdefault(node.func.value.id, ("append", node.lineno, ast.unparse(node.args[0])))
    return out
