"""Settings and thresholds, resolved once: command-line option > NEURALDBG_* env var > [tool.neuraldbg].

Every threshold lives in `Thresholds` with the reason for its value, so tuning happens in one place."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field, ValidationError

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.events import Kind


class Thresholds(BaseModel):
    """Classifier thresholds. Gradient sizes are compared as RMS (norm / sqrt(numel)) so that they do
    not depend on layer width or batch size."""

    debounce: int = Field(3, description="observations a new state must hold before an event "
                          "(non-finite values are reported at once)")
    vanish_ratio: float = Field(1e-4, description="a layer whose gradient RMS is below this fraction of the "
                                "largest layer's in the same model is vanishing: healthy nets stay within ~1e-2")
    vanish_abs: float = Field(1e-10, description="gradient RMS this small is vanishing whatever the other layers do")
    explode_growth: float = Field(1e3, description="gradient RMS this many times its own early baseline is exploding")
    explode_abs: float = Field(1e2, description="gradient RMS above this is exploding outright (healthy "
                               "layers sit around 1e-4..1e-1)")
    dead_frac: float = Field(0.7, description="fraction of units never active over a batch for a dead layer; "
                             "healthy sparse ReLU nets have 50-70% zeros but few units dead on a whole batch")
    dead_output_frac: float = Field(0.3, description="the same for the model's last layer (e.g. a ReLU on the "
                                    "logits): an output unit that never fires is a class that can never win")
    saturated_frac: float = Field(0.6, description="fraction of a bounded activation's outputs pinned at its "
                                  "rails (sigmoid <.02 or >.98, tanh |x|>.96) for a saturated layer")
    anomalous_growth: float = Field(1e2, description="activation std this many times its early baseline")
    data_scale: float = Field(20.0, description="inputs with |mean| or std above this are not normalised "
                              "(raw 0-255 pixels: mean 127, std 73)")
    target_scale: float = Field(1e3, description="regression targets with |mean| or std above this")
    data_shift: float = Field(10.0, description="input std or mean moving this many baseline stds is a shift")
    loss_window: int = Field(10, description="losses per window when judging the loss curve")
    plateau_improvement: float = Field(0.03, description="relative loss improvement below this over the whole "
                                       "run (>= 3 windows) is a plateau")
    diverge_factor: float = Field(2.0, description="recent loss this many times the starting loss and the best")
    oscillation: float = Field(0.3, description="mean |step-to-step loss change| relative to the loss level, "
                               "with frequent sign changes, for an oscillating loss")


KNOWN_KINDS = {k.value for k in Kind}


class Settings(BaseModel):
    run_dir: Optional[str] = None
    fail_on: list[str] = Field(default_factory=list)
    min_confidence: float = 0.5
    every: int = 10
    quiet: bool = False
    thresholds: Thresholds = Field(default_factory=Thresholds)

    @classmethod
    def resolve(cls, cli: dict[str, Any], cwd: Path | None = None) -> "Settings":
        """Merge pyproject, environment and command line (later wins) and validate once."""
        merged: dict[str, Any] = {}
        merged.update(_from_pyproject(cwd or Path.cwd()))
        _merge(merged, _from_env(os.environ))
        _merge(merged, {k: v for k, v in cli.items() if v is not None})
        if isinstance(merged.get("fail_on"), str):
            merged["fail_on"] = parse_fail_on(merged["fail_on"])
        try:
            settings = cls.model_validate(merged)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise NeuraldbgError(f"neuraldbg: bad setting {loc}: {err['msg']}") from None
        if settings.every < 1:
            raise NeuraldbgError("neuraldbg: --every must be >= 1")
        return settings


def parse_fail_on(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k != "any" and k not in KNOWN_KINDS]
    if bad:
        raise NeuraldbgError(f"neuraldbg: unknown kind {bad[0]!r} for --fail-on; "
                             f"use 'any' or one of: {', '.join(sorted(KNOWN_KINDS))}")
    return kinds


def parse_threshold_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in Thresholds.model_fields:
            raise NeuraldbgError(f"neuraldbg: bad --threshold {pair!r}; use NAME=VALUE with NAME one of: "
                                 f"{', '.join(Thresholds.model_fields)}")
        out[key] = value.strip()
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "thresholds" and isinstance(value, dict):
            base.setdefault("thresholds", {}).update(value)
        else:
            base[key] = value


def _from_env(env: os._Environ | dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in ("run_dir", "fail_on", "min_confidence", "every", "quiet"):
        value = env.get(f"NEURALDBG_{field.upper()}")
        if value is not None:
            out[field] = value
    if env.get("NEURALDBG_THRESHOLDS"):
        out["thresholds"] = parse_threshold_pairs(env["NEURALDBG_THRESHOLDS"].split(","))
    return out


def _from_pyproject(start: Path) -> dict[str, Any]:
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text())
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise NeuraldbgError(f"neuraldbg: cannot read {path}: {e}") from None
            section = dict(data.get("tool", {}).get("neuraldbg", {}))
            return {k.replace("-", "_"): v for k, v in section.items()}
    return {}
