"""Conversion to dense arrays: ranking and tie rule, labels at the right positions, the
stated number of relevant documents, per-query cuts, and inputs left untouched."""

from __future__ import annotations

import copy
import math
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragguard.calibration import arrays_from_dicts, build_arrays, evaluate
from ragguard.calibration.metrics import ndcg, precision, recall
from ragguard.errors import EvalSetError
from ragguard.policy import PolicyParams, apply_policy, cut_ranked, rank
from ragguard.scores import normalize

TOL = 1e-12

score = st.one_of(
    st.sampled_from([0.1, 0.2, 0.5, 0.9, -0.3, 0.0, -0.0]),  # ties are common
    st.just(math.nan),
    st.floats(-5, 5, allow_nan=False, width=32),
)
query = st.tuples(
    st.lists(st.tuples(st.integers(0, 15), score), max_size=12, unique_by=lambda t: t[0]),
    st.dictionaries(st.integers(0, 20), st.integers(-1, 3), max_size=8),
)


def reference_ranking(scores: list[float], kind: str | None) -> list[int]:
    """Input positions in ranked order, written out: valid scores by normalised value,
    highest first, ties in input order; then invalid ones in input order."""
    norm = normalize(np.array([scores], dtype=np.float64), kind)
    values, valid = norm.values[0].tolist(), norm.valid[0].tolist()
    good = sorted((i for i in range(len(scores)) if valid[i]), key=lambda i: (-values[i], i))
    return good + [i for i in range(len(scores)) if not valid[i]]


@settings(max_examples=120, deadline=None)
@given(st.lists(query, min_size=1, max_size=6), st.sampled_from(["similarity", "distance", None]))
def test_conversion_matches_a_plain_reference(
    queries: list[tuple[list[tuple[int, float]], dict[int, int]]], kind: str | None
) -> None:
    qids = [f"q{i}" for i in range(len(queries))]
    runs = [{f"d{d}": s for d, s in cands} for cands, _ in queries]
    labels = [{f"d{d}": g for d, g in grades.items()} for _, grades in queries]
    arrays = build_arrays(qids, runs, labels, score_kind=kind)
    width = arrays.shape[1]
    for row, (run, lab) in enumerate(zip(runs, labels, strict=True)):
        ids = list(run)
        order = reference_ranking(list(run.values()), kind) if ids else []
        ranked = [ids[i] for i in order]
        assert arrays.doc_ids(row) == ranked
        assert arrays.order[row, : len(ids)].tolist() == order
        expected_grades = [float(lab.get(d, 0)) for d in ranked] + [0.0] * (width - len(ids))
        assert arrays.grades[row].tolist() == expected_grades
        assert arrays.judged[row].tolist() == [d in lab for d in ranked] + [False] * (
            width - len(ids)
        )
        assert arrays.n_present[row] == len(ids)
        raw = arrays.raw[row, : len(ids)].tolist()
        assert all(
            (math.isnan(a) and math.isnan(run[d])) or a == run[d]
            for a, d in zip(raw, ranked, strict=True)
        )
        assert arrays.n_relevant[row] == sum(g >= 1 for g in lab.values())
    # the same order as the runtime policy's rank()
    if width:
        raw_in = np.full((len(qids), width), np.nan)
        present = np.zeros((len(qids), width), dtype=np.bool_)
        for row, run in enumerate(runs):
            raw_in[row, : len(run)] = list(run.values())
            present[row, : len(run)] = True
        norm = normalize(raw_in, kind, present=present)
        policy_order = rank(np.nan_to_num(norm.values), norm.valid, present).order
        for row, run in enumerate(runs):
            assert policy_order[row, : len(run)].tolist() == arrays.order[row, : len(run)].tolist()


listed_score = st.one_of(score, st.just(1e308))  # rrf: 1e308 * (k + 1) is infinite


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.integers(0, 15), listed_score), max_size=12, unique_by=lambda t: t[0]
            ),
            st.dictionaries(st.integers(0, 20), st.integers(-1, 3), max_size=8),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["similarity", "distance", "rrf", None]),
)
def test_runs_listed_best_first_rank_as_the_reference(
    queries: list[tuple[list[tuple[int, float]], dict[int, int], bool]], kind: str | None
) -> None:
    """A run listed in ranked order, as run files and retrievers list it (such rows are
    not sorted again), ranks, scores and labels its candidates as the plain reference
    does, next to rows in any order, whatever the ties and invalid scores; normalised
    scores that overflow (rrf) read as NaN, as in any order."""
    with np.errstate(over="ignore"):  # 1e308 x 61 overflows (a warning)
        check_listed_runs(queries, kind)


def check_listed_runs(
    queries: list[tuple[list[tuple[int, float]], dict[int, int], bool]], kind: str | None
) -> None:
    qids = [f"q{i}" for i in range(len(queries))]
    runs, labels = [], []
    for cands, grades, listed in queries:
        run = {f"d{d}": s for d, s in cands}
        if listed and run:
            ids = list(run)
            run = {ids[i]: run[ids[i]] for i in reference_ranking(list(run.values()), kind)}
        runs.append(run)
        labels.append({f"d{d}": g for d, g in grades.items()})
    arrays = build_arrays(qids, runs, labels, score_kind=kind)
    for row, ((_, _, listed), run, lab) in enumerate(zip(queries, runs, labels, strict=True)):
        ids, n = list(run), len(run)
        if not n:
            continue
        norm = normalize(np.array([list(run.values())], dtype=np.float64), kind)
        values, valid = norm.values[0].tolist(), norm.valid[0].tolist()
        order = reference_ranking(list(run.values()), kind)
        if listed:
            assert order == list(range(n))
        assert arrays.order[row, :n].tolist() == order
        ranked = [ids[i] for i in order]
        assert arrays.doc_ids(row) == ranked
        expected = [values[i] if valid[i] and math.isfinite(values[i]) else math.nan for i in order]
        assert np.array_equal(arrays.scores[row, :n], expected, equal_nan=True)
        assert arrays.grades[row, :n].tolist() == [float(lab.get(d, 0)) for d in ranked]
        assert arrays.judged[row, :n].tolist() == [d in lab for d in ranked]
        assert arrays.n_valid[row] == sum(valid)


labelled_query = st.tuples(
    st.lists(
        st.tuples(st.integers(0, 15), st.one_of(score, st.none(), st.sampled_from([1.5, 2.0]))),
        max_size=12,
        unique_by=lambda t: t[0],
    ),
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=12),
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(labelled_query, min_size=1, max_size=6),
    st.sampled_from(["similarity", "probability", "rrf", None]),
)
def test_every_label_kind_lands_on_its_documents_ranked_position(
    queries: list[tuple[list[tuple[int, float | None]], list[tuple[int, int]]]], kind: str | None
) -> None:
    """Grades, distractors, utilities and abstention probabilities sit where their
    documents rank, whatever the ties (probabilities above 1 clip to equal keys), the
    missing scores, and the mapping type the run comes in."""
    qids = [f"q{i}" for i in range(len(queries))]
    runs = [{f"d{d}": s for d, s in cands} for cands, _ in queries]
    grades, distractors, utilities, no_response = [], [], [], []
    for _, labels in queries:
        by_kind: list[dict[str, int]] = [{}, {}, {}, {}]
        for doc, which in labels:
            by_kind[which][f"d{doc}"] = doc
        grades.append({d: v % 4 for d, v in by_kind[0].items()})
        distractors.append(frozenset(by_kind[1]))
        utilities.append({d: (v % 5 - 2) / 2 for d, v in by_kind[2].items()})
        no_response.append({d: v / 20 for d, v in by_kind[3].items()})
    arrays = build_arrays(
        qids,
        [MappingProxyType(r) for r in runs],  # any mapping, not only dicts
        grades,
        score_kind=kind,
        distractors=distractors,
        utilities=utilities,
        no_response=no_response,
    )
    nan = math.nan
    for row in range(len(qids)):
        ranked = arrays.doc_ids(row)
        n = len(ranked)
        assert arrays.grades[row, :n].tolist() == [float(grades[row].get(d, 0)) for d in ranked]
        assert arrays.judged[row, :n].tolist() == [d in grades[row] for d in ranked]
        assert arrays.distractor[row, :n].tolist() == [d in distractors[row] for d in ranked]
        for got, given_ in ((arrays.given_utility, utilities), (arrays.no_response, no_response)):
            expected = [given_[row].get(d, nan) for d in ranked]
            assert np.array_equal(got[row, :n], np.array(expected, dtype=float), equal_nan=True)


def test_ranked_arrays_feed_the_policy_unchanged() -> None:
    run = {"q1": {"a": 0.2, "b": 0.9, "c": 0.9, "d": 0.5}, "q2": {"x": 0.3}}
    arrays = arrays_from_dicts({"q1": {"c": 1}, "q2": {}}, run)
    params = PolicyParams(max_k=3, relative_threshold=0.6)
    from_arrays = cut_ranked(arrays.ranked(), params)
    raw = np.array([[0.2, 0.9, 0.9, 0.5], [0.3, np.nan, np.nan, np.nan]])
    present = np.array([[True] * 4, [True, False, False, False]])
    direct = apply_policy(np.nan_to_num(raw), ~np.isnan(raw), params, present)
    assert from_arrays.n_kept.tolist() == direct.n_kept.tolist() == [2, 1]
    # b and c tie at 0.9: input order breaks the tie, so b ranks first
    assert arrays.doc_ids(0) == ["b", "c", "d", "a"]
    assert arrays.grades[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    # metrics on what the policy kept
    assert precision(arrays, cut=from_arrays.n_kept).tolist() == [0.5, 0.0]


def test_stated_number_of_relevant_documents() -> None:
    # labels cover only the retrieved candidates; the query states 4 relevant documents
    qrels = {"q": {"a": 2, "b": 0, "c": 1}}
    run = {"q": {"a": 0.9, "b": 0.8, "c": 0.7}}
    plain = arrays_from_dicts(qrels, run)
    stated = arrays_from_dicts(qrels, run, n_relevant={"q": 4})
    assert recall(plain)[0] == 1.0
    assert recall(stated)[0] == pytest.approx(2 / 4)
    assert stated.ideal_grades[0].tolist() == [2.0, 1.0, 1.0, 1.0]
    dcg = 2.0 + 1.0 / 2.0
    assert ndcg(plain)[0] == pytest.approx(dcg / (2.0 + 1 / math.log2(3)), abs=TOL)
    idcg = 2.0 + 1 / math.log2(3) + 1 / 2.0 + 1 / math.log2(5)
    assert ndcg(stated)[0] == pytest.approx(dcg / idcg, abs=TOL)
    assert evaluate(qrels, run, "map", n_relevant={"q": 4})["map"] == pytest.approx(
        (1 / 1 + 2 / 3) / 4
    )
    with pytest.raises(EvalSetError, match="states 1 relevant documents but 2"):
        arrays_from_dicts(qrels, run, n_relevant={"q": 1})


def test_cut_truncates_each_query_and_is_validated() -> None:
    run = {"q1": {"a": 0.9, "b": 0.8, "c": 0.7}, "q2": {"x": 0.9, "y": 0.1}}
    arrays = arrays_from_dicts({"q1": {"b": 1, "c": 1}, "q2": {"y": 1}}, run)
    cut = np.array([1, 2])
    assert recall(arrays, cut=cut).tolist() == [0.0, 1.0]
    assert precision(arrays, 3, cut=cut).tolist() == pytest.approx([0.0, 1 / 3])
    assert evaluate(arrays, metrics="recall@1", cut=cut) == {"recall@1": 0.0}
    for bad in (np.array([1]), np.array([1.0, 2.0]), np.array([-1, 2])):
        with pytest.raises(ValueError, match="cut must be"):
            recall(arrays, cut=bad)
    for k in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="k must be"):
            recall(arrays, k)  # type: ignore[arg-type]


def test_inputs_are_never_modified() -> None:
    qrels = {"q": {"a": 1, "z": 2}, "empty": {}}
    run = {"q": {"a": 0.5, "b": None, "c": 0.5}, "extra": {"a": 1.0}}
    before = copy.deepcopy((qrels, run))
    result = evaluate(qrels, run, ["ndcg@2", "udcg", "ra_nwg@2"], per_query=True)  # type: ignore[arg-type]
    assert (qrels, run) == before
    assert set(result["ndcg@2"]) == {"q", "empty"}  # run-only query "extra" is left out


def test_run_only_queries_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="ragguard"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}, "x": {"b": 1.0}, "y": {}}, "recall")
    assert "2 run queries have no qrels and are not evaluated" in caplog.text


def test_missing_scores_rank_last_and_bad_values_are_errors() -> None:
    arrays = arrays_from_dicts({"q": {"b": 1}}, {"q": {"a": None, "b": 0.1, "c": 0.3}})  # type: ignore[dict-item]
    assert arrays.doc_ids(0) == ["c", "b", "a"]
    assert arrays.n_valid.tolist() == [2]
    with pytest.raises(EvalSetError, match="score of document 'b' in query 'q' is not a number"):
        arrays_from_dicts({"q": {}}, {"q": {"a": 0.1, "b": "high"}})  # type: ignore[dict-item]
    with pytest.raises(EvalSetError, match="grade of a document in query 'q' is not finite"):
        arrays_from_dicts({"q": {"a": math.nan}}, {"q": {"a": 0.1}})
    with pytest.raises(EvalSetError, match=r"utility of document 'a' in query 'q' must lie in"):
        build_arrays(["q"], [{"a": 0.1}], [{}], utilities=[{"a": 1.5}])
    with pytest.raises(EvalSetError, match="no-response probability"):
        build_arrays(["q"], [{"a": 0.1}], [{}], no_response=[{"a": -0.1}])
    with pytest.raises(ValueError, match="grades has 2 entries for 1 queries"):
        build_arrays(["q"], [{}], [{}, {}])


def test_with_profile_recomputes_only_utilities() -> None:
    arrays = arrays_from_dicts({"q": {}}, {"q": {"a": 0.9, "b": 0.6, "c": 0.4, "d": 0.3}})
    assert arrays.utility[0].tolist() == [-0.5, -0.5, -0.5, 0.0]
    medical = arrays.with_profile("medical")
    assert medical.utility[0].tolist() == [-1.0, -1.0, -1.0, 0.0]
    assert medical.grades is arrays.grades
    assert arrays.utility[0].tolist() == [-0.5, -0.5, -0.5, 0.0]


def test_stated_counts_must_be_integers_and_ndcg_stays_at_most_one() -> None:
    with pytest.raises(EvalSetError, match=r"must be an integer, got 2\.5"):
        arrays_from_dicts({"q": {"a": 1}}, {"q": {"a": 1.0}}, n_relevant={"q": 2.5})  # type: ignore[dict-item]
    # a fractional grade below 1 is not relevant, but its gain still counts in the ideal
    arrays = arrays_from_dicts({"q": {"a": 0.5, "b": 1}}, {"q": {"a": 0.9, "b": 0.1}})
    assert arrays.n_relevant.tolist() == [1]
    assert ndcg(arrays)[0] == pytest.approx((0.5 + 1 / math.log2(3)) / (1 + 0.5 / math.log2(3)))
    assert ndcg(arrays)[0] <= 1.0
