"""The calibration report: well-formed HTML, every plot it shows exists, and without
matplotlib everything but the plots."""

from __future__ import annotations

import base64
import errno
import math
import os
import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ragguard._optional import install_hint
from ragguard.calibration import CalibrationResult, SweepGrid, calibrate, load_inputs
from ragguard.calibration.report import PLOT_NOTE, build_report, format_number, write_report
from ragguard.errors import ConfigError
from tests.faults import replace_fails

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "notes"
PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = {"utility_vs_k.png", "heatmap.png", "optimal_k.png", "baseline_vs_guarded.png"}
VOID = {"meta", "img", "br", "hr", "link", "input"}


@pytest.fixture(scope="module")
def result() -> CalibrationResult:
    return calibrate(load_inputs(NOTES), min_recall=0.8, n_bootstrap=300)


class _Balance(HTMLParser):
    """Checks that every non-void tag is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def check_html(page: str) -> ET.Element:
    """Parse the page as XML (it is written XHTML-compatible) and check tag balance."""
    assert page.startswith("<!DOCTYPE html>\n")
    parser = _Balance()
    parser.feed(page)
    assert not parser.errors and not parser.stack
    return ET.fromstring(page.split("\n", 1)[1])


def test_html_is_well_formed_and_every_plot_exists(
    result: CalibrationResult, tmp_path: Path
) -> None:
    written = write_report(result, tmp_path / "report", config_path="ragguard.toml")
    page = written.html.read_text(encoding="utf-8")
    root = check_html(page)
    imgs = root.findall(".//img")
    assert {img.get("data-plot") for img in imgs} == PLOTS
    for img in imgs:
        src = img.get("src") or ""
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG)
        assert (tmp_path / "report" / "plots" / str(img.get("data-plot"))).read_bytes() == data
    assert "http://" not in page and "https://" not in page and "<script" not in page
    md = written.markdown.read_text(encoding="utf-8")
    referenced = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert {Path(r).name for r in referenced} == PLOTS
    for r in referenced:
        assert (tmp_path / "report" / r).is_file()
    assert {p.name for p in written.plots} == PLOTS and written.plots_drawn


def test_report_says_what_was_chosen_and_names_distractors(result: CalibrationResult) -> None:
    rep = build_report(result, plots=False)
    md = rep.markdown()
    r = result.recommended
    assert f"**Run `{r.name}`: max_k={r.chosen_params.max_k}" in md
    assert result.why() in md
    assert "## Baseline vs guarded" in md and "held-out queries" in md
    assert "## Queries that gained and lost most" in md
    # a gained query names the known distractors the guard removed
    gained = md.split("### Gained most", 1)[1].split("### Lost most", 1)[0]
    assert "known distractor, removed" in gained
    for m in ("udcg", "recall", "distractor_rate"):
        assert f"| {m} |" in md
    assert "Plots were turned off." in md


def test_without_matplotlib_the_report_has_tables_and_a_note(
    result: CalibrationResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    written = write_report(result, tmp_path / "r")
    assert not written.plots_drawn and written.plots == ()
    assert not (tmp_path / "r" / "plots").exists()
    md = written.markdown.read_text(encoding="utf-8")
    assert PLOT_NOTE in md and install_hint("report") in md
    page = written.html.read_text(encoding="utf-8")
    root = check_html(page)
    assert root.findall(".//img") == []
    assert "ragguard-context[report]" in page and "<table>" in page


def verdict_row(md: str, metric: str) -> list[str]:
    line = next(x for x in md.splitlines() if x.startswith(f"| {metric} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_passages_verdict_says_same_when_nothing_changes(result: CalibrationResult) -> None:
    """Only one setting to choose from: the guarded setting is the baseline, so the
    passages kept differ by exactly 0."""
    only_top3 = SweepGrid(max_k=(3,), thresholds=(0.0,), cut_rules=())
    same = calibrate(load_inputs(NOTES), grid=only_top3, n_bootstrap=50)
    c = same.recommended.comparison
    assert c.difference["passages"].mean == 0.0
    assert verdict_row(build_report(same, plots=False).markdown(), "passages")[-1] == "same"
    # and where the guard keeps fewer, it says so
    fewer = verdict_row(build_report(result, plots=False).markdown(), "passages")
    assert result.recommended.comparison.difference["passages"].mean < 0
    assert fewer[-1] == "fewer"


def test_numbers_print_alike_everywhere() -> None:
    assert format_number(0.12345) == "0.123" and format_number(2.0, 2) == "2.00"
    assert format_number(0.5, signed=True) == "+0.500"
    assert format_number(-0.5, 1, signed=True) == "-0.5"
    assert format_number(math.nan) == format_number(math.nan, signed=True) == "n/a"


def test_a_failed_write_keeps_the_old_report_and_leaves_nothing_temporary(
    result: CalibrationResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "report.html").write_text("the previous report")
    replace_fails(monkeypatch, lambda dst: dst.name == "report.html", errno.ENOSPC)
    with pytest.raises(OSError, match=os.strerror(errno.ENOSPC)):
        write_report(result, folder, plots=False)
    assert (folder / "report.html").read_text() == "the previous report"
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(ConfigError, match="is a file"):
        write_report(result, folder / "report.html")
