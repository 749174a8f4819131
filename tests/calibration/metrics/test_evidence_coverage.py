"""Evidence coverage: a hand-computed eval set, a brute-force loop over random data, the
prefix table the sweep reads, and the need it asks of each query (one passage, the
data's ``needs``, or ``needs=N`` for every query)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics import compute, parse_metric
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
from ragguard.calibration.metrics.tables import prefix_table
from ragguard.errors import ConfigError
from tests.calibration.conftest import random_trec_data

LINES = [
    # three relevant candidates, the first at rank 1
    {"query_id": "q1", "relevant": ["a", "c", "d"],
     "candidates": [{"id": i, "score": s} for i, s in zip("abcd", (4, 3, 2, 1), strict=True)]},
    # the one relevant candidate at rank 2
    {"query_id": "q2", "relevant": ["y"],
     "candidates": [{"id": i, "score": s} for i, s in zip("xyz", (3, 2, 1), strict=True)]},
    # unanswerable: judged, nothing relevant
    {"query_id": "q3", "not_relevant": ["u"],
     "candidates": [{"id": "u", "score": 2}, {"id": "v", "score": 1}]},
    # needs two of its three relevant candidates (ranks 1, 3, 4)
    {"query_id": "q4", "relevant": ["p", "q", "r"], "needs": 2,
     "candidates": [{"id": i, "score": s} for i, s in zip("psqr", (4, 3, 2, 1), strict=True)]},
    # needs five, has one relevant candidate: needs all it has
    {"query_id": "q5", "relevant": ["m", "gone"], "needs": 5,
     "candidates": [{"id": "m", "score": 2}, {"id": "o", "score": 1}]},
]  # fmt: skip


@pytest.fixture
def hand(tmp_path: Path) -> EvalArrays:
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in LINES), encoding="utf-8")
    ev = load_evalset(path)
    return ev.arrays()


def at(arrays: EvalArrays, metric: str, size: int) -> list[float]:
    return compute(arrays, metric, cut=np.full(arrays.n_queries, size)).tolist()


def test_coverage_by_hand(hand: EvalArrays) -> None:
    nan = float("nan")
    np.testing.assert_equal(at(hand, "evidence_coverage", 1), [1, 0, nan, 0, 1])
    np.testing.assert_equal(at(hand, "evidence_coverage", 2), [1, 1, nan, 0, 1])
    np.testing.assert_equal(at(hand, "evidence_coverage", 3), [1, 1, nan, 1, 1])
    # recall asks for every relevant candidate: q1 and q4 reach it only at size 4
    np.testing.assert_allclose(at(hand, "evidence_recall", 3), [2 / 3, 1, nan, 2 / 3, 1])
    # needs=2 for every query replaces the data's needs (q4: 2, q5: 5 -> its 1)
    np.testing.assert_equal(at(hand, "evidence_coverage(needs=2)", 1), [0, 0, nan, 0, 1])
    np.testing.assert_equal(at(hand, "evidence_coverage(needs=2)", 3), [1, 1, nan, 1, 1])
    np.testing.assert_equal(at(hand, "evidence_coverage(needs=3)", 3), [0, 1, nan, 0, 1])


def test_the_needs_field_reaches_the_arrays(hand: EvalArrays) -> None:
    assert hand.n_needed.tolist() == [0, 0, 0, 2, 5]
    assert hand.row_slice(3, 5).n_needed.tolist() == [2, 5]


def brute_force(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    size: int,
    needs: dict[str, int],
) -> list[float]:
    """Per query: the first ``size`` candidates by score hold min(need, relevant
    candidates) relevant ones; NaN without a relevant candidate."""
    out = []
    for q, grades in qrels.items():
        ranked = sorted(run[q], key=lambda d: -run[q][d])
        relevant = [d for d in ranked if grades.get(d, 0) >= 1]
        if not relevant:
            out.append(float("nan"))
            continue
        kept = sum(1 for d in ranked[:size] if grades.get(d, 0) >= 1)
        out.append(float(kept >= min(needs.get(q, 1), len(relevant))))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_coverage_is_the_brute_force_loop_and_its_prefix_table(seed: int) -> None:
    qrels, run = random_trec_data(seed)
    arrays = arrays_from_dicts(qrels, run)
    rng = np.random.default_rng(seed)
    stated = rng.integers(0, 4, size=arrays.n_queries)  # 0: not stated
    own = replace(arrays, n_needed=stated.astype(np.intp))
    cols = arrays.shape[1] + 2
    cases = [
        (arrays, "evidence_coverage", dict.fromkeys(qrels, 1)),
        (arrays, "evidence_coverage(needs=3)", dict.fromkeys(qrels, 3)),
        (own, "evidence_coverage", {q: int(n) or 1 for q, n in zip(qrels, stated, strict=True)}),
        (own, "evidence_coverage(needs=2)", dict.fromkeys(qrels, 2)),
    ]
    for arr, metric, needs in cases:
        table = prefix_table(arr, parse_metric(metric), cols)
        assert table is not None
        for size in range(cols):
            expected = brute_force(qrels, run, size, needs)
            np.testing.assert_equal(at(arr, metric, size), expected)
            np.testing.assert_equal(table[:, size], expected)
    assert np.isnan(at(arrays, "evidence_coverage", 0)).any()  # NA rows occur


@pytest.mark.parametrize("needs", ["0", "-1", "1.5"])
def test_a_need_that_is_not_a_positive_whole_number_is_refused(
    hand: EvalArrays, needs: str
) -> None:
    with pytest.raises(ConfigError, match=rf"needs must be a whole number >= 1, got {needs}"):
        compute(hand, f"evidence_coverage(needs={needs})")


def test_on_silver_labels_evidence_recall_is_coverage_where_a_query_has_one_source(
    tmp_path: Path,
) -> None:
    # what the report says of silver labels: with one source passage, --min-recall X
    # (mean evidence recall) asks what evidence_coverage>=X asks; the RAGAS testset's q3
    # was written from two passages (doc3, doc4), where they differ
    ragas = Path(__file__).resolve().parents[2] / "data" / "ragas"
    ranked = {"q1": "doc2 doc1", "q2": "doc2 doc5", "q3": "doc3 doc6 doc4", "q4": "doc1 doc6"}
    lines = [
        f"{q} Q0 {d} {r} {1 - r / 10} run"
        for q, docs in ranked.items()
        for r, d in enumerate(docs.split(), 1)
    ]
    (tmp_path / "run.trec").write_text("\n".join(lines) + "\n")
    arrays = load_evalset(ragas / "testset.jsonl", runs=tmp_path / "run.trec").arrays()
    for size in (1, 2, 3):
        recall = at(arrays, "evidence_recall", size)
        coverage = at(arrays, "evidence_coverage", size)
        np.testing.assert_equal([recall[i] for i in (0, 1, 3)], [coverage[i] for i in (0, 1, 3)])
    assert (at(arrays, "evidence_recall", 1)[2], at(arrays, "evidence_coverage", 1)[2]) == (0.5, 1)
    assert at(arrays, "evidence_coverage", 1)[:2] == [0, 1]  # doc1 at rank 2; doc2 first
