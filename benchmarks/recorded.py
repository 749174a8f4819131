"""Where benchmark figures go: one JSON file per benchmark in ``benchmarks/results/``,
from which ``benchmarks/table.py`` regenerates the table of ``benchmarks/README.md`` and
``docs/benchmarks/index.md``.

A benchmark run with ``--record`` (or ``--record=PATH``) writes what it printed, its goal
lines (PASS / FAIL), the machine, the load average at its start and end, its wall time
and its command line to ``benchmarks/results/NAME.json`` (or PATH)::

    python benchmarks/guard_overhead.py --record
    python benchmarks/table.py          # the table then shows the new figures

A script opts in by running its ``main()`` inside :func:`recording`; the option is taken
out of ``sys.argv`` before the script parses its own options.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

RESULTS = Path(__file__).resolve().parent / "results"
REQUIRED = ("benchmark", "headline", "machine", "load", "command")


def machine() -> str:
    """The machine in one line: CPUs, CPU model, memory, OS, Python."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if found:
            model = found.group(1).strip()
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text(encoding="utf-8").split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    return (
        f"{os.cpu_count()} CPUs ({model}){memory}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def commit() -> str | None:
    """The checked-out commit (with ``+changes`` when the work tree differs), if any."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty.stdout.strip() else "")


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


class _Tee(io.TextIOBase):
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _take_option(argv: list[str], default: Path) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "--record":
            del argv[i]
            return default
        if arg.startswith("--record="):
            del argv[i]
            return Path(arg.split("=", 1)[1])
    return None


def result(benchmark: str, output: str, *, load_start: float | None, load_end: float | None,
           wall_s: float, command: str) -> dict[str, Any]:  # fmt: skip
    """The JSON document of one run: what the table reads, and the whole printed report."""
    lines = output.splitlines()
    goals = [line.strip() for line in lines if re.match(r"\s*(PASS|FAIL)\b", line)]
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return {
        "benchmark": benchmark,
        "headline": "; ".join(goals) if goals else last,
        "goals": goals,
        "machine": machine(),
        "load": f"load average {load_start} at the start, {load_end} at the end",
        "load_average": {"start": load_start, "end": load_end},
        "wall_s": round(wall_s, 1),
        "command": command,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commits": {"run": commit()},
        "source": "recorded by the script (--record)",
        "output": lines,
    }


@contextlib.contextmanager
def recording(benchmark: str, argv: list[str] | None = None) -> Iterator[None]:
    """Run the body (a benchmark's ``main()``) and, when ``--record`` is among the
    arguments, write its figures as JSON; the option is removed from ``argv``
    (default ``sys.argv``) first. Also writes when the body exits with ``SystemExit``."""
    args = sys.argv if argv is None else argv
    command = (
        "python benchmarks/"
        + benchmark
        + ".py "
        + " ".join(a for a in args[1:] if not a.startswith("--record"))
    )
    path = _take_option(args, RESULTS / f"{benchmark}.json")
    if path is None:
        yield
        return
    tee = _Tee(sys.stdout)
    start, load_start = time.perf_counter(), load_average()
    previous, sys.stdout = sys.stdout, tee  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = previous
        doc = result(
            benchmark,
            tee.copy.getvalue(),
            load_start=load_start,
            load_end=load_average(),
            wall_s=time.perf_counter() - start,
            command=command.strip(),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"figures recorded in {path}", file=sys.stderr)
