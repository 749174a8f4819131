"""What every ``ragguard`` command shares: the app, consoles and the error boundary."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from ragguard import __version__
from ragguard.errors import RagguardError

__all__ = ["Verbose", "app", "err", "friendly_errors", "out"]

app = typer.Typer(
    name="ragguard",
    help="Decide which retrieved passages reach your LLM: calibrate, evaluate, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()  # results
err = Console(stderr=True)  # progress, messages, errors

Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks and debug logs.")]


def _version(value: bool) -> None:
    if value:
        out.print(f"ragguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """ragguard: distraction-aware calibration and a runtime context guard for RAG."""


@contextmanager
def friendly_errors(verbose: bool = False) -> Iterator[None]:
    """Turn ragguard's errors, invalid settings and missing files into one clear line on
    stderr and exit code 1; with ``verbose``, log at DEBUG and re-raise for the
    traceback."""
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    try:
        yield
    except (RagguardError, ValidationError, FileNotFoundError, ValueError) as exc:
        if verbose:
            raise
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
