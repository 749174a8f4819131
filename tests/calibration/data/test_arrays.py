"""Conversion to dense arrays: ranking and tie rule, labels at the right positions, the
stated number of relevant documents, per-query cuts, and inputs left untouched."""

from __future__ import annotations

import copy
import math
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from ragguard.calibration import EvalSet, evaluate
from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.metrics import ndcg, precision, recall
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
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


# --------------------------------------------------------------------------- reordered

REORDER_METRICS = ["ndcg@3", "recall@2", "udcg", "udcg_ndcg@3", "distractor_rate@2", "map"]
PER_CANDIDATE = ("grades", "judged", "distractor", "no_response", "utility", "scores", "raw")
PER_QUERY = (
    "n_relevant",
    "n_relevant_labelled",
    "ideal_grades",
    "ideal_utilities",
    "grade_counts",
    "max_grade",
    "n_evidence",
)


def _labelled_rows(seed: int) -> dict[str, list[Any]]:
    """Random rows: padding (lists of 0..8), tied and missing scores, grades -1..3,
    labelled distractors, given utilities and abstention probabilities, some on
    documents the run did not retrieve, and stated relevant counts."""
    rng = np.random.default_rng(seed)
    qids, runs, grades, distractors, utilities, no_response, stated = [], [], [], [], [], [], []
    for q in range(7):
        n = int(rng.integers(0, 9))
        values = rng.choice([0.2, 0.5, 0.5, 0.8, math.nan, -0.1], n).tolist()
        runs.append({f"d{j}": v for j, v in enumerate(values)})
        docs = [f"d{j}" for j in rng.choice(12, 6, replace=False)]
        grades.append({d: int(rng.integers(-1, 4)) for d in docs[:4]})
        distractors.append({d for d in docs if grades[-1].get(d) == -1 or rng.random() < 0.1})
        utilities.append({d: float(rng.choice([-0.5, 0.3, 0.8])) for d in docs[3:5]})
        no_response.append({d: float(rng.uniform(0, 1)) for d in docs[1:3] if rng.random() < 0.5})
        relevant = sum(g >= 1 for g in grades[-1].values())
        stated.append(relevant + 2 if rng.random() < 0.3 else None)
        qids.append(f"q{q}")
    return {
        "qids": qids,
        "runs": runs,
        "grades": grades,
        "distractors": distractors,
        "utilities": utilities,
        "no_response": no_response,
        "stated": stated,
    }


def _source(rows: dict[str, list[Any]], profile: str = "support") -> EvalArrays:
    return build_arrays(
        rows["qids"],
        rows["runs"],
        rows["grades"],
        distractors=rows["distractors"],
        utilities=rows["utilities"],
        no_response=rows["no_response"],
        n_relevant=rows["stated"],
        profile=profile,
    )


def _perm_of(source: EvalArrays, ids_per_row: list[list[str]], width: int) -> NDArray[np.intp]:
    perm = np.full((source.n_queries, width), -1, dtype=np.intp)
    for row, ids in enumerate(ids_per_row):
        where = {d: i for i, d in enumerate(source.doc_ids(row))}
        perm[row, : len(ids)] = [where[d] for d in ids]
    return perm


def _assert_same(got: EvalArrays, expected: EvalArrays) -> None:
    assert got.shape == expected.shape
    assert [got.doc_ids(r) for r in range(got.n_queries)] == [
        expected.doc_ids(r) for r in range(expected.n_queries)
    ]
    for name in ("n_present", "n_valid", *PER_CANDIDATE, *PER_QUERY, "retrieved_grade_counts"):
        a, b = getattr(got, name), getattr(expected, name)
        assert a.shape == b.shape, name
        assert np.array_equal(a, b, equal_nan=True), name
    assert got.score_kind == expected.score_kind
    assert dict(got.score_issues) == dict(expected.score_issues)
    ranked_got, ranked_exp = got.ranked(), expected.ranked()
    assert np.array_equal(ranked_got.scores, ranked_exp.scores, equal_nan=True)
    assert evaluate(got, metrics=REORDER_METRICS, per_query=True) == evaluate(
        expected, metrics=REORDER_METRICS, per_query=True
    )


@pytest.mark.parametrize("seed", range(30))
def test_reordered_with_new_scores_equals_the_arrays_of_the_reranked_lists(seed: int) -> None:
    """A sub-list of each row with new scores (the reranked top n) equals what
    build_arrays makes of the same lists as dicts: each candidate's new score, its
    labels, and its utility from the source ranking given as its utility."""
    rows = _labelled_rows(seed)
    source = _source(rows, profile=("support", "medical", "creative")[seed % 3])
    rng = np.random.default_rng(1000 + seed)
    lists, new_runs, given = [], [], []
    for row in range(source.n_queries):
        ids = source.doc_ids(row)
        keep = [d for d in ids if rng.random() < 0.7]  # any sub-list, in source order
        new = rng.choice([0.1, 0.4, 0.4, 0.9, math.nan], len(keep)).tolist()
        new_runs.append(dict(zip(keep, new, strict=True)))
        u = dict(zip(ids, source.utility[row, : len(ids)].tolist(), strict=True))
        given.append({**rows["utilities"][row], **{d: u[d] for d in keep}})
        lists.append(keep)
    expected = build_arrays(
        rows["qids"],
        new_runs,
        rows["grades"],
        score_kind="probability",
        distractors=rows["distractors"],
        utilities=given,
        no_response=rows["no_response"],
        n_relevant=rows["stated"],
        profile=source.profile,
        n_evidence=source.n_evidence,
    )
    ranked_ids = [expected.doc_ids(r) for r in range(expected.n_queries)]
    perm = _perm_of(source, ranked_ids, expected.shape[1])
    scores = np.full(perm.shape, np.nan)
    for row, ids in enumerate(ranked_ids):
        scores[row, : len(ids)] = [new_runs[row][d] for d in ids]
    got = source.reordered(perm, scores=scores, score_kind="probability")
    _assert_same(got, expected)
    # utilities stayed with their candidates; the data's own given utilities moved along
    for row, ids in enumerate(ranked_ids):
        u = dict(zip(source.doc_ids(row), source.utility[row].tolist(), strict=False))
        assert got.utility[row, : len(ids)].tolist() == [u[d] for d in ids]
        expected_given = [rows["utilities"][row].get(d, math.nan) for d in ids]
        assert np.array_equal(got.given_utility[row, : len(ids)], expected_given, equal_nan=True)
    # nothing of the source changed, and its rows slice alike
    _assert_same(source, _source(rows, profile=source.profile.name))
    for lo, hi in ((0, 3), (2, 7)):
        _assert_same(got.row_slice(lo, hi), expected.row_slice(lo, hi))


@pytest.mark.parametrize("seed", range(30))
def test_reordered_keeping_scores_moves_every_candidate_with_its_id(seed: int) -> None:
    """Each row's kept candidates first (as the stages after the cut reorder rows): every
    per-candidate value follows its document, looked up by id in the source."""
    rows = _labelled_rows(seed)
    source = _source(rows)
    rng = np.random.default_rng(2000 + seed)
    lists = []
    for row in range(source.n_queries):
        ids = source.doc_ids(row)
        valid, rest = ids[: int(source.n_valid[row])], ids[int(source.n_valid[row]) :]
        chosen = [d for d in valid if rng.random() < 0.5]
        others = [d for d in valid if d not in chosen] + rest
        lists.append(chosen + (others if seed % 2 else others[: len(others) // 2]))
    width = max(map(len, lists), default=0)
    got = source.reordered(_perm_of(source, lists, width))
    assert got.shape == (source.n_queries, width)
    for row, ids in enumerate(lists):
        assert got.doc_ids(row) == ids
        by_id = {
            name: dict(zip(source.doc_ids(row), getattr(source, name)[row].tolist(), strict=False))
            for name in PER_CANDIDATE
        }
        for name in PER_CANDIDATE:
            assert np.array_equal(
                getattr(got, name)[row, : len(ids)],
                np.array([by_id[name][d] for d in ids], dtype=getattr(got, name).dtype),
                equal_nan=True,
            ), name
        pad = slice(len(ids), None)
        assert not got.judged[row, pad].any() and not got.grades[row, pad].any()
        assert np.isnan(got.raw[row, pad]).all() and np.isnan(got.scores[row, pad]).all()
        assert got.utility[row, pad].tolist() == [0.0] * (width - len(ids))
        n_valid = int(source.n_valid[row])
        assert got.n_valid[row] == sum(d in source.doc_ids(row)[:n_valid] for d in ids)
    for name in PER_QUERY:
        assert np.array_equal(getattr(got, name), getattr(source, name)), name
    # a reordered row's policy cut reads its own scores, in its own order
    assert np.array_equal(got.ranked().scores[got.valid], got.scores[got.valid])


def test_reordered_rejects_a_bad_permutation() -> None:
    arrays = arrays_from_dicts(
        {"q1": {"a": 1}, "q2": {}}, {"q1": {"a": 0.9, "b": 0.5, "c": math.nan}, "q2": {"x": 0.3}}
    )
    ok = np.array([[1, 0, 2], [0, -1, -1]])
    assert arrays.reordered(ok).doc_ids(0) == ["b", "a", "c"]
    for perm, match in (
        (np.array([[1, 0, 2]]), "shape"),  # one row for two queries
        (np.zeros((2, 4), dtype=np.intp), "shape"),  # wider than the rows
        (np.array([[1.0, 0.0, 2.0], [0.0, -1.0, -1.0]]), "integer"),
        (np.array([[1, 1, 2], [0, -1, -1]]), "twice"),
        (np.array([[1, 0, 2], [1, -1, -1]]), "candidates first"),  # q2 has one candidate
        (np.array([[1, -1, 0], [0, -1, -1]]), "candidates first"),  # padding in between
        (np.array([[1, 0, 2], [0, -2, -1]]), "candidates first"),
        (np.array([[2, 0, 1], [0, -1, -1]]), "scored candidates before"),  # NaN-scored c first
    ):
        with pytest.raises(EvalSetError, match=match):
            arrays.reordered(perm)
    with pytest.raises(EvalSetError, match="scores must have perm's shape"):
        arrays.reordered(ok, scores=np.zeros((2, 2)), score_kind="probability")
    with pytest.raises(EvalSetError, match="scored candidates before"):
        arrays.reordered(ok, scores=np.array([[math.nan, 0.5, 0.1], [0.2, 0, 0]]))
    # new scores: issues of their kind are reported, nothing is clipped silently away
    got = arrays.reordered(
        ok, scores=np.array([[1.5, 0.5, 0.2], [0.2, 0, 0]]), score_kind="probability"
    )
    assert got.scores[0].tolist() == [1.0, 0.5, 0.2] and got.raw[0].tolist() == [1.5, 0.5, 0.2]
    assert got.n_valid.tolist() == [3, 1]
    assert [i.value for i in got.score_issues] == ["probability_out_of_range"]
    # the empty case
    none = arrays_from_dicts({"q": {}}, {"q": {}})
    assert none.reordered(np.zeros((1, 0), dtype=np.intp)).shape == (1, 0)


@pytest.mark.parametrize("seed", range(20))
def test_dicts_and_columns_give_the_one_builder_the_same_rows(seed: int) -> None:
    """``build_arrays`` codes dicts (a label's candidate found by its score: a binary
    search in a row listed best first, a comparison in another, the ids on a tie or
    NaN); ``EvalSet.from_dicts`` codes columns (labels joined by Arrow). Both feed the
    one builder, and the arrays are the same: rows best first or in any order, ties,
    NaN scores, distractors, utilities, probabilities, stated counts."""
    rows = _labelled_rows(seed)
    rng = np.random.default_rng(seed)
    # about half the rows listed best first with distinct scores (the binary search),
    # the others as drawn (ties, NaN, any order: comparison and the ids)
    runs = [
        {d: (len(run) - i) / 8 for i, d in enumerate(run)} if rng.random() < 0.5 else run
        for run in rows["runs"]
    ]
    grades = rows["grades"]
    distractors = [
        {d for d in dis if grades[i].get(d, 1) <= 0} for i, dis in enumerate(rows["distractors"])
    ]
    qids = rows["qids"]
    es = EvalSet.from_dicts(
        dict(zip(qids, grades, strict=True)),
        {"r": dict(zip(qids, runs, strict=True))},
        distractors={q: sorted(d) for q, d in zip(qids, distractors, strict=True)},
        utilities=dict(zip(qids, rows["utilities"], strict=True)),
        no_response=dict(zip(qids, rows["no_response"], strict=True)),
        n_relevant={q: s for q, s in zip(qids, rows["stated"], strict=True) if s is not None},
    )
    from_dicts = build_arrays(
        qids, runs, grades, score_kind=es.runs["r"].score_kind, distractors=distractors,
        utilities=rows["utilities"], no_response=rows["no_response"], n_relevant=rows["stated"],
    )  # fmt: skip
    _assert_same(from_dicts, es.arrays("r"))
