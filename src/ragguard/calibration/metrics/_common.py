"""Helpers shared by the metric families: cutoffs, windows, discounts, safe division."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from numbers import Integral
from typing import TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.errors import ConfigError, EvalSetError

F64 = NDArray[np.float64]
I = NDArray[np.intp]  # noqa: E741
S = TypeVar("S", bound=np.generic)


@dataclass(frozen=True, slots=True)
class Window:
    """Which ranked positions a metric reads.

    Attributes:
        width: number of leading columns to read (with a ``cut``, no more than the
            longest kept prefix: columns beyond it would all be masked).
        length: (Q,) per query, how many candidates the metric considers: the list
            (or its first ``cut`` candidates), at most ``k``.
        k: the cutoff, or ``None`` for the whole list.
        masked: True when positions inside ``width`` but beyond ``length`` hold
            candidates that must be ignored (only with ``cut``).
    """

    width: int
    length: I
    k: int | None
    masked: bool

    def take(self, matrix: NDArray[S], fill: float | bool = 0) -> NDArray[S]:
        """``matrix[:, :width]`` with positions beyond ``length`` set to ``fill``."""
        view = matrix[:, : self.width]
        if not self.masked:
            return view
        keep = np.arange(self.width)[None, :] < self.length[:, None]
        return cast("NDArray[S]", np.where(keep, view, fill).astype(matrix.dtype))

    def denominator(self) -> F64:
        """The cutoff ``k`` per query, or the list length when there is no cutoff."""
        if self.k is None:
            return self.length.astype(np.float64)
        return np.full(self.length.shape, float(self.k))


def window(arrays: EvalArrays, k: int | None, cut: ArrayLike | None) -> Window:
    """The positions a metric at cutoff ``k`` reads, after an optional per-query ``cut``.

    Args:
        arrays: the evaluation arrays.
        k: cutoff (``None``: the whole list).
        cut: optional (Q,) number of leading candidates kept per query, e.g. the
            ``n_kept`` of ``ragguard.policy.cut_ranked``; the rest count as not
            retrieved.
    """
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise ConfigError(f"k must be an int >= 1 or None, got {k!r}")
        k = int(k)
    n = arrays.shape[1]
    length = arrays.n_present
    masked = False
    if cut is not None:
        c = np.asarray(cut)
        if c.shape != length.shape or not np.issubdtype(c.dtype, np.integer) or (c < 0).any():
            raise EvalSetError(
                f"cut must be {length.shape[0]} non-negative ints (one per query), "
                f"got shape {c.shape} dtype {c.dtype}"
            )
        length = np.minimum(length, c.astype(np.intp))
        masked = True
    width = n if k is None else min(k, n)
    if k is not None:
        length = np.minimum(length, k)
    if masked:
        # columns at or beyond the longest kept prefix are masked in every row: skip them
        # (a sweep's cuts are short next to long candidate lists)
        width = min(width, int(length.max())) if length.size else 0
        masked = bool((length < np.minimum(arrays.n_present, width)).any())
    return Window(width, length, k, masked)


@lru_cache(maxsize=32)
def discount(n: int) -> F64:
    """``1 / log2(rank + 1)`` for ranks 1..n (read-only, cached)."""
    d = 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))
    d.setflags(write=False)
    return d


def divide(num: F64, den: F64, *, empty: float = 0.0) -> F64:
    """``num / den``, ``empty`` where ``den`` is 0."""
    zero = den == 0
    return np.where(zero, empty, num / np.where(zero, 1.0, den))
