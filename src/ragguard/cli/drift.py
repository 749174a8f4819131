"""``ragguard drift LOG``: the drift watch over a log of the guard's ``ragguard.select``
spans, offline (``ragguard.drift``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ragguard.cli._common import Verbose, app, err, friendly_errors, say

ALARM_EXIT = 3
"""The exit status when the watch alarms (1 is an error)."""
SHOWN_PROBLEMS = 10


@app.command()
def drift(
    log: Annotated[
        Path,
        typer.Argument(
            metavar="LOG",
            help="The guard's ragguard.select spans as JSON: OTLP/JSON lines (the "
            "OpenTelemetry Collector's file exporter), the SDK's ConsoleSpanExporter "
            "output, or one object of span attributes per line.",
        ),
    ],
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            metavar="FILE",
            help="The config the guard ran with (its [reference], written by ragguard calibrate).",
        ),
    ] = Path("ragguard.toml"),
    verbose: Verbose = False,
) -> None:
    """Test a guard's logged selections against its config's reference, as
    ContextGuard.drift() does (exit status 3 on an alarm)."""
    with friendly_errors(verbose):
        alarm = _drift(log, config)
    if alarm:
        raise typer.Exit(ALARM_EXIT)


def _drift(log: Path, config: Path) -> bool:
    from ragguard.config import GuardConfig
    from ragguard.drift import DriftMonitor, read_log
    from ragguard.errors import ConfigError, SelectionLogError

    reference = GuardConfig.from_file(config).reference
    if reference is None:
        raise ConfigError(
            f"{config} has no [reference] (the scores over the calibration queries); "
            "recalibrate with ragguard calibrate, which writes it"
        )
    text = log.read_text(encoding="utf-8", errors="replace")
    found = read_log(text)
    for line in found.problems[:SHOWN_PROBLEMS]:
        err.print(
            f"[yellow]warning:[/] {escape(f'{log}: {line}')}", highlight=False, soft_wrap=True
        )
    if len(found.problems) > SHOWN_PROBLEMS:
        more = len(found.problems) - SHOWN_PROBLEMS
        err.print(
            f"[yellow]warning:[/] {log}: {more} more records skipped",
            highlight=False,
            soft_wrap=True,
        )
    if not text.strip():
        raise SelectionLogError(f"{log} is empty; point ragguard drift at the guard's span log")
    if not found.spans:
        raise SelectionLogError(
            f"{log} holds no ragguard.select span; export the guard's OpenTelemetry spans "
            "(docs: Tracing) and point ragguard drift at that file"
        )
    if all(math.isnan(top) for top, _, _ in found.observations):
        raise SelectionLogError(
            f"none of the {found.spans} ragguard.select spans in {log} records "
            "ragguard.score.top; spans record it from this ragguard on: log with it and "
            "run ragguard drift again"
        )
    report = DriftMonitor(reference).feed(found.observations)
    say(f"{log}: {found.spans} ragguard.select spans read")
    say(str(report))
    return report.alarm
