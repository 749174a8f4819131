"""The expected-utility rule: keep p * gain > (1 - p) * penalty, with the profile's
distractor penalty, in the policy and through the guard's rerank stage."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragguard import Candidate, ContextGuard, GuardConfig, Reason
from ragguard.config import profile_utility_cut
from ragguard.policy import PolicyParams, UtilityCut, apply_policy
from ragguard.profiles import BUILTIN_PROFILES
from tests.reference_policy import reference_select

PROBS = {"a": 0.9, "b": 0.55, "c": 0.4, "d": 0.25, "e": 0.1, "f": 0.5}


def kept_ids(p: PolicyParams, probs: dict[str, float]) -> list[str]:
    x = np.array([list(probs.values())])
    result = apply_policy(x, np.isfinite(x), p)
    names = list(probs)
    return [names[i] for i in result.kept_positions(0)]


@pytest.mark.parametrize(
    ("profile", "penalty", "kept"),
    [
        # medical: 1.0; keep p > 1/2. b: .55 > .45; f: .5 > .5 is false (strict)
        ("medical", 1.0, ["a", "b"]),
        # support: 0.5; keep p > 1/3. c: .4 > .6 x .5 = .3
        ("support", 0.5, ["a", "b", "f", "c"]),
        # creative: 0.2; keep p > 1/6. d: .25 > .75 x .2 = .15; e: .1 < .18
        ("creative", 0.2, ["a", "b", "f", "c", "d"]),
    ],
)
def test_profiles_cut_at_their_break_even_probability(
    profile: str, penalty: float, kept: list[str]
) -> None:
    cut = profile_utility_cut(BUILTIN_PROFILES[profile])
    assert cut == UtilityCut(gain=1.0, penalty=penalty)
    assert cut.threshold == pytest.approx(penalty / (1.0 + penalty))
    assert kept_ids(PolicyParams(max_k=10, min_k=0, expected_utility=cut), PROBS) == kept


def test_utility_cut_rejects_meaningless_values() -> None:
    with pytest.raises(ValueError, match="gain"):
        UtilityCut(gain=0.0)
    with pytest.raises(ValueError, match="penalty"):
        UtilityCut(penalty=-0.5)


probability = st.one_of(
    st.floats(0, 1, allow_nan=False), st.sampled_from([0.5, 1 / 3, 0.0, 1.0, None, math.nan])
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(probability, max_size=10),
    st.integers(1, 10),
    st.integers(0, 2),
    st.sampled_from([0.0, 0.2, 0.5, 1.0, 3.0]),
    st.sampled_from([None, 0.3]),
    st.booleans(),
)
def test_expected_utility_equals_the_plain_reference(
    scores: list[float | None],
    max_k: int,
    min_k: int,
    penalty: float,
    min_score: float | None,
    keep_invalid: bool,
) -> None:
    p = PolicyParams(
        max_k=max_k,
        min_k=min(min_k, max_k),
        min_score=min_score,
        expected_utility=UtilityCut(1.0, penalty),
        keep_invalid=keep_invalid,
    )
    x = np.array([[math.nan if s is None else s for s in scores]], dtype=np.float64)
    result = apply_policy(x, np.isfinite(x), p)
    n = int(result.n_kept[0])
    order = result.order[0].tolist()
    codes = result.reasons[0].tolist()
    from ragguard.policy import REASON_OF_CODE

    dropped = {i: REASON_OF_CODE[c] for i, c in zip(order[n:], codes[n:], strict=True)}
    assert (order[:n], dropped) == reference_select(scores, p)


class Table:
    """A reranker returning fixed probabilities per passage text."""

    score_kind = "probability"

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        return [PROBS[t] for t in texts]


@pytest.mark.parametrize(
    ("profile", "kept"),
    [("medical", ["a", "b"]), ("creative", ["a", "b", "f", "c", "d"])],
)
def test_guard_rerank_stage_cuts_by_expected_utility(profile: str, kept: list[str]) -> None:
    config = GuardConfig(
        profile=profile,
        score_kind="similarity",
        max_k=10,
        relative_threshold=0.0,
        rerank={"enabled": True, "top_n": 10, "expected_utility": True},
    )
    cands = [Candidate(name, name, 1.0 - i / 10) for i, name in enumerate(PROBS)]
    sel = ContextGuard(config, reranker=Table()).select("q", cands)
    assert [c.id for c in sel.kept] == kept
    assert {d.reason for d in sel.dropped} == {Reason.BELOW_EXPECTED_UTILITY}
    if profile == "medical":
        f = next(d for d in sel.dropped if d.candidate.id == "f")
        assert "distractor penalty 1" in f.message and "keep above 0.5" in f.message


def test_expected_utility_round_trips_through_toml(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    config = GuardConfig(profile="medical", rerank={"enabled": True, "expected_utility": True})
    back = GuardConfig.from_file(config.save(tmp_path / "g.toml"))
    assert back.rerank.expected_utility
    assert back.rerank_policy_params().expected_utility == UtilityCut(1.0, 1.0)
    assert GuardConfig().rerank_policy_params().expected_utility is None


def test_sweep_tells_settings_apart_that_differ_only_in_the_utility_cut() -> None:
    from ragguard.calibration import EvalSet
    from ragguard.calibration.fit.sweep import sweep

    es = EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": PROBS}}, score_kind="probability")
    points = [
        PolicyParams(max_k=6, min_k=0, expected_utility=UtilityCut(1.0, 1.0)),
        PolicyParams(max_k=6, min_k=0, expected_utility=UtilityCut(1.0, 0.2)),
    ]
    result = sweep(es.arrays(), points, ["recall"])
    assert result.kept[:, 0].tolist() == [2, 5]
