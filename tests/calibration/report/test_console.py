"""The console summary (``ragguard.calibration.report.console``) is rendered from the
result view alone: the view with its search taken out prints what ``ragguard calibrate``
prints, byte for byte."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ragguard.calibration import calibrate, load_inputs
from ragguard.calibration.fit.steps import CommandLine
from ragguard.calibration.report.console import print_result
from ragguard.cli import app

ROOT = Path(__file__).resolve().parents[3]
NOTES = ROOT / "examples" / "notes"


def test_the_console_prints_the_view_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    run = CliRunner().invoke(app, ["calibrate", str(NOTES), "--out", "a.toml", "--no-report"])
    assert run.exit_code == 0, run.output

    # the same calibration (calibrate's defaults are the command's), its view with the
    # run's search taken out: a printer that reached into it would fail or differ
    result = calibrate(load_inputs(NOTES), constraints=["evidence_coverage>=0.9"])
    view = result.view(evalset=CommandLine(str(NOTES)))
    detached = replace(view, run=None)
    buffer = io.StringIO()
    print_result(detached, Console(file=buffer, width=80))
    printed = buffer.getvalue()
    assert printed.count("\n") > 10 and "Chosen: run" in printed and "Next:" in printed
    assert run.stdout.startswith(printed)
    assert run.stdout[len(printed) :].lstrip("\n").startswith("Config  ")
