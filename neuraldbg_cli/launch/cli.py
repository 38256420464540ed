"""Command line: a thin typer shell. The work lives in session/reasoner/trace*/renderers; this file maps
NeuraldbgError to one stderr line and exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from neuraldbg_cli import __version__
from neuraldbg_cli.errors import ExitCode, NeuraldbgError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Run an unmodified PyTorch training script under observation and explain why training fails.",
)

RUN_HELP = """Run SCRIPT (or -m MODULE) exactly like python would, observed. Everything after SCRIPT goes to
the script untouched. Exit status: the script's own when it fails, 3 when --fail-on matched, 2 on bad input."""


def _fail(e: NeuraldbgError) -> None:
    typer.echo(str(e), err=True)
    raise typer.Exit(int(ExitCode.USAGE)) from None


@app.command(
    help=RUN_HELP,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True, "allow_extra_args": True},
)
def run(
    target: list[str] = typer.Argument(None, metavar="SCRIPT [ARGS]... | -m MODULE [ARGS]..."),
    run_dir: str | None = typer.Option(None, "--run-dir", help="where the trace goes [runs/<stamp>-<stem>]"),
    fail_on: str | None = typer.Option(None, "--fail-on", help="comma-separated kinds or 'any': exit 3 if found"),
    stop_on: str | None = typer.Option(
        None,
        "--stop-on",
        help="comma-separated kinds or 'any': end the training at the next step once one is confirmed, exit 3",
    ),
    min_confidence: float | None = typer.Option(
        None, "--min-confidence", help="confidence for --fail-on and --stop-on [0.5]"
    ),
    every: int | None = typer.Option(None, "--every", help="full statistics every N steps [10]"),
    quiet: bool | None = typer.Option(
        None, "--quiet", "-q", help="no live event lines (the verdict and trace path still print)"
    ),
    threshold: list[str] = typer.Option([], "--threshold", help="override a threshold: NAME=VALUE (repeatable)"),
) -> None:
    from neuraldbg_cli.config import Settings, parse_threshold_pairs
    from neuraldbg_cli.launch.joblaunch import start

    try:
        cli = {
            "run_dir": run_dir,
            "fail_on": fail_on,
            "stop_on": stop_on,
            "min_confidence": min_confidence,
            "every": every,
            "quiet": quiet,
            "thresholds": parse_threshold_pairs(threshold) if threshold else None,
        }
        session = start(Settings.resolve(cli), list(target or []))
    except NeuraldbgError as e:
        _fail(e)
    raise typer.Exit(session.run())


@app.command()
def explain(
    run_dirs: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR...",
        help="a run directory written by `neuraldbg run`; for a torchrun job whose nodes wrote their own, all of them",
    ),
    format: str = typer.Option("text", "--format", "-f", help="text | json | junit | github"),
    fail_on: str | None = typer.Option(None, "--fail-on", help="comma-separated kinds or 'any': exit 3 if found"),
    min_confidence: float = typer.Option(0.5, "--min-confidence", help="confidence that counts as found"),
) -> None:
    """Replay a run's trace through the reasoner: ranked causes, where and when they started, what to change."""
    from neuraldbg_cli.config import parse_fail_on
    from neuraldbg_cli.reason import reasoner
    from neuraldbg_cli.render import RENDERERS
    from neuraldbg_cli.trace.job import read_job

    try:
        if format not in RENDERERS:
            raise NeuraldbgError(f"neuraldbg: unknown --format {format!r}; use one of {', '.join(RENDERERS)}")
        kinds = parse_fail_on(fail_on) if fail_on else []
        report = reasoner.explain_job(read_job(run_dirs), min_confidence)
    except NeuraldbgError as e:
        _fail(e)
    typer.echo(RENDERERS[format](report, reasoner.kinds_checked(kinds), min_confidence))
    if kinds and reasoner.failing_kinds(report, kinds, min_confidence):
        raise typer.Exit(int(ExitCode.FAIL_ON))


@app.command()
def events(
    run_dir: Path = typer.Argument(..., help="a run directory written by `neuraldbg run`"),
    type: str | None = typer.Option(None, "--type", "-t", help="only events of this type (comma-separated)"),
    module: str | None = typer.Option(None, "--module", "-m", help="only this module and its submodules"),
    as_json: bool = typer.Option(False, "--json", help="print JSON lines instead of a table"),
) -> None:
    """Print the semantic events of a run (every rank's, of a torchrun job), filtered by type and module."""
    import orjson

    from neuraldbg_cli.trace.job import read_job

    try:
        job = read_job([run_dir])
    except NeuraldbgError as e:
        _fail(e)
    types = set(type.split(",")) if type else None
    for run_data in job.runs:
        for w in run_data.warnings:
            typer.echo(f"neuraldbg: warning: {'' if run_data.rank is None else f'rank {run_data.rank}: '}{w}", err=True)
        for ev in run_data.events:
            if types and ev.type not in types:
                continue
            if module and not (ev.module == module or (ev.module or "").startswith(module + ".")):
                continue
            if as_json:
                line = ev.to_json_dict() if run_data.rank is None else {**ev.to_json_dict(), "rank": run_data.rank}
                typer.echo(orjson.dumps(line).decode())
            else:
                metrics = " ".join(f"{k}={v:.4g}" for k, v in ev.metrics.items() if v is not None)
                rank = "" if run_data.rank is None else f"r{run_data.rank} "
                typer.echo(
                    f"{rank}{ev.step:>7}  {ev.type:<27} {(ev.module or ev.site or '-'):<24} "
                    f"{ev.from_} -> {ev.to}  {metrics}"
                )


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a run directory written by `neuraldbg run`"),
    output: Path | None = typer.Option(None, "--output", "-o", help="HTML file [RUN_DIR/report.html]"),
) -> None:
    """Write a self-contained HTML report: the loss, per-layer heatmaps, each hypothesis linked to its evidence."""
    from neuraldbg_cli.reason import reasoner
    from neuraldbg_cli.render import html
    from neuraldbg_cli.trace.job import read_run, read_stats

    try:
        run_data = read_run(run_dir)
        rep = reasoner.explain(run_data)
        out = output or Path(run_dir) / "report.html"
        page = html.render_page(rep, read_stats(run_dir), run_data.events, run_data.models)
        out.write_text(page, encoding="utf-8")
    except NeuraldbgError as e:
        _fail(e)
    except OSError as e:
        _fail(NeuraldbgError(f"neuraldbg: cannot write the report: {e.strerror or e}"))
    typer.echo(str(out))


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="a run directory written by `neuraldbg run`"),
    tensorboard: Path | None = typer.Option(None, "--tensorboard", help="write TensorBoard event files here"),
) -> None:
    """Export a run's statistics (scalars), events and verdict (text) to TensorBoard, next to your own logs."""
    from neuraldbg_cli.reason import reasoner
    from neuraldbg_cli.render.export import write_tensorboard
    from neuraldbg_cli.trace.job import read_run, read_stats

    try:
        if tensorboard is None:
            raise NeuraldbgError("neuraldbg: export needs a destination: --tensorboard DIR")
        run_data = read_run(run_dir)
        out = write_tensorboard(tensorboard, read_stats(run_dir), run_data.events, reasoner.explain(run_data))
    except NeuraldbgError as e:
        _fail(e)
    for w in run_data.warnings:
        typer.echo(f"neuraldbg: warning: {w}", err=True)
    typer.echo(f"neuraldbg: exported to {out} (tensorboard --logdir {out})")


@app.command()
def verify(
    run_dir: Path = typer.Argument(..., help="a run directory written by `neuraldbg run`"),
    steps: int | None = typer.Option(None, "--steps", help="optimizer steps per trial [1.5 × latest onset + 20, ≤300]"),
    seeds: int | None = typer.Option(None, "--seeds", help="repeat on seeds 1..S [the script's own seeding, once]"),
    fix: list[str] = typer.Option([], "--fix", help="only this fix: ID or ID:NAME=VALUE,... (repeatable)"),
    timeout: float | None = typer.Option(None, "--timeout", help="seconds per trial before it is killed"),
    min_confidence: float = typer.Option(0.5, "--min-confidence", help="confidence that counts as present"),
) -> None:
    """Re-run the recorded command with each suggested fix, next to an unchanged control: which fixes cure it."""
    from neuraldbg_cli.verify import runner as v

    try:
        plan = v.make_plan(run_dir, steps, seeds, fix, timeout, min_confidence)
    except NeuraldbgError as e:
        _fail(e)
    if isinstance(plan, str):
        typer.echo(f"neuraldbg: {plan}")
        return
    doc, interrupted = v.execute(plan, min_confidence, typer.echo)
    path = v.write(run_dir, doc)
    for line in v.summary_lines(doc):
        typer.echo(line)
    typer.echo(f"neuraldbg: results in {path} (neuraldbg explain {run_dir} shows them next to each fix)")
    if interrupted:
        raise typer.Exit(130)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"neuraldbg {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True)) -> None:
    """neuraldbg: why is my training failing?"""


def main() -> None:
    try:
        app(prog_name="neuraldbg")
    except NeuraldbgError as e:  # anything that slipped past a command
        print(str(e), file=sys.stderr)
        sys.exit(int(ExitCode.USAGE))
    except Exception as e:  # noqa: BLE001 - a bug of ours: still one line, never a traceback
        print(f"neuraldbg: internal error ({type(e).__name__}: {e}); please report it", file=sys.stderr)
        sys.exit(int(ExitCode.USAGE))
