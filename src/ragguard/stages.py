"""Stages after the cut: near-duplicate removal, then the token budget (docs/guides/budget.md),
over one set of (rows x columns) arrays (``StageState``). Both are causal along the kept
list, so the calibration sweep may run them once on a longer prefix."""

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
"""Scripts written without spaces (a regex class body): each character is a word."""

_SHINGLE_WORD = re.compile(rf"[{UNSPACED}]|[^\W{UNSPACED}]+")
_NEAR = CODES[Reason.NEAR_DUPLICATE]
_OVER = CODES[Reason.OVER_TOKEN_BUDGET]

Shingles = frozenset[str]
"""A passage's shingles, each its words joined by one space."""


# every ASCII character that ``\w`` does not match, as a space
_ASCII_NON_WORD = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")}
)


def words(text: str) -> list[str]:
    """The lower-cased ``\\w+`` words of ``text`` (ASCII through ``str.translate``: 3x faster)."""
    low = text.lower()
    if low.isascii():
        return low.translate(_ASCII_NON_WORD).split()
    return _WORD.findall(low)


def shingles(text: str, size: int = SHINGLE_WORDS) -> Shingles:
    """The ``size``-word shingles of ``text``, each character of ``UNSPACED`` a word."""
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
        positions: (Q, W) input positions the cut kept, in kept order; -1 pads.
        reasons: (Q, W) 0 while kept, else the dropping stage's code; -1 on padding.
        partner: (Q, W) the column a near-duplicate repeats; -1 elsewhere.
        similarity: (Q, W) a near-duplicate's Jaccard similarity with it; NaN elsewhere.
        tokens: (Q, W) token counts, when the budget stage ran.
        threshold: the near-duplicate threshold, when that stage ran.
        max_tokens: the token budget, when that stage ran.
        counter: the declaration of the counter that gave ``tokens``."""

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
    """Drop each kept passage at least ``threshold`` similar to a kept, higher-ranked one,
    naming the highest-ranked such passage."""
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
    """Fill ``max_tokens`` greedily in kept order; a passage that does not fit is dropped."""
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
    """Why the near-duplicate stage dropped a passage (``kept``: whether ``other`` stayed)."""
    return (
        f"near-duplicate of {'kept ' if kept else ''}id {other!r} at input position "
        f"{position}: word {SHINGLE_WORDS}-shingle Jaccard similarity {similarity:.3g} >= "
        f"near_duplicate_threshold {threshold:g}"
        + ("" if kept else " (that passage then did not fit in max_tokens either)")
    )


def over_budget_message(tokens: int, used: int, max_tokens: int, counter: str) -> str:
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
    """The stages ``params`` turns on, in order; a ``ConfigError`` when an input is missing."""
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
