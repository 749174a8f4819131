"""``Calibrator(option objects).fit(evalset)``: the same calibration as
``calibrate(evalset, **keywords)``, its options checked when built, the caller's
objects untouched."""

from __future__ import annotations

import json
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import (
    Answerability,
    CalibrationResult,
    Calibrator,
    Check,
    Constraint,
    Guarantee,
    RerankGrid,
    RerankSearch,
    Search,
    Split,
    Stages,
    UtilityRules,
    calibrate,
    load_evalset,
)
from ragguard.calibration.report.summary import result_document
from ragguard.errors import ArgumentTypeError, ConfigError
from ragguard.policy import ConflictMode
from tests.calibration.answerability_data import random_rows, write_jsonl
from tests.calibration.two_stage_data import make_data, oracle

ROOT = Path(__file__).resolve().parents[3]
NOTES = ROOT / "examples" / "notes" / "evalset.jsonl"


def _without_dates(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_dates(v) for k, v in value.items() if k != "created"}
    if isinstance(value, list):
        return [_without_dates(v) for v in value]
    return value


def _same(a: CalibrationResult, b: CalibrationResult) -> None:
    """Two results say and write the same: the ``--json`` document and the config."""
    da = _without_dates(result_document(a, config_path="c.toml", evalset="e"))
    db = _without_dates(result_document(b, config_path="c.toml", evalset="e"))
    assert json.dumps(da, sort_keys=True) == json.dumps(db, sort_keys=True)
    ca = _without_dates(a.config().model_dump(mode="json"))
    cb = _without_dates(b.config().model_dump(mode="json"))
    assert ca == cb
    assert [r.written for r in a.runs] == [r.written for r in b.runs]


@pytest.fixture(scope="module")
def notes() -> Any:
    runs = sorted((ROOT / "examples" / "notes" / "runs").glob("*.trec"))
    return load_evalset(NOTES, runs=runs)


def test_calibrate_forwards_every_option_and_fits_the_same_twice(notes: Any) -> None:
    keywords: dict[str, Any] = {
        "objective": "utility",
        "constraints": ["distractor_rate<=0.6", "evidence_recall>=0.7"],
        "profile": "medical",
        "rules": UtilityRules(relevant_grade=1),
        "search": Search(max_k=6),
        "split": Split(holdout=0.4, seed=3, folds=3),
        "check": Check(n_bootstrap=200, level=0.9, baseline_k=3, on_worse="stop"),
    }
    calibrator = Calibrator(
        objective="utility",
        constraints=["distractor_rate<=0.6", "evidence_recall>=0.7"],
        profile="medical",
        rules=UtilityRules(relevant_grade=1),
        search=Search(max_k=6),
        split=Split(holdout=0.4, seed=3, folds=3),
        check=Check(n_bootstrap=200, level=0.9, baseline_k=3, on_worse="stop"),
    )
    fitted = calibrator.fit(notes)
    _same(fitted, calibrate(notes, **keywords))
    assert fitted.header.holdout == 0.4 and fitted.header.seed == 3 and fitted.folds == 3
    assert fitted.header.on_worse == "stop" and fitted.header.profile.name == "medical"
    assert [str(c) for c in fitted.header.constraints] == [
        "distractor_rate<=0.6",
        "evidence_recall>=0.7",
    ]


def test_a_guarantee_option_reaches_the_result(notes: Any) -> None:
    fitted = Calibrator(
        guarantee=Guarantee(recall=0.8, confidence=0.9), check=Check(n_bootstrap=100)
    ).fit(notes)
    assert fitted.header.target == 0.8 and fitted.header.confidence == 0.9
    assert Guarantee.parse("recall>=0.8", 0.9) == Guarantee(recall=0.8, confidence=0.9)


def test_calibrate_forwards_the_fit_arguments_and_a_second_stage() -> None:
    es, texts, _ = make_data()
    grid = RerankGrid(top_n=(3, 6))
    stages = Stages(max_tokens=40, conflicts=("off", "drop"))
    fitted = Calibrator(
        constraints=["evidence_recall>=0.5"],
        search=Search(max_k=5),
        split=Split(folds=2),
        check=Check(n_bootstrap=100),
        stages=stages,
        rerank=RerankSearch(reranker=oracle, grid=grid, cache_dir=None),
    ).fit(es, passages=texts)
    called = calibrate(
        es,
        constraints=["evidence_recall>=0.5"],
        search=Search(max_k=5),
        split=Split(folds=2),
        check=Check(n_bootstrap=100),
        stages=Stages(max_tokens=40, conflicts=("off", "drop")),
        rerank=RerankSearch(reranker=oracle, grid=grid, cache_dir=None),
        passages=texts,
    )
    _same(fitted, called)
    assert fitted.rerank is not None and fitted.stage_settings == called.stage_settings


def test_an_answerability_option_reaches_the_result(tmp_path: Path) -> None:
    es = load_evalset(write_jsonl(tmp_path / "eval.jsonl", random_rows(1)))
    fitted = Calibrator(
        constraints=["evidence_recall>=0.5"],
        check=Check(n_bootstrap=100),
        answerability=Answerability(max_false_abstain=0.2, confidence=0.9),
    ).fit(es)
    assert fitted.answerability is not None


def test_options_are_frozen_and_checked_before_any_data(notes: Any) -> None:
    split = Split(holdout=0.2)
    with pytest.raises(AttributeError):
        split.holdout = 0.5  # type: ignore[misc]
    calibrator = Calibrator(constraints=["evidence_recall>=0.8"], split=split)
    # the strings are parsed once, when built
    assert calibrator.constraints == (Constraint("evidence_recall", ">=", 0.8),)
    # a bad value never reaches fit: ConfigError naming it, one line
    with pytest.raises(ConfigError, match=r"^holdout must be a fraction in \[0, 1\), got 1.5$"):
        Calibrator(split=Split(holdout=1.5))
    # defaults are the calibrate() defaults
    assert Calibrator() == Calibrator(
        objective="udcg", search=Search(), split=Split(holdout=0.3, seed=0, folds=5),
        check=Check(n_bootstrap=2000, level=0.95, baseline_k=None, on_worse="top-k"),
        stages=Stages(),
    )  # fmt: skip


def test_fit_reads_no_ragguard_variables(
    notes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """RAGGUARD_* variables configure a runtime guard: a calibration with them set writes
    what one without them writes (no min_evidence 0.99, no conflicts "drop" that nothing
    measured), and a warning names them (issue 41, CB-83)."""
    for name in [k for k in os.environ if k.upper().startswith("RAGGUARD_")]:
        monkeypatch.delenv(name)
    calibrator = Calibrator(check=Check(n_bootstrap=100))
    clean = calibrator.fit(notes)
    monkeypatch.setenv("RAGGUARD_MIN_EVIDENCE", "0.99")
    monkeypatch.setenv("RAGGUARD_CONFLICTS", "drop")
    with caplog.at_level(logging.WARNING, logger="ragguard"):
        fitted = calibrator.fit(notes)
    _same(fitted, clean)
    config = fitted.config()
    assert (config.min_evidence, config.conflicts) == (None, ConflictMode.OFF)
    assert config.source_of("min_evidence") == "default"
    raw = tomllib.loads(fitted.save_config(tmp_path / "cfg.toml").read_text())
    assert "min_evidence" not in raw and raw["conflicts"] == "off"
    (warned,) = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert warned.startswith("RAGGUARD_CONFLICTS, RAGGUARD_MIN_EVIDENCE not read: calibration")


@pytest.mark.parametrize("given", ["examples/ramdocs/evalset.jsonl", NOTES, None])
def test_fit_of_what_is_not_an_eval_set_says_load_it_first(given: Any) -> None:
    """A path (or None) where the EvalSet belongs: one line saying how to load it (issue
    41, CB-73, CB-74), not AttributeError: 'str' object has no attribute 'runs'."""
    with pytest.raises(ArgumentTypeError) as caught:
        Calibrator().fit(given)
    message = str(caught.value)
    assert "fit(load_evalset(path))" in message and "load_inputs" in message
    assert "\n" not in message
    assert ("NoneType" if given is None else repr(str(given))) in message


def test_fit_leaves_the_eval_set_and_the_options_as_they_were() -> None:
    es, texts, _ = make_data()
    constraints = ["evidence_recall>=0.5"]
    calibrator = Calibrator(constraints=constraints, check=Check(n_bootstrap=50))
    before = (es.qids, dict(es.runs), repr(calibrator))
    calibrator.fit(es, passages=texts)
    assert (es.qids, dict(es.runs), repr(calibrator)) == before
    assert constraints == ["evidence_recall>=0.5"]
    doc = next(iter(texts))
    assert es.texts.get(doc.split("-")[0], doc) is None  # the texts went to a copy
