"""JUnit XML: one test case per kind checked, failed where found (for CI dashboards)."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from neuraldbg_cli.trace.events import Kind, Report


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    found = {h.kind: h for h in report.hypotheses if h.confidence >= min_confidence}
    failures = sum(1 for k in checked if k in found)
    cases = []
    for kind in checked:
        h = found.get(kind)
        case = f'  <testcase classname="neuraldbg" name={quoteattr(kind.value)}'
        if h is None:
            cases.append(case + "/>")
        else:
            msg = f"{h.summary} (confidence {h.confidence:.2f}, origin {h.origin.module}, step {h.origin.step})"
            body = escape("\n".join(h.suggestions))
            cases.append(f"{case}>\n    <failure message={quoteattr(msg)}>{body}</failure>\n  </testcase>")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<testsuite name="neuraldbg" tests="{len(checked)}" failures="{failures}">\n'
        + "\n".join(cases)
        + "\n</testsuite>"
    )
