"""Per-candidate utilities in [-1, 1]: a utility given in the data, else an abstention
probability (``u = R * (1 - p_no)``), else the labels under a profile's rules
(``UtilityRules``); in full: docs/reference/data-formats.md ("Utilities")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.errors import ConfigError, EvalSetError
from ragguard.profiles import DEFAULT_PROFILE, Profile, resolve_profile

__all__ = [
    "UtilityRules",
    "abstention_utility",
    "as_profile",
    "candidate_utilities",
    "label_utility",
    "rules_of",
]

RELEVANT_UTILITY = 1.0
PARTIAL_UTILITY = 0.5


@dataclass(frozen=True, slots=True)
class UtilityRules:
    """Which grades count as relevant (+1.0) and partially relevant (+0.5).

    Attributes:
        relevant_grade: grades at or above this are relevant.
        partial_grade: grades at or above this (and below ``relevant_grade``) are
            partially relevant; ``None`` for binary relevance.
    """

    relevant_grade: int = 1
    partial_grade: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.relevant_grade, bool) or not isinstance(self.relevant_grade, int):
            raise ConfigError(f"relevant_grade must be an int, got {self.relevant_grade!r}")
        if self.relevant_grade < 1:
            raise ConfigError(f"relevant_grade must be >= 1, got {self.relevant_grade}")
        p = self.partial_grade
        if p is not None and (
            isinstance(p, bool) or not isinstance(p, int) or not 1 <= p < self.relevant_grade
        ):
            raise ConfigError(
                f"partial_grade must be an int in [1, relevant_grade={self.relevant_grade}) "
                f"or None, got {p!r}"
            )


def rules_of(profile: Profile, rules: UtilityRules | None = None) -> UtilityRules:
    """``rules`` when given, else the grades the profile counts as (partially) relevant."""
    if rules is not None:
        return rules
    return UtilityRules(profile.relevant_grade, profile.partial_grade)


def as_profile(profile: Profile | str | None) -> Profile:
    """A ``Profile`` from a profile, a built-in name or ``None`` (the default)."""
    if profile is None:
        return resolve_profile(DEFAULT_PROFILE)
    if isinstance(profile, Profile):
        return profile
    return resolve_profile(profile)


def label_utility(grades: ArrayLike, rules: UtilityRules | None = None) -> NDArray[np.float64]:
    """+1.0 for relevant grades, +0.5 for partially relevant ones, 0.0 otherwise (also the
    utility of a relevant passage the run did not retrieve)."""
    rules = rules or UtilityRules()
    g = np.asarray(grades, dtype=np.float64)
    out = np.where(g >= rules.relevant_grade, RELEVANT_UTILITY, 0.0)
    if rules.partial_grade is not None:
        partial = (g >= rules.partial_grade) & (g < rules.relevant_grade)
        out = np.where(partial, PARTIAL_UTILITY, out)
    return out


def abstention_utility(relevant: ArrayLike, no_response_prob: ArrayLike) -> NDArray[np.float64]:
    """The paper's Eq. 2: ``u = R * (1 - p_no)``, R = +1 if relevant else -1 (NaN
    ``p_no``: NaN).

    Raises:
        EvalSetError: a probability outside [0, 1]."""
    p = np.asarray(no_response_prob, dtype=np.float64)
    known = ~np.isnan(p)
    if ((p[known] < 0.0) | (p[known] > 1.0)).any():
        raise EvalSetError("no-response probabilities must lie in [0, 1]")
    sign = np.where(np.asarray(relevant, dtype=np.bool_), 1.0, -1.0)
    return sign * (1.0 - p)


def candidate_utilities(
    grades: NDArray[np.float64],
    scores: NDArray[np.float64],
    valid: NDArray[np.bool_],
    present: NDArray[np.bool_],
    *,
    distractor: NDArray[np.bool_] | None = None,
    given: NDArray[np.float64] | None = None,
    no_response: NDArray[np.float64] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
) -> NDArray[np.float64]:
    """Utilities of ranked candidates, (queries x candidates) matrices in ranked order as
    ``EvalArrays`` holds them; 0.0 on padding (rules: the module docstring)."""
    prof = as_profile(profile)
    rules = rules_of(prof, rules)
    base = label_utility(grades, rules)
    positive = base > 0
    not_relevant = ~positive & present

    q, n = grades.shape
    hard = np.zeros((q, n), dtype=np.bool_)
    if prof.distractor_top_ranks > 0:
        hard[:, : prof.distractor_top_ranks] = True
    if n:
        top = np.where(valid[:, 0], scores[:, 0], np.nan)
        with np.errstate(invalid="ignore"):
            bar = np.where(top > 0, prof.distractor_score_ratio * top, np.inf)
            hard |= valid & (scores >= bar[:, None])
    u = np.where(not_relevant & hard, prof.hard_negative_penalty, base)
    if distractor is not None:
        u = np.where(not_relevant & distractor, prof.known_distractor_penalty, u)
    if no_response is not None:
        measured = abstention_utility(positive, no_response)
        u = np.where(np.isnan(measured), u, measured)
    if given is not None:
        u = np.where(np.isnan(given), u, given)
    return np.where(present, u, 0.0)
