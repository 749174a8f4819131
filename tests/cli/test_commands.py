"""The ``ragguard`` command's shared behaviour, through typer's CliRunner."""

from __future__ import annotations

import errno
import logging
import os

import pytest
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


# --------------------------------------------------------------------------- --help

COMMANDS = [
    [], ["calibrate"], ["evaluate"], ["compare"], ["profiles"], ["profiles", "list"],
    ["profiles", "show"], ["config"], ["config", "show"], ["annotate"], ["synth"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ragguard")
def test_help_reads_cleanly_at_80_columns(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "<bool>" not in text  # a flag takes no value
    assert "Usage: ragguard" in text and "--help" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    if command != ["annotate"]:  # annotate's own options are checked in its tests
        assert "--no-no-" not in text


def test_help_shows_square_brackets_as_written() -> None:
    for command in (["profiles"], ["profiles", "list"], ["profiles", "show"]):
        text = runner.invoke(app, [*command, "--help"], terminal_width=80).stdout
        assert "custom [profiles.NAME] tables" in " ".join(text.split())


def test_the_command_list_shows_each_command_in_a_whole_sentence() -> None:
    text = runner.invoke(app, ["--help"], terminal_width=80).stdout
    commands = text.split("Commands:", 1)[1]
    for name in ("annotate", "calibrate", "evaluate", "compare", "profiles", "config"):
        line = next(x for x in commands.splitlines() if x.strip().startswith(name + " "))
        assert line.rstrip().endswith(".") and not line.rstrip().endswith("..."), line


# --------------------------------------------------------------------------- errors


def test_a_file_system_error_is_one_line_naming_the_path() -> None:
    probe = typer.Typer()

    @probe.command()
    def fail() -> None:
        with friendly_errors():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), "out/cfg")

    result = runner.invoke(probe, [])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: out/cfg: {os.strerror(errno.EISDIR)}"


def test_library_warnings_print_once_as_a_warning_line() -> None:
    probe = typer.Typer()

    @probe.command()
    def warn() -> None:
        with friendly_errors():
            logging.getLogger("ragguard.calibration.data.evalset").warning("3 problems [sic]")

    result = runner.invoke(probe, [])
    assert result.exit_code == 0
    assert result.stderr.strip() == "warning: 3 problems [sic]"
    # the handler lives only while the command runs
    assert not logging.getLogger("ragguard").handlers
