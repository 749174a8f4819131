"""Checks and atomic writes for the files calibrate, its report and annotate write."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragguard.errors import ConfigError, RagguardError

__all__ = ["check_output_path", "staging_folder"]


def check_output_path(
    path: str | os.PathLike[str],
    *,
    folder: bool,
    what: str,
    error: type[RagguardError] = ConfigError,
    example: str | None = "ragguard.toml",
) -> Path:
    """``path`` as a :class:`~pathlib.Path`, checked before anything is written: a file
    to write (``folder=False``) must not be a folder, a folder to write into must not be
    a file, and no existing parent may be a file.

    Raises:
        ``error`` (default :class:`ConfigError`): naming the path, ``what`` it was meant
            for, and what to give instead (a file name like ``example``).
    """
    p = Path(path)
    if folder and p.exists() and not p.is_dir():
        raise error(f"{p} is a file; {what} is a folder of files: give a folder name")
    if not folder and p.is_dir():
        hint = f" (e.g. {p / example})" if example else ""
        raise error(f"{p} is a folder; {what} is a file: give a file name{hint}")
    parent = next((a for a in p.parents if a.exists()), None)
    if parent is not None and not parent.is_dir():
        raise error(f"cannot write {what} to {p}: {parent} is a file, not a folder")
    return p


@contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """A new hidden folder inside ``folder`` to write files in before :func:`os.replace`
    moves each into place (the same file system, so each move is atomic). It is removed
    on the way out, with whatever is still in it, on success or failure."""
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=".ragguard-", suffix=".tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
