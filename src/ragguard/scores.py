"""Score kinds and their normalisation to one higher-is-better scale, the same at runtime
and in calibration (docs/guides/selection.md has the table and why).

* similarity: ``s = x``; distance: ``s = 1 / (1 + max(x, 0))``; logit: ``s = sigmoid(x)``;
  probability: ``s = clip(x, 0, 1)``; rrf: ``s = x * (rrf_k + 1)`` (1.0 = first in one list).
* A missing, NaN or infinite score is invalid, never zero (``invalid_scores`` decides).

Scores that contradict their kind are a ``ScoreIssue`` (rows affected), one ``ScoreWarning``
per guard. What happens: ``negative_similarity`` (below -1), ``ascending_similarity``,
``descending_distance``, ``logit_in_unit_interval``, ``rrf_out_of_range``: nothing changes;
``negative_distance``: clipped to 0; ``probability_out_of_range``: clipped to [0, 1];
``nonpositive_top``: the relative threshold is skipped on that row; ``unknown_kind``,
``no_scores``: score rules are skipped, input order, only ``max_k`` / ``min_k`` apply;
``all_invalid``: every candidate is dropped (no fallback to ``max_k``). The direction checks
read the input order: two valid scores suffice with ``ranked=True`` (the retriever's order),
four otherwise; they cannot tell on ties, re-sorted or merged lists, or rerank scores."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.errors import ConfigError, EvalSetError


def not_one_of(cls: type[StrEnum], value: object, setting: str) -> ConfigError:
    """The error of ``cls(value)`` (``ScoreKind("cosine")``, a mistake in a setting)."""
    allowed = ", ".join(repr(k.value) for k in cls)
    return ConfigError(f"{setting} must be one of {allowed}; got {value!r}")


class ScoreKind(StrEnum):
    """What a raw score is, which fixes its direction and its normalisation."""

    SIMILARITY = "similarity"
    DISTANCE = "distance"
    LOGIT = "logit"
    PROBABILITY = "probability"
    RRF = "rrf"

    @classmethod
    def _missing_(cls, value: object) -> ScoreKind:
        raise not_one_of(cls, value, "score_kind")


class ScoreIssue(StrEnum):
    """A way in which scores contradict their declared kind (see the module docstring)."""

    NEGATIVE_SIMILARITY = "negative_similarity"
    ASCENDING_SIMILARITY = "ascending_similarity"
    DESCENDING_DISTANCE = "descending_distance"
    NEGATIVE_DISTANCE = "negative_distance"
    PROBABILITY_OUT_OF_RANGE = "probability_out_of_range"
    LOGIT_IN_UNIT_INTERVAL = "logit_in_unit_interval"
    RRF_OUT_OF_RANGE = "rrf_out_of_range"
    NONPOSITIVE_TOP = "nonpositive_top"
    UNKNOWN_KIND = "unknown_kind"
    NO_SCORES = "no_scores"
    ALL_INVALID = "all_invalid"


_MESSAGES: dict[ScoreIssue, str] = {
    ScoreIssue.NEGATIVE_SIMILARITY: (
        "score_kind='similarity' but some scores are below -1, which neither cosine "
        "similarity nor BM25 can be. If they are cross-encoder logits set "
        "score_kind='logit'; if negated distances, pass the distances with "
        "score_kind='distance'. They are kept as they are."
    ),
    ScoreIssue.ASCENDING_SIMILARITY: (
        "score_kind='similarity' but scores increase along the input order, which is how "
        "retrievers return distances (lower is better). If they are distances set "
        "score_kind='distance'; as declared, the last candidates rank first."
    ),
    ScoreIssue.DESCENDING_DISTANCE: (
        "score_kind='distance' but scores decrease along the input order, which is how "
        "retrievers return similarities (higher is better). If they are similarities set "
        "score_kind='similarity'; as declared, the last candidates rank first."
    ),
    ScoreIssue.NEGATIVE_DISTANCE: (
        "score_kind='distance' but some scores are negative; a distance cannot be. They are "
        "treated as 0 (a perfect match). If higher is better here, set score_kind='similarity'."
    ),
    ScoreIssue.PROBABILITY_OUT_OF_RANGE: (
        "score_kind='probability' but some scores lie outside [0, 1]; they are clipped into "
        "it. Set score_kind='logit' for cross-encoder logits or 'similarity' for cosine/BM25."
    ),
    ScoreIssue.LOGIT_IN_UNIT_INTERVAL: (
        "score_kind='logit' but every score lies in [0, 1], which looks like probabilities. "
        "A sigmoid squeezes them into [0.5, 0.73] and a relative threshold keeps nearly "
        "everything. If they are probabilities, set score_kind='probability'."
    ),
    ScoreIssue.RRF_OUT_OF_RANGE: (
        "score_kind='rrf' but some scores are negative or above 1, which a sum of "
        "1 / (rrf_k + rank) cannot be. Set score_kind to what the retriever returns "
        "('similarity' for normalised fusion scores)."
    ),
    ScoreIssue.NONPOSITIVE_TOP: (
        "relative_threshold needs a positive top score, but the top normalised score is <= 0, "
        "so the relative threshold was skipped for this query (max_k, min_k and min_score "
        "still apply). Check score_kind, or set relative_threshold=0 to silence this."
    ),
    ScoreIssue.UNKNOWN_KIND: (
        "no score_kind is set, so ragguard cannot tell whether higher scores are better: "
        "relative_threshold, min_score and cut rules are skipped, candidates keep their "
        "input order and only max_k / min_k apply. Set score_kind ('similarity', "
        "'distance', 'logit', 'probability' or 'rrf') in GuardConfig, RAGGUARD_SCORE_KIND "
        "or ragguard.toml."
    ),
    ScoreIssue.NO_SCORES: (
        "no candidate has a numeric score, so relative_threshold, min_score and cut rules "
        "are skipped and only max_k / min_k apply. Use a vector-store retriever (ragguard "
        "queries the store with scores), put numbers (int or float) in document metadata "
        "under one of the adapter's score_keys, or enable the rerank stage."
    ),
    ScoreIssue.ALL_INVALID: (
        "every candidate's score is missing, NaN or infinite, so invalid_scores='drop' "
        "dropped them all and nothing was kept. Fix the scores where they are made; set "
        "invalid_scores='keep_last' to keep such candidates in input order under max_k / "
        "min_k, or call select(..., scored=False) when the source gives no scores."
    ),
}


def issue_message(issue: ScoreIssue) -> str:
    return _MESSAGES[issue]


@dataclass(frozen=True, slots=True)
class Normalized:
    """Scores on the higher-is-better scale.

    Attributes:
        values: normalised scores, NaN where the raw score is invalid.
        valid: True where the raw score is finite (and the position holds a candidate).
        issues: for each contradiction found, the number of rows it affects.
    """

    values: NDArray[np.float64]
    valid: NDArray[np.bool_]
    issues: dict[ScoreIssue, int] = field(default_factory=dict)


# valid scores a one-way run needs: an unsorted list of 4 runs one way by chance 1 in 24
_UNORDERED_MIN = 4
_RANKED_MIN = 2


# ufunc reductions: numpy's functions of the same name add a Python wrapper (short rows)
_any = np.logical_or.reduce
_all = np.logical_and.reduce
_count = np.add.reduce  # of a bool array: how many are True
_min = np.minimum.reduce


def _rows_with(mask: NDArray[np.bool_]) -> int:
    return int(_count(_any(mask, axis=1)))


def _one_way_rows(
    x: NDArray[np.float64], valid: NDArray[np.bool_], *, rising: bool, min_len: int, every: bool
) -> int:
    """Rows with ``min_len`` or more valid scores that strictly rise (``rising``) or fall
    from each valid score to the next; only rows whose first steps allow it are checked in full."""
    if x.shape[1] < min_len:
        return 0
    d = x if rising else -x
    if every:  # the usual case: each score against the next one
        if not _any(d.argmax(axis=1) == x.shape[1] - 1):
            return 0  # a strictly rising row has its maximum last: most rows stop here
        return int(_count(_all(d[:, 1:] > d[:, :-1], axis=1)))
    maybe = np.ones(x.shape[0], dtype=np.bool_)
    for j in range(min(_UNORDERED_MIN, x.shape[1]) - 1):
        maybe &= ~(valid[:, j] & valid[:, j + 1] & (d[:, j + 1] <= d[:, j]))
    rows = np.flatnonzero(maybe & (valid.sum(axis=1) >= min_len))
    if rows.size == 0:
        return 0
    dr, vr = d[rows], valid[rows]
    # each position's latest valid score before it (-1: none yet)
    cols = np.arange(x.shape[1])
    last = np.maximum.accumulate(np.where(vr, cols, -1), axis=1)
    before = np.empty_like(last)
    before[:, 0] = -1
    before[:, 1:] = last[:, :-1]
    has_before = vr & (before >= 0)
    prev = np.take_along_axis(dr, np.maximum(before, 0), axis=1)
    falls = has_before & ~(dr > prev)
    return int(_count(~_any(falls, axis=1)))


def _note(
    issues: dict[ScoreIssue, int],
    issue: ScoreIssue,
    mask: NDArray[np.bool_],
    valid: NDArray[np.bool_],
) -> None:
    if _any(mask, axis=None) and (rows := _rows_with(mask & valid)):
        issues[issue] = rows


def normalize(
    raw: ArrayLike,
    kind: ScoreKind | str | None,
    *,
    present: NDArray[np.bool_] | None = None,
    rrf_k: int = 60,
    ranked: bool = False,
) -> Normalized:
    """Map raw scores to the higher-is-better scale of their kind.

    Args:
        raw: a (queries x candidates) matrix (a 1-D array is one query); ``None`` entries
            become NaN.
        kind: the declared [`ScoreKind`][ragguard.ScoreKind], or ``None`` when unknown. With
            ``None`` every present candidate counts as valid, every value is 0 (so a stable sort
            keeps input order) and the issue ``unknown_kind`` is reported.
        present: which positions hold a candidate (False for padding); default all.
        rrf_k: the constant of reciprocal rank fusion, for ``kind="rrf"``.
        ranked: the input order is the retriever's ranking, best first; the direction
            checks (``ascending_similarity``, ``descending_distance``) then need two
            valid scores instead of four.

    Returns:
        The normalised scores, their validity mask and the issues found.
    """
    x = np.asarray(raw, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise EvalSetError(f"scores must be a 1-D or 2-D array, got shape {x.shape}")
    if present is not None and present.shape != x.shape:
        raise EvalSetError(f"present mask has shape {present.shape}, scores have {x.shape}")

    issues: dict[ScoreIssue, int] = {}
    if kind is None:
        held = np.ones(x.shape, dtype=np.bool_) if present is None else present.copy()
        if x.size:
            issues[ScoreIssue.UNKNOWN_KIND] = _rows_with(held)
        return Normalized(np.zeros(x.shape), held, issues)

    if not isinstance(kind, ScoreKind):
        kind = ScoreKind(kind)
    valid = np.isfinite(x) if present is None else np.isfinite(x) & present
    every = bool(_all(valid, axis=None))
    min_len = _RANKED_MIN if ranked else _UNORDERED_MIN
    # Each check starts with one cheap test that is False for ordinary scores; NaN
    # compares False, and +-inf are masked by ``valid`` before anything is counted.
    if kind is ScoreKind.SIMILARITY:
        if x.size and not _min(x, axis=None) >= -1:  # below -1, or an invalid score
            _note(issues, ScoreIssue.NEGATIVE_SIMILARITY, x < -1, valid)
        s = x
        if rows := _one_way_rows(x, valid, rising=True, min_len=min_len, every=every):
            issues[ScoreIssue.ASCENDING_SIMILARITY] = rows
    elif kind is ScoreKind.DISTANCE:
        _note(issues, ScoreIssue.NEGATIVE_DISTANCE, x < 0, valid)
        if rows := _one_way_rows(x, valid, rising=False, min_len=min_len, every=every):
            issues[ScoreIssue.DESCENDING_DISTANCE] = rows
        s = 1.0 / (1.0 + np.maximum(x, 0.0))
    elif kind is ScoreKind.LOGIT:
        in_unit = ((x >= 0) & (x <= 1)) | ~valid
        looks_prob = in_unit.all(axis=1) & (valid.sum(axis=1) >= 2)
        if looks_prob.any():
            issues[ScoreIssue.LOGIT_IN_UNIT_INTERVAL] = int(looks_prob.sum())
        s = 0.5 * (1.0 + np.tanh(0.5 * x))  # sigmoid without overflow for large |x|
    elif kind is ScoreKind.PROBABILITY:
        _note(issues, ScoreIssue.PROBABILITY_OUT_OF_RANGE, (x < 0) | (x > 1), valid)
        s = np.clip(x, 0.0, 1.0)
    else:  # ScoreKind.RRF
        _note(issues, ScoreIssue.RRF_OUT_OF_RANGE, (x < 0) | (x > 1), valid)
        s = x * float(rrf_k + 1)

    if every:  # nothing to blank out; never hand back the caller's own array
        return Normalized(x.copy() if s is x and isinstance(raw, np.ndarray) else s, valid, issues)
    return Normalized(np.where(valid, s, np.nan), valid, issues)
