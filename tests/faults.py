"""Fault injection for the write paths: one ``os.replace`` fails as a full disk or a
denied permission would, the way the operating system reports it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def replace_fails(monkeypatch: pytest.MonkeyPatch, when: Callable[[Path], bool], code: int) -> None:
    """Make ``os.replace(src, dst)`` raise ``OSError(code)`` (the matching subclass, such
    as ``PermissionError`` for ``EACCES``) naming ``dst`` when ``when(dst)``; other moves
    happen as usual."""
    real = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if when(Path(dst)):
            raise OSError(code, os.strerror(code), str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
