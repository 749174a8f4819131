"""The calibration report: well-formed HTML, every plot it shows exists, and without
matplotlib everything but the plots."""

from __future__ import annotations

import base64
import errno
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from ragguard._optional import install_hint
from ragguard.calibration import (
    CalibrationResult,
    Check,
    EvalSet,
    Guarantee,
    RerankGrid,
    RerankSearch,
    Search,
    SweepGrid,
    calibrate,
    load_inputs,
)
from ragguard.calibration.fit.risk import risk_upper_bound
from ragguard.calibration.fit.statistics import Interval, split_queries
from ragguard.calibration.fit.sweep import describe_point, is_plain_top_k
from ragguard.calibration.metrics import compute
from ragguard.calibration.report import (
    PLOT_NOTE,
    build_report,
    format_interval,
    format_number,
    write_report,
)
from ragguard.calibration.report.plots import draw_figures
from ragguard.errors import ConfigError
from ragguard.policy import CutRule
from tests.calibration.generalise_data import adversarial, synthetic_evalset
from tests.faults import replace_fails

ROOT = Path(__file__).resolve().parents[3]
NOTES = ROOT / "examples" / "notes"
PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = {"utility_vs_k.png", "heatmap.png", "optimal_k.png", "baseline_vs_guarded.png"}
VOID = {"meta", "img", "br", "hr", "link", "input"}


@pytest.fixture(scope="module")
def result() -> CalibrationResult:
    return calibrate(
        load_inputs(NOTES), constraints=["evidence_recall>=0.8"], check=Check(n_bootstrap=300)
    )


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
    assert f"**Run `{r.name}`: {describe_point(r.written_params)}**" in md
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
    passages kept differ by exactly 0, and the report gives no verdict at all."""
    only_top3 = SweepGrid(max_k=(3,), thresholds=(0.0,), cut_rules=())
    same = calibrate(load_inputs(NOTES), search=Search(grid=only_top3), check=Check(n_bootstrap=50))
    c = same.recommended.comparison
    assert c.difference["passages"].mean == 0.0 and c.passages_verdict() == "same"
    row = verdict_row(build_report(same, plots=False).markdown(), "passages")
    assert row == ["passages", "3.000 [3.000, 3.000]"]  # the one setting's value, no verdict
    # and where the guard keeps fewer, it says so
    fewer = verdict_row(build_report(result, plots=False).markdown(), "passages")
    assert result.recommended.comparison.difference["passages"].mean < 0
    assert fewer[-1] == "fewer"


def test_numbers_print_alike_everywhere() -> None:
    assert format_number(0.12345) == "0.123" and format_number(2.0, 2) == "2.00"
    assert format_number(0.5, signed=True) == "+0.500"
    assert format_number(-0.5, 1, signed=True) == "-0.5"
    assert format_number(math.nan) == format_number(math.nan, signed=True) == "n/a"


def test_intervals_round_outward_and_keep_a_bound_off_zero_off_zero() -> None:
    """[0.003, 0.0712] printed "[+0.00, +0.07]" next to "better": rounded to 2 decimals
    it includes 0 and leaves out 0.0712. Outward rounding holds the true interval, and
    a bound off 0 gets the decimals that keep it off 0 (so the printed interval
    excludes 0 exactly when the true one does)."""
    assert format_interval(0.003, 0.0712) == "[+0.003, +0.08]"
    assert format_interval(-0.0712, -0.003) == "[-0.08, -0.003]"
    assert format_interval(-0.0004, 0.67) == "[-0.01, +0.67]"
    assert format_interval(0.0, 0.67) == "[+0.00, +0.67]"  # 0 itself: no clear difference
    assert format_interval(-0.1, -0.0) == "[-0.10, +0.00]"  # no negative zero
    assert format_interval(0.07, 0.07) == "[+0.07, +0.07]"  # exact values stay exact
    assert format_interval(0.5, 0.6, 3, signed=False) == "[0.500, 0.600]"
    assert format_interval(-10.871, -9.731) == "[-10.88, -9.73]"
    assert format_interval(math.nan, 1.0) == ""


def test_markdown_report_writes_no_html_from_the_data(tmp_path: Path) -> None:
    """SE-03: a query and a run name carrying markup reached report.md verbatim, so a
    Markdown viewer that renders HTML would run it; both files now show it as text."""
    folder = tmp_path / "notes"
    (folder / "runs").mkdir(parents=True)
    payload = "<img src=x onerror=alert(2)>"
    lines = (NOTES / "evalset.jsonl").read_text(encoding="utf-8").splitlines()
    with (folder / "evalset.jsonl").open("w", encoding="utf-8") as fh:
        for line in lines:
            record = json.loads(line)
            record["query"] = f"{record['query']} {payload} & more"
            fh.write(json.dumps(record) + "\n")
    run = "dense<b>x"
    (folder / "runs" / f"{run}.trec").write_text(
        (NOTES / "runs" / "dense-minilm.trec").read_text(encoding="utf-8"), encoding="utf-8"
    )
    res = calibrate(
        load_inputs(folder), constraints=["evidence_recall>=0.8"], check=Check(n_bootstrap=100)
    )
    md = build_report(res, plots=False).markdown()
    assert payload in "".join(res.header.evalset.queries[q].text or "" for q in res.header.qids)
    assert "<img" not in md and "<b>" not in md and "<" not in md
    assert "&lt;img src=x onerror=alert(2)> &amp; more" in md  # shown as text
    assert "`dense&lt;b>x`" in md
    page = build_report(res, plots=False).html()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page


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


# --------------------------------------------------------------------------- issue 13


def section(md: str, title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## ``."""
    return md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def interval(iv: Interval, signed: bool = False) -> str:
    """A mean and its interval as the report prints them (the interval rounded
    outward: see test_intervals_round_outward_and_keep_a_bound_off_zero_off_zero)."""
    outward = format_interval(iv.low, iv.high, 3, signed=signed)
    return f"{format_number(iv.mean, signed=signed)} {outward}"


def test_the_report_states_the_guarantee_with_its_numbers() -> None:
    res = calibrate(
        synthetic_evalset(200, 20, 3),
        check=Check(n_bootstrap=200),
        guarantee=Guarantee(recall=0.8, confidence=0.9),
    )
    r = res.recommended
    g = r.guarantee
    assert g is not None and g.point is not None and r.full is not None
    # what the calibration queries certify is written: no refit on all queries
    assert r.written == r.chosen == g.point
    md = build_report(res, plots=False).markdown()
    rec = section(md, "Recommendation")
    assert f"**Run `run`: {describe_point(r.written_params)}**" in rec
    assert "certified on the 140 calibration queries and not refitted" in rec
    sec = section(md, "Recall guarantee")
    assert "mean evidence recall >= 0.8 on new queries, with confidence 90%" in sec
    for words in ("Learn-then-Test", "Hoeffding-Bentkus", "arXiv:2110.01052", "exchangeable",
                  "bounded in [0, 1]", "no evidence are left out"):  # fmt: skip
        assert words in sec
    # the certified lower bound: the HB upper confidence bound on the mean loss of the
    # written setting over the 140 calibration queries, at delta = 0.1 shared by the
    # two paths
    cal = res.header.calibration_rows
    ev_cal = compute(r.arrays, "evidence_recall", cut=r.sweep.kept[r.written])[cal]
    bound = 1 - risk_upper_bound(1 - float(np.mean(ev_cal)), cal.size, 0.1 / len(g.paths))
    assert bound >= 0.8 and g.recall_bound == pytest.approx(bound)
    passages = float(np.mean(r.sweep.kept[r.written][cal]))
    assert (
        f"**{describe_point(r.written_params)}**, mean evidence recall >= "
        f"{math.floor(bound * 1000) / 1000:.3f} (certified lower bound), keeping "
        f"{format_number(passages, 2)} passages on average" in sec
    )
    # the held-out evidence recall of the calibration-certified setting, recomputed
    held = compute(r.arrays, "evidence_recall", cut=r.sweep.kept[g.point])[res.header.heldout_rows]
    assert (
        f"held-out check: {describe_point(r.sweep.points[g.point])} reaches mean evidence "
        f"recall {format_number(float(np.nanmean(held)))} on the {res.header.heldout_rows.size} "
        "held-out queries with evidence, never used to certify it" in sec
    )
    # classic recall, labelled as the retriever's ceiling, next to evidence recall
    assert "retriever's ceiling" in section(md, "Baseline vs guarded")


def test_an_unmet_guarantee_names_what_can_be_guaranteed() -> None:
    res = calibrate(synthetic_evalset(60, 10, 1), guarantee=Guarantee(recall=0.99, confidence=0.95))
    g = res.recommended.guarantee
    assert g is not None and not g.met
    # keeping all 10 candidates has evidence recall 1 on every query (loss 0); the HB
    # bound at loss 0 is Hoeffding's (1 - a)^n = delta, delta = 0.05 over 2 paths, on the
    # 42 calibration queries (the 18 held out never certify)
    reachable = (0.05 / 2) ** (1 / 42)
    assert g.best_bound == pytest.approx(reachable, abs=1e-9)
    shown = f"{math.floor(reachable * 1000) / 1000:.3f}"  # a bound printed rounded down
    md = build_report(res, plots=False, config_path="g.toml").markdown()
    unmet = section(md, "Constraints not met")
    assert f"the most that can be guaranteed is {shown}" in unmet
    assert "`--holdout 0` certifies on all 60 queries" in unmet
    assert (
        f"**not met**: no setting is certified on the 42 calibration queries with evidence; "
        f"the most that can be guaranteed at 95% confidence is {shown} (top-10)"
        in section(md, "Recall guarantee")
    )
    rec = section(md, "Recommendation")
    assert "is written only with `--allow-unmet`" in rec
    assert "No setting carries the guarantee on the 42 calibration queries" in rec
    assert "**Run `run`: top-10**" in rec  # the largest context stands in


def test_a_fallback_to_top_k_is_what_the_report_says_is_written() -> None:
    res = calibrate(
        adversarial(90, 0, 0.3),
        objective="utility",
        constraints=["evidence_recall>=0.0"],
        check=Check(n_bootstrap=200),
    )
    r = res.recommended
    assert r.fallback is not None and is_plain_top_k(r.written_params)
    md = build_report(res, plots=False, config_path="g.toml").markdown()
    rec = section(md, "Recommendation")
    assert f"**Run `run`: {describe_point(r.written_params)}**" in rec
    assert f"**Fallback to plain top-k:** {r.fallback}." in rec
    assert f"calibration queries was {describe_point(r.chosen_params)}" in rec
    assert 'Config: `g.toml`; load it with `ContextGuard.from_file("g.toml")`.' in rec
    d = r.comparison.difference["utility"]
    row = verdict_row(md, "utility")
    assert row[3:] == [interval(d, signed=True), "worse"]
    assert f"plain top-k is written instead ({describe_point(r.written_params)})" in section(
        md, "Baseline vs guarded"
    )
    # the cross-validation table: folds, every family's CV mean and standard error
    s = r.selection
    assert s is not None and s.folds == 5
    cv = section(md, "Choosing the rule family: cross-validation")
    assert "**5 folds**" in cv
    for j, (_, name) in enumerate(s.families):
        cells = f"| {name} | {format_number(s.cv_mean[j])} | {format_number(s.cv_se[j])} |"
        assert cells in cv
    # the one-SE rule: the simplest feasible family within one SE of the best is chosen
    ok = [j for j in range(len(s.families)) if s.cv_feasible[j]]
    best = max(ok, key=lambda j: s.cv_mean[j])
    within = [j for j in ok if s.cv_mean[j] >= s.cv_mean[best] - s.cv_se[best]]
    assert s.chosen == min(within)
    assert f"| {s.family} | {format_number(s.cv_mean[s.chosen])} |" in cv
    assert "**chosen**" in next(x for x in cv.splitlines() if x.startswith(f"| {s.family} |"))
    assert f"of at least {format_number(s.cv_mean[best] - s.cv_se[best])}" in cv
    # with on_worse="stop" the report says nothing is written, and names no config
    stop = calibrate(
        adversarial(90, 0, 0.3),
        objective="utility",
        constraints=["evidence_recall>=0.0"],
        check=Check(n_bootstrap=200, on_worse="stop"),
    )
    md = build_report(stop, plots=False, config_path="g.toml").markdown()
    assert "**No config is written** (`on_worse='stop'`)" in md and "g.toml" not in md


def test_a_chosen_baseline_is_not_compared_with_itself_and_a_small_set_is_flagged(
    tmp_path: Path,
) -> None:
    only_top_k = SweepGrid(max_k=(1, 2, 3, 4), thresholds=(0.0,), cut_rules=())
    res = calibrate(
        synthetic_evalset(40, 6, 5), search=Search(grid=only_top_k), check=Check(n_bootstrap=200)
    )
    r = res.recommended
    assert r.chosen_is_baseline
    written = write_report(res, tmp_path / "r")
    md = written.markdown.read_text(encoding="utf-8")
    sec = section(md, "Baseline vs guarded")
    assert "**the baseline itself**" in sec and "nothing to compare" in sec
    assert "| metric | baseline:" not in md and "difference" not in sec
    assert "Queries that gained and lost most" not in md
    assert "baseline_vs_guarded.png" not in md
    # no baseline-vs-guarded plot (and no heatmap: one threshold is no grid)
    assert {p.name for p in written.plots} == {"utility_vs_k.png", "optimal_k.png"}
    # the held-out values of that one setting, recomputed from the arrays
    udcg = compute(r.arrays, "udcg", cut=r.sweep.kept[r.chosen])[res.header.heldout_rows]
    assert f"| udcg | {format_number(float(np.mean(udcg)))} [" in sec
    iv = r.comparison.guarded["udcg"]
    assert f"| udcg | {interval(iv)} |" in sec
    assert (
        f"**Small eval set:** 40 labelled queries (50 or more advised). The 95% interval of "
        f"mean `udcg` on the 12 held-out queries is {format_number(iv.high - iv.low)} wide"
        in section(md, "Recommendation")
    )


def test_an_unmet_floor_names_the_best_reachable_value_and_its_setting() -> None:
    # 30 queries, 6 candidates; the one relevant passage is ranked 1st on every third
    # query and 5th on the others: with caps up to 3, evidence recall reaches 1/3
    run, qrels = {}, {}
    for i in range(30):
        q = f"q{i:02d}"
        run[q] = {f"{q}_{r}": 1.0 - r / 10 for r in range(1, 7)}
        qrels[q] = {f"{q}_{1 if i % 3 == 0 else 5}": 1}
    es = EvalSet.from_dicts(qrels, {"run": run})
    grid = SweepGrid(max_k=(1, 2, 3), thresholds=(0.0, 0.5), cut_rules=())
    res = calibrate(
        es,
        constraints=["evidence_recall>=0.8"],
        search=Search(grid=grid),
        check=Check(n_bootstrap=100),
    )
    r = res.recommended
    [short] = res.shortfalls()
    ev = compute(r.arrays, "evidence_recall", cut=r.kernel.cut(short.best))
    assert float(np.mean(ev)) == pytest.approx(1 / 3) == short.best_value
    md = build_report(res, plots=False, config_path="g.toml").markdown()
    sec = section(md, "Constraints not met")
    assert "caps up to 3 passages" in sec
    assert (
        f"| evidence_recall>=0.8 | {format_number(1 / 3)} | {describe_point(short.best)} | "
        f"{describe_point(r.written_params)}: {format_number(1 / 3)} |" in sec
    )
    assert "is written only with `--allow-unmet`" in section(md, "Recommendation")


def test_a_two_stage_choice_worse_on_held_out_leaves_the_stage_off() -> None:
    """A reranker that ranks the answer first on the calibration queries and last on
    the held-out ones: the two-stage choice is worse there, and the report says the
    stage is left off and which retrieval-only setting the config holds."""
    n = 90
    _, held_rows = split_queries(n, 0.3, 0)
    held = {f"question {i}" for i in held_rows.tolist()}

    def treacherous(query: str, texts: Sequence[str]) -> list[float]:
        s = [3.0 if "answer" in t else -3.0 + 0.1 * i for i, t in enumerate(texts)]
        return [-x for x in s] if query in held else s

    qrels, run, texts, queries = {}, {}, {}, {}
    for i in range(n):
        q = f"q{i:02d}"
        queries[q] = f"question {i}"
        qrels[q] = {f"{q}-a": 1}
        run[q] = {f"{q}-a": 0.9, f"{q}-b": 0.5, f"{q}-c": 0.49, f"{q}-d": 0.48}
        texts.update({f"{q}-a": "the answer", f"{q}-b": "b", f"{q}-c": "c", f"{q}-d": "d"})
    es = EvalSet.from_dicts(qrels, {"dense": run}, queries=queries)
    res = calibrate(
        es,
        search=Search(max_k=4),
        check=Check(n_bootstrap=200),
        rerank=RerankSearch(
            reranker=treacherous, score_kind="logit", grid=RerankGrid(top_n=(4,)), cache_dir=None
        ),
        passages=texts,
    )
    two = res.rerank
    assert two is not None and two.fallback is not None
    assert not res.config().rerank.enabled
    md = build_report(res, plots=False).markdown()
    sec = section(md, "Two stages: retrieval, then the reranker")
    written = describe_point(res.recommended.written_params)
    assert f"The config leaves it off and holds run dense's retrieval-only setting, {written}" in (
        " ".join(sec.split())
    )
    # the held-out evidence recall behind it: the answer kept on every held-out query by
    # retrieval (1.000), on none by the reranker's top-1 (0.000)
    row = next(x for x in sec.splitlines() if x.startswith("| evidence_recall |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("1.000") and cells[3].startswith("0.000")
    assert cells[5] == "worse"
    rec = section(md, "Recommendation")
    assert f"**Run `dense`: {written}**" in rec and f"Second stage left off: {two.fallback}" in rec


def test_the_plots_draw_the_view_and_compute_nothing(result: CalibrationResult) -> None:
    """The heatmap's cells and hatching, the top-k curves and the oracle line are the
    view's, taken from the sweep once; the plots draw only what the view holds."""
    pytest.importorskip("matplotlib")
    view = result.view()
    sweep, objective = view.run.sweep, view.header.objective
    h = view.heatmap
    assert h is not None
    cells = 0
    for i, p in enumerate(sweep.points):
        if p.cut is CutRule.NONE and p.min_score is None:
            a, b = h.max_k.index(p.max_k), h.thresholds.index(p.relative_threshold)
            assert h.objective[a, b] == sweep.mean(i, objective)
            assert h.fails[a, b] == (sweep.mean(i, "evidence_recall") < 0.8)
            cells += 1
    assert cells == int(np.isfinite(h.objective).sum()) and h.fails.any()
    top_k = [i for i, p in enumerate(sweep.points) if is_plain_top_k(p)]
    for curve in view.curves:
        assert curve.ks == tuple(sweep.points[i].max_k for i in top_k)
        assert curve.means == tuple(sweep.mean(i, curve.metric) for i in top_k)
    rows = view.header.calibration_rows
    assert view.oracle_utility == pytest.approx(np.mean(view.optimal.utility[rows]))
    figs = draw_figures(replace(view, heatmap=None))
    assert figs is not None
    assert {f.name for f in figs} == PLOTS - {"heatmap.png"}
