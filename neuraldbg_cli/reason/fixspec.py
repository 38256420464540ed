"""Fixes as data (torch-free): the changes neuraldbg can apply to a run from outside the script, their
parameters, the words that describe them, and their one-line form (`lr_scale:factor=0.1`) that `verify`
hands a trial in NEURALDBG_FIX. The rules attach them to hypotheses (`Hypothesis.fixes`); fixes.py applies
them (torch side)."""

from __future__ import annotations

from typing import Any

from neuraldbg_cli.errors import NeuraldbgError

# id -> (parameter defaults, what it does): every id here has an implementation in fixes.py
FIXES: dict[str, tuple[dict[str, Any], str]] = {
    "lr_scale": ({"factor": 0.1}, "run every optimizer step at {factor:g} times the learning rate"),
    "clip_grad_norm": ({"max_norm": 1.0}, "clip the gradient norm to {max_norm:g} before each optimizer step"),
    "warmup": ({"steps": 50}, "warm the learning rate up linearly over the first {steps} steps"),
    "weight_decay": ({"value": 1e-4}, "set weight_decay={value:g} in every optimizer"),
    "adam_eps": ({"value": 1e-4}, "set eps={value:g} in every Adam-family optimizer"),
    "bn_train_mode": ({}, "run BatchNorm layers in training mode during training forwards"),
    "reinit": (
        {"layer": "Linear", "init": "kaiming"},
        "re-initialise every nn.{layer} with {init} init (biases 0) before the first training forward",
    ),
    "activation_swap": (
        {"to": "ReLU", "init": "kaiming"},
        "replace nn.Sigmoid/nn.Tanh modules with nn.{to} (Linear/Conv weights: {init} init)",
    ),
    "zero_grad": ({}, "set the gradients to None after each optimizer step (optimizer.zero_grad() after step())"),
    "scheduler_per_epoch": ({}, "step each lr scheduler once per epoch (one pass over a DataLoader), not per batch"),
    "minimize": ({}, "build every optimizer with maximize=False (each step goes down the gradient)"),
    "drop_output_relu": ({}, "replace a model's last module, when it is an nn.ReLU, with nn.Identity"),
}
# fixes that act through a torch optimizer (its step hooks, its param groups): nothing to apply to a script that
# steps none (a manual `p.data -= lr * p.grad` loop), so they are not offered to verify there
VIA_OPTIMIZER = frozenset(
    {"lr_scale", "clip_grad_norm", "warmup", "weight_decay", "adam_eps", "zero_grad", "scheduler_per_epoch", "minimize"}
)
# the words a text parameter accepts; init: He (kaiming_normal_, made for ReLU), Glorot (xavier_uniform_, made for
# tanh/sigmoid), or the weights left as they are (keep: the swap alone)
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("reinit", "init"): ("kaiming", "xavier"),
    ("activation_swap", "to"): ("ReLU", "GELU"),
    ("activation_swap", "init"): ("kaiming", "xavier", "keep"),
}
ENV_FIX = "NEURALDBG_FIX"  # a trial's fix, one-line form
ENV_MAX_STEPS = "NEURALDBG_MAX_STEPS"  # a trial ends cleanly after this many optimizer steps
PAIRED_SEED = 0  # without --seeds, every trial's global RNGs start from this: the control and the trials alike
ENV_SEED = "NEURALDBG_SEED"  # a trial's seed: the global RNGs seeded with it, the script's own seeds offset by it
ENV_GUARD = "NEURALDBG_WRITE_GUARD"  # a trial's folder: writes to other files are redirected into it
ENV_OVERLAY = "NEURALDBG_OVERLAY"  # the folder a trial sees through a copy-on-write overlay (verify.overlay)
ENV_OVERLAY_FAILED = "NEURALDBG_OVERLAY_FAILED"  # why the overlay could not be set up: the write guard alone
TRIAL_FILE = "trial.json"  # what a trial applied (fix, seed, write guard), in its run directory


def fix(fix_id: str, text: str | None = None, **params: Any) -> dict[str, Any]:
    """A fix as a hypothesis lists it: {"id", "params", "text"} (text: the suggestion it implements, or the
    fix's own description)."""
    defaults, words = FIXES[fix_id]
    merged = {**defaults, **params}
    return {"id": fix_id, "params": merged, "text": text or words.format(**merged)}


def lr_scale(current: float, target: float, text: str) -> dict[str, Any]:
    """lr_scale moving `current` to `target`, its factor rounded to 3 significant digits."""
    return fix("lr_scale", text, factor=float(f"{target / current:.3g}"))


def spec(fix_id: str, params: dict[str, Any]) -> str:
    """The one-line form: `lr_scale:factor=0.1` (`bn_train_mode` without parameters)."""
    body = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))
    return f"{fix_id}:{body}" if body else fix_id


def parse(text: str) -> tuple[str, dict[str, Any]]:
    """`ID[:NAME=VALUE,...]` -> (id, params over the defaults); NeuraldbgError for an unknown id or parameter."""
    fix_id, _, body = text.strip().partition(":")
    if fix_id not in FIXES:
        raise NeuraldbgError(f"neuraldbg: unknown fix {fix_id!r}; known fixes: {', '.join(FIXES)}")
    defaults = FIXES[fix_id][0]
    params = dict(defaults)
    for pair in filter(None, body.split(",")):
        name, eq, value = pair.partition("=")
        if not eq or name.strip() not in defaults:
            known = ", ".join(defaults) or "none"
            raise NeuraldbgError(f"neuraldbg: fix {fix_id}: bad parameter {pair!r} (parameters: {known})")
        params[name.strip()] = _value(value.strip(), name.strip(), defaults[name.strip()], fix_id)
    return fix_id, params


def _value(text: str, name: str, default: Any, fix_id: str) -> Any:
    if isinstance(default, str):
        choices = CHOICES.get((fix_id, name))
        if choices and text not in choices:
            raise NeuraldbgError(f"neuraldbg: fix {fix_id}: {name}={text!r} is not one of {', '.join(choices)}")
        return text
    try:
        value = int(text) if isinstance(default, int) else float(text)
    except ValueError:
        raise NeuraldbgError(f"neuraldbg: fix {fix_id}: {text!r} is not a number") from None
    least = 0 if fix_id == "weight_decay" else 1e-300  # weight decay may be switched off, nothing else
    if not value >= least or value == float("inf"):
        raise NeuraldbgError(f"neuraldbg: fix {fix_id}: {text!r} must be a positive number")
    return value


def annotate(fixes: list[dict[str, Any]], kind: str, verified: dict[str, Any]) -> list[dict[str, Any]]:
    """A hypothesis's fixes with what `verify` found (verify.json's entry of the same kind, id and params):
    `verified` (status) and `verified_detail` (its reason, with the numbers); by status, verified fixes first,
    and within a status in verify.json's order (verify lists the verified by effect, the best cure first)."""
    entries = verified.get("fixes") if isinstance(verified, dict) else None
    if not isinstance(entries, list):
        return fixes
    found = {
        (e.get("kind"), e.get("id"), spec(str(e.get("id")), e.get("params") or {})): e
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("params", {}), dict)
    }
    place = {id(e): i for i, e in enumerate(entries)}
    at: dict[int, int] = {}
    for f in fixes:
        e = found.get((kind, f["id"], spec(f["id"], f["params"])))
        if e is not None and e.get("status") in STATUSES:
            f["verified"] = e["status"]
            f["verified_detail"] = str(e.get("reason") or "")
            at[id(f)] = place[id(e)]
    return sorted(fixes, key=lambda f: (STATUSES.get(f.get("verified", ""), len(STATUSES)), at.get(id(f), 0)))


# verify's statuses, in the order fixes are listed (the contract's words)
STATUSES = {"verified": 0, "partial": 1, "not_verified": 2, "worse": 3, "inconclusive": 4}
MARKS = {
    "verified": "verified ✓",
    "partial": "partial ~",
    "not_verified": "not verified ✗",
    "worse": "worse ✗✗",
    "inconclusive": "inconclusive ?",
}


def verdicts(fixes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(status, `fix ID:PARAMS: verified ✓ (reason, with the numbers)`) for each fix `verify` judged, in the
    fixes' order (annotate lists verified ones first): what explain and the report show under the suggestions."""
    out = []
    for f in fixes:
        status = f.get("verified")
        if status in MARKS:
            detail = f" ({f['verified_detail']})" if f.get("verified_detail") else ""
            out.append((status, f"fix {spec(f['id'], f['params'])}: {MARKS[status]}{detail}"))
    return out
