"""Candidate and Selection: the fast constructor adapters use, and the kept decisions
built without the dropped ones' (issue 39)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.candidate import candidate_of
from ragguard.errors import CandidateError
from ragguard.policy import PolicyResult
from tests.adapters.helpers import keyword_reranker

PHRASE = "the plant built electric cars on three shifts in the year before"
WORDS = PHRASE.split()


def _candidates() -> list[Candidate]:
    """Scores in input order, a repeated id, a near-copy, a missing score."""
    out = [Candidate(f"d{i}", " ".join(WORDS[i:] + WORDS[:i]), 1.0 - 0.05 * i) for i in range(10)]
    out += [Candidate("d1", out[1].text, 0.5), Candidate("near", out[0].text, 0.97)]
    return [*out, Candidate("none", "no score", None)]


@pytest.mark.parametrize(
    ("settings", "reranker"),
    [
        ({"max_k": 3}, None),
        ({"max_k": 6, "relative_threshold": 0.5, "near_duplicate_threshold": 0.8}, None),
        ({"max_k": 6, "max_tokens": 20, "conflicts": "flag"}, None),
        (
            {"max_k": 4, "rerank": {"enabled": True, "top_n": 3, "beyond_top_n": "keep_below"}},
            keyword_reranker,
        ),
        ({"max_k": 3, "min_evidence": 0.999}, None),
    ],
)
@pytest.mark.usefixtures("untraced")
def test_kept_decisions_are_built_without_the_dropped_ones(
    settings: dict[str, Any], reranker: Any
) -> None:
    guard = ContextGuard(GuardConfig(score_kind="similarity", **settings), reranker=reranker)
    sel = guard.select("plant cars", _candidates())
    kept = sel.kept_decisions
    assert "decisions" not in vars(sel)  # nothing built the whole list
    assert kept == [d for d in sel.decisions if d.kept]
    assert [d.candidate for d in kept] == sel.kept
    assert sel.kept_decisions == kept  # read after the whole list: the same


@pytest.mark.parametrize(
    ("settings", "reranker"),
    [
        ({"max_k": 3}, None),
        ({"max_k": 6, "relative_threshold": 0.5, "near_duplicate_threshold": 0.8}, None),
        ({"max_k": 6, "max_tokens": 20, "conflicts": "flag"}, None),
        ({"max_k": 4, "rerank": {"enabled": True, "top_n": 8}}, keyword_reranker),
        ({"max_k": 3, "min_evidence": 0.999}, None),
        ({"max_k": 12, "invalid_scores": "keep_last"}, None),
    ],
)
@pytest.mark.usefixtures("untraced")
def test_kept_decisions_need_no_reason_codes_of_the_cut(
    settings: dict[str, Any], reranker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut's per-candidate reason codes (``PolicyResult.order`` / ``reasons``) are
    computed for the dropped candidates only: the kept ones' decisions never read them."""
    guard = ContextGuard(GuardConfig(score_kind="similarity", **settings), reranker=reranker)
    expected = guard.select("plant cars", _candidates()).kept_decisions

    def unread(result: PolicyResult) -> Any:
        raise AssertionError("the reason codes were computed")

    monkeypatch.setattr(PolicyResult, "order", property(unread))
    monkeypatch.setattr(PolicyResult, "reasons", property(unread))
    sel = guard.select("plant cars", _candidates())
    assert sel.kept_decisions == expected and expected
    with pytest.raises(AssertionError, match="reason codes"):
        sel.dropped  # noqa: B018 - the dropped ones' decisions do read them


@pytest.mark.parametrize("score", [0.5, None, 1, np.float64(0.25), 10**400, float("nan")])
def test_candidate_of_is_the_candidate_the_constructor_makes(score: Any) -> None:
    metadata = {"a": [1]}
    made = candidate_of("x", "text", score, metadata, source=metadata)
    expected = Candidate("x", "text", score, metadata, source=metadata)
    assert made == expected and type(made.score) is type(expected.score)
    assert made.metadata is not metadata and made.source is metadata


@pytest.mark.parametrize(
    "args",
    [
        (1, "t", 0.5, {}),
        ("x", None, 0.5, {}),
        ("x", "t", "0.5", {}),
        ("x", "t", True, {}),
        ("x", "t", 0.5, []),
    ],
)
def test_candidate_of_checks_what_a_framework_object_does_not_guarantee(
    args: tuple[Any, ...],
) -> None:
    with pytest.raises(CandidateError):
        candidate_of(*args, source=None)
