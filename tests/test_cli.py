"""The ``ragguard`` command's shared behaviour, through typer's CliRunner."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

import ragguard
from ragguard.cli import app
from ragguard.cli._common import friendly_errors
from ragguard.errors import ConfigError

runner = CliRunner()


def test_version_and_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"ragguard {ragguard.__version__}"
    assert runner.invoke(app, ["--help"]).exit_code == 0


def test_friendly_errors_print_one_line_and_exit_1() -> None:
    probe = typer.Typer()

    @probe.command()
    def fail(verbose: bool = False) -> None:
        with friendly_errors(verbose):
            raise ConfigError("max_k=0 (argument): Input should be greater than or equal to 1")

    result = runner.invoke(probe, [])
    assert result.exit_code == 1
    assert "error: max_k=0" in result.stderr and "Traceback" not in result.stderr
    verbose = runner.invoke(probe, ["--verbose"])
    assert isinstance(verbose.exception, ConfigError)
