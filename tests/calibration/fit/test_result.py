"""The result view (:meth:`CalibrationResult.view`): derived once, and every output of
``ragguard calibrate`` (the console, ``--json``, the Markdown report and the config's
provenance) says what it says, each checked against a view built independently, by the
library on the same data, and against values recomputed from the labels."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragguard.calibration import calibrate, load_inputs
from ragguard.calibration.fit.sweep import PASSAGES, lower_is_better
from ragguard.calibration.metrics import compute, safety_band
from ragguard.cli import app

ROOT = Path(__file__).resolve().parents[3]
NOTES = ROOT / "examples" / "notes"
runner = CliRunner()


def _flat(text: str) -> str:
    """Output with rich's wrapping undone and shell continuations joined."""
    return " ".join(text.replace(" \\\n", " ").split())


def _verdict(metric: str, low: float, high: float) -> str:
    """The verdict a paired difference's interval gives, written out here."""
    if metric == PASSAGES:
        return "fewer" if high < 0 else "more" if low > 0 else "no clear difference"
    if math.isnan(low) or low <= 0 <= high:
        return "no clear difference"
    gained = (low > 0) != lower_is_better(metric)
    return "better" if gained else "worse"


def test_the_view_is_built_once_and_the_methods_read_it() -> None:
    res = calibrate(load_inputs(NOTES), constraints=["evidence_recall>=0.8"])
    view = res.view()
    assert res.view() is view and res.view(res.recommended) is view
    named = res.view(evalset="my/eval")
    assert res.view(evalset="my/eval") is named and named.written is view.written
    assert res.why() == view.why and res.unmet() == list(view.unmet)
    assert res.next_steps("my/eval") == list(named.next_steps)
    commands = [c for _, cmds in named.next_steps for c in cmds]
    assert "ragguard calibrate my/eval --rerank CROSS_ENCODER" in commands
    assert not any("my/eval" in c for _, cmds in view.next_steps for c in cmds)
    # another run's view names that run's setting
    other = next(r for r in res.runs if r is not res.recommended)
    assert res.view(other).run is other and res.view(other).written.run is other
    # a view is of the run given, not of another one of the same name
    twin = replace(res.recommended, fallback="worse on the held-out queries")
    assert res.view(twin).run is twin and "worse on the held-out queries" in res.why(twin)
    assert res.view() is view and "worse on the held-out queries" not in view.why


def test_every_output_says_what_the_view_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shown = str(NOTES)
    console = runner.invoke(app, ["calibrate", shown, "--out", "a.toml", "--report", "rep"])
    assert console.exit_code == 0, console.output
    as_json = runner.invoke(app, ["calibrate", shown, "--json", "--no-report", "--out", "b.toml"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    provenance = tomllib.loads((tmp_path / "a.toml").read_text())["provenance"]
    report = " ".join((tmp_path / "rep" / "report.md").read_text().split())
    text = _flat(console.stdout)

    # the view, built independently by the library on the same data and options
    res = calibrate(load_inputs(NOTES), constraints=["evidence_coverage>=0.9"])
    view = res.view(evalset=shown)
    r, w = view.run, view.written

    # what the config holds
    assert provenance["setting"] == doc["recommended"]["setting"] == w.setting
    assert f"Chosen: run {r.name} with {w.setting} (score_kind" in text
    assert f"**Run `{r.name}`: {w.setting}**" in report
    # why, what it is checked against, and what is unmet
    assert doc["recommended"]["why"] == view.why and f"Why: {view.why}." in text
    assert f"Why: {view.why}." in report
    assert doc["recommended"]["baseline"]["setting"] == provenance["baseline"] == view.baseline
    assert doc["objective_text"] == view.objective and f"objective: {view.objective};" in text
    assert view.unmet == () and "shortfall" not in provenance and "not met:" not in text

    # the held-out check: each verdict is the one its interval gives
    rows = doc["heldout_check"]["metrics"]
    assert list(rows) == [x.metric for x in view.check.rows]
    for row in view.check.rows:
        d = rows[row.metric]["difference"]
        low, high = (math.nan if d[k] is None else d[k] for k in ("low", "high"))
        assert rows[row.metric]["verdict"] == row.verdict == _verdict(row.metric, low, high)
        assert provenance["heldout_check"][row.metric].startswith(f"{row.baseline.mean:.4f} -> ")
        assert f"| {row.metric} |" in report and f"| {row.verdict} |" in report

    # the safety band of the tested setting, recomputed from the labels
    held = res.header.heldout_rows
    rate = float(np.nanmean(compute(r.arrays, "distractor_rate", cut=r.chosen_kept)[held]))
    band = safety_band(rate)
    assert view.band is band and doc["recommended"]["safety_band"] == band.value
    assert view.check.bands is not None and view.check.bands[1] is band
    assert f"{view.check.bands[0].value} with plain top-k, {band.value} guarded" in text

    # what the default constraint costs: the same everywhere; the best plain top-k
    # without it, and its held-out mean, recomputed from the labels
    cost, cal = view.cost, res.header.calibration_rows
    assert cost is not None and cost.constraints == "evidence_coverage>=0.9"

    def top(k: int, rows: np.ndarray) -> float:
        cut = np.minimum(r.arrays.n_present, k)
        return float(np.nanmean(compute(r.arrays, "udcg", cut=cut)[rows]))

    by_k = {k: top(k, cal) for k in range(1, r.cap + 1)}
    best_k = max(by_k, key=lambda k: by_k[k])
    assert cost.top_k == f"top-{best_k}" and cost.top_k_value == pytest.approx(by_k[best_k])
    assert cost.free >= cost.top_k_value and cost.free >= cost.best
    assert cost.best == pytest.approx(r.sweep.mean(r.chosen, "udcg"))  # the choice is best
    free = doc["constraint_cost"]
    assert free["constraints"] == cost.constraints and free["worse"] is None
    assert free["top_k_without"] == {"setting": f"top-{best_k}", "objective": cost.top_k_value}
    assert (
        free["best_with"]["objective"] == cost.best
        and free["best_without"]["objective"] == cost.free
    )
    held_top = free["heldout_check"]["metrics"]["udcg"]["baseline"]
    assert held_top == pytest.approx(top(best_k, held))
    assert f"Constraint cost: {cost.line()}." in text
    assert "## What the constraints cost" in report and cost.line()[1:] in report

    # what to try next (RISKY here): the same commands everywhere
    assert band.value == "RISKY" and view.next_steps
    assert [s["command"] for s in doc["recommended"]["next_steps"]] == [
        list(cmds) for _, cmds in view.next_steps
    ]
    assert f"Next: {view.next_steps_intro}:" in text
    for what, commands in view.next_steps:
        assert f"- {what}" in text and what in report
        for command in commands:
            assert command in text and f"`{command}`" in report

    # every run's line: the same settings in the console, --json and the report, and
    # means recomputed from the labels
    assert (
        [x.run for x in view.runs] == [x.name for x in res.runs] == [d["run"] for d in doc["runs"]]
    )
    for line, d, run in zip(view.runs, doc["runs"], res.runs, strict=True):
        assert line.recommended == (run is res.recommended)
        udcg = compute(run.arrays, "udcg", cut=run.written_kept)
        assert line.written_means["udcg"] == pytest.approx(float(np.nanmean(udcg)), abs=1e-12)
        assert d["setting"] == line.written and d["objective"] == pytest.approx(
            line.written_means["udcg"]
        )
        calib = compute(run.arrays, "udcg", cut=run.chosen_kept)[res.header.calibration_rows]
        assert line.chosen_means["udcg"] == pytest.approx(float(np.nanmean(calib)), abs=1e-12)
        mark = " (recommended)" if line.recommended else ""
        assert f"| `{line.run}`{mark} | {line.chosen} |" in report
        assert f"{line.run}{' *' if line.recommended else ''} {line.chosen}" in text
