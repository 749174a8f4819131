"""Classic metrics against pytrec_eval (primary oracle) and ranx, to 1e-12.

Random runs use distinct float32-exact scores, so every tool ranks alike; they include
queries with no relevant document, lists shorter than the cutoff (and empty ones) and
relevant documents that were not retrieved (the tests check that those cases occur).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from ragguard.calibration import evaluate
from ragguard.calibration.metrics import compute, f_beta, precision, recall
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
from tests.calibration.conftest import random_trec_data

pytrec_eval = pytest.importorskip("pytrec_eval")

SEEDS = [0, 1, 2]
TOL = 1e-12


@pytest.fixture(scope="module")
def ranx() -> ModuleType:
    """ranx with its numba kernels compiled once for this module (tens of seconds on a
    fresh machine)."""
    mod = pytest.importorskip("ranx")
    q, r = random_trec_data(99, n_queries=3)
    mod.evaluate(mod.Qrels(q), mod.Run(r), ["ndcg_burges@5", "f1@5", "ndcg@5", "mrr@5"])
    return mod


def _per_query_trec(qrels: Any, run: Any, measures: set[str]) -> dict[str, dict[str, float]]:
    result: dict[str, dict[str, float]] = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(
        run
    )
    return result


def _top(run: dict[str, dict[str, float]], k: int) -> dict[str, dict[str, float]]:
    return {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:k]) for q, d in run.items()}


def test_random_data_covers_the_edge_cases() -> None:
    qrels, run = random_trec_data(0)
    no_relevant = [q for q, g in qrels.items() if not any(v >= 1 for v in g.values())]
    short = [q for q, d in run.items() if len(d) < 10]
    empty = [q for q, d in run.items() if not d]
    unretrieved = [
        q for q, g in qrels.items() if any(v >= 1 and d not in run[q] for d, v in g.items())
    ]
    assert no_relevant and short and empty and unretrieved


PAIRS_AT_K = [
    ("precision@{k}", "P_{k}"),
    ("recall@{k}", "recall_{k}"),
    ("ndcg@{k}", "ndcg_cut_{k}"),
    ("map@{k}", "map_cut_{k}"),
    ("hit_rate@{k}", "success_{k}"),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("k", [1, 5, 10, 30])
def test_cutoff_metrics_equal_pytrec_eval(seed: int, k: int) -> None:
    qrels, run = random_trec_data(seed)
    measures = {theirs.format(k=k) for _, theirs in PAIRS_AT_K}
    ref = _per_query_trec(qrels, run, measures)
    ours = evaluate(qrels, run, [m.format(k=k) for m, _ in PAIRS_AT_K], per_query=True)
    assert set(ref) == set(qrels)  # pytrec_eval scored every query
    for mine, theirs in PAIRS_AT_K:
        for qid, values in ref.items():
            assert ours[mine.format(k=k)][qid] == pytest.approx(
                values[theirs.format(k=k)], abs=TOL
            ), (mine, qid)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("k", [1, 3, 10])
def test_mrr_at_k_equals_recip_rank_of_the_run_cut_at_k(seed: int, k: int) -> None:
    qrels, run = random_trec_data(seed)
    ref = _per_query_trec(qrels, _top(run, k), {"recip_rank"})
    ours = evaluate(qrels, run, f"mrr@{k}", per_query=True)[f"mrr@{k}"]
    for qid, values in ref.items():
        assert ours[qid] == pytest.approx(values["recip_rank"], abs=TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_whole_list_metrics_equal_pytrec_eval(seed: int) -> None:
    qrels, run = random_trec_data(seed)
    pairs = [
        ("ndcg", "ndcg"),
        ("map", "map"),
        ("mrr", "recip_rank"),
        ("precision", "set_P"),
        ("recall", "set_recall"),
    ]
    ref = _per_query_trec(qrels, run, {t for _, t in pairs})
    ours = evaluate(qrels, run, [m for m, _ in pairs], per_query=True)
    for mine, theirs in pairs:
        for qid, values in ref.items():
            assert ours[mine][qid] == pytest.approx(values[theirs], abs=TOL), (mine, qid)


def test_queries_without_any_label_score_zero_and_count_in_the_mean() -> None:
    # pytrec_eval drops a query whose qrels are empty; ragguard (like ranx) scores it 0
    qrels = {"a": {"d1": 1}, "b": {}}
    run = {"a": {"d1": 0.9, "d2": 0.1}, "b": {"d3": 0.5}}
    assert set(_per_query_trec(qrels, run, {"P_1"})) == {"a"}
    assert evaluate(qrels, run, ["precision@1", "ndcg@1"]) == {"precision@1": 0.5, "ndcg@1": 0.5}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("k", [3, 10])
def test_exponential_ndcg_and_f1_equal_ranx(ranx: ModuleType, seed: int, k: int) -> None:
    qrels, run = random_trec_data(seed)
    names = [f"ndcg_burges@{k}", f"f1@{k}", f"ndcg@{k}", f"mrr@{k}", f"map@{k}", f"recall@{k}"]
    per_query = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), names, return_mean=False)
    ranx_qids = list(ranx.Qrels(qrels).keys())
    assert ranx_qids == list(qrels)
    ours = evaluate(qrels, run, names, per_query=True)
    for name in names:
        theirs = dict(zip(ranx_qids, np.asarray(per_query[name]).tolist(), strict=True))
        for qid, value in theirs.items():
            assert ours[name][qid] == pytest.approx(value, abs=TOL), (name, qid)


def test_whole_list_f1_and_exponential_ndcg_equal_ranx(ranx: ModuleType) -> None:
    qrels, run = random_trec_data(5)
    names = ["f1", "ndcg_burges"]
    per_query = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), names, return_mean=False)
    ranx_qids = list(ranx.Qrels(qrels).keys())
    assert ranx_qids == list(qrels)
    ours = evaluate(qrels, run, names, per_query=True)
    for name in names:
        for qid, value in zip(ranx_qids, np.asarray(per_query[name]).tolist(), strict=True):
            assert ours[name][qid] == pytest.approx(value, abs=TOL), (name, qid)


def test_f_beta_by_hand() -> None:
    # 10 candidates, relevant at ranks 1, 4 and 7; one more relevant document unretrieved
    run = {"q": {f"d{i}": 10.0 - i for i in range(1, 11)}}
    qrels = {"q": {"d1": 1, "d4": 2, "d7": 1, "d99": 1}}
    arrays = arrays_from_dicts(qrels, run)
    # at k = 5: 2 relevant retrieved, P = 2/5, R = 2/4
    p, r = 2 / 5, 2 / 4
    assert precision(arrays, 5)[0] == pytest.approx(p, abs=TOL)
    assert recall(arrays, 5)[0] == pytest.approx(r, abs=TOL)
    for beta in (0.5, 1.0, 2.0):
        expected = (1 + beta**2) * p * r / (beta**2 * p + r)
        assert f_beta(arrays, 5, beta=beta)[0] == pytest.approx(expected, abs=TOL)
    assert compute(arrays, "f2@5")[0] == pytest.approx(5 * p * r / (4 * p + r), abs=TOL)
    assert compute(arrays, "f0.5@5")[0] == pytest.approx(1.25 * p * r / (0.25 * p + r), abs=TOL)
    assert compute(arrays, "f_beta(beta=3)@5")[0] == pytest.approx(10 * p * r / (9 * p + r))
    # F2 weighs recall: at k = 10 (P = 0.3, R = 0.75) it beats F0.5
    assert compute(arrays, "f2@10")[0] > compute(arrays, "f0.5@10")[0]
    # nothing relevant retrieved: P = R = 0 -> 0, not NaN
    assert f_beta(arrays_from_dicts({"q": {"x": 1}}, run), 5)[0] == 0.0


def test_f_beta_rejects_bad_beta() -> None:
    arrays = arrays_from_dicts({"q": {"a": 1}}, {"q": {"a": 1.0}})
    for beta in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="beta"):
            f_beta(arrays, 5, beta=beta)
