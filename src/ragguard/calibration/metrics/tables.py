"""A metric at every context size ``c = 0..K`` at once, from prefix sums: one cumulative
sum instead of K + 1 calls (O(K^2) per query when the caps grow to 100). Each table
equals ``compute(arrays, metric, cut=c)`` column by column (tested); others: ``None``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics import ParsedMetric
from ragguard.calibration.metrics._common import F64, I, discount, divide
from ragguard.calibration.metrics.classic import evidence_needed
from ragguard.calibration.metrics.udcg import DEFAULT_GAMMA


def _cumulative(x: F64, cols: int) -> F64:
    """(Q, cols) sums of the first ``min(c, width)`` columns of ``x`` for c = 0..cols-1."""
    q, width = x.shape
    out = np.zeros((q, cols))
    if width:
        np.cumsum(x, axis=1, out=out[:, 1 : width + 1])
        out[:, width + 1 :] = out[:, width : width + 1]
    return out


class _Prefix:
    """Per-row context lengths and prefix sums of one chunk of rows."""

    def __init__(self, arrays: EvalArrays, k: int | None, cols: int) -> None:
        self.arrays = arrays
        self.cols = cols
        n = arrays.shape[1]
        self.width = min(cols - 1, n if k is None else min(k, n))
        sizes = np.arange(cols, dtype=np.intp)[None, :]
        cap = sizes if k is None else np.minimum(sizes, k)
        self.length: I = np.minimum(cap, arrays.n_present[:, None])  # (Q, cols)
        self.k = k

    def sum(self, x: F64) -> F64:
        return _cumulative(x[:, : self.width], self.cols)

    def count(self, hits: NDArray[np.bool_]) -> F64:
        return self.sum(hits.astype(np.float64))

    def lengths(self) -> F64:
        return self.length.astype(np.float64)

    def denominator(self) -> F64:
        """The cutoff ``k``, or the context length when there is none."""
        return self.lengths() if self.k is None else np.full(self.length.shape, float(self.k))

    def grades(self) -> F64:
        return self.arrays.grades[:, : self.width]

    def utility(self) -> F64:
        return self.arrays.utility[:, : self.width]

    def discounted(self, x: F64) -> F64:
        return self.sum(x * discount(self.width)[None, :])

    def normalised(self, x: F64, ideal: F64) -> F64:
        """``discounted(x)`` over the DCG of the ``ideal`` ranking cut at ``k``."""
        top, ideal = self.discounted(x), ideal[:, : self.k]
        return divide(top, np.broadcast_to((ideal @ discount(ideal.shape[1]))[:, None], top.shape))


def _mrr(p: _Prefix, params: dict[str, object]) -> F64:
    rel = p.grades() >= 1
    if not rel.shape[1]:
        return np.zeros(p.length.shape)
    first = rel.argmax(axis=1)[:, None]
    inside = np.asarray(rel.any(axis=1))[:, None] & (first < p.length)
    out: F64 = np.where(inside, 1.0 / (first + 1.0), 0.0)
    return out


def _evidence(p: _Prefix) -> F64:
    return p.count(p.grades() >= p.arrays.rules.relevant_grade)


def _evidence_recall(p: _Prefix, params: dict[str, object]) -> F64:
    found = _evidence(p)
    den = np.broadcast_to(p.arrays.n_evidence.astype(np.float64)[:, None], found.shape)
    out: F64 = np.divide(found, den, out=np.full(found.shape, np.nan), where=den > 0)
    return out


def _evidence_coverage(p: _Prefix, params: dict[str, object]) -> F64:
    need = evidence_needed(p.arrays, params.get("needs"))  # type: ignore[arg-type]
    out: F64 = np.greater_equal(_evidence(p), need[:, None]).astype(np.float64)
    out[p.arrays.n_evidence == 0] = np.nan
    return out


def _udcg(p: _Prefix, params: dict[str, object]) -> F64:
    gamma = float(params.get("gamma", DEFAULT_GAMMA))  # type: ignore[arg-type]
    u = p.utility()
    x = divide(p.sum(np.maximum(u, 0.0)) + gamma * p.sum(np.minimum(u, 0.0)), p.lengths())
    out: F64 = np.where(p.length > 0, 1.0 / (1.0 + np.exp(-x)), 0.0)
    return out


_TABLES: dict[str, Callable[[_Prefix, dict[str, object]], F64]] = {
    "precision": lambda p, _: divide(p.count(p.grades() >= 1), p.denominator()),
    "recall": lambda p, _: divide(
        p.count(p.grades() >= 1), p.arrays.n_relevant.astype(np.float64)[:, None]
    ),
    "evidence_recall": _evidence_recall,
    "evidence_coverage": _evidence_coverage,
    "hit_rate": lambda p, _: (p.count(p.grades() >= 1) > 0).astype(np.float64),
    "mrr": _mrr,
    "ndcg": lambda p, _: p.normalised(np.maximum(p.grades(), 0.0), p.arrays.ideal_grades),
    "udcg": _udcg,
    "udcg_dcg": lambda p, _: p.discounted(p.utility()),
    "udcg_ndcg": lambda p, _: p.normalised(p.utility(), p.arrays.ideal_utilities),
    "utility": lambda p, _: p.sum(p.utility()) + 0.0,  # + 0.0 turns -0.0 into 0.0
    "distractor_rate": lambda p, _: divide(p.count(p.utility() < 0), p.lengths()),
    "distractor_harm": lambda p, _: -p.sum(np.minimum(p.utility(), 0.0)) + 0.0,
}


def prefix_table(arrays: EvalArrays, metric: ParsedMetric, cols: int) -> F64 | None:
    """(Q, cols) ``metric`` of every row at context sizes ``0..cols-1``, or ``None`` when
    the metric has no prefix form here (compute it size by size)."""
    table = _TABLES.get(metric.spec.name)
    if table is None or set(metric.params) - {"gamma", "needs"}:
        return None
    return table(_Prefix(arrays, metric.k, cols), metric.params)
