"""The contract's `explain --format json`."""

from __future__ import annotations

import orjson

from neuraldbg_cli.trace.events import Kind, Report


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    return orjson.dumps(report.to_json_dict(), option=orjson.OPT_INDENT_2).decode()
