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


def _precision(p: _Prefix, params: dict[str, object]) -> F64:
    hits = p.sum((p.grades() >= 1).astype(np.float64))
    den = p.length.astype(np.float64) if p.k is None else np.full(p.length.shape, float(p.k))
    return divide(hits, den)


def _recall(p: _Prefix, params: dict[str, object]) -> F64:
    hits = p.sum((p.grades() >= 1).astype(np.float64))
    return divide(hits, p.arrays.n_relevant.astype(np.float64)[:, None])


def _evidence_recall(p: _Prefix, params: dict[str, object]) -> F64:
    found = p.sum((p.grades() >= p.arrays.rules.relevant_grade).astype(np.float64))
    den = np.broadcast_to(p.arrays.n_evidence.astype(np.float64)[:, None], found.shape)
    out: F64 = np.divide(found, den, out=np.full(found.shape, np.nan), where=den > 0)
    return out


def _evidence_coverage(p: _Prefix, params: dict[str, object]) -> F64:
    found = p.sum((p.grades() >= p.arrays.rules.relevant_grade).astype(np.float64))
    need = evidence_needed(p.arrays, params.get("needs"))  # type: ignore[arg-type]
    out: F64 = np.greater_equal(found, need[:, None]).astype(np.float64)
    out[p.arrays.n_evidence == 0] = np.nan
    return out


def _hit_rate(p: _Prefix, params: dict[str, object]) -> F64:
    hits = p.sum((p.grades() >= 1).astype(np.float64))
    out: F64 = (hits > 0).astype(np.float64)
    return out


def _mrr(p: _Prefix, params: dict[str, object]) -> F64:
    rel = p.grades() >= 1
    q = rel.shape[0]
    first: I = rel.argmax(axis=1) if rel.shape[1] else np.zeros(q, dtype=np.intp)
    found: NDArray[np.bool_] = np.zeros(q, dtype=np.bool_)
    if rel.shape[1]:
        found = np.asarray(rel.any(axis=1), dtype=np.bool_)
    inside = found[:, None] & (first[:, None] < p.length)
    out: F64 = np.where(inside, 1.0 / (first[:, None] + 1.0), 0.0)
    return out


def _ndcg(p: _Prefix, params: dict[str, object]) -> F64:
    return p.normalised(np.maximum(p.grades(), 0.0), p.arrays.ideal_grades)


def _udcg(p: _Prefix, params: dict[str, object]) -> F64:
    gamma = float(params.get("gamma", DEFAULT_GAMMA))  # type: ignore[arg-type]
    u = p.utility()
    pos = p.sum(np.maximum(u, 0.0))
    neg = p.sum(np.minimum(u, 0.0))
    x = divide(pos + gamma * neg, p.length.astype(np.float64))
    out: F64 = np.where(p.length > 0, 1.0 / (1.0 + np.exp(-x)), 0.0)
    return out


def _udcg_dcg(p: _Prefix, params: dict[str, object]) -> F64:
    return p.discounted(p.utility())


def _udcg_ndcg(p: _Prefix, params: dict[str, object]) -> F64:
    return p.normalised(p.utility(), p.arrays.ideal_utilities)


def _utility(p: _Prefix, params: dict[str, object]) -> F64:
    out: F64 = p.sum(p.utility()) + 0.0
    return out


def _distractor_rate(p: _Prefix, params: dict[str, object]) -> F64:
    bad = p.sum((p.utility() < 0).astype(np.float64))
    return divide(bad, p.length.astype(np.float64))


def _distractor_harm(p: _Prefix, params: dict[str, object]) -> F64:
    out: F64 = -p.sum(np.minimum(p.utility(), 0.0)) + 0.0
    return out


_TABLES: dict[str, Callable[[_Prefix, dict[str, object]], F64]] = {
    "precision": _precision,
    "recall": _recall,
    "evidence_recall": _evidence_recall,
    "evidence_coverage": _evidence_coverage,
    "hit_rate": _hit_rate,
    "mrr": _mrr,
    "ndcg": _ndcg,
    "udcg": _udcg,
    "udcg_dcg": _udcg_dcg,
    "udcg_ndcg": _udcg_ndcg,
    "utility": _utility,
    "distractor_rate": _distractor_rate,
    "distractor_harm": _distractor_harm,
}


def prefix_table(arrays: EvalArrays, metric: ParsedMetric, cols: int) -> F64 | None:
    """(Q, cols) ``metric`` of every row at context sizes ``0..cols-1``, or ``None`` when
    the metric has no prefix form here (compute it size by size)."""
    table = _TABLES.get(metric.spec.name)
    if table is None or set(metric.params) - {"gamma", "needs"}:
        return None
    return table(_Prefix(arrays, metric.k, cols), metric.params)
