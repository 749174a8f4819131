"""Normalisation of each score kind, against hand-computed values."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragguard import Candidate, ContextGuard, ScoreWarning
from ragguard.scores import ScoreIssue, ScoreKind, normalize


def norm(
    raw: list[float | None], kind: str | None, **kw: int
) -> tuple[list[float], dict[ScoreIssue, int]]:
    x = np.array([math.nan if v is None else v for v in raw], dtype=np.float64)
    out = normalize(x, kind, **kw)  # type: ignore[arg-type]
    return out.values[0].tolist(), out.issues


def close(a: list[float], b: list[float]) -> bool:
    return all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-12)
        for x, y in zip(a, b, strict=True)
    )


def test_similarity_is_unchanged() -> None:
    values, issues = norm([0.9, 0.3, 12.5], "similarity")
    assert values == [0.9, 0.3, 12.5]
    assert issues == {}


def test_distance_flips_direction_into_unit_interval() -> None:
    values, issues = norm([0.0, 1.0, 3.0], "distance")
    assert close(values, [1.0, 0.5, 0.25])
    assert issues == {}


def test_distance_relative_threshold_meaning() -> None:
    # keep s >= t * s_top  <=>  d <= (1 + d_top) / t - 1 ; with d_top = 0.2, t = 0.8 -> 0.5
    values, _ = norm([0.2, 0.4999999, 0.5000001], "distance")
    assert values[1] >= 0.8 * values[0] > values[2]


def test_logit_goes_through_sigmoid() -> None:
    values, _ = norm([0.0, 2.0, -3.0, 800.0, -800.0], "logit")
    expected = [0.5, 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(3)), 1.0, 0.0]
    assert all(
        math.isclose(v, e, rel_tol=1e-12, abs_tol=1e-300)
        for v, e in zip(values, expected, strict=True)
    )


def test_probability_is_clipped_with_issue() -> None:
    values, issues = norm([0.2, 1.3, -0.1], "probability")
    assert values == [0.2, 1.0, 0.0]
    assert issues == {ScoreIssue.PROBABILITY_OUT_OF_RANGE: 1}


def test_rrf_in_first_place_units() -> None:
    values, issues = norm([1 / 61, 2 / 61, 1 / 70], "rrf")
    assert close(values, [1.0, 2.0, 61 / 70])
    assert issues == {}
    values, _ = norm([1 / 11], "rrf", rrf_k=10)
    assert close(values, [1.0])


@pytest.mark.parametrize("kind", list(ScoreKind))
def test_invalid_scores_are_nan_and_not_valid(kind: ScoreKind) -> None:
    out = normalize(np.array([0.5, math.nan, math.inf, -math.inf]), kind)
    assert out.valid.tolist() == [[True, False, False, False]]
    assert math.isfinite(out.values[0, 0]) and np.isnan(out.values[0, 1:]).all()


@pytest.mark.parametrize("kind", list(ScoreKind))
def test_normalisation_preserves_order_in_the_kinds_direction(kind: ScoreKind) -> None:
    raw = np.array([0.05, 0.2, 0.4, 0.6, 0.9])  # valid in every kind's domain
    values = normalize(raw, kind).values[0]
    if kind is ScoreKind.DISTANCE:
        assert (np.diff(values) < 0).all()
    else:
        assert (np.diff(values) > 0).all()


def test_contradictions_are_reported_per_row() -> None:
    x = np.array([[0.9, -1.5, 0.2, 0.1], [0.9, 0.5, -0.1, -0.9], [0.1, 0.2, 0.3, 0.35]])
    issues = normalize(x, "similarity").issues
    assert issues == {ScoreIssue.NEGATIVE_SIMILARITY: 1, ScoreIssue.ASCENDING_SIMILARITY: 1}
    assert normalize(np.array([0.1, 0.2, 0.2, 0.3]), "similarity").issues == {}
    assert normalize(np.array([-0.5, 0.2]), "distance").issues == {ScoreIssue.NEGATIVE_DISTANCE: 1}
    assert normalize(np.array([0.1, 0.9, 0.4]), "logit").issues == {
        ScoreIssue.LOGIT_IN_UNIT_INTERVAL: 1
    }
    assert normalize(np.array([0.7, 0.2]), "rrf").issues == {}
    assert normalize(np.array([1.7, 0.2]), "rrf").issues == {ScoreIssue.RRF_OUT_OF_RANGE: 1}


def test_negative_distance_treated_as_perfect_match() -> None:
    values, _ = norm([-0.5, 0.0, 1.0], "distance")
    assert values == [1.0, 1.0, 0.5]


def test_unknown_kind_keeps_order_and_reports() -> None:
    out = normalize(np.array([0.1, math.nan, 0.9]), None)
    assert out.values.tolist() == [[0.0, 0.0, 0.0]]
    assert out.valid.all()
    assert out.issues == {ScoreIssue.UNKNOWN_KIND: 1}


def test_bad_shapes_and_kinds() -> None:
    with pytest.raises(ValueError):
        normalize(np.zeros((2, 2, 2)), "similarity")
    with pytest.raises(ValueError):
        normalize(np.zeros(3), "cosine")
    with pytest.raises(ValueError):
        normalize(np.zeros((1, 3)), "similarity", present=np.ones((1, 2), dtype=bool))


def _one_way_rows_reference(x: np.ndarray, *, rising: bool, min_len: int) -> int:  # type: ignore[type-arg]
    """Rows with ``min_len`` or more valid scores where each valid score is strictly
    above (below) the valid score before it, invalid ones skipped. Each row on its own:
    padding or an invalid score at a row's end does not hide it, other rows do not
    matter."""
    d = x if rising else -x
    count = 0
    for row in d.tolist():
        scores = [v for v in row if math.isfinite(v)]
        one_way = all(b > a for a, b in itertools.pairwise(scores))
        if one_way and len(scores) >= min_len:
            count += 1
    return count


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from([0.1, 0.2, 0.3, 0.5]), st.just(math.nan)),
            min_size=1,
            max_size=7,
        ),
        min_size=1,
        max_size=6,
    ).filter(lambda rows: len({len(r) for r in rows}) == 1),
    st.booleans(),
)
def test_direction_check_counts_match_their_definition(
    rows: list[list[float]], ranked: bool
) -> None:
    # the check pre-filters rows on their first steps; the count must not change
    x = np.array(rows, dtype=np.float64)
    min_len = 2 if ranked else 4
    for kind, issue, rising in [
        ("similarity", ScoreIssue.ASCENDING_SIMILARITY, True),
        ("distance", ScoreIssue.DESCENDING_DISTANCE, False),
    ]:
        expected = _one_way_rows_reference(x, rising=rising, min_len=min_len)
        got = normalize(x, kind, ranked=ranked).issues.get(issue, 0)
        assert got == expected, (kind, ranked)


def test_similarities_declared_as_distances_are_caught() -> None:
    # the issue's example: similarities in retriever order, declared as distances, would
    # keep the worst passages; this is the mirror of ascending_similarity
    sims = np.array([0.92, 0.85, 0.40, 0.31, 0.12])
    assert normalize(sims, "distance").issues == {ScoreIssue.DESCENDING_DISTANCE: 1}
    assert normalize(sims, "similarity").issues == {}
    # two or three candidates: only the retriever's order can tell
    for short in ([0.92, 0.85], [0.92, 0.85, 0.40]):
        assert normalize(np.array(short), "distance", ranked=True).issues == {
            ScoreIssue.DESCENDING_DISTANCE: 1
        }
        assert normalize(np.array(short), "distance").issues == {}
        assert normalize(np.array(short[::-1]), "similarity", ranked=True).issues == {
            ScoreIssue.ASCENDING_SIMILARITY: 1
        }
    # ties and single candidates tell nothing
    assert normalize(np.array([0.5, 0.5]), "distance", ranked=True).issues == {}
    assert normalize(np.array([0.5]), "distance", ranked=True).issues == {}


def test_guard_warns_on_two_similarities_declared_as_distances() -> None:
    guard = ContextGuard(score_kind="distance", relative_threshold=0.0)
    retrieved = [Candidate("answer", "", 0.92), Candidate("unrelated", "", 0.12)]
    with pytest.warns(ScoreWarning, match="decrease along the input order"):
        sel = guard.select("q", retrieved)
    # as declared, the smaller "distance" ranks first: the warning is what tells the user
    assert [c.id for c in sel.kept] == ["unrelated", "answer"]
    # repeated ids mean merged lists, which have no single order: nothing to warn about
    merged = [Candidate("a", "", 0.9), Candidate("b", "", 0.5), Candidate("a", "", 0.3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContextGuard(score_kind="distance").select("q", merged)


def test_a_score_beyond_float_range_is_invalid_not_an_error() -> None:
    huge = Candidate("huge", "", 10**400)
    assert not huge.has_valid_score
    sel = ContextGuard(score_kind="similarity").select("q", [huge, Candidate("ok", "", 0.5)])
    assert [c.id for c in sel.kept] == ["ok"]
    (dropped,) = sel.dropped
    assert dropped.candidate.id == "huge" and dropped.reason == "invalid_score"


def test_direction_checks_skip_invalid_scores_between_valid_ones() -> None:
    # 0.9, (missing), 0.8 falls: a similarity run in retriever order, not ascending; and
    # 0.2, (missing), 0.7 rises, as distances would (hand-checked)
    falls = np.array([[0.9, np.nan, 0.8]])
    rises = np.array([[0.2, np.nan, 0.7]])
    assert normalize(falls, "similarity", ranked=True).issues == {}
    assert normalize(rises, "similarity", ranked=True).issues == {
        ScoreIssue.ASCENDING_SIMILARITY: 1
    }
    assert normalize(falls, "distance", ranked=True).issues == {ScoreIssue.DESCENDING_DISTANCE: 1}
    # beside a row that rises end to end, the falling row still does not count
    both = np.array([[0.9, np.nan, 0.8], [0.1, 0.2, 0.3]])
    assert normalize(both, "similarity", ranked=True).issues == {ScoreIssue.ASCENDING_SIMILARITY: 1}


@pytest.mark.parametrize("kind", list(ScoreKind))
def test_normalize_never_hands_back_the_callers_array(kind: ScoreKind) -> None:
    # the guard writes nothing into the values, but a caller may: writing into them
    # must never change the scores it passed in (all valid: nothing is blanked out)
    one_row = np.array([0.9, 0.5, 0.1])
    for raw in (one_row, one_row[None, :].copy(), one_row.tolist()):
        before = np.array(raw, dtype=np.float64)
        out = normalize(raw, kind)
        out.values[...] = -7.0
        assert np.array_equal(np.asarray(raw, dtype=np.float64), before), type(raw)


def test_ascending_similarity_needs_every_step_to_rise() -> None:
    # the check first asks whether the maximum is last; a list whose maximum is last
    # but which falls on the way does not rise (hand-checked)
    assert norm([0.3, 0.1, 0.5], "similarity", ranked=True)[1] == {}
    assert norm([0.1, 0.3, 0.5], "similarity", ranked=True)[1] == {
        ScoreIssue.ASCENDING_SIMILARITY: 1
    }
    assert norm([0.5, 0.5, 0.5], "similarity", ranked=True)[1] == {}  # ties do not rise
    assert norm([0.1, 0.5], "similarity", ranked=True)[1] == {ScoreIssue.ASCENDING_SIMILARITY: 1}
    assert norm([0.5], "similarity", ranked=True)[1] == {}


def test_similarity_below_minus_one_is_counted_beside_invalid_scores() -> None:
    # the quick test for a similarity below -1 is the row's minimum, which NaN and -inf
    # make NaN / -inf: the masked count must still count only valid scores below -1
    assert norm([0.5, None, -2.0], "similarity")[1] == {ScoreIssue.NEGATIVE_SIMILARITY: 1}
    assert norm([0.5, None, -np.inf], "similarity")[1] == {}
    assert norm([math.nan, math.nan], "similarity")[1] == {}
    assert norm([], "similarity")[1] == {}
