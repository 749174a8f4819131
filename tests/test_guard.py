"""ContextGuard.select on good and bad input: clear answers, nothing lost."""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import pickle
import threading
import warnings
from collections.abc import Callable

import pytest

from ragguard import (
    ArgumentTypeError,
    Candidate,
    CandidateError,
    ConfigError,
    ContextGuard,
    DuplicateIdError,
    GuardConfig,
    InvalidScoreError,
    RagguardError,
    Reason,
    ScoreWarning,
    Selection,
    Verdict,
)
from ragguard.selecting import CallStage, Drop, Stage, State
from ragguard.testing import FakeReranker


def sim_guard(**settings: object) -> ContextGuard:
    base: dict[str, object] = {"score_kind": "similarity", "max_k": 3, "relative_threshold": 0.7}
    return ContextGuard(GuardConfig(**{**base, **settings}))


def cands(*scores: float | None) -> list[Candidate]:
    return [Candidate(f"d{i}", f"text {i}", s) for i, s in enumerate(scores)]


def ids(items: list[Candidate]) -> list[str]:
    return [c.id for c in items]


def assert_nothing_lost(sel: Selection, n: int) -> None:
    indices = sorted([d.index for d in sel.decisions])
    assert indices == list(range(n))
    assert len(sel.kept) + len(sel.dropped) == n
    assert all(d.reason is not None and d.message for d in sel.dropped)


def test_quick_start_example() -> None:
    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.7, score_kind="similarity"))
    sel = guard.select("What was my 500 lb deadlift PR?", cands(0.62, 0.91, 0.88, 0.3, 0.86, 0.85))
    assert ids(sel.kept) == ["d1", "d2", "d4"]
    reasons = {d.candidate.id: d.reason for d in sel.dropped}
    assert reasons == {
        "d5": Reason.OVER_MAX_K,
        "d0": Reason.BELOW_RELATIVE_THRESHOLD,
        "d3": Reason.BELOW_RELATIVE_THRESHOLD,
    }
    assert_nothing_lost(sel, 6)


def test_empty_input() -> None:
    sel = sim_guard().select("q", [])
    assert sel.kept == [] and sel.dropped == [] and sel.decisions == ()


def test_one_candidate_is_kept() -> None:
    sel = sim_guard().select("q", cands(0.1))
    assert ids(sel.kept) == ["d0"]


def test_all_scores_equal_keeps_up_to_max_k() -> None:
    for cut in ("none", "gap", "autocut"):
        sel = sim_guard(cut=cut).select("q", cands(0.5, 0.5, 0.5, 0.5))
        assert ids(sel.kept) == ["d0", "d1", "d2"]
        assert [d.reason for d in sel.dropped] == [Reason.OVER_MAX_K]


def test_all_scores_missing_follow_the_policy() -> None:
    inputs = cands(None, None, None, None)
    guard = sim_guard()
    # G-09: every score invalid left an empty selection without a word
    with pytest.warns(ScoreWarning) as caught:
        sel = guard.select("q", inputs)
    assert sel.kept == []
    assert {d.reason for d in sel.dropped} == {Reason.INVALID_SCORE}
    assert "missing (None)" in sel.dropped[0].message
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("every candidate's score is missing, NaN or infinite, so ")
    assert "invalid_scores='keep_last'" in message and "scored=False" in message
    assert sel.warnings == (message,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per guard; each selection records it
        again = guard.select("q", cands(math.nan, math.inf, -math.inf))
    assert again.kept == [] and again.warnings == (message,)
    # with the rerank stage on, nothing is left to rerank: the same warning
    rerank = FakeReranker({}, default=0.9)
    with pytest.warns(ScoreWarning, match="every candidate's score is missing"):
        config = GuardConfig(score_kind="similarity", rerank={"enabled": True})
        sel = ContextGuard(config, reranker=rerank).select("q", inputs)
    assert sel.kept == [] and rerank.calls == []
    # one valid score is enough: nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ids(sim_guard().select("q", cands(None, 0.5, math.nan)).kept) == ["d1"]

    sel = sim_guard(invalid_scores="keep_last").select("q", inputs)
    assert ids(sel.kept) == ["d0", "d1", "d2"]
    assert [d.reason for d in sel.dropped] == [Reason.OVER_MAX_K]

    with pytest.raises(InvalidScoreError, match="d0"):
        sim_guard(invalid_scores="raise").select("q", inputs)


def test_nan_inf_none_never_become_zero() -> None:
    sel = sim_guard(min_k=0, relative_threshold=0.0).select(
        "q", cands(math.nan, 0.4, math.inf, None, -math.inf)
    )
    assert ids(sel.kept) == ["d1"]
    invalid = {d.candidate.id: d.message for d in sel.dropped}
    assert set(invalid) == {"d0", "d2", "d3", "d4"}
    assert "nan" in invalid["d0"] and "inf" in invalid["d2"] and "None" in invalid["d3"]
    assert all(d.normalized_score is None for d in sel.dropped)


def test_keep_last_puts_unscored_after_scored() -> None:
    sel = sim_guard(invalid_scores="keep_last", max_k=4).select("q", cands(None, 0.9, 0.2, 0.8))
    assert ids(sel.kept) == ["d1", "d3", "d0"]
    assert [d.candidate.id for d in sel.dropped] == ["d2"]
    assert_nothing_lost(sel, 4)


def test_negative_similarity_warns_once_with_defined_behaviour() -> None:
    guard = sim_guard()
    with pytest.warns(ScoreWarning) as record:
        sel = guard.select("q", cands(-2.0, -5.0, -9.0, -9.5))
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "below -1" in messages[0] and "score_kind='logit'" in messages[0]
    assert "relative_threshold needs a positive top score" in messages[1]
    # top <= 0: relative threshold skipped, cap applies
    assert ids(sel.kept) == ["d0", "d1", "d2"]
    assert any("relative_threshold needs a positive top score" in w for w in sel.warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = guard.select("q", cands(-2.0, -5.0))  # already warned: silent
    assert again.warnings  # but still recorded on the selection


def test_slightly_negative_cosine_similarities_are_ordinary() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = sim_guard().select("q", cands(0.62, -0.04, 0.55, -0.2))
    assert ids(sel.kept) == ["d0", "d2"]
    assert sel.warnings == ()


def test_distances_declared_as_similarity_warn() -> None:
    guard = sim_guard()
    with pytest.warns(ScoreWarning, match="increase along the input order"):
        sel = guard.select("q", cands(0.12, 0.35, 0.41, 0.9))
    # as declared, the largest "similarity" ranks first
    assert ids(sel.kept)[0] == "d3"


def test_distance_kind_flips_ranking() -> None:
    guard = ContextGuard(score_kind="distance", max_k=2, relative_threshold=0.5)
    sel = guard.select("q", cands(0.12, 0.35, 3.0, 0.9))
    # normalised: 1/1.12=.893, 1/1.35=.741, 1/4=.25, 1/1.9=.526; bar .446 -> d2 below
    assert ids(sel.kept) == ["d0", "d1"]
    assert {d.candidate.id: d.reason for d in sel.dropped} == {
        "d3": Reason.OVER_MAX_K,
        "d2": Reason.BELOW_RELATIVE_THRESHOLD,
    }


def test_logit_kind_thresholds_probabilities() -> None:
    guard = ContextGuard(score_kind="logit", max_k=5, relative_threshold=0.5)
    sel = guard.select("q", cands(-1.0, 3.0, -4.0, 0.5))
    # sigmoid: .269, .953, .018, .622; bar .476 -> keep d1, d3
    assert ids(sel.kept) == ["d1", "d3"]
    assert sel.kept_decisions[0].normalized_score == pytest.approx(1 / (1 + math.exp(-3)))


def test_unsorted_input_comes_out_best_first() -> None:
    sel = sim_guard(relative_threshold=0.0, max_k=5).select("q", cands(0.3, 0.9, 0.1, 0.5))
    assert ids(sel.kept) == ["d1", "d3", "d0", "d2"]
    assert [d.rank for d in sel.kept_decisions] == [0, 1, 2, 3]


def test_duplicate_ids_keep_best_by_default() -> None:
    inputs = [Candidate("a", "x", 0.5), Candidate("b", "y", 0.8), Candidate("a", "x'", 0.9)]
    sel = sim_guard(relative_threshold=0.0).select("q", inputs)
    assert [(c.id, c.score) for c in sel.kept] == [("a", 0.9), ("b", 0.8)]
    (dup,) = sel.dropped
    assert dup.reason is Reason.DUPLICATE_ID and dup.index == 0 and "position 2" in dup.message
    assert_nothing_lost(sel, 3)


def test_duplicate_ids_other_rules() -> None:
    inputs = [Candidate("a", "x", 0.5), Candidate("b", "y", 0.8), Candidate("a", "x'", 0.9)]
    first = sim_guard(relative_threshold=0.0, duplicates="keep_first").select("q", inputs)
    assert [(c.id, c.score) for c in first.kept] == [("b", 0.8), ("a", 0.5)]
    everything = sim_guard(relative_threshold=0.0, duplicates="keep_all").select("q", inputs)
    assert len(everything.kept) == 3
    with pytest.raises(DuplicateIdError, match="'a'"):
        sim_guard(duplicates="raise").select("q", inputs)


@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_keep_first_keeps_the_first_copy_with_a_valid_score(bad: float | None) -> None:
    inputs = [Candidate("a", "x", bad), Candidate("b", "y", 0.8), Candidate("a", "x'", 0.6)]
    sel = sim_guard(relative_threshold=0.0, duplicates="keep_first").select("q", inputs)
    assert [(c.id, c.score) for c in sel.kept] == [("b", 0.8), ("a", 0.6)]
    (dup,) = sel.dropped
    assert dup.index == 0 and dup.reason is Reason.DUPLICATE_ID
    assert dup.message == "duplicate of id 'a' at input position 2"
    assert_nothing_lost(sel, 3)


def test_keep_first_is_still_first_among_valid_copies() -> None:
    inputs = [Candidate("a", "x", None), Candidate("a", "x'", 0.3), Candidate("a", "x''", 0.9)]
    sel = sim_guard(relative_threshold=0.0, duplicates="keep_first").select("q", inputs)
    assert [(c.id, c.score) for c in sel.kept] == [("a", 0.3)]  # not the best one
    assert {d.index: d.reason for d in sel.dropped} == {
        0: Reason.DUPLICATE_ID,
        2: Reason.DUPLICATE_ID,
    }
    # no copy has a valid score: the first stays, and invalid_scores decides about it
    inputs = [Candidate("a", "x", None), Candidate("a", "x'", math.nan), Candidate("b", "y", 0.8)]
    sel = sim_guard(duplicates="keep_first").select("q", inputs)
    assert ids(sel.kept) == ["b"]
    assert {d.index: d.reason for d in sel.dropped} == {
        0: Reason.INVALID_SCORE,
        1: Reason.DUPLICATE_ID,
    }
    assert_nothing_lost(sel, 3)


def test_ten_thousand_candidates() -> None:
    n = 10_000
    inputs = [Candidate(f"d{i}", score=((i * 7919) % n) / n) for i in range(n)]
    sel = sim_guard(max_k=10, relative_threshold=0.5).select("q", inputs)
    assert [c.score for c in sel.kept] == [(n - i) / n for i in range(1, 11)]
    assert_nothing_lost(sel, n)
    counts = {r: sum(d.reason is r for d in sel.dropped) for r in Reason}
    # scores are k / n for k = 0..9999; the bar is 0.5 * 0.9999, so k >= 5000 passes it
    assert counts[Reason.OVER_MAX_K] == 5000 - 10
    assert counts[Reason.BELOW_RELATIVE_THRESHOLD] == 5000


def test_unknown_score_kind_only_caps_and_warns_once() -> None:
    guard = ContextGuard(max_k=2)  # support profile: relative_threshold 0.7, no score_kind
    with pytest.warns(ScoreWarning, match="no score_kind is set"):
        sel = guard.select("q", cands(0.1, 0.9, 0.5))
    assert ids(sel.kept) == ["d0", "d1"]  # input order, no threshold
    assert all(d.normalized_score is None for d in sel.decisions)


def test_unknown_kind_is_silent_when_no_score_rule_is_configured() -> None:
    guard = ContextGuard(max_k=2, relative_threshold=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = guard.select("q", cands(None, None, None))
    assert ids(sel.kept) == ["d0", "d1"]


def test_per_call_score_kind_overrides_config() -> None:
    guard = ContextGuard(max_k=5, relative_threshold=0.5)
    sel = guard.select("q", cands(0.1, 1.0, 2.0), score_kind="distance")
    assert ids(sel.kept) == ["d0", "d1"]  # 1/1.1, 1/2 >= .5 * .909; 1/3 is not


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        (None, "got NoneType; pass [] when the retriever found nothing"),
        (Candidate("a", score=0.5), "got Candidate; pass a list, [candidate]"),
        (3, "got int"),
        ("abc", "got str"),
        ({"a": Candidate("a", score=0.5)}, "got dict"),
    ],
)
def test_candidates_that_are_not_a_sequence_are_a_candidate_error(
    candidates: object, expected: str
) -> None:
    guard = sim_guard()
    message = f"candidates must be an iterable of Candidate objects (a list or tuple), {expected}"
    with pytest.raises(CandidateError) as info:
        guard.select("q", candidates)  # type: ignore[arg-type]
    assert str(info.value) == message
    with pytest.raises(CandidateError):
        asyncio.run(guard.aselect("q", candidates))  # type: ignore[arg-type]


def test_bad_call_arguments_are_named_errors() -> None:
    guard = sim_guard()
    with pytest.raises(CandidateError, match="query must be a str, got NoneType"):
        guard.select(None, cands(0.5))  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        guard.select("q", cands(0.5), score_kind="cosine")
    assert str(info.value) == (
        "score_kind='cosine' is not allowed; use one of 'similarity', 'distance', 'logit', "
        "'probability', 'rrf'"
    )
    for max_k in (0, -1, True, "3", 2.0):
        with pytest.raises(ConfigError, match="max_k must be an int >= 1"):
            guard.select("q", cands(0.5), max_k=max_k)  # type: ignore[arg-type]
    assert ids(guard.select("q", cands(0.9, 0.8), max_k=1).kept) == ["d0"]


def test_bad_constructor_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="config must be a GuardConfig, got dict"):
        ContextGuard({"max_k": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_selection must be callable"):
        ContextGuard(on_selection="print")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"cannot guard a builtins\.object"):
        sim_guard().wrap(object())
    # a wrong type stays a TypeError for callers who catch that
    assert issubclass(ArgumentTypeError, RagguardError) and issubclass(ArgumentTypeError, TypeError)


def test_not_candidates_is_a_clear_error() -> None:
    with pytest.raises(CandidateError, match="expects Candidate objects, got dict"):
        sim_guard().select("q", [{"id": "a", "score": 0.3}])  # type: ignore[list-item]
    with pytest.raises(CandidateError, match="real number"):
        Candidate("a", score="0.5")  # type: ignore[arg-type]
    with pytest.raises(CandidateError, match="real number"):
        Candidate("a", score=True)
    with pytest.raises(CandidateError, match="id must be a str"):
        Candidate(3)  # type: ignore[arg-type]


def test_callers_objects_are_never_mutated() -> None:
    originals = [{"page_content": f"p{i}", "metadata": {"k": [i]}} for i in range(4)]
    snapshot = copy.deepcopy(originals)
    meta = {"source": "notes.md"}
    inputs = [
        Candidate(f"d{i}", o["page_content"], s, metadata=meta, source=o)  # type: ignore[arg-type]
        for i, (o, s) in enumerate(zip(originals, [0.9, 0.2, 0.8, None], strict=True))
    ]
    sel = sim_guard().select("q", inputs)
    _ = sel.dropped, sel.decisions
    assert originals == snapshot
    assert meta == {"source": "notes.md"}
    assert sel.kept[0].source is originals[0]
    sel.kept[0].metadata["x"] = 1  # the candidate's own copy, not the caller's dict
    assert meta == {"source": "notes.md"}


def test_candidates_and_selections_pickle_and_copy() -> None:
    inputs = [Candidate("a", "x", 0.9, {"k": 1}), Candidate("b", "y", None)]
    sel = sim_guard().select("q", inputs)
    for clone in (pickle.loads(pickle.dumps(sel)), copy.deepcopy(sel)):
        assert [c.id for c in clone.kept] == ["a"]
        assert [(d.candidate.id, d.reason) for d in clone.dropped] == [("b", Reason.INVALID_SCORE)]
    assert pickle.loads(pickle.dumps(inputs[0])) == inputs[0]


def test_warning_points_at_the_callers_line() -> None:
    with pytest.warns(ScoreWarning) as record:
        sim_guard().select("q", cands(-0.5, -0.2))
    assert record[0].filename == __file__

    async def caller() -> Selection:
        return await sim_guard().aselect("q", cands(-0.5, -0.2))

    with pytest.warns(ScoreWarning) as record:
        asyncio.run(caller())
    assert record[0].filename == __file__  # the line that awaited aselect()


def test_on_selection_and_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Selection] = []
    guard = ContextGuard(GuardConfig(score_kind="similarity", max_k=1), on_selection=seen.append)
    with caplog.at_level(logging.DEBUG, logger="ragguard"):
        sel = guard.select("q", cands(0.9, 0.1))
    assert seen == [sel]
    assert "dropped 'd1': below_relative_threshold" in caplog.text


def test_aselect_matches_select() -> None:
    guard = sim_guard()
    inputs = cands(0.9, 0.1, 0.85, None)
    sync = guard.select("q", inputs)
    result = asyncio.run(guard.aselect("q", inputs))
    assert ids(result.kept) == ids(sync.kept)
    assert [(d.index, d.reason) for d in result.dropped] == [
        (d.index, d.reason) for d in sync.dropped
    ]


def test_config_and_settings_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="not both"):
        ContextGuard(GuardConfig(), max_k=3)


def test_from_profile_uses_profile_defaults() -> None:
    guard = ContextGuard.from_profile("medical", score_kind="similarity")
    assert (guard.config.max_k, guard.config.relative_threshold) == (3, 0.8)
    sel = guard.select("q", cands(1.0, 0.81, 0.79, 0.95, 0.9))
    assert ids(sel.kept) == ["d0", "d3", "d4"]


# --- answerability: min_evidence ---------------------------------------------------------


def test_min_evidence_keeps_nothing_and_says_why() -> None:
    guard = sim_guard(min_evidence=0.5, min_k=2)
    sel = guard.select("q", cands(0.45, 0.3, None))
    assert_nothing_lost(sel, 3)
    assert sel.kept == [] and sel.verdict is Verdict.INSUFFICIENT
    assert [(d.candidate.id, d.reason) for d in sel.dropped] == [
        ("d0", Reason.INSUFFICIENT_EVIDENCE),
        ("d1", Reason.INSUFFICIENT_EVIDENCE),
        ("d2", Reason.INVALID_SCORE),
    ]
    assert sel.dropped[0].message == (
        "not enough evidence: the best normalised score 0.45 is below min_evidence 0.5, so "
        "nothing is kept"
    )
    assert sel.dropped[0].normalized_score == 0.45  # the score is still reported
    # at the floor the usual rules decide, and the verdict says so
    sel = guard.select("q", cands(0.5, 0.3, None))
    assert ids(sel.kept) == ["d0", "d1"] and sel.verdict is Verdict.ANSWERABLE
    # off: the same scores keep the best ones
    assert ids(sim_guard(min_k=2).select("q", cands(0.45, 0.3)).kept) == ["d0", "d1"]


def test_min_evidence_reads_the_normalised_scale() -> None:
    # distances 0.5 and 3.0 normalise to 1 / (1 + d): 0.667 and 0.25
    guard = sim_guard(score_kind="distance", min_evidence=0.6)
    assert ids(guard.select("q", cands(0.5, 3.0)).kept) == ["d0"]
    assert guard.select("q", cands(1.0, 3.0)).kept == []  # 0.5 < 0.6


def test_min_evidence_with_an_unknown_score_kind_is_skipped_with_the_usual_warning() -> None:
    guard = ContextGuard(max_k=2, relative_threshold=0.0, min_evidence=0.99)
    with pytest.warns(ScoreWarning, match="no score_kind is set"):
        sel = guard.select("q", cands(0.1, 0.2, 0.3))
    assert ids(sel.kept) == ["d0", "d1"] and sel.verdict is Verdict.ANSWERABLE


def test_min_evidence_reads_rerank_probabilities_and_keeps_nothing_below_top_n() -> None:
    texts = {"a": 0.3, "b": 0.2}
    guard = ContextGuard(
        GuardConfig(score_kind="similarity", max_k=3, relative_threshold=0.0, min_evidence=0.5,
                    rerank={"enabled": True, "top_n": 2, "beyond_top_n": "keep_below",
                            "relative_threshold": 0.0}),
        reranker=FakeReranker(texts),
    )  # fmt: skip
    # retrieval scores are high, the reranker's probabilities are not
    inputs = [Candidate("a", "a", 0.95), Candidate("b", "b", 0.9), Candidate("c", "c", 0.85)]
    sel = guard.select("q", inputs)
    assert_nothing_lost(sel, 3)
    assert sel.kept == [] and sel.verdict is Verdict.INSUFFICIENT
    by_id = {d.candidate.id: d for d in sel.dropped}
    assert {i: d.reason for i, d in by_id.items()} == dict.fromkeys(
        "abc", Reason.INSUFFICIENT_EVIDENCE
    )
    assert by_id["a"].message == (
        "not enough evidence: the best rerank probability 0.3 is below min_evidence 0.5, so "
        "nothing is kept"
    )
    assert by_id["c"].message.startswith(
        "not reranked (retrieval rank 3 is below rerank.top_n=2); not enough evidence"
    )
    assert sel.rerank is not None and sel.rerank.n_kept_below == 0
    # one probability at the floor: the cut keeps as usual, and c fills the room
    guard = ContextGuard(guard.config, reranker=FakeReranker({"a": 0.5, "b": 0.2}))
    assert ids(guard.select("q", inputs).kept) == ["a", "b", "c"]


# -- a stage added to the guard's list: one class, one line ----------------------------


class DropWord(Stage):
    """A test-only stage after the cut: drops the kept passages whose text holds a word."""

    __slots__ = ("word",)

    def __init__(self, *, word: str) -> None:
        self.word = word

    def __call__(self, s: State, /) -> None:
        gone = [i for i in s.kept if self.word in s.candidates[i].text.split()]
        if gone:
            s.kept = [i for i in s.kept if i not in gone]
            s.records.append((self, gone))

    def drops(self, s: State, facts: list[int], /) -> list[Drop]:
        return [Drop(i, Reason.OVER_MAX_K, detail=self.word) for i in facts]

    def explain(self, drop: Drop, s: State, /) -> str:
        return f"its text says {drop.detail!r}"


class Judge(CallStage):
    """A test-only model call: a judge says which kept passages answer the query."""

    __slots__ = ("judge", "threads")

    def __init__(self, *, judge: Callable[[str, list[str]], list[bool]]) -> None:
        self.judge = judge
        self.threads: list[int] = []

    def request(self, s: State, /) -> tuple[str, list[str]] | None:
        return (s.query, [s.candidates[i].text for i in s.kept]) if s.kept else None

    def call(self, request: tuple[str, list[str]], /) -> list[bool]:
        self.threads.append(threading.get_ident())
        return self.judge(*request)

    def apply(self, s: State, response: list[bool], /) -> None:
        cols = list(s.kept)
        s.kept = [i for i, ok in zip(cols, response, strict=True) if ok]
        gone = [i for i, ok in zip(cols, response, strict=True) if not ok]
        if gone:
            s.records.append((self, gone))

    def drops(self, s: State, facts: list[int], /) -> list[Drop]:
        return [Drop(i, Reason.BELOW_MIN_SCORE) for i in facts]

    def explain(self, drop: Drop, s: State, /) -> str:
        return f"the judge says it does not answer {s.query!r}"


def judged_guard() -> tuple[ContextGuard, Judge]:
    guard = sim_guard(max_k=4)
    guard.stages.append(DropWord(word="stale"))  # the one line a post-cut stage needs
    judge = Judge(judge=lambda query, texts: ["wrong" not in t for t in texts])
    guard.stages.append(judge)  # the one line a call stage needs
    return guard, judge


JUDGED = [
    Candidate("d0", "fresh fact", 0.9),
    Candidate("d1", "stale fact", 0.85),
    Candidate("d2", "another fresh fact", 0.8),
    Candidate("d3", "a wrong fact", 0.75),
    Candidate("d4", "far away", 0.1),
]


def check_judged(sel: Selection) -> None:
    assert [c.id for c in sel.kept] == ["d0", "d2"]
    assert [(d.candidate.id, d.kept, d.rank) for d in sel.decisions] == [
        ("d0", True, 0),
        ("d2", True, 1),
        ("d1", False, 2),  # dropped after the cut, in the cut's order
        ("d3", False, 3),
        ("d4", False, 4),  # dropped by the cut itself
    ]
    by_id = {d.candidate.id: d for d in sel.dropped}
    assert (by_id["d1"].reason, by_id["d1"].message) == (Reason.OVER_MAX_K, "its text says 'stale'")
    assert by_id["d3"].reason is Reason.BELOW_MIN_SCORE
    assert by_id["d3"].message == "the judge says it does not answer 'q'"
    assert by_id["d3"].normalized_score == pytest.approx(0.75)  # the cut's score stays
    assert by_id["d4"].reason is Reason.BELOW_RELATIVE_THRESHOLD
    assert all(d.message == "kept" for d in sel.kept_decisions)


def test_a_stage_and_a_call_stage_added_in_one_line_each_run_in_select() -> None:
    guard, judge = judged_guard()
    check_judged(guard.select("q", JUDGED))
    assert judge.threads == [threading.get_ident()]  # select() calls it blocking


@pytest.mark.parametrize("entry", [42, None, lambda state: None, "Cut"])
def test_a_stage_list_entry_that_is_not_a_stage_is_refused_in_one_line(entry: object) -> None:
    guard = ContextGuard(score_kind="similarity")
    guard.stages.append(entry)  # type: ignore[arg-type]
    candidates = [Candidate("a", "text", 0.9)]
    for call in (
        lambda: guard.select("q", candidates),
        lambda: asyncio.run(guard.aselect("q", candidates)),
    ):
        with pytest.raises(ArgumentTypeError, match=r"ContextGuard\.stages holds") as raised:
            call()
        assert "\n" not in str(raised.value) and repr(entry) in str(raised.value)


def test_a_stage_and_a_call_stage_added_in_one_line_each_run_in_aselect() -> None:
    guard, judge = judged_guard()
    check_judged(asyncio.run(guard.aselect("q", JUDGED)))
    # aselect() awaits the call, made off the event loop's thread
    assert len(judge.threads) == 1 and judge.threads[0] != threading.get_ident()


def test_a_call_stage_with_nothing_to_ask_is_not_called() -> None:
    guard, judge = judged_guard()
    sel = guard.select("q", [Candidate("d1", "stale fact", 0.9)])
    assert sel.kept == [] and judge.threads == []
    assert [d.message for d in sel.dropped] == ["its text says 'stale'"]
