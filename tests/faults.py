"""Fault injection: one ``os.replace`` fails as a full disk or a denied permission would,
or the network is gone; each the way the operating system reports it."""

from __future__ import annotations

import errno
import os
import socket
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


def block_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Cut this process off the network as a machine without one is: every name lookup
    and every connection fails with ``OSError``, as the operating system reports it. The
    list returned records each attempt (``"resolve HOST"``, ``"connect ADDRESS"``), so a
    test can also assert that nothing was tried."""
    attempts: list[str] = []

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        attempts.append(f"resolve {host}")
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(f"connect {address}")
        raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return attempts
