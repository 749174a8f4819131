"""What ``ragguard calibrate`` writes for the team's examples, held byte for byte.

A change that only restructures code must leave the written config and the ``--json``
document as they were (dates aside). The expected files in ``tests/data/golden/`` were
written by the command itself; a change that means to alter them regenerates them with
``UPDATE_GOLDEN=1 python -m pytest tests/cli/test_outputs_unchanged.py`` and names the
difference in CHANGELOG.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragguard.cli import app

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
#: the config's lines that hold the time it was written
_DATED = re.compile(r"^(# ragguard guard config, written |created = ).*$", re.M)

CASES = {
    "notes": ["examples/notes"],
    "ramdocs-unanswerable": [
        "examples/ramdocs/unanswerable/evalset.jsonl",
        "--conflicts",
        "off,keep_first,drop",
        "--max-false-abstain",
        "0.1",
    ],
}


def _undated(text: str, out: Path) -> str:
    return _DATED.sub(r"\1<date>", text).replace(str(out), "<out>")


@pytest.mark.parametrize("name", sorted(CASES))
def test_calibrate_writes_what_it_wrote_before(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the inputs as a user names them, relative
    out = tmp_path / "ragguard.toml"
    result = CliRunner().invoke(
        app, ["calibrate", *CASES[name], "--json", "--no-report", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    written = {
        f"{name}.json": _undated(result.stdout, out),
        f"{name}.toml": _undated(out.read_text(encoding="utf-8"), out),
    }
    for file, text in written.items():
        if os.environ.get("UPDATE_GOLDEN"):
            (GOLDEN / file).write_text(text, encoding="utf-8")
        assert text == (GOLDEN / file).read_text(encoding="utf-8"), file
