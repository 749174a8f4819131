"""What every ``ragguard`` command shares: the app, consoles and the error boundary."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ragguard import __version__
from ragguard.errors import RagguardError

app = typer.Typer(
    name="ragguard",
    help="Decide which retrieved passages reach your LLM: calibrate, evaluate, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click help: texts as written ([profiles.NAME] kept), untyped flags, terminal width
    rich_markup_mode=None,
)
out = Console()  # results
err = Console(stderr=True)  # progress, messages, errors


def say(text: str, console: Console = out) -> None:
    """Print ``text`` as written: no highlighting, wrapped by the terminal, not by rich."""
    console.print(text, highlight=False, soft_wrap=True)


def option(kind: Any, help: str, *names: str, **settings: Any) -> Any:
    """``Annotated[kind, typer.Option(*names, help=help, **settings)]``."""
    return Annotated[kind, typer.Option(*names, help=help, **settings)]


Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks and debug logs.")]


def _version(value: bool) -> None:
    if value:
        out.print(f"ragguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """ragguard: distraction-aware calibration and a runtime context guard for RAG."""


def error_line(exc: BaseException) -> str:
    """The one line a command prints for ``exc``: the message joined into one line, or for a
    file-system error the path (for a move, the destination) and the reason."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename2 if exc.filename2 is not None else exc.filename
        text = f"{where}: {exc.strerror}" if where is not None else exc.strerror
    else:
        text = str(exc)
    return " ".join(text.split())


class _ConsoleHandler(logging.Handler):
    """Prints ragguard's warnings on stderr, once each, as ``warning: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            label = "error" if record.levelno >= logging.ERROR else "warning"
            err.print(
                f"[yellow]{label}:[/] {escape(record.getMessage())}",
                highlight=False,
                soft_wrap=True,
            )
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


@contextmanager
def friendly_errors(verbose: bool = False) -> Iterator[None]:
    """Library and file-system errors as one line on stderr and exit 1 (with ``verbose``:
    DEBUG logs and the traceback); other exceptions are bugs and keep theirs. The library's
    warnings print as ``warning: ...`` while it runs."""
    handler: logging.Handler | None = None
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    else:
        handler = _ConsoleHandler(logging.WARNING)
        logging.getLogger("ragguard").addHandler(handler)
    try:
        yield
    except (RagguardError, OSError) as exc:
        if verbose:
            raise
        err.print(f"[bold red]error:[/] {escape(error_line(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        if handler is not None:
            logging.getLogger("ragguard").removeHandler(handler)
