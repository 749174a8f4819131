"""The ``ragguard`` command.

One typer app; each command lives in its own module of this package and registers on
``app`` (``ragguard.cli.calibrate``, ``ragguard.cli.annotate``, ...). Every command
runs inside ``ragguard.cli._common.friendly_errors``, so the library's own errors,
invalid settings and file-system errors print one clear line and exit 1, and the
library's warnings print once on stderr; ``--verbose`` shows the traceback. Progress and
messages go to stderr; results go to stdout. Help is plain text (click's formatter):
help strings are shown as written, without rich markup.
"""

from __future__ import annotations

import os

from ragguard.cli import annotate as _annotate  # noqa: F401  (registers its command)
from ragguard.cli import calibrate as _calibrate  # noqa: F401
from ragguard.cli import config as _config  # noqa: F401
from ragguard.cli import evaluate as _evaluate  # noqa: F401
from ragguard.cli import train as _train  # noqa: F401
from ragguard.cli._common import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``ragguard`` console script."""
    # pyarrow's allocator (mimalloc) keeps freed pages for a while before giving them back;
    # in this process a large file's parse buffers are freed once and never reused, so
    # give them back at once (about 200 MB per 100,000 x 100 run). Read when pyarrow
    # loads, which is later; a value set by the user stays.
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
    app()
