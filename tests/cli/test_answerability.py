"""``ragguard calibrate --max-false-abstain``: unanswerable queries counted after loading,
``min_evidence`` written to the config, the console, ``--json`` and the report, on real
files; ``evaluate`` and ``compare`` still read such an eval set."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from ragguard import ContextGuard, GuardConfig, Verdict
from ragguard.calibration import evaluate, load_evalset
from tests.calibration.answerability_data import (
    candidates_of,
    random_rows,
    unanswerable_only,
    write_jsonl,
)
from tests.cli.checks import error_line, invoke


@pytest.fixture
def evalset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_jsonl(tmp_path / "eval.jsonl", random_rows(0))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_calibrate_writes_min_evidence_and_says_what_it_does(evalset: Path, tmp_path: Path) -> None:
    res = invoke("calibrate", evalset, "--max-false-abstain", "0.1", "--report", "rep")
    assert res.exit_code == 0, res.output
    text = flat(res.stdout)
    assert "160 queries (40 unanswerable: judged, none relevant)" in text
    assert "Answerability: min_evidence" in text
    assert "at most 0.1 of answerable new queries abstain, with probability >= 95%" in text
    assert re.search(
        r"held-out check of min_evidence [0-9.]+ \(95% intervals\): catches "
        r"[0-9.]+ \[[0-9.]+, [0-9.]+\] of the 11 held-out unanswerable",
        text,
    ), text
    config = GuardConfig.from_file(tmp_path / "ragguard.toml")
    raw = tomllib.loads((tmp_path / "ragguard.toml").read_text())
    floor = raw["min_evidence"]
    assert config.min_evidence == floor == raw["provenance"]["answerability"]["min_evidence"]
    assert f"min_evidence {floor:g} on the normalised retrieval score" in text
    assert raw["provenance"]["queries"]["unanswerable"] == 40
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "## Answerability (min_evidence)" in report and f"`min_evidence = {floor:g}`" in report
    assert "unanswerable" in (tmp_path / "rep" / "report.html").read_text()
    # the config as `config show` reads it
    shown = invoke("config", "show", tmp_path / "ragguard.toml")
    assert shown.exit_code == 0 and "min_evidence" in shown.stdout
    # the guard it configures abstains on what the held-out check counted as caught
    records = {r["query_id"]: r for r in random_rows(0)}
    guard = ContextGuard(config)
    abstained = {
        q for q, r in records.items()
        if guard.select(r["query"], candidates_of(r)).verdict is Verdict.INSUFFICIENT
    }  # fmt: skip
    assert abstained and all(
        max(c.score for c in candidates_of(records[q])) < floor for q in abstained
    )


def test_calibrate_json_carries_the_floor_and_the_shares(evalset: Path, tmp_path: Path) -> None:
    res = invoke(
        "calibrate", evalset, "--max-false-abstain", "0.1", "--no-report", "--json",
        "--out", "g.toml",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    a = doc["answerability"]
    assert doc["queries"]["unanswerable"] == 40
    assert a["met"] is True and a["min_evidence"] == doc["recommended"]["config"]["min_evidence"]
    assert a["min_evidence"] == tomllib.loads((tmp_path / "g.toml").read_text())["min_evidence"]
    check = a["check"]
    assert check["split"] == "held-out" and check["unanswerable"] == 11
    for share in (check["caught"], check["lost"]):
        assert 0 <= share["low"] <= share["mean"] <= share["high"] <= 1
    assert a["calibration"]["lost"] <= 0.1
    assert set(a["effect"]) >= {"udcg", "evidence_recall"}


def test_without_the_option_no_floor_is_written(evalset: Path, tmp_path: Path) -> None:
    res = invoke("calibrate", evalset, "--no-report", "--json", "--out", "g.toml")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["answerability"] is None
    raw = tomllib.loads((tmp_path / "g.toml").read_text())
    assert "min_evidence" not in raw and "answerability" not in raw["provenance"]


def test_evaluate_and_compare_count_unanswerable_queries(evalset: Path) -> None:
    for command in ("evaluate", "compare"):
        res = invoke(command, evalset)
        assert res.exit_code == 0, res.output
        assert "160 queries (40 unanswerable: judged, none relevant)" in flat(res.stdout)
    res = invoke("evaluate", evalset, "--metrics", "udcg@3,recall@3", "--json")
    assert res.exit_code == 0, res.output
    expected = evaluate(load_evalset(evalset), metrics=["udcg@3", "recall@3"])
    assert json.loads(res.stdout)["default"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--max-false-abstain", "1"], "--max-false-abstain (max_false_abstain) must be a share"),
        (["--max-false-abstain", "0"], "must be a share in (0, 1), got 0.0"),
        (["--max-false-abstain", "nan"], "must be a share in (0, 1), got nan"),
        (["--max-false-abstain", "0.1", "--guarantee", "recall>=0.9"], "--guarantee"),
    ],
)
def test_bad_uses_are_one_line(evalset: Path, tmp_path: Path, extra: list[str], named: str) -> None:
    line = error_line(invoke("calibrate", evalset, "--no-report", "--out", "x.toml", *extra))
    assert named in line, line
    assert not (tmp_path / "x.toml").exists()


def test_no_certified_floor_writes_nothing_unless_allowed(tmp_path: Path) -> None:
    """28 answerable queries cannot certify 0.1 at 95% (29 needed): calibrate exits 1 with
    the shortfall, or writes the config without min_evidence under --allow-unmet."""
    records = [
        {"query_id": f"a{i:02d}", "relevant": ["top"], "not_relevant": ["low"],
         "candidates": [{"id": "top", "score": 0.9}, {"id": "low", "score": 0.4}]}
        for i in range(28)
    ] + [
        {"query_id": f"u{i}", "relevant": [], "not_relevant": ["x"],
         "candidates": [{"id": "x", "score": 0.3 + i / 10}]}
        for i in range(3)
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "small.jsonl", records)
    args = ["calibrate", path, "--max-false-abstain", "0.1", "--holdout", "0", "--no-report",
            "--min-recall", "0", "--out", tmp_path / "s.toml"]  # fmt: skip
    line = error_line(invoke(*args))
    assert "no config written: no min_evidence floor keeps" in line
    assert "at least 29 answerable calibration queries are needed" in line
    assert not (tmp_path / "s.toml").exists()
    res = invoke(*args, "--allow-unmet")
    assert res.exit_code == 0, res.output
    raw = tomllib.loads((tmp_path / "s.toml").read_text())
    assert "min_evidence" not in raw
    assert raw["provenance"]["answerability"]["met"] is False


def test_a_set_with_no_answerable_query_is_one_line(tmp_path: Path) -> None:
    """The 101 unanswerable ramdocs queries alone (issue 41, CB-77): the library's check,
    before any sweep, is the command's one line."""
    path = unanswerable_only(tmp_path / "all.jsonl")
    line = error_line(
        invoke("calibrate", path, "--max-false-abstain", "0.1", "--no-report", "--out",
               tmp_path / "cfg.toml")
    )  # fmt: skip
    assert "none of the 101 labelled queries has a relevant passage" in line, line
    assert not (tmp_path / "cfg.toml").exists()
