"""``ragguard calibrate --noise-floor ALPHA --noise-scorer MODEL``: bad inputs are one line
each, before any model loads or data is swept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.calibration.answerability_data import random_rows, write_jsonl
from tests.cli.checks import error_line, invoke


@pytest.fixture
def evalset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_jsonl(tmp_path / "eval.jsonl", random_rows(0))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--noise-floor", "0.05"], "pass --noise-scorer, the embedding model the run"),
        (["--noise-scorer", "./model"], "--noise-scorer scores passages for --noise-floor"),
        (["--noise-floor", "1.5", "--noise-scorer", "./none"], r"must be a share in (0, 1)"),
        (["--noise-floor", "nan", "--noise-scorer", "./none"], "got nan"),
        (["--noise-floor", "0.05", "--noise-scorer", "./none"], "no folder ./none"),
    ],
)
def test_bad_inputs_are_one_line(evalset: Path, args: list[str], message: str) -> None:
    res = invoke("calibrate", evalset, "--no-report", *args)
    assert res.exit_code == 1, res.output
    line = error_line(res)
    assert message in line and "\n" not in line.strip()
    assert not Path("ragguard.toml").exists()
