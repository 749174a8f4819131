"""The metric string registry and evaluate()'s shapes, as ranx users expect them."""

from __future__ import annotations

import math
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest

import ragguard.calibration as calibration
from ragguard.calibration import evaluate
from ragguard.calibration.metrics import ALIASES, METRICS, parse_metric
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
from ragguard.errors import EvalSetError

QRELS = {"q1": {"a": 2, "b": 1, "z": 1}, "q2": {"c": 1}}
RUN = {"q1": {"a": 0.9, "x": 0.8, "b": 0.7}, "q2": {"y": 0.9, "c": 0.2}}


def test_means_and_per_query_shapes() -> None:
    means = evaluate(QRELS, RUN, metrics=["recall@2", "mrr", "udcg"])
    assert list(means) == ["recall@2", "mrr", "udcg"]
    assert means["recall@2"] == pytest.approx((1 / 3 + 1) / 2)
    assert means["mrr"] == pytest.approx((1.0 + 0.5) / 2)
    per = evaluate(QRELS, RUN, metrics="recall@2", per_query=True)
    assert per == {"recall@2": {"q1": pytest.approx(1 / 3), "q2": 1.0}}
    assert all(isinstance(v, float) for v in means.values())
    arrays = arrays_from_dicts(QRELS, RUN)
    assert evaluate(arrays, metrics=["recall@2"]) == {"recall@2": means["recall@2"]}


def test_every_registered_metric_runs_on_edge_data() -> None:
    qrels = {"q1": {"a": 5, "b": 3, "c": 1}, "q2": {}, "q3": {"d": 4}}
    run = {"q1": {"a": 0.9, "c": 0.5, "x": 0.4}, "q2": {"y": 0.3}, "q3": {}}
    names = [*METRICS, *ALIASES, "f1", "f2", "f0.5"]
    for name in names:
        for text in (name, f"{name}@2", f"{name}@50"):
            per = evaluate(qrels, run, metrics=text, per_query=True)[text]
            assert set(per) == {"q1", "q2", "q3"}
            values = np.array(list(per.values()))
            spec = parse_metric(text).spec
            assert spec.may_be_na or np.isfinite(values).all(), text
            assert np.isfinite(values[0]), text  # q1 has everything: always defined


GRADE_RULE = "must be an integer up to 5 (1-5 relevant, 0 not relevant, -1 a known distractor)"


@pytest.mark.parametrize(
    ("grade", "shown"),
    [(math.nan, "nan"), (math.inf, "inf"), (10**400, "1" + "0" * 400), (Decimal("2.5"), "2.5"),
     (6, "6"), (5.5, "5.5")],
)  # fmt: skip
@pytest.mark.parametrize("scores_ok", [True, False])
def test_a_bad_grade_in_dicts_is_the_readers_error_whatever_else_fails(
    grade: object, shown: str, scores_ok: bool
) -> None:
    """Dicts are converted before their grades are checked (one walk over them), yet a
    grade the readers' rule rejects is still that rule's error, naming query and
    document, also when the conversion itself fails on it (NaN, inf, an int too large
    for a float) or on a score that is not a number."""
    qrels = {"q1": {"a": 1}, "q2": {"b": 0, "d7": grade}}
    run = {"q1": {"a": 0.9}, "q2": {"b": 0.5, "d7": 0.4 if scores_ok else "x"}}
    with pytest.raises(EvalSetError) as info:
        evaluate(qrels, run, ["ndcg@3"])  # type: ignore[dict-item]
    assert (
        str(info.value)
        == f"qrels table: the grade {GRADE_RULE}, got {shown} (query 'q2', document 'd7')"
    )


def test_good_grades_of_any_numeric_type_pass_the_deferred_check() -> None:
    """Whole floats, Decimals, negative grades and bools are grades the rule accepts."""
    qrels = {"q1": {"a": 2.0, "b": Decimal(1), "c": -1, "d": True}}
    ints = {"q1": {"a": 2, "b": 1, "c": -1, "d": 1}}
    run = {"q1": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}}
    metrics = ["ndcg@3", "recall@4", "map"]
    assert evaluate(qrels, run, metrics) == evaluate(ints, run, metrics)  # type: ignore[arg-type]


def test_metric_syntax() -> None:
    p = parse_metric("nDCG@10")
    assert (p.spec.name, p.k, p.params) == ("ndcg", 10, {})
    p = parse_metric("udcg(gamma=0.333)@5")
    assert (p.spec.name, p.k, p.params) == ("udcg", 5, {"gamma": 0.333})
    p = parse_metric("ra_nwg(alpha=0, cap3=0.5)")
    assert p.params == {"alpha": 0, "cap3": 0.5} and p.k is None
    assert parse_metric("f2@10").params == {"beta": 2.0}
    assert parse_metric("%proc@5").spec.name == "pct_proc"
    assert parse_metric("hit@10").spec.name == "hit_rate"
    assert parse_metric("n_recall4+@5").spec.name == "n_recall_4plus"
    assert METRICS["udcg"].params == ("gamma",)
    assert METRICS["ndcg"].summary.startswith("Normalised discounted cumulative gain")


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("bleu@10", r"unknown metric 'bleu@10'; known metrics: distractor_harm, "),
        ("ndcg@0", "must be >= 1"),
        ("ndcg@x", "cannot parse metric"),
        ("udcg(lambda=1)", r"unknown parameter 'lambda' \(allowed: gamma\)"),
        ("udcg(gamma)", "parameters are written name=value"),
        ("udcg(gamma=high)", "is not a number"),
        ("udcg(gamma=nan)", "is not finite"),
        ("ndcg(gamma=1)@5", r"allowed: none"),
    ],
)
def test_metric_string_errors(text: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        evaluate(QRELS, RUN, metrics=text)


def test_argument_errors() -> None:
    with pytest.raises(TypeError, match="pass the run too"):
        evaluate(QRELS, metrics="ndcg")
    with pytest.raises(TypeError, match="takes an EvalSet, EvalArrays or qrels"):
        evaluate([1, 2], RUN, metrics="ndcg")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="carry their run, profile and rules"):
        evaluate(arrays_from_dicts(QRELS, RUN), metrics="ndcg", profile="medical")


def test_public_api_is_sorted_complete_and_lazy() -> None:
    # sorted as ruff's RUF022 keeps it: constants first, then the rest alphabetically
    order = sorted(calibration.__all__, key=lambda n: (not n.isupper(), n))
    assert list(calibration.__all__) == order
    for name in calibration.__all__:
        assert hasattr(calibration, name), name
    code = "import sys, ragguard; print([m for m in sys.modules if 'calibration' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert "EvalSetError" in __import__("ragguard").__all__
