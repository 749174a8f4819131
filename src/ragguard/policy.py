"""The selection policy, once, vectorised over a (queries x candidates) matrix of
normalised scores: the guard calls it with one row, the calibration sweep with thousands
(docs/guides/selection.md; the rules' formulas are at their kernels below)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from ragguard.errors import ConfigError, EvalSetError

# Reductions called as ufunc methods: the numpy functions of the same name go through a
# Python wrapper first, which costs more than the work on one guard call's short row.
_all = np.logical_and.reduce
_count = np.add.reduce  # of a bool array: how many are True


class CutRule(StrEnum):
    """Optional label-free cut rule applied after the threshold rules."""

    NONE = "none"
    GAP = "gap"
    AUTOCUT = "autocut"


DEFAULT_CONFLICT_SIMILARITY = 0.5
"""The default ``conflict_similarity``, chosen on the 250 RAMDocs development questions
(``benchmarks/conflicts.py``, docs/benchmarks/conflicts.md)."""


DEFAULT_ANSWER_SIMILARITY = 0.4
"""The default ``conflict_answer_similarity``, chosen on the calibration half of the RAMDocs
development questions (``benchmarks/conflicts.py``, section d)."""


class ConflictDetector(StrEnum):
    """Which passages the conflict stage compares (``ragguard.conflicts``): near-copies that
    differ in a fact, passages whose answers to the question differ, or both."""

    NEAR_COPY = "near-copy"
    ANSWERS = "answers"
    BOTH = "both"


class ConflictMode(StrEnum):
    """What the conflict stage does with passages that disagree (``ragguard.conflicts``)."""

    OFF = "off"
    FLAG = "flag"
    DROP = "drop"
    KEEP_FIRST = "keep_first"
    PREFER = "prefer"


class Reason(StrEnum):
    """Machine-readable reason a candidate was dropped.

    ``not_reranked`` and ``rerank_failed`` also serve as ``Decision.rerank_reason``: why a
    candidate has no rerank score although the rerank stage is on.
    """

    INVALID_SCORE = "invalid_score"
    DUPLICATE_ID = "duplicate_id"
    BELOW_RELATIVE_THRESHOLD = "below_relative_threshold"
    BELOW_MIN_SCORE = "below_min_score"
    SCORE_GAP = "score_gap"
    AUTOCUT = "autocut"
    OVER_MAX_K = "over_max_k"
    NOT_RERANKED = "not_reranked"
    """Ranked by retrieval below ``rerank.top_n``, so the reranker never scored it."""
    RERANK_FAILED = "rerank_failed"
    """The rerank stage failed and the guard fell back to retrieval scores (fail_open)."""
    BELOW_EXPECTED_UTILITY = "below_expected_utility"
    """Its probability x the gain of a relevant passage does not exceed (1 - probability)
    x the distractor penalty ([`UtilityCut`][ragguard.UtilityCut])."""
    NEAR_DUPLICATE = "near_duplicate"
    """Its text is near-identical to a kept, higher-ranked passage
    (``near_duplicate_threshold``, ``ragguard.stages``)."""
    OVER_TOKEN_BUDGET = "over_token_budget"
    """Kept by the cut, but its tokens do not fit in what is left of ``max_tokens``
    (``ragguard.stages``)."""
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"
    """The best candidate's score is below ``min_evidence``: nothing is kept."""
    CONFLICT = "conflict"
    """It nearly repeats another kept passage but states different facts, and the
    ``conflicts`` rule dropped it (``ragguard.conflicts``)."""


# Integer codes used in the reason matrix. 0 = kept, -1 = padding (no candidate).
KEPT = 0
PADDING = -1
CODES: dict[Reason, int] = {reason: i + 1 for i, reason in enumerate(Reason)}
REASON_OF_CODE: dict[int, Reason] = {code: reason for reason, code in CODES.items()}


@dataclass(frozen=True, slots=True)
class UtilityCut:
    """The expected-utility rule: keep a passage whose probability ``p`` of being
    relevant makes keeping it worth more than leaving it out,
    ``p * gain > (1 - p) * penalty``.

    Attributes:
        gain: utility of a relevant passage in the context (> 0; 1.0 in every profile).
        penalty: harm of a distractor in the context, as a positive number (a profile's
            ``-hard_negative_penalty``).

    Example:
        >>> UtilityCut(gain=1.0, penalty=1.0).threshold, round(UtilityCut(1.0, 0.2).threshold, 4)
        (0.5, 0.1667)
    """

    gain: float = 1.0
    penalty: float = 1.0

    def __post_init__(self) -> None:
        for name, value, low in (("gain", self.gain, "> 0"), ("penalty", self.penalty, ">= 0")):
            real = isinstance(value, (int, float, np.integer, np.floating))
            ok = real and not isinstance(value, bool) and np.isfinite(value)
            if not (ok and (value > 0 if low == "> 0" else value >= 0)):
                raise ConfigError(f"UtilityCut {name} must be a finite number {low}, got {value!r}")

    @property
    def threshold(self) -> float:
        """The probability a passage must exceed: ``penalty / (gain + penalty)``."""
        return self.penalty / (self.gain + self.penalty)


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """Parameters of the selection policy."""

    max_k: int
    min_k: int = 1
    relative_threshold: float = 0.0
    min_score: float | None = None
    cut: CutRule = CutRule.NONE
    gap_buffer: int = 0
    gap_window: int | None = None
    autocut_jumps: int = 1
    keep_invalid: bool = False
    score_rules: bool = True
    expected_utility: UtilityCut | None = None
    near_duplicate_threshold: float | None = None
    max_tokens: int | None = None
    min_evidence: float | None = None
    conflicts: ConflictMode = ConflictMode.OFF
    conflict_similarity: float = DEFAULT_CONFLICT_SIMILARITY
    conflict_detector: ConflictDetector = ConflictDetector.NEAR_COPY
    conflict_answer_similarity: float = DEFAULT_ANSWER_SIMILARITY

    def __post_init__(self) -> None:
        if self.max_k < 1:
            raise ConfigError(f"max_k must be >= 1, got {self.max_k}")
        if not 0 <= self.min_k <= self.max_k:
            raise ConfigError(f"min_k must be in [0, max_k={self.max_k}], got {self.min_k}")
        if not 0.0 <= self.relative_threshold <= 1.0:
            raise ConfigError(
                f"relative_threshold must be in [0, 1], got {self.relative_threshold}"
            )
        if self.gap_buffer < 0:
            raise ConfigError(f"gap_buffer must be >= 0, got {self.gap_buffer}")
        if self.gap_window is not None and self.gap_window < 2:
            raise ConfigError(f"gap_window must be >= 2 or None, got {self.gap_window}")
        if self.autocut_jumps < 1:
            raise ConfigError(f"autocut_jumps must be >= 1, got {self.autocut_jumps}")
        t = self.near_duplicate_threshold
        if t is not None and not 0.0 < t <= 1.0:
            raise ConfigError(f"near_duplicate_threshold must be in (0, 1] or None, got {t}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")
        if self.min_evidence is not None and not np.isfinite(self.min_evidence):
            raise ConfigError(
                f"min_evidence must be a finite number or None, got {self.min_evidence}"
            )
        if not 0.0 < self.conflict_similarity <= 1.0:
            raise ConfigError(
                f"conflict_similarity must be in (0, 1], got {self.conflict_similarity}"
            )

    @property
    def uses_stages(self) -> bool:
        """Whether a stage after the cut is on (conflicts, near-duplicates, token budget)."""
        return (
            self.near_duplicate_threshold is not None
            or self.max_tokens is not None
            or self.conflicts is not ConflictMode.OFF
        )

    @property
    def uses_scores(self) -> bool:
        """Whether any rule of these parameters looks at score values."""
        return (
            self.relative_threshold > 0
            or self.min_score is not None
            or self.cut is not CutRule.NONE
            or self.expected_utility is not None
            or self.min_evidence is not None
        )


@dataclass(frozen=True, slots=True)
class Ranked:
    """Scores ranked once, to be cut under many parameter settings.

    Attributes:
        order: (Q, N) input positions: valid candidates by score (highest first, ties in
            input order), then invalid ones, then padding.
        scores: (Q, N) normalised scores along ``order``; ``-inf`` invalid, NaN padding.
        n_valid: (Q,) number of candidates with a valid score (they come first).
        n_present: (Q,) number of candidates.
        complete: every position of every row holds a valid score (the cut skips checks)."""

    order: NDArray[np.intp]
    scores: NDArray[np.float64]
    n_valid: NDArray[np.intp]
    n_present: NDArray[np.intp]
    complete: bool = False


@dataclass(frozen=True)
class PolicyResult:
    """What the policy decided, per row; the reason codes only when asked for.

    Attributes:
        ranked: the ranking that was cut.
        params: the parameters it was cut with.
        n_kept: (Q,) number of candidates kept.
        n_kept_valid: (Q,) how many of them have a valid score (they come first).
        top: (Q,) top normalised score (NaN where no score is valid).
        threshold_skipped: (Q,) rows whose top score was not positive.
        prefixes: (Q,) prefixes kept by the relative threshold, the floor, the
            expected-utility rule and the cut rule (``n_valid`` when off).
        abstained: (Q,) rows where ``min_evidence`` kept nothing; ``None`` when off."""

    ranked: Ranked
    params: PolicyParams
    n_kept: NDArray[np.intp]
    n_kept_valid: NDArray[np.intp]
    top: NDArray[np.float64]
    threshold_skipped: NDArray[np.bool_]
    prefixes: tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]
    abstained: NDArray[np.bool_] | None = None

    def kept_positions(self, row: int) -> list[int]:
        """Input positions of row ``row``'s kept candidates, best first."""
        order = self.ranked.order[row]
        m, n = int(self.n_kept_valid[row]), int(self.n_kept[row])
        if n == m:
            return order[:m].tolist()  # type: ignore[no-any-return]
        start = int(self.ranked.n_valid[row])
        return order[:m].tolist() + order[start : start + n - m].tolist()  # type: ignore[no-any-return]

    @cached_property
    def _codes(self) -> tuple[NDArray[np.intp], NDArray[np.int8]]:
        ranked, p = self.ranked, self.params
        q, size = ranked.scores.shape
        pos = np.arange(size)[None, :]
        p_thr, p_floor, p_eu, p_cut = (x[:, None] for x in self.prefixes)
        m = self.n_kept_valid[:, None]
        n_valid, n_present = ranked.n_valid[:, None], ranked.n_present[:, None]
        cut_code = CODES[Reason.AUTOCUT] if p.cut is CutRule.AUTOCUT else CODES[Reason.SCORE_GAP]
        codes = np.full((q, size), CODES[Reason.OVER_MAX_K], dtype=np.int8)
        codes[pos >= p_cut] = cut_code
        codes[pos >= p_eu] = CODES[Reason.BELOW_EXPECTED_UTILITY]
        codes[pos >= p_floor] = CODES[Reason.BELOW_MIN_SCORE]
        codes[pos >= p_thr] = CODES[Reason.BELOW_RELATIVE_THRESHOLD]
        codes[pos < m] = KEPT
        invalid = (pos >= n_valid) & (pos < n_present)
        if p.keep_invalid:
            extra = (self.n_kept - self.n_kept_valid)[:, None]
            codes[invalid] = CODES[Reason.OVER_MAX_K]
            codes[invalid & (pos - n_valid < extra)] = KEPT
        else:
            codes[invalid] = CODES[Reason.INVALID_SCORE]
        if self.abstained is not None:
            codes[self.abstained[:, None] & (pos < n_valid)] = CODES[Reason.INSUFFICIENT_EVIDENCE]
            if p.keep_invalid:
                codes[self.abstained[:, None] & invalid] = CODES[Reason.INSUFFICIENT_EVIDENCE]
        codes[pos >= n_present] = PADDING
        order = ranked.order
        if p.keep_invalid:
            # kept invalid candidates move ahead of dropped valid ones: kept first, then
            # dropped, then padding, each group in ranked order
            group = np.where(codes == KEPT, 0, np.where(codes == PADDING, 2, 1))
            regroup = np.argsort(group, axis=1, kind="stable")
            order = np.take_along_axis(order, regroup, axis=1)
            codes = np.take_along_axis(codes, regroup, axis=1)
        return order, codes

    @property
    def order(self) -> NDArray[np.intp]:
        """(Q, N) input positions: kept, then dropped, then padding, each in ranked order."""
        return self._codes[0]

    @property
    def reasons(self) -> NDArray[np.int8]:
        """(Q, N) reason codes along ``order``: 0 kept, -1 padding, else ``CODES[reason]``."""
        return self._codes[1]


def rank(
    scores: NDArray[np.float64],
    valid: NDArray[np.bool_],
    present: NDArray[np.bool_] | None = None,
) -> Ranked:
    """Rank each row: valid scores highest first (stable), then invalid, then padding."""
    if scores.ndim != 2 or scores.shape != valid.shape:
        raise EvalSetError(
            f"scores and valid must be 2-D arrays of one shape, got {scores.shape} and "
            f"{valid.shape}"
        )
    q, size = scores.shape
    complete = False
    if present is None:
        n_present = np.empty(q, dtype=np.intp)
        n_present.fill(size)
        complete = size > 0 and bool(_all(valid, axis=None))
        # all valid (the usual case): no invalid score to send to the end
        key = -scores if complete else np.where(valid, -scores, np.inf)
    else:
        valid = valid & present
        key = np.where(valid, -scores, np.inf)
        key = np.where(present, key, np.nan)  # NaN sorts after +inf
        n_present = _count(present, axis=1)
    order = key.argsort(axis=1, kind="stable")
    key.sort(axis=1)  # ``key`` is this function's own array
    n_valid = n_present if complete else _count(valid, axis=1)
    return Ranked(order, np.negative(key, out=key), n_valid, n_present, complete)


def _finite(s: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.where(np.isfinite(s), s, 0.0)


def _gap_prefix(s: NDArray[np.float64], n: NDArray[np.intp], p: PolicyParams) -> NDArray[np.intp]:
    """Before the largest gap ``s[j] - s[j+1]`` among the first ``gap_window`` (first on
    ties), plus ``gap_buffer``; no cut when every gap is 0 (Adaptive-k)."""
    size = s.shape[1]
    if size < 2:
        return n
    f = _finite(s)
    gaps = f[:, :-1] - f[:, 1:]
    limit = n if p.gap_window is None else np.minimum(n, p.gap_window)
    usable = np.arange(size - 1) + 1 < limit[:, None]
    gaps = np.where(usable, gaps, -np.inf)
    j = gaps.argmax(axis=1)
    largest = np.take_along_axis(gaps, j[:, None], axis=1)[:, 0]
    cut = np.minimum(j + 1 + p.gap_buffer, n)
    return np.where(largest > 0, cut, n)


def _autocut_prefix(
    s: NDArray[np.float64], n: NDArray[np.intp], p: PolicyParams
) -> NDArray[np.intp]:
    """Before the ``autocut_jumps``-th local maximum of ``(s[j] - s[0]) / (s[n-1] - s[0])
    - j / (n - 1)``; no cut when all scores are equal (Weaviate's autocut)."""
    size = s.shape[1]
    if size < 2:
        return n
    f = _finite(s)
    i = np.arange(size)
    last = np.take_along_axis(f, np.maximum(n - 1, 0)[:, None], axis=1)[:, 0]
    span = last - f[:, 0]  # <= 0
    flat = span == 0
    safe_span = np.where(flat, -1.0, span)
    steps = np.maximum(n - 1, 1).astype(np.float64)
    diff = (f - f[:, :1]) / safe_span[:, None] - i / steps[:, None]
    prev = np.concatenate([diff[:, :1], diff[:, :-1]], axis=1)
    nxt = np.concatenate([diff[:, 1:], diff[:, -1:]], axis=1)
    prev2 = np.concatenate([diff[:, :2], diff[:, :-2]], axis=1)
    is_last = i == (n - 1)[:, None]
    middle = (i >= 1) & (i < (n - 1)[:, None]) & (diff > prev) & (diff > nxt)
    end = is_last & (i >= 1) & (diff > prev) & ((i < 2) | (diff > prev2))
    jump = (middle | end) & ~flat[:, None]
    hit = np.cumsum(jump, axis=1) >= p.autocut_jumps
    return np.where(hit.any(axis=1), hit.argmax(axis=1), n)


def abstains(
    top: NDArray[np.float64], min_evidence: float | NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Where ``min_evidence`` keeps nothing: ``top`` below the floor, or NaN. Broadcasts
    (Q, 1) tops against (1, F) floors."""
    out: NDArray[np.bool_] = ~(top >= min_evidence)  # NaN compares False: abstain too
    return out


def cut_ranked(ranked: Ranked, params: PolicyParams) -> PolicyResult:
    """Apply the rules of ``params`` to ranked rows. Each rule keeps a prefix; the shortest
    wins, raised to ``min_k`` (never beyond the valid candidates), capped at ``max_k``; with
    ``keep_invalid`` invalid candidates fill the room left. A dropped candidate gets the first
    reason that applies: threshold, floor, expected utility, cut rule, ``over_max_k``."""
    s, n_valid = ranked.scores, ranked.n_valid
    q, size = s.shape
    first = s[:, 0] if size else np.full(q, np.nan)  # -inf / NaN when no valid score
    scored = None if ranked.complete else n_valid > 0  # None: every row is
    top = first if scored is None else np.where(scored, first, np.nan)

    p_thr = p_floor = p_eu = p_cut = m = n_valid
    rules = params.score_rules
    if rules and params.relative_threshold > 0:
        positive = first > 0
        bar = first * params.relative_threshold
        p_thr = np.where(positive, _count(s >= bar[:, None], axis=1), n_valid)
        skipped = ~positive if scored is None else scored & ~positive
        m = p_thr
    else:
        skipped = np.zeros(q, dtype=np.bool_)
    if rules:
        if params.min_score is not None:
            p_floor = _count(s >= params.min_score, axis=1)
            m = np.minimum(m, p_floor)
        if params.expected_utility is not None:
            eu = params.expected_utility
            with np.errstate(invalid="ignore"):  # inf x 0 on invalid rows: NaN, compares False
                p_eu = _count(s * eu.gain > (1.0 - s) * eu.penalty, axis=1)
            m = np.minimum(m, p_eu)
        if params.cut is CutRule.GAP:
            p_cut = _gap_prefix(s, n_valid, params)
            m = np.minimum(m, p_cut)
        elif params.cut is CutRule.AUTOCUT:
            p_cut = _autocut_prefix(s, n_valid, params)
            m = np.minimum(m, p_cut)

    # min_k = 1 changes nothing unless a rule besides the relative threshold cut (the
    # threshold keeps the top candidate of every scored row)
    other_rules = rules and (
        params.min_score is not None
        or params.expected_utility is not None
        or params.cut is not CutRule.NONE
    )
    if params.min_k > 1 or (params.min_k and other_rules):
        m = np.maximum(m, np.minimum(n_valid, params.min_k))
    m = np.minimum(m, params.max_k)
    n_kept = m
    if params.keep_invalid:
        n_kept = m + np.clip(params.max_k - m, 0, ranked.n_present - n_valid)
    abstained = None
    if params.min_evidence is not None and params.score_rules:
        abstained = abstains(top, params.min_evidence)
        m = np.where(abstained, 0, m)
        n_kept = np.where(abstained, 0, n_kept)
    prefixes = (p_thr, p_floor, p_eu, p_cut)
    return PolicyResult(ranked, params, n_kept, m, top, skipped, prefixes, abstained)


def apply_policy(
    scores: NDArray[np.float64],
    valid: NDArray[np.bool_],
    params: PolicyParams,
    present: NDArray[np.bool_] | None = None,
) -> PolicyResult:
    """Rank and cut a (queries x candidates) matrix of normalised scores.

    Args:
        scores: normalised scores (higher is better); values where ``valid`` is False
            are ignored.
        valid: True where the score is finite.
        params: the policy's parameters.
        present: False for positions that hold no candidate (padding); default all True.

    Returns:
        The ranked order, per-position reason codes and kept counts of every row.
    """
    return cut_ranked(rank(scores, valid, present), params)


class Explainer:
    """One-line explanations of why candidates of one cut were dropped; what depends only
    on the cut is formatted once."""

    __slots__ = ("_tails", "params", "score_name", "top")

    def __init__(
        self, params: PolicyParams, top: float, score_name: str = "normalised score"
    ) -> None:
        self.params = params
        self.top = top
        self.score_name = score_name
        self._tails: dict[Reason, str] = {}

    def _tail(self, reason: Reason) -> str:
        """The part of the explanation of ``reason`` shared by every candidate of the cut."""
        p = self.params
        if reason is Reason.BELOW_RELATIVE_THRESHOLD:
            bar = p.relative_threshold * self.top
            return (
                f" < relative_threshold {p.relative_threshold:g} x top score {self.top:.4g} "
                f"= {bar:.4g}"
            )
        if reason is Reason.BELOW_MIN_SCORE:
            return f" < min_score {p.min_score:g}"
        if reason is Reason.SCORE_GAP:
            return "ranked after the largest score gap (cut='gap')"
        if reason is Reason.AUTOCUT:
            return f"ranked after score jump {p.autocut_jumps} (cut='autocut')"
        if reason is Reason.OVER_MAX_K:
            return f"ranked below the max_k={p.max_k} cap"
        if reason is Reason.INSUFFICIENT_EVIDENCE:
            return (
                f"not enough evidence: the best {self.score_name} {self.top:.4g} is below "
                f"min_evidence {p.min_evidence:g}, so nothing is kept"
            )
        raise ConfigError(f"describe() does not explain {reason!r}; the caller knows the detail")

    def __call__(self, reason: Reason, normalized: float | None) -> str:
        if reason is Reason.BELOW_EXPECTED_UTILITY:
            eu = self.params.expected_utility
            assert eu is not None
            p = float("nan") if normalized is None else normalized
            return (
                f"{self.score_name} {p:.4g} x gain {eu.gain:g} = {p * eu.gain:.4g} does not "
                f"exceed (1 - {p:.4g}) x distractor penalty {eu.penalty:g} = "
                f"{(1 - p) * eu.penalty:.4g} (expected utility: keep above {eu.threshold:.4g})"
            )
        tail = self._tails.get(reason)
        if tail is None:
            tail = self._tails[reason] = self._tail(reason)
        if reason is Reason.BELOW_RELATIVE_THRESHOLD or reason is Reason.BELOW_MIN_SCORE:
            return f"{self.score_name} {normalized:.4g}{tail}"
        return tail


def describe(
    reason: Reason,
    normalized: float | None,
    params: PolicyParams,
    top: float,
    score_name: str = "normalised score",
) -> str:
    """A one-line explanation of why a candidate was dropped."""
    return Explainer(params, top, score_name)(reason, normalized)
