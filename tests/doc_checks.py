"""Helpers the docs and examples tests share: the fenced blocks of README.md and every
page under docs/, addressed by page and block, run with their printed output checked;
and an example folder's build script, loaded as a module.

The convention a page follows (``docs/contributing.md`` states it for authors):

- every ```` ```python ```` block runs, in page order, the blocks of one page sharing
  one namespace, in a temporary folder where ``examples/`` is the repository's;
- in a block that runs, each line that starts with ``# `` at column 0 is a line the
  block prints, in order; a line ending in `` ...`` matches a printed line that starts
  with the text before it. Comments that are not output go after code on the same line;
- a block right after the HTML comment ``<!-- doc-test: skip REASON -->`` (invisible in
  the rendered page) is compiled but not run: it needs your vector store, a server or a
  file an earlier command writes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*doc-test:\s*skip\s+(.+?)\s*-->\s*$")


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced block of a page."""

    page: str  # relative to the repository root: "README.md", "docs/guides/calibrate.md"
    lang: str  # the fence's language ("python", "bash", "console", "toml", "")
    number: int  # 1-based among the page's blocks of the same language
    line: int  # the line of the opening fence
    source: str
    skip: str | None  # the reason of a preceding doc-test skip comment

    @property
    def name(self) -> str:
        """How a test names it: ``docs/guides/calibrate.md python 2 (line 270)``."""
        return f"{self.page} {self.lang} {self.number} (line {self.line})"

    def expected_output(self) -> list[str]:
        """The lines the block says it prints: its ``# `` lines at column 0."""
        return [line[2:] for line in self.source.splitlines() if line.startswith("# ")]


def pages() -> list[str]:
    """README.md and every Markdown page under docs/, relative to the repository root."""
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *docs]


def page_text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def blocks(page: str, lang: str | None = None) -> list[Block]:
    """The fenced blocks of ``page`` (of language ``lang`` when given), in page order."""
    text = page_text(page)
    found: list[Block] = []
    counts: dict[str, int] = {}
    for match in _FENCE.finditer(text):
        kind = match.group(1)
        counts[kind] = counts.get(kind, 0) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        found.append(
            Block(
                page=page,
                lang=kind,
                number=counts[kind],
                line=text.count("\n", 0, match.start()) + 1,
                source=match.group(2),
                skip=skip.group(1) if skip else None,
            )
        )
    return [b for b in found if lang is None or b.lang == lang]


def all_blocks(lang: str) -> Iterator[Block]:
    for page in pages():
        yield from blocks(page, lang)


def output_matches(printed: list[str], expected: list[str]) -> bool:
    """Whether ``printed`` is ``expected`` line by line (a `` ...`` ending: a prefix)."""
    if len(printed) != len(expected):
        return False
    for got, want in zip(printed, expected, strict=True):
        if want.endswith(" ..."):
            if not got.startswith(want[:-4]):
                return False
        elif got != want:
            return False
    return True


def run_block(block: Block, workdir: Path) -> None:
    """Run ``block`` after the runnable python blocks before it on its page (their output
    unchecked), in ``workdir`` with ``examples/`` linked; assert it prints what it says."""
    examples = workdir / "examples"
    if not examples.exists():
        examples.symlink_to(ROOT / "examples")
    namespace: dict[str, object] = {"__name__": "__doc_block__"}
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        for earlier in blocks(block.page, "python"):
            if earlier.skip is not None:
                continue
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(earlier.source, earlier.name, "exec"), namespace)
            if earlier.number == block.number:
                lines = printed.getvalue().splitlines()
                expected = block.expected_output()
                assert output_matches(lines, expected), "\n".join(
                    [f"{block.name} printed", *lines, "but says", *expected]
                )
                return
    finally:
        os.chdir(previous)
    raise AssertionError(f"{block.name} is not a runnable block")


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` (an example's ``build.py``) as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module
