"""The README's quick start and the example run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    source = code.group(1)
    monkeypatch.chdir(tmp_path)  # the snippet writes ragguard.toml
    namespace: dict[str, object] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    assert (tmp_path / "ragguard.toml").exists()
    selection = namespace["selection"]
    assert [c.id for c in selection.kept] == ["log-03-02", "log-02-10"]  # type: ignore[attr-defined]
    assert [d.candidate.id for d in selection.dropped] == ["squat-pr", "no-score"]  # type: ignore[attr-defined]


def test_quickstart_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGGUARD_")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    assert "log-2024-03-16   below_relative_threshold" in out.stdout
    assert "medical profile keeps: ['log-2024-03-02', 'log-2024-02-10']" in out.stdout


@pytest.mark.slow  # each example loads the packaged MiniLM in a fresh process
@pytest.mark.parametrize(
    "name", ["langchain_quickstart.py", "llamaindex_quickstart.py", "haystack_quickstart.py"]
)
def test_framework_examples_run_offline(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGGUARD_")}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True, text=True, check=True, env=env, timeout=120,
    )  # fmt: skip
    guarded = out.stdout.split("Guarded retriever:")[1].strip().splitlines()[:3]
    assert [line.split()[-1] for line in guarded] == [
        "log-2024-03-16",
        "log-2024-03-02",
        "log-2024-02-10",
    ]


def test_readme_calibration_example_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Calibration data and metrics", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    source = code.group(1)
    monkeypatch.chdir(tmp_path)  # the snippet writes eval.jsonl
    exec(compile(source, "README.md", "exec"), {})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    documented = [line[2:] for line in source.splitlines() if line.startswith("# {")]
    assert printed == documented
    assert "DANGEROUS" in source
