"""Utilities from labels under each profile's rules, given values and abstention."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.calibration import UtilityRules
from ragguard.calibration.data.arrays import build_arrays
from ragguard.calibration.data.utility import abstention_utility, label_utility
from ragguard.profiles import ProfileSpec, resolve_profile

# ranked by score: a relevant, b unjudged (rank 2), c known distractor, d judged not
# relevant at 0.75, e at exactly 0.7 x top, f just below, g without a score (last)
SCORES = {"a": 1.0, "b": 0.9, "c": 0.8, "d": 0.75, "e": 0.7, "f": 0.69, "g": math.nan}
GRADES = {"a": 1, "d": 0}


def utilities(profile: str, **kw: object) -> list[float]:
    arrays = build_arrays(
        ["q"],
        [SCORES],
        [GRADES],
        distractors=[{"c"}],
        profile=profile,
        **kw,  # type: ignore[arg-type]
    )
    return arrays.utility[0].tolist()


def test_support_profile_rules() -> None:
    # ratio 0.7, top 3 ranks, known -1.0, hard negative -0.5
    assert utilities("support") == [1.0, -0.5, -1.0, -0.5, -0.5, 0.0, 0.0]


def test_medical_profile_is_stricter() -> None:
    # ratio 0.5, known and hard -1.0: f (0.69 >= 0.5) is a hard negative too
    assert utilities("medical") == [1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0]


def test_creative_profile_is_relaxed() -> None:
    # ratio 0.9, rank window 1, known -0.5, hard -0.2: only b (0.9 >= 0.9) is hard
    assert utilities("creative") == [1.0, -0.2, -0.5, 0.0, 0.0, 0.0, 0.0]


def test_partial_grades() -> None:
    arrays = build_arrays(
        ["q"],
        [{"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1, "e": 0.05}],
        [{"a": 3, "b": 2, "c": 1, "d": 2}],
        rules=UtilityRules(relevant_grade=3, partial_grade=2),
    )
    # c has grade 1 < partial: not relevant, inside the top 3 -> hard negative
    assert arrays.utility[0].tolist() == [1.0, 0.5, -0.5, 0.5, 0.0]


def test_given_utilities_and_abstention_take_precedence() -> None:
    arrays = build_arrays(
        ["q"],
        [{"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1}],
        [{"a": 1, "d": 1}],
        utilities=[{"b": 0.25, "d": -0.75}],
        no_response=[{"a": 0.2, "c": 0.6, "d": 0.5}],
    )
    # a: relevant, 1 - 0.2; b: given; c: irrelevant, -(1 - 0.6); d: given beats abstention
    assert arrays.utility[0].tolist() == pytest.approx([0.8, 0.25, -0.4, -0.75])


def test_abstention_utility_is_eq_2() -> None:
    got = abstention_utility([True, False, True], [0.0, 0.25, math.nan])
    assert got[:2].tolist() == [1.0, -0.75]
    assert math.isnan(got[2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        abstention_utility([True], [1.5])


def test_score_rule_skipped_without_a_positive_top_or_without_scores() -> None:
    negative = build_arrays(["q"], [{"a": -0.1, "b": -0.2, "c": -0.3, "d": -0.4}], [{}])
    assert negative.utility[0].tolist() == [-0.5, -0.5, -0.5, 0.0]  # rank rule only
    unscored = build_arrays(
        ["q"], [{"a": math.nan, "b": math.nan, "c": math.nan, "d": math.nan}], [{}],
        score_kind=None,
    )  # fmt: skip
    assert unscored.utility[0].tolist() == [-0.5, -0.5, -0.5, 0.0]


def test_label_utility_and_rules_validation() -> None:
    assert label_utility([0, 1, 2, 3], UtilityRules(3, 2)).tolist() == [0.0, 0.0, 0.5, 1.0]
    assert label_utility([-1, 0, 1, 5]).tolist() == [0.0, 0.0, 1.0, 1.0]
    for bad in ({"relevant_grade": 0}, {"relevant_grade": 2, "partial_grade": 2},
                {"relevant_grade": True}, {"relevant_grade": 3, "partial_grade": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            UtilityRules(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["similarity", "distance", "logit", "probability", "rrf"])
def test_score_ratio_rule_flags_what_the_runtime_threshold_keeps(kind: str) -> None:
    """Calibration and runtime share one scale: with the rank window off, the non-relevant
    candidates a profile flags by score ratio are exactly those a guard with
    relative_threshold = ratio keeps."""
    profile = resolve_profile("ratio", {"ratio": ProfileSpec(distractor_top_ranks=0)})
    rng = np.random.default_rng(4)
    ranges = {"similarity": (0.1, 1.0), "distance": (0.0, 2.0), "logit": (-6.0, 6.0),
              "probability": (0.0, 1.0), "rrf": (0.01, 0.033)}  # fmt: skip
    for _ in range(20):
        raw = rng.uniform(*ranges[kind], size=12).tolist()
        ids = [f"d{i}" for i in range(12)]
        arrays = build_arrays(
            ["q"], [dict(zip(ids, raw, strict=True))], [{}], score_kind=kind, profile=profile
        )
        flagged = {arrays.doc_ids(0)[i] for i, u in enumerate(arrays.utility[0].tolist()) if u < 0}
        guard = ContextGuard(
            GuardConfig(
                score_kind=kind, relative_threshold=profile.distractor_score_ratio,
                max_k=12, min_k=0,
            )
        )  # fmt: skip
        kept = guard.select("q", [Candidate(i, score=s) for i, s in zip(ids, raw, strict=True)])
        assert flagged == {c.id for c in kept.kept}
