"""The README's conflicts / min_evidence example runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_conflicts_example_prints_its_comments() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Conflicting passages and not enough evidence", 1)[1]
    code = re.search(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    assert code is not None
    source = code.group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "README.md", "exec"), {})
    expected = [line.removeprefix("# ") for line in source.splitlines() if line.startswith("# ")]
    assert printed.getvalue().splitlines() == expected
    assert len(expected) == 5
