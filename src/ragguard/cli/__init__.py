"""The ``ragguard`` command: one typer app (``_common``); each command registers on it from
its own module (see DESIGN.md and the command-line guide)."""

from __future__ import annotations

import os

from ragguard.cli import annotate as _annotate  # noqa: F401  (registers its command)
from ragguard.cli import calibrate as _calibrate  # noqa: F401
from ragguard.cli import config as _config  # noqa: F401
from ragguard.cli import drift as _drift  # noqa: F401
from ragguard.cli import evaluate as _evaluate  # noqa: F401
from ragguard.cli import synth as _synth  # noqa: F401
from ragguard.cli import train as _train  # noqa: F401
from ragguard.cli._common import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``ragguard`` console script."""
    # pyarrow's mimalloc keeps freed pages a while; a large file's parse buffers are never
    # reused here, so give them back at once (~200 MB per 100,000 x 100 run)
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
    app()
