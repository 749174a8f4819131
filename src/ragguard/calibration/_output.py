"""Checks and atomic writes for what calibrate, its report, annotate and train-reranker
write. Staging folders ``.ragguard-[TAG]PID-HOST-RANDOM.tmp`` beside the output are
moved into place and removed on the way out (``staging_folder`` says when a stale one goes)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ragguard.errors import ConfigError, RagguardError

#: ``.ragguard-`` + an optional tag (letters and ``-``) + PID + host hash + tempfile's
#: random part + ``.tmp``.
_STAGING = re.compile(r"^\.ragguard-(?P<tag>[a-z]+-)?(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-\w+\.tmp$")


def check_output_path(
    path: str | os.PathLike[str],
    *,
    folder: bool,
    what: str,
    error: type[RagguardError] = ConfigError,
    example: str | None = "ragguard.toml",
) -> Path:
    """``path`` as a ``Path``, checked before anything is written: a file
    to write (``folder=False``) must not be a folder, a folder to write into must not be
    a file, and no existing parent may be a file.

    Raises:
        ``error`` (default [`ConfigError`][ragguard.ConfigError]): naming the path, ``what``
            it was meant for, and what to give instead (a file name like ``example``).
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


def check_not_input(
    path: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str] | None],
    *,
    what: str,
    error: type[RagguardError] = ConfigError,
) -> None:
    """Refuse to write ``path`` when it is one of ``inputs`` or a folder holding one
    (both resolved, links followed; ``None`` and paths that do not exist are skipped).

    Raises:
        ``error`` (default [`ConfigError`][ragguard.ConfigError]): one line naming ``path``,
            the input it would replace, and what to do.
    """
    target = Path(path).resolve()
    for given in inputs:
        if given is None or not Path(given).exists():
            continue
        source = Path(given).resolve()
        if source == target or target in source.parents:
            held = "is" if source == target else "holds"
            raise error(
                f"{what} {path} {held} the input {given}, which writing there would "
                "replace; write elsewhere"
            )


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8")).hexdigest()[:8]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` may still run (``True`` whenever that cannot be told)."""
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True


def _remove_stale_staging(folder: Path) -> None:
    """Remove the staging folders in ``folder`` left by dead processes of this machine."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    host = _host()
    for entry in entries:
        m = _STAGING.match(entry.name)
        if m is None or m["host"] != host or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


@contextmanager
def staging_folder(folder: Path, *, tag: str = "") -> Iterator[Path]:
    """A new staging folder in ``folder`` (``tag``: a lowercase word), removed on the way
    out, whatever happens. First removes the stale ones: exactly that name pattern, this
    HOST, its process gone (never probed on Windows); nothing else is ever removed."""
    if tag and not re.fullmatch(r"[a-z]+", tag):
        raise ValueError(f"tag must be lowercase letters, got {tag!r}")
    _remove_stale_staging(folder)
    prefix = f".ragguard-{tag + '-' if tag else ''}{os.getpid()}-{_host()}-"
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=prefix, suffix=".tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
