"""Jupyter: `%load_ext neuraldbg` registers `%%neuraldbg [--run-dir D] [--fail-on K] [--stop-on K] [--every N]`, a
cell magic that observes one cell (api.Observation) and shows its verdict inline (the observation's HTML)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from neuraldbg_cli.launch.api import Observation


def _options(line: str) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="%%neuraldbg", add_help=False, exit_on_error=False)
    p.add_argument("--run-dir")
    p.add_argument("--fail-on")
    p.add_argument("--stop-on")
    p.add_argument("--every", type=int)
    p.add_argument("--min-confidence", type=float)
    p.add_argument("--quiet", "-q", action="store_true", default=None)
    try:
        ns = p.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit) as e:
        raise ValueError(f"%%neuraldbg: {e}") from None
    return {k: v for k, v in vars(ns).items() if v is not None}


def load_ipython_extension(ipython: Any) -> None:
    def neuraldbg(line: str, cell: str) -> Observation:
        obs = Observation(name="notebook", **_options(line))
        with obs:
            ipython.ex(cell)  # the cell's code in the notebook's namespace; its exceptions pass through
        return obs  # displayed inline: the verdict (Observation._repr_html_)

    ipython.register_magic_function(neuraldbg, "cell", "neuraldbg")
