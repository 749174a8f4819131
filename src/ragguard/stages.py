r"""Stages after the cut: near-duplicate removal, then the token budget (what each
does: docs/guides/budget.md).

Near-identical: the exact Jaccard similarity of the two passages' **word 3-shingle
sets**, :math:`|A \cap B| / |A \cup B|`, is at least the threshold; in scripts written
without spaces between words (``UNSPACED``) each character is a word; a passage of fewer
than three words is one shingle of its words. The passage a near-duplicate names is the
one the near-duplicate control kept; when the token budget then drops that one, the
near-duplicate stays dropped too and its message says so.

Both stages are *causal* along the kept list: whether the passage at position ``j`` is
kept depends only on the passages before it, so running them on a longer prefix of the
ranked list and taking the first ``m`` passages gives what running them on the first
``m`` gives; the calibration sweep relies on this (``ragguard.calibration.fit.sweep``).
Their state is one set of (rows x columns) arrays over the kept list (``StageState``);
the runtime guard runs them on one row, the calibration sweep on every query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ragguard.errors import ConfigError
from ragguard.policy import CODES, KEPT, PADDING, PolicyParams, Reason

SHINGLE_WORDS = 3
"""Words per shingle of the near-duplicate comparison."""

_WORD = re.compile(r"\w+")

UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"  # Hiragana, Katakana (and half-width)
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"  # Han
)
"""The characters (a regular-expression class body) of scripts written without spaces
between words: in a shingle (and in the conflict stage's alignment) each is a word of
its own, so passages in these scripts are compared character by character instead of as
one long "word" per sentence. Other scripts keep their ``\\w+`` words."""

_SHINGLE_WORD = re.compile(rf"[{UNSPACED}]|[^\W{UNSPACED}]+")
_NEAR = CODES[Reason.NEAR_DUPLICATE]
_OVER = CODES[Reason.OVER_TOKEN_BUDGET]

Shingles = frozenset[str]
"""A passage's shingles, each its words joined by one space (words hold no space, so
the join is exact; a str caches its hash, so set operations do not rehash)."""


# every ASCII character that ``\w`` does not match, as a space
_ASCII_NON_WORD = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")}
)


def words(text: str) -> list[str]:
    """The lower-cased ``\\w+`` words of ``text``. ASCII text (most passages) is split
    with ``str.translate`` and ``str.split``, three times faster than the regular
    expression and the same words; other text goes through the expression.

    Example:
        >>> words("Re-rank: top_k=5, the GPU's!")
        ['re', 'rank', 'top_k', '5', 'the', 'gpu', 's']
    """
    low = text.lower()
    if low.isascii():
        return low.translate(_ASCII_NON_WORD).split()
    return _WORD.findall(low)


def shingles(text: str, size: int = SHINGLE_WORDS) -> Shingles:
    """The set of ``size``-word shingles of ``text`` (lower-cased ``\\w+`` words; each
    character of ``UNSPACED`` a word), each as its words joined by a space.

    Example:
        >>> sorted(shingles("The cat sat on the mat"))[:2]
        ['cat sat on', 'on the mat']
        >>> sorted(shingles("工厂生产了3559辆"))[:2]
        ['了 3559 辆', '产 了 3559']
    """
    w = words(text) if text.isascii() else _SHINGLE_WORD.findall(text.lower())
    if len(w) < size:
        return frozenset([" ".join(w)]) if w else frozenset()
    return frozenset(map(" ".join, zip(*[w[i:] for i in range(size)], strict=False)))


def jaccard(a: Shingles, b: Shingles) -> float:
    """Jaccard similarity of two shingle sets; 0.0 when either is empty."""
    if not a or not b:
        return 0.0
    inter = len(a & b) if len(a) <= len(b) else len(b & a)
    return inter / (len(a) + len(b) - inter)


@dataclass(frozen=True, slots=True)
class StageState:
    """The kept list of each row as it passes the stages.

    Attributes:
        positions: (Q, W) input positions of the passages the cut kept, in kept order;
            -1 pads short rows.
        reasons: (Q, W) 0 while kept, else the code (``ragguard.policy.CODES``) of
            the stage that dropped it; -1 on padding.
        partner: (Q, W) for a near-duplicate, the column of the kept passage it repeats;
            -1 elsewhere.
        similarity: (Q, W) for a near-duplicate, its Jaccard similarity with that
            passage; NaN elsewhere.
        tokens: (Q, W) token counts, when the budget stage ran; else ``None``.
        threshold: the near-duplicate threshold, when that stage ran.
        max_tokens: the token budget, when that stage ran.
        counter: the declaration of the counter that gave ``tokens``.
    """

    positions: NDArray[np.intp]
    reasons: NDArray[np.int8]
    partner: NDArray[np.intp]
    similarity: NDArray[np.float64]
    tokens: NDArray[np.int64] | None = None
    threshold: float | None = None
    max_tokens: int | None = None
    counter: str = ""

    @property
    def kept(self) -> NDArray[np.bool_]:
        """(Q, W) True where the passage is still kept."""
        out: NDArray[np.bool_] = self.reasons == KEPT
        return out

    def kept_positions(self, row: int) -> list[int]:
        """Input positions of row ``row``'s passages still kept, in order."""
        return self.positions[row][self.reasons[row] == KEPT].tolist()  # type: ignore[no-any-return]

    def used_before(self, row: int, col: int) -> int:
        """Tokens of the passages kept before column ``col`` of row ``row``."""
        if self.tokens is None:
            return 0
        kept = self.reasons[row, :col] == KEPT
        return int(self.tokens[row, :col][kept].sum())


def start_state(positions: NDArray[np.intp]) -> StageState:
    """The state before any stage: every passage of ``positions`` (-1: padding) kept."""
    pos = np.asarray(positions, dtype=np.intp)
    if pos.ndim != 2:
        raise ConfigError(f"positions must be a 2-D array, got shape {pos.shape}")
    reasons = np.where(pos >= 0, KEPT, PADDING).astype(np.int8)
    return StageState(pos, reasons, np.full(pos.shape, -1, np.intp), np.full(pos.shape, np.nan))


def near_duplicate_stage(
    state: StageState, *, shingles: Sequence[Sequence[Shingles]], threshold: float
) -> StageState:
    """Drop each kept passage whose shingles are at least ``threshold`` similar to those
    of a kept, higher-ranked passage; name the highest-ranked such passage.

    Args:
        state: the kept lists.
        shingles: per row, the shingle set of each column (at least as many as the row's
            passages).
        threshold: the Jaccard similarity in (0, 1] from which two passages are
            near-duplicates.
    """
    reasons, partner, sim = state.reasons.copy(), state.partner.copy(), state.similarity.copy()
    for q in range(reasons.shape[0]):
        row_sets = shingles[q]
        kept: list[int] = []
        for j in np.flatnonzero(reasons[q] == KEPT).tolist():
            mine = row_sets[j]
            n = len(mine)
            for i in kept:
                m = len(row_sets[i])
                # Jaccard <= min(n, m) / max(n, m): skip pairs whose sizes rule it out
                if min(n, m) < threshold * max(n, m):
                    continue
                s = jaccard(mine, row_sets[i])
                if s >= threshold:
                    reasons[q, j], partner[q, j], sim[q, j] = _NEAR, i, s
                    break
            else:
                kept.append(j)
    return replace(state, reasons=reasons, partner=partner, similarity=sim, threshold=threshold)


def token_budget_stage(
    state: StageState, *, tokens: NDArray[np.int64], max_tokens: int, counter: str = ""
) -> StageState:
    """Fill ``max_tokens`` greedily in kept order: keep a passage when it fits in what the
    passages kept before it left, else drop it (``over_token_budget``) and go on.

    Args:
        state: the kept lists.
        tokens: (Q, W) token count of each column (any value on padding).
        max_tokens: the budget of each row.
        counter: the declaration of the counter that gave ``tokens`` (for messages).
    """
    t = np.asarray(tokens, dtype=np.int64)
    if t.shape != state.positions.shape:
        raise ConfigError(f"tokens must have shape {state.positions.shape}, got {t.shape}")
    codes: list[list[int]] = state.reasons.tolist()
    counts: list[list[int]] = t.tolist()
    for row, row_tokens in zip(codes, counts, strict=True):  # a few passages per row
        used = 0
        for j, code in enumerate(row):
            if code != KEPT:
                continue
            if used + row_tokens[j] <= max_tokens:
                used += row_tokens[j]
            else:
                row[j] = _OVER
    reasons = np.array(codes, dtype=np.int8).reshape(state.reasons.shape)
    return replace(state, reasons=reasons, tokens=t, max_tokens=max_tokens, counter=counter)


def near_duplicate_message(
    other: str, position: int, similarity: float, threshold: float, kept: bool
) -> str:
    """Why the near-duplicate stage dropped a passage: it repeats id ``other`` at input
    ``position`` (``kept``: whether that passage is kept in the end)."""
    return (
        f"near-duplicate of {'kept ' if kept else ''}id {other!r} at input position "
        f"{position}: word {SHINGLE_WORDS}-shingle Jaccard similarity {similarity:.3g} >= "
        f"near_duplicate_threshold {threshold:g}"
        + ("" if kept else " (that passage then did not fit in max_tokens either)")
    )


def over_budget_message(tokens: int, used: int, max_tokens: int, counter: str) -> str:
    """Why the token budget dropped a passage of ``tokens`` tokens: the passages kept
    before it use ``used``."""
    return (
        f"its {tokens} tokens do not fit in max_tokens={max_tokens}: the passages kept "
        f"before it use {used} (token_counter {counter!r})"
    )


def run_stages(
    state: StageState,
    params: PolicyParams,
    *,
    shingles: Sequence[Sequence[Shingles]] | None = None,
    tokens: NDArray[np.int64] | None = None,
    counter: str = "",
) -> StageState:
    """The stages ``params`` turns on, in order: near-duplicates, then the token budget.

    Raises:
        ConfigError: a stage is on but its input (``shingles``, ``tokens``) is missing.
    """
    if params.near_duplicate_threshold is not None:
        if shingles is None:
            raise ConfigError("near_duplicate_threshold is set but no passage texts were given")
        state = near_duplicate_stage(
            state, shingles=shingles, threshold=params.near_duplicate_threshold
        )
    if params.max_tokens is not None:
        if tokens is None:
            raise ConfigError("max_tokens is set but no token counts were given")
        state = token_budget_stage(
            state, tokens=tokens, max_tokens=params.max_tokens, counter=counter
        )
    return state
