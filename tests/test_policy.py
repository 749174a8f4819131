"""The vectorised selection policy against hand-computed cases and a plain-Python reference."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragguard import Candidate, ContextGuard, GuardConfig, Reason, Selection
from ragguard.policy import (
    KEPT,
    PADDING,
    REASON_OF_CODE,
    CutRule,
    PolicyParams,
    PolicyResult,
    apply_policy,
    cut_ranked,
    describe,
    rank,
)
from ragguard.stages import run_stages, shingles, start_state
from tests.reference_policy import reference_select, reference_stages


def run(scores: list[float | None], **params: object) -> tuple[list[int], dict[int, Reason]]:
    """Run the vectorised policy on one row; return kept positions and dropped reasons."""
    x = np.array([math.nan if s is None else s for s in scores], dtype=np.float64)[None, :]
    result = apply_policy(x, np.isfinite(x), PolicyParams(**params))  # type: ignore[arg-type]
    return unpack(result, 0)


def unpack(result: PolicyResult, row: int) -> tuple[list[int], dict[int, Reason]]:
    order = result.order[row].tolist()
    codes = result.reasons[row].tolist()
    n = int(result.n_kept[row])
    assert all(c == KEPT for c in codes[:n])
    dropped = {
        i: REASON_OF_CODE[c] for i, c in zip(order[n:], codes[n:], strict=True) if c != PADDING
    }
    return order[:n], dropped


# --- hand-computed cases -------------------------------------------------------------


def test_relative_threshold_keeps_scores_at_or_above_t_times_top() -> None:
    # top 0.9, bar 0.7 * 0.9 = 0.63: 0.63 is kept (>=), 0.62 is not
    kept, dropped = run([0.62, 0.9, 0.63, 0.8], max_k=10, relative_threshold=0.7)
    assert kept == [1, 3, 2]
    assert dropped == {0: Reason.BELOW_RELATIVE_THRESHOLD}


def test_max_k_caps_after_the_threshold() -> None:
    kept, dropped = run([0.9, 0.89, 0.88, 0.87], max_k=2, relative_threshold=0.5)
    assert kept == [0, 1]
    assert dropped == {2: Reason.OVER_MAX_K, 3: Reason.OVER_MAX_K}


def test_min_k_restores_the_best_candidates_below_the_threshold() -> None:
    kept, dropped = run([1.0, 0.2, 0.1], max_k=5, min_k=2, relative_threshold=0.9)
    assert kept == [0, 1]
    assert dropped == {2: Reason.BELOW_RELATIVE_THRESHOLD}


def test_absolute_floor_on_normalised_scale() -> None:
    kept, dropped = run([0.9, 0.5, 0.45], max_k=5, min_k=0, min_score=0.5)
    assert kept == [0, 1]
    assert dropped == {2: Reason.BELOW_MIN_SCORE}


def test_min_k_zero_can_keep_nothing() -> None:
    kept, dropped = run([0.1, 0.2], max_k=5, min_k=0, min_score=0.5)
    assert kept == []
    assert set(dropped.values()) == {Reason.BELOW_MIN_SCORE}


def test_threshold_reason_wins_over_max_k_reason() -> None:
    _, dropped = run([1.0, 0.95, 0.1], max_k=1, relative_threshold=0.5)
    assert dropped == {1: Reason.OVER_MAX_K, 2: Reason.BELOW_RELATIVE_THRESHOLD}


def test_ties_keep_input_order() -> None:
    kept, _ = run([0.5, 0.9, 0.5, 0.9], max_k=3)
    assert kept == [1, 3, 0]


def test_nonpositive_top_skips_threshold_and_reports_it() -> None:
    x = np.array([[-0.2, -0.5, -0.9]])
    result = apply_policy(x, np.isfinite(x), PolicyParams(max_k=2, relative_threshold=0.9))
    assert result.threshold_skipped.tolist() == [True]
    kept, dropped = unpack(result, 0)
    assert kept == [0, 1]
    assert dropped == {2: Reason.OVER_MAX_K}


def test_gap_rule_cuts_before_the_largest_gap() -> None:
    # gaps: 0.05, 0.40, 0.05 -> cut after position 1
    kept, dropped = run([0.9, 0.85, 0.45, 0.4], max_k=10, cut=CutRule.GAP)
    assert kept == [0, 1]
    assert dropped == {2: Reason.SCORE_GAP, 3: Reason.SCORE_GAP}


def test_gap_rule_buffer_and_window() -> None:
    scores = [0.9, 0.85, 0.45, 0.4, 0.39, -0.2]
    # the largest gap overall (0.39 -> -0.2) lies outside a window of 4; inside it 0.85->0.45
    assert run(scores, max_k=10, cut=CutRule.GAP)[0] == [0, 1, 2, 3, 4]
    assert run(scores, max_k=10, cut=CutRule.GAP, gap_window=4)[0] == [0, 1]
    assert run(scores, max_k=10, cut=CutRule.GAP, gap_window=4, gap_buffer=1)[0] == [0, 1, 2]


def test_gap_rule_does_not_cut_equal_scores() -> None:
    assert run([0.5, 0.5, 0.5], max_k=10, cut=CutRule.GAP)[0] == [0, 1, 2]


def test_autocut_cuts_before_the_first_jump() -> None:
    # Scores 0.9, 0.88, 0.86 then a drop to 0.3, 0.29: normalised y = 0, .033, .067, 1, 1
    # minus x = 0, .25, .5, .75, 1 gives 0, -.217, -.433, .25, 0: the jump is at index 3.
    kept, dropped = run([0.9, 0.88, 0.86, 0.3, 0.29], max_k=10, cut=CutRule.AUTOCUT)
    assert kept == [0, 1, 2]
    assert dropped == {3: Reason.AUTOCUT, 4: Reason.AUTOCUT}


def test_autocut_second_jump_and_flat_scores() -> None:
    scores = [1.0, 0.99, 0.6, 0.59, 0.2, 0.19]
    assert run(scores, max_k=10, cut=CutRule.AUTOCUT)[0] == [0, 1]
    assert run(scores, max_k=10, cut=CutRule.AUTOCUT, autocut_jumps=2)[0] == [0, 1, 2, 3]
    assert run([0.4, 0.4, 0.4], max_k=10, cut=CutRule.AUTOCUT)[0] == [0, 1, 2]


def test_invalid_scores_dropped_or_kept_last() -> None:
    scores = [None, 0.5, math.nan, 0.9, math.inf]
    kept, dropped = run(scores, max_k=10)
    assert kept == [3, 1]
    assert dropped == {0: Reason.INVALID_SCORE, 2: Reason.INVALID_SCORE, 4: Reason.INVALID_SCORE}
    kept, dropped = run(scores, max_k=4, keep_invalid=True)
    assert kept == [3, 1, 0, 2]
    assert dropped == {4: Reason.OVER_MAX_K}


def test_unscored_mode_keeps_input_order_and_only_caps() -> None:
    # score rules off: 0.5 < 0.9 x 0.9 survives, only the cap drops anything
    kept, dropped = run([0.1, 0.9, 0.5], max_k=2, relative_threshold=0.9, score_rules=False)
    assert kept == [1, 2]
    assert dropped == {0: Reason.OVER_MAX_K}


def test_padding_positions_are_not_candidates() -> None:
    x = np.array([[0.9, 0.1, 0.0], [0.9, 0.8, 0.7]])
    present = np.array([[True, True, False], [True, True, True]])
    result = apply_policy(x, np.ones_like(present), PolicyParams(max_k=5), present)
    assert result.n_kept.tolist() == [2, 3]
    assert result.reasons[0].tolist() == [KEPT, KEPT, PADDING]


def test_empty_matrix() -> None:
    result = apply_policy(np.zeros((3, 0)), np.zeros((3, 0), dtype=bool), PolicyParams(max_k=3))
    assert result.n_kept.tolist() == [0, 0, 0]


def test_min_evidence_keeps_nothing_below_the_floor_whatever_min_k() -> None:
    # top 0.4 < 0.5: nothing, although min_k asks for 3
    kept, dropped = run([0.4, 0.3, None, 0.2], max_k=5, min_k=3, min_evidence=0.5)
    assert kept == []
    assert dropped == {
        0: Reason.INSUFFICIENT_EVIDENCE,
        1: Reason.INSUFFICIENT_EVIDENCE,
        2: Reason.INVALID_SCORE,
        3: Reason.INSUFFICIENT_EVIDENCE,
    }
    # the floor is inclusive, and once the top reaches it the other rules decide alone
    kept, dropped = run([0.5, 0.3, 0.1], max_k=5, min_k=2, min_evidence=0.5)
    assert kept == [0, 1, 2] and dropped == {}
    kept, dropped = run([0.5, 0.3, 0.1], max_k=5, min_k=2, relative_threshold=0.9, min_evidence=0.5)
    assert kept == [0, 1] and dropped == {2: Reason.BELOW_RELATIVE_THRESHOLD}
    assert run([0.5, 0.3, 0.1], max_k=5, min_evidence=0.5000001)[0] == []


def test_min_evidence_abstains_on_rows_without_a_valid_score() -> None:
    kept, dropped = run([None, math.nan, math.inf], max_k=5, min_evidence=-100.0)
    assert kept == [] and set(dropped.values()) == {Reason.INVALID_SCORE}
    # keep_invalid would have kept them: they too are dropped for the missing evidence
    kept, dropped = run([None, 0.2, math.nan], max_k=5, min_evidence=0.5, keep_invalid=True)
    assert kept == [] and set(dropped.values()) == {Reason.INSUFFICIENT_EVIDENCE}
    kept, _ = run([None, 0.6, math.nan], max_k=5, min_evidence=0.5, keep_invalid=True)
    assert kept == [1, 0, 2]
    assert run([], max_k=5, min_evidence=0.0) == ([], {})


def test_min_evidence_is_skipped_without_score_rules_and_recorded_per_row() -> None:
    assert run([0.1, 0.2], max_k=5, min_evidence=0.5, score_rules=False)[0] == [1, 0]
    x = np.array([[0.9, 0.1], [0.3, 0.2], [np.nan, np.nan]])
    result = apply_policy(x, np.isfinite(x), PolicyParams(max_k=2, min_evidence=0.5))
    assert result.abstained is not None
    assert result.abstained.tolist() == [False, True, True]
    assert result.n_kept.tolist() == [2, 0, 0]
    assert apply_policy(x, np.isfinite(x), PolicyParams(max_k=2)).abstained is None


def test_min_evidence_explains_itself() -> None:
    p = PolicyParams(max_k=3, min_evidence=0.5)
    assert describe(Reason.INSUFFICIENT_EVIDENCE, 0.2, p, 0.3, "rerank probability") == (
        "not enough evidence: the best rerank probability 0.3 is below min_evidence 0.5, "
        "so nothing is kept"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"max_k": 0},
        {"max_k": 2, "min_k": 3},
        {"max_k": 2, "relative_threshold": 1.5},
        {"max_k": 2, "gap_buffer": -1},
        {"max_k": 2, "gap_window": 1},
        {"max_k": 2, "autocut_jumps": 0},
        {"max_k": 2, "min_evidence": math.nan},
        {"max_k": 2, "min_evidence": math.inf},
        {"max_k": 2, "conflict_similarity": 0.0},
        {"max_k": 2, "conflict_similarity": 1.5},
    ],
)
def test_params_validate(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PolicyParams(**bad)  # type: ignore[arg-type]


def test_rank_once_cut_many_equals_apply() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 30))
    ranked = rank(x, np.isfinite(x))
    for t in (0.0, 0.3, 0.9):
        p = PolicyParams(max_k=7, relative_threshold=t)
        a, b = cut_ranked(ranked, p), apply_policy(x, np.isfinite(x), p)
        assert np.array_equal(a.reasons, b.reasons)
        assert np.array_equal(a.n_kept, b.n_kept)


# --- property tests --------------------------------------------------------------------

finite = st.floats(min_value=-5, max_value=5, allow_nan=False, width=32)
score = st.one_of(
    finite,
    finite,
    finite,
    st.sampled_from([0.5, 0.25]),
    st.sampled_from([None, math.nan, math.inf]),
)
rows = st.lists(score, min_size=0, max_size=12)


@st.composite
def policy_params(draw: st.DrawFn) -> PolicyParams:
    max_k = draw(st.integers(1, 12))
    return PolicyParams(
        max_k=max_k,
        min_k=draw(st.integers(0, max_k)),
        relative_threshold=draw(st.sampled_from([0.0, 0.25, 0.5, 0.7, 0.9, 1.0])),
        min_score=draw(st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 2.0]))),
        cut=draw(st.sampled_from(list(CutRule))),
        gap_buffer=draw(st.integers(0, 2)),
        gap_window=draw(st.one_of(st.none(), st.integers(2, 6))),
        autocut_jumps=draw(st.integers(1, 3)),
        keep_invalid=draw(st.booleans()),
        min_evidence=draw(st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.3, 0.5, 0.9, 2.0]))),
    )


@settings(max_examples=300, deadline=None)
@given(rows, policy_params())
def test_vectorised_policy_equals_plain_reference(
    scores: list[float | None], p: PolicyParams
) -> None:
    assert run(scores, **{f: getattr(p, f) for f in p.__dataclass_fields__}) == reference_select(
        scores, p
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=6), policy_params())
def test_matrix_path_equals_scalar_guard_path(
    batch: list[list[float | None]], p: PolicyParams
) -> None:
    """Many padded rows through apply_policy == each row alone through ContextGuard.select."""
    width = max((len(r) for r in batch), default=0)
    x = np.full((len(batch), width), np.nan)
    present = np.zeros((len(batch), width), dtype=bool)
    for q, r in enumerate(batch):
        x[q, : len(r)] = [math.nan if s is None else s for s in r]
        present[q, : len(r)] = True
    matrix = apply_policy(x, np.isfinite(x), p, present)

    config = GuardConfig(
        score_kind="similarity", max_k=p.max_k, min_k=p.min_k,
        relative_threshold=p.relative_threshold, min_score=p.min_score, cut=p.cut,
        gap_buffer=p.gap_buffer, gap_window=p.gap_window, autocut_jumps=p.autocut_jumps,
        invalid_scores="keep_last" if p.keep_invalid else "drop", min_evidence=p.min_evidence,
    )  # fmt: skip
    guard = ContextGuard(config)
    for q, r in enumerate(batch):
        cands = [Candidate(f"c{i}", score=s) for i, s in enumerate(r)]
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # negative similarities warn; not under test here
            sel = guard.select("q", cands)
        kept, dropped = unpack(matrix, q)
        assert [c.id for c in sel.kept] == [f"c{i}" for i in kept]
        assert {d.index: d.reason for d in sel.dropped} == dropped


@settings(max_examples=300, deadline=None)
@given(rows, policy_params(), st.sampled_from([0.0, 0.3, 0.6, 0.8, 1.0]))
def test_policy_invariants(scores: list[float | None], p: PolicyParams, t2: float) -> None:
    fields = {f: getattr(p, f) for f in p.__dataclass_fields__}
    kept, dropped = run(scores, **fields)
    # nothing lost, nothing twice
    assert sorted(kept + list(dropped)) == list(range(len(scores)))
    assert len(kept) <= p.max_k
    # kept valid candidates come in non-increasing score order, before any invalid one
    vals = [scores[i] for i in kept]
    finite_vals = [v for v in vals if v is not None and math.isfinite(v)]
    assert vals[: len(finite_vals)] == finite_vals
    assert finite_vals == sorted(finite_vals, reverse=True)
    # the top candidate survives when min_k >= 1 and its score is valid
    valid = [(s, i) for i, s in enumerate(scores) if s is not None and math.isfinite(s)]
    if p.min_k >= 1 and valid:
        top, best = min(valid, key=lambda pair: (-pair[0], pair[1]))
        if p.min_evidence is None or top >= p.min_evidence:
            assert kept[0] == best
        else:  # not enough evidence: nothing, whatever min_k says
            assert kept == [] and Reason.INSUFFICIENT_EVIDENCE in dropped.values()
    # raising the threshold never keeps more, and keeps a prefix of what it kept before
    lo, hi = sorted([p.relative_threshold, t2])
    kept_lo, _ = run(scores, **{**fields, "relative_threshold": lo})
    kept_hi, _ = run(scores, **{**fields, "relative_threshold": hi})
    n_valid_hi = sum(1 for i in kept_hi if scores[i] is not None and math.isfinite(scores[i]))  # type: ignore[arg-type]
    n_valid_lo = sum(1 for i in kept_lo if scores[i] is not None and math.isfinite(scores[i]))  # type: ignore[arg-type]
    assert n_valid_hi <= n_valid_lo
    assert kept_hi[:n_valid_hi] == kept_lo[:n_valid_hi]


# --- the stages after the cut: near-duplicates, token budget ---------------------------

# a vocabulary of three words: near-duplicates and exact repeats are frequent
texts = st.lists(st.sampled_from(["a", "b", "c"]), min_size=0, max_size=9).map(" ".join)
passages = st.lists(st.tuples(score, texts), min_size=0, max_size=12)


@st.composite
def staged_params(draw: st.DrawFn) -> PolicyParams:
    p = draw(policy_params())
    return replace(
        p,
        near_duplicate_threshold=draw(st.sampled_from([None, 0.3, 0.5, 0.8, 1.0])),
        max_tokens=draw(st.sampled_from([None, 1, 2, 3, 5, 8])),
    )


def staged_guard(p: PolicyParams) -> ContextGuard:
    return ContextGuard(
        GuardConfig(
            score_kind="similarity", max_k=p.max_k, min_k=p.min_k,
            relative_threshold=p.relative_threshold, min_score=p.min_score, cut=p.cut,
            gap_buffer=p.gap_buffer, gap_window=p.gap_window, autocut_jumps=p.autocut_jumps,
            invalid_scores="keep_last" if p.keep_invalid else "drop",
            near_duplicate_threshold=p.near_duplicate_threshold, max_tokens=p.max_tokens,
            min_evidence=p.min_evidence,
        )
    )  # fmt: skip


def select_quietly(guard: ContextGuard, cands: list[Candidate]) -> Selection:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # negative similarities warn; not under test here
        return guard.select("q", cands)


@settings(max_examples=300, deadline=None)
@given(passages, staged_params())
def test_guard_with_stages_equals_plain_reference(
    rows: list[tuple[float | None, str]], p: PolicyParams
) -> None:
    cands = [Candidate(f"c{i}", t, s) for i, (s, t) in enumerate(rows)]
    sel = select_quietly(staged_guard(p), cands)
    cut_kept, cut_dropped = reference_select([s for s, _ in rows], p)
    tokens = [math.ceil(len(t) / 4) for _, t in rows]  # the default counter, chars:4
    kept, dropped, partner = reference_stages(
        cut_kept, [t for _, t in rows], tokens, p.near_duplicate_threshold, p.max_tokens
    )
    assert [c.id for c in sel.kept] == [f"c{i}" for i in kept]
    assert {d.index: d.reason for d in sel.dropped} == {**cut_dropped, **dropped}
    assert {
        d.index: d.duplicate_of_position for d in sel.dropped if d.duplicate_of is not None
    } == partner
    for d in sel.dropped:  # the id of the passage at that position, or neither
        position = d.duplicate_of_position
        assert d.duplicate_of == (None if position is None else f"c{position}")


@settings(max_examples=300, deadline=None)
@given(passages, staged_params())
def test_stage_invariants(rows: list[tuple[float | None, str]], p: PolicyParams) -> None:
    cands = [Candidate(f"c{i}", t, s) for i, (s, t) in enumerate(rows)]
    sel = select_quietly(staged_guard(p), cands)
    plain = select_quietly(
        staged_guard(replace(p, near_duplicate_threshold=None, max_tokens=None)), cands
    )
    kept = [d.index for d in sel.kept_decisions]
    # nothing lost, nothing twice, every drop has a reason, the cap holds
    assert sorted(kept + [d.index for d in sel.dropped]) == list(range(len(rows)))
    assert all(d.reason is not None and d.message for d in sel.dropped)
    assert len(kept) <= p.max_k
    # the stages keep a subsequence of what the cut kept, in the same order
    before = [d.index for d in plain.kept_decisions]
    assert kept == [i for i in before if i in set(kept)]
    # ranks: kept first, then the stages' drops, then the cut's, as numbered
    assert [d.rank for d in sel.decisions] == list(range(len(rows)))
    # the budget holds; no two kept passages are near-duplicates
    if p.max_tokens is not None:
        assert sum(math.ceil(len(rows[i][1]) / 4) for i in kept) <= p.max_tokens
    if p.near_duplicate_threshold is not None:
        sets = [shingles(rows[i][1]) for i in kept]
        for a in range(len(sets)):
            for b in range(a):
                both = sets[a] and sets[b]
                assert not both or len(sets[a] & sets[b]) / len(sets[a] | sets[b]) < (
                    p.near_duplicate_threshold
                )
    # a near-duplicate names a passage ranked above it, with that passage's id: a kept
    # one, or one the budget then dropped (the message says which)
    reasons = {d.index: d.reason for d in sel.dropped}
    for d in sel.dropped:
        if d.reason is Reason.NEAR_DUPLICATE:
            first = d.duplicate_of_position
            assert first is not None and d.duplicate_of == cands[first].id
            assert before.index(first) < before.index(d.index)
            assert repr(cands[first].id) in d.message
            if first in kept:
                assert "near-duplicate of kept id" in d.message
            else:
                assert reasons[first] is Reason.OVER_TOKEN_BUDGET
                assert "did not fit in max_tokens either" in d.message
    # a passage over the budget was kept by the cut; turning the stages off keeps it
    for d in sel.dropped:
        if d.reason in (Reason.OVER_TOKEN_BUDGET, Reason.NEAR_DUPLICATE):
            assert d.index in before


@settings(max_examples=150, deadline=None)
@given(st.lists(passages, min_size=1, max_size=6), staged_params())
def test_stages_on_many_rows_equal_the_guard_row_by_row(
    batch: list[list[tuple[float | None, str]]], p: PolicyParams
) -> None:
    """The calibration path: the policy on a padded matrix, then run_stages on every
    row at once == each row alone through ContextGuard.select."""
    width = max((len(r) for r in batch), default=0)
    x = np.full((len(batch), width), np.nan)
    present = np.zeros((len(batch), width), dtype=bool)
    for q, r in enumerate(batch):
        x[q, : len(r)] = [math.nan if s is None else s for s, _ in r]
        present[q, : len(r)] = True
    matrix = apply_policy(x, np.isfinite(x), p, present)
    kept_rows = [matrix.kept_positions(q) for q in range(len(batch))]
    cols = max((len(k) for k in kept_rows), default=0)
    positions = np.full((len(batch), cols), -1, dtype=np.intp)
    tokens = np.zeros((len(batch), cols), dtype=np.int64)
    sets = []
    for q, k in enumerate(kept_rows):
        positions[q, : len(k)] = k
        tokens[q, : len(k)] = [math.ceil(len(batch[q][i][1]) / 4) for i in k]
        sets.append([shingles(batch[q][i][1]) for i in k])
    state = run_stages(start_state(positions), p, shingles=sets, tokens=tokens)
    guard = staged_guard(p)
    for q, r in enumerate(batch):
        sel = select_quietly(guard, [Candidate(f"c{i}", t, s) for i, (s, t) in enumerate(r)])
        assert [c.id for c in sel.kept] == [f"c{i}" for i in state.kept_positions(q)]


def test_rows_of_valid_scores_cut_as_rows_with_a_presence_mask() -> None:
    # rank() marks rows whose every position holds a valid score as complete, and the
    # cut then skips its per-row validity checks; the same rows ranked with a presence
    # mask (all True) take the general path: every figure of the cut must agree
    rng = np.random.default_rng(3)
    x = np.round(rng.normal(size=(40, 9)), 1)  # ties and non-positive tops included
    x[5] = -np.abs(x[5])
    valid = np.isfinite(x)
    fast, general = rank(x, valid), rank(x, valid, np.ones_like(valid))
    assert fast.complete and not general.complete
    for t in (0.0, 0.5, 1.0):
        for min_k in (0, 1, 3):
            for cut in CutRule:
                p = PolicyParams(max_k=6, min_k=min_k, relative_threshold=t, cut=cut)
                a, b = cut_ranked(fast, p), cut_ranked(general, p)
                for field in ("n_kept", "n_kept_valid", "top", "threshold_skipped"):
                    assert np.array_equal(getattr(a, field), getattr(b, field)), field
                assert np.array_equal(a.reasons, b.reasons) and np.array_equal(a.order, b.order)
                assert all(map(np.array_equal, a.prefixes, b.prefixes))
