"""Helpers the docs and examples tests share: a README section's example, run with its
printed output checked, and an example folder's build script, loaded as a module."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def run_readme_example(heading: str) -> list[str]:
    """Run the first ``python`` block of the README section ``heading`` and check that it
    prints exactly its ``# `` comment lines, in order; return those lines."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, f"no python block under {heading!r}"
    source = code.group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "README.md", "exec"), {})
    expected = [line.removeprefix("# ") for line in source.splitlines() if line.startswith("# ")]
    assert printed.getvalue().splitlines() == expected
    return expected


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
