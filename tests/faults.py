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


def replace_interrupted(monkeypatch: pytest.MonkeyPatch, when: Callable[[Path], bool]) -> None:
    """Make ``os.replace(src, dst)`` raise :class:`KeyboardInterrupt` when ``when(dst)``,
    as a Ctrl-C arriving during that move would; other moves happen as usual."""
    real = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if when(Path(dst)):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


STAGING_CHILD = """
import os, signal, sys, time
from pathlib import Path
from ragguard.calibration._output import staging_folder
with staging_folder(Path(sys.argv[1]), tag=sys.argv[2]) as tmp:
    (tmp / "half-written").write_text("x")
    print(tmp, flush=True)
    if sys.argv[3] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)
"""


def _child_env() -> dict[str, str]:
    """The environment for a child process that imports this ragguard (the tests may
    run from another folder with a relative ``PYTHONPATH``)."""
    import ragguard

    src = str(Path(ragguard.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def killed_staging_folder(folder: Path, tag: str = "") -> Path:
    """The staging folder a process left in ``folder`` when it was killed (``kill -9``)
    while writing in it: a real leftover, made by a child process."""
    import signal
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", STAGING_CHILD, str(folder), tag, "kill"],
        capture_output=True, text=True, timeout=120, check=False, env=_child_env(),
    )  # fmt: skip
    assert res.returncode == -signal.SIGKILL, res.stderr
    left = Path(res.stdout.strip())
    assert left.parent == folder and (left / "half-written").is_file()
    return left


class LiveStaging:
    """A child process writing in a staging folder of ``folder`` until stopped (a
    context manager: ``path`` is its folder)."""

    def __init__(self, folder: Path, tag: str = "") -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, "-c", STAGING_CHILD, str(folder), tag, "live"],
            stdout=subprocess.PIPE, text=True, env=_child_env(),
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.path = Path(self.proc.stdout.readline().strip())

    def __enter__(self) -> LiveStaging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
