"""What every refused command must look like, for the CLI tests."""

from __future__ import annotations

from click.testing import Result
from typer.testing import CliRunner

from ragguard.cli import app


def error_line(result: Result) -> str:
    """The one line a refused command printed: exit code 1, handled (no exception raised
    through the CLI, no traceback), exactly one ``error:`` line on stderr and it is the
    last one. Returns that line."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], result.stderr
    return errors[0]


def invoke(*args: object) -> Result:
    """``ragguard ARGS`` through typer's CliRunner (each argument as ``str``)."""
    return CliRunner().invoke(app, [str(a) for a in args])
