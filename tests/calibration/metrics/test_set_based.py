"""RA-nWG@K and its diagnostics against the set-based write-up's example and hand cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragguard.calibration import evaluate
from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.metrics import (
    harm,
    n_recall_4plus,
    n_recall_5,
    pct_proc,
    precision_4plus,
    proc,
    ra_nwg,
    rarity_weights,
)

TOL = 1e-12

# The write-up's example: the labelled pool of one query and the K = 4 passages fed to
# the LLM (its grades [4, 3, 3, 3]).
POOL = {"p5": 5, "p4a": 4, "p4b": 4, "p3a": 3, "p3b": 3, "p3c": 3, "p2": 2, "p1": 1}
FED = ["p4a", "p3a", "p3b", "p3c"]


def one_query(ranked: list[str], labels: dict[str, int] = POOL) -> EvalArrays:
    scores = {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}
    return build_arrays(["q"], [scores], [labels])


def test_rarity_weights_of_the_example() -> None:
    counts = np.array([[0, 1, 1, 3, 2, 1]])
    w = rarity_weights(counts)[0]
    # r4 / r5 = (0.5 / 1.0) * (n5 / n4) = 0.25; r3 / r5 = 0.1 * (1 / 3), under both caps
    assert w.tolist() == pytest.approx([0.0, 0.0, 0.0, 0.1 / 3, 0.25, 1.0], abs=TOL)
    # alpha = 0: no rarity, base utilities capped
    assert rarity_weights(counts, alpha=0.0)[0, 3:].tolist() == pytest.approx([0.1, 0.5, 1.0])
    # caps bind when 5s are common: n5 = 10, n4 = 1 -> r4/r5 = 5 -> cap4 = 1; r3/r5 = 1 -> 0.25
    capped = rarity_weights(np.array([[0, 0, 0, 1, 1, 10]]))[0]
    assert capped[3:].tolist() == pytest.approx([0.25, 1.0, 1.0])
    assert rarity_weights(np.array([[0, 0, 0, 1, 1, 10]]), cap3=0.1)[0, 3] == pytest.approx(0.1)


def test_no_grade_5_uses_the_fixed_fallback() -> None:
    w = rarity_weights(np.array([[3, 1, 2, 5, 2, 0]]))[0]
    assert w[3:].tolist() == [0.2, 1.0, 1.0]


def test_ra_nwg_of_the_write_up_example() -> None:
    arrays = one_query([*FED, "p2", "p1"])
    # G_obs = 0.25 + 3 * (1/30) = 0.35; G_oracle(4) = 1 + 0.25 + 0.25 + 1/30 = 46/30
    assert ra_nwg(arrays, 4)[0] == pytest.approx(0.35 / (46 / 30), abs=TOL)
    assert ra_nwg(arrays, 4)[0] == pytest.approx(21 / 92, abs=TOL)
    # the pool holds no grade 5: the best 4 of it is what was fed -> PROC = RA-nWG
    assert proc(arrays, 4)[0] == pytest.approx(21 / 92, abs=TOL)
    assert pct_proc(arrays, 4)[0] == pytest.approx(1.0, abs=TOL)


def test_proc_and_pct_proc_separate_retrieval_from_selection() -> None:
    # the grade-5 passage was retrieved, but ranked 6th: selection, not retrieval, failed
    arrays = one_query([*FED, "p2", "p5"])
    assert ra_nwg(arrays, 4)[0] == pytest.approx(21 / 92, abs=TOL)
    pool_best = 1.0 + 0.25 + 2 / 30  # p5, p4a, two 3s
    assert proc(arrays, 4)[0] == pytest.approx(pool_best / (46 / 30), abs=TOL)
    assert pct_proc(arrays, 4)[0] == pytest.approx(0.35 / pool_best, abs=TOL)
    # RA-nWG = PROC x %PROC
    assert ra_nwg(arrays, 4)[0] == pytest.approx(proc(arrays, 4)[0] * pct_proc(arrays, 4)[0])
    # a policy cut to 2 passages shortens the context, not the pool
    cut = np.array([2])
    assert ra_nwg(arrays, 4, cut=cut)[0] == pytest.approx((0.25 + 1 / 30) / (46 / 30), abs=TOL)
    assert proc(arrays, 4, cut=cut)[0] == pytest.approx(proc(arrays, 4)[0], abs=TOL)


def test_recall_precision_and_harm_at_k() -> None:
    arrays = one_query(["p1", "p5", "p4a", "unjudged", "p2", "p3a"])
    # top 4: p1 (1), p5 (5), p4a (4), unjudged
    assert n_recall_4plus(arrays, 4)[0] == pytest.approx(2 / min(4, 3), abs=TOL)
    assert n_recall_5(arrays, 4)[0] == pytest.approx(1.0, abs=TOL)
    assert n_recall_4plus(arrays, 2)[0] == pytest.approx(1 / 2, abs=TOL)  # min(K=2, R=3)
    assert precision_4plus(arrays, 4)[0] == pytest.approx(2 / 4, abs=TOL)
    assert harm(arrays, 4)[0] == pytest.approx(1 / 4, abs=TOL)  # p1; unjudged is not harm
    assert harm(arrays, 6)[0] == pytest.approx(2 / 6, abs=TOL)  # p1, p2
    assert harm(arrays, 6, harm_grade=1)[0] == pytest.approx(1 / 6, abs=TOL)
    assert precision_4plus(arrays, 10)[0] == pytest.approx(2 / 10, abs=TOL)  # divides by K


def test_na_cases_are_nan_and_means_skip_them() -> None:
    labels = [
        {"a": 5, "b": 4},  # defined
        {"c": 2, "d": 1},  # nothing of grade >= 3: RA-nWG, PROC, N-Recall all NA
        {"e": 3},  # no grade >= 4: N-Recall NA; RA-nWG defined (fallback weights)
    ]
    runs = [{"a": 2.0, "x": 1.0}, {"c": 1.0}, {"e": 1.0}]
    arrays = build_arrays(["q1", "q2", "q3"], runs, labels)
    r = ra_nwg(arrays, 2)
    assert r[0] == pytest.approx(1.0 / (1.0 + 0.5))  # w4 = min(0.5 * 1/1, 1) = 0.5
    assert math.isnan(r[1])
    assert r[2] == pytest.approx(1.0)
    assert math.isnan(proc(arrays, 2)[1]) and math.isnan(pct_proc(arrays, 2)[1])
    nr = n_recall_4plus(arrays, 2)
    assert nr[0] == pytest.approx(1 / 2) and math.isnan(nr[1]) and math.isnan(nr[2])
    means = evaluate(arrays, metrics=["ra_nwg@2", "n_recall_4plus@2", "n_recall_5@2"])
    assert means["ra_nwg@2"] == pytest.approx((r[0] + r[2]) / 2)  # q2 skipped
    assert means["n_recall_4plus@2"] == pytest.approx(0.5)
    assert means["n_recall_5@2"] == pytest.approx(1.0)
    per = evaluate(arrays, metrics="ra_nwg@2", per_query=True)["ra_nwg@2"]
    assert math.isnan(per["q2"])
    # every query NA: the mean is NaN, not an error or a warning
    only_na = build_arrays(["q"], [{"c": 1.0}], [{"c": 2}])
    assert math.isnan(evaluate(only_na, metrics="ra_nwg@5")["ra_nwg@5"])


def test_pct_proc_is_na_when_nothing_useful_was_retrieved() -> None:
    arrays = one_query(["p2", "p1", "unjudged"])
    assert proc(arrays, 3)[0] == 0.0
    assert math.isnan(pct_proc(arrays, 3)[0])
    assert ra_nwg(arrays, 3)[0] == 0.0


def test_without_k_the_budget_is_the_list_length() -> None:
    arrays = one_query(FED)
    assert ra_nwg(arrays)[0] == pytest.approx(ra_nwg(arrays, 4)[0], abs=TOL)
    # an empty list without a cutoff: K = 0, so the ratios are NA and the shares 0
    empty = build_arrays(["q"], [{}], [POOL])
    assert math.isnan(ra_nwg(empty)[0])
    assert math.isnan(n_recall_4plus(empty)[0])
    assert precision_4plus(empty)[0] == 0.0
    assert harm(empty)[0] == 0.0
    # with a cutoff the budget stays K: an empty list scores 0
    assert ra_nwg(empty, 4)[0] == 0.0
    assert n_recall_4plus(empty, 4)[0] == 0.0


def test_grades_outside_the_rubric_are_rejected() -> None:
    arrays = build_arrays(["q"], [{"a": 1.0}], [{"a": 7}])
    with pytest.raises(ValueError, match="1-5 rubric"):
        ra_nwg(arrays, 5)
    fractional = build_arrays(["q"], [{"a": 1.0}], [{"a": 4.5}])
    with pytest.raises(ValueError, match="integer grades"):
        harm(fractional, 5)
