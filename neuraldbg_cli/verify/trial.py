"""A `verify` trial, inside the observed process: what the NEURALDBG_FIX / _SEED / _MAX_STEPS / _WRITE_GUARD
variables ask for, applied before the script starts (write guard, seeds, fix) and undone after it ended, with
what happened written to the run directory's trial.json. The variables are taken out of os.environ, so the
script sees the environment it had."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.reason.fixspec import (
    ENV_FIX,
    ENV_GUARD,
    ENV_MAX_STEPS,
    ENV_OVERLAY,
    ENV_OVERLAY_FAILED,
    ENV_SEED,
    PAIRED_SEED,
    TRIAL_FILE,
    parse,
)


class Trial:
    def __init__(self, run_dir: Path, env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.fix_text = env.get(ENV_FIX) or None
        self.seed = int(env[ENV_SEED]) if env.get(ENV_SEED) else None
        self.max_steps = int(env[ENV_MAX_STEPS]) if env.get(ENV_MAX_STEPS) else None
        self.guarded = bool(env.get(ENV_GUARD))
        self.overlay = env.get(ENV_OVERLAY) or None  # the folder the overlay launcher covered
        self.overlay_failed = env.get(ENV_OVERLAY_FAILED) or None
        self.hooks = HookSet()
        self.guard: Any = None
        self.applied: Any = None
        self.error: str | None = None

    def install(self) -> None:
        """Write guard first (the fix and seeding write nothing, but nothing of the script may escape it)."""
        from neuraldbg_cli.verify import fixes
        from neuraldbg_cli.verify.writeguard import WriteGuard

        if self.guarded:  # under an overlay, the guard keeps only what lies outside it
            self.guard = WriteGuard(self.run_dir, free=[self.overlay] if self.overlay else [])
            self.guard.install(self.hooks)
        if self.seed is not None:
            fixes.seed(self.seed, self.hooks)
        else:
            fixes.pair()
        if self.fix_text:
            try:
                fix_id, params = parse(self.fix_text)
                self.applied = fixes.install(fix_id, params, self.hooks)
            except Exception as e:  # noqa: BLE001 - reported in trial.json: verify calls the trial inconclusive
                self.error = f"{type(e).__name__}: {e}"

    def close(self, write_json: Any) -> None:
        """Undo the hooks and patches, then record the trial (through the run writer, after the guard is gone)."""
        self.hooks.remove()
        doc: dict[str, Any] = {"seed": self.seed, "max_steps": self.max_steps}
        if self.seed is None:
            doc["paired_seed"] = PAIRED_SEED
        if self.fix_text:
            doc["fix"] = self.applied.report() if self.applied is not None else {"error": self.error}
        doc["isolation"] = "overlay" if self.overlay else "guard"
        if self.overlay:
            doc["overlay"] = self.overlay
        elif self.overlay_failed:
            doc["overlay_failed"] = self.overlay_failed
        if self.guard is not None:
            doc["write_guard"] = self.guard.report()
        write_json(TRIAL_FILE, doc)


def from_env(run_dir: Path) -> Trial | None:
    """The trial this process runs, or None (an ordinary run); its variables are removed from os.environ."""
    names = (ENV_FIX, ENV_SEED, ENV_MAX_STEPS, ENV_GUARD, ENV_OVERLAY, ENV_OVERLAY_FAILED)
    env = {n: os.environ.pop(n) for n in names if n in os.environ}
    return Trial(run_dir, env) if env else None
