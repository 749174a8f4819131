"""The ``ragguard`` command.

One typer app; each command lives in its own module of this package and registers on
:data:`app` (``ragguard.cli.calibrate``, ``ragguard.cli.annotate``, ...). Every command
runs inside :func:`ragguard.cli._common.friendly_errors`, so the library's own errors
and invalid settings print one clear message and exit 1; ``--verbose`` shows the
traceback. Progress and messages go to stderr; results go to stdout.
"""

from __future__ import annotations

from ragguard.cli import annotate as _annotate  # noqa: F401  (registers its command)
from ragguard.cli import calibrate as _calibrate  # noqa: F401
from ragguard.cli import config as _config  # noqa: F401
from ragguard.cli import evaluate as _evaluate  # noqa: F401
from ragguard.cli._common import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``ragguard`` console script."""
    app()
