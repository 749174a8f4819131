"""Fitting a rerank score's map to p(relevant) (Platt by Newton's method on standardised
logits, with Platt's smoothed targets; isotonic by PAVA, as scikit-learn's
``IsotonicRegression(out_of_bounds="clip")``) and measuring its calibration (Brier, ECE)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.calibration.fit.sweep import F64
from ragguard.errors import ConfigError, EvalSetError
from ragguard.probability import MapMethod, ProbabilityMap


def _pairs(z: ArrayLike, y: ArrayLike) -> tuple[F64, F64]:
    zs = np.asarray(z, dtype=np.float64).reshape(-1)
    ys = np.asarray(y, dtype=np.float64).reshape(-1)
    if zs.shape != ys.shape:
        raise EvalSetError(f"scores and labels differ in length: {zs.size} and {ys.size}")
    keep = np.isfinite(zs) & np.isfinite(ys)
    zs, ys = zs[keep], ys[keep]
    if ((ys != 0) & (ys != 1)).any():
        raise EvalSetError("labels must be 0 or 1")
    return zs, ys


def _need_both(y: F64, what: str) -> None:
    if y.size == 0 or y.min() == y.max():
        raise EvalSetError(
            f"{what} needs relevant and non-relevant passages among the scored ones; got "
            f"{int(y.sum())} relevant of {y.size}"
        )


def fit_platt(z: ArrayLike, y: ArrayLike, *, smooth: bool = True) -> ProbabilityMap:
    """Fit ``p = sigmoid(a * z + b)`` by maximum likelihood."""
    zs, ys = _pairs(z, y)
    _need_both(ys, "Platt scaling")
    t = ys
    if smooth:
        n_pos, n_neg = ys.sum(), ys.size - ys.sum()
        t = np.where(ys == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    mu = float(zs.mean())
    sd = float(zs.std()) or 1.0
    u = (zs - mu) / sd
    design = np.stack([u, np.ones_like(u)], axis=1)

    def nll(w: F64) -> float:
        f = design @ w
        # -[t log s(f) + (1 - t) log(1 - s(f))] = logaddexp(0, f) - t f
        return float(np.sum(np.logaddexp(0.0, f) - t * f))

    w = np.zeros(2)
    prior = float(np.clip(t.mean(), 1e-12, 1 - 1e-12))
    w[1] = math.log(prior / (1.0 - prior))
    current = nll(w)
    for _ in range(200):
        f = design @ w
        p = 0.5 * (1.0 + np.tanh(0.5 * f))
        grad = design.T @ (p - t)
        hess = (design * (p * (1.0 - p))[:, None]).T @ design + 1e-12 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-10:
            trial = w - scale * step
            value = nll(trial)
            if value <= current:
                break
            scale *= 0.5
        else:
            break
        converged = current - value <= 1e-12 * max(1.0, abs(current))
        w, current = trial, value
        if converged and float(np.max(np.abs(scale * step))) < 1e-9:
            break
    a = w[0] / sd
    b = w[1] - w[0] * mu / sd
    if not (math.isfinite(a) and math.isfinite(b)):
        raise EvalSetError("Platt scaling did not converge (the scores separate the labels)")
    if a <= 0:
        _not_rising(f"Platt slope a = {a:.3g} <= 0", ys.size)
    return ProbabilityMap(method=MapMethod.PLATT, a=float(a), b=float(b))


def _not_rising(detail: str, n: int) -> NoReturn:
    raise EvalSetError(
        f"the scores do not rise with relevance on these {n} pairs ({detail}): such a map "
        "would keep the worst passages, or cannot rank them, so none is fitted; check that "
        "higher scores mean more relevant and the declared score kind"
    )


def _pava(values: F64, weights: F64) -> tuple[F64, NDArray[np.intp]]:
    """Pool adjacent violators: block means and each block's first index."""
    means: list[float] = []
    wsum: list[float] = []
    starts: list[int] = []
    for i, (v, w) in enumerate(zip(values.tolist(), weights.tolist(), strict=True)):
        means.append(v)
        wsum.append(w)
        starts.append(i)
        while len(means) > 1 and means[-2] > means[-1]:
            w2 = wsum[-2] + wsum[-1]
            means[-2] = (means[-2] * wsum[-2] + means[-1] * wsum[-1]) / w2
            wsum[-2] = w2
            del means[-1], wsum[-1], starts[-1]
    return np.array(means), np.array(starts, dtype=np.intp)


def fit_isotonic(z: ArrayLike, y: ArrayLike) -> ProbabilityMap:
    """Fit a non-decreasing map by pool-adjacent-violators."""
    zs, ys = _pairs(z, y)
    _need_both(ys, "isotonic calibration")
    order = np.argsort(zs, kind="stable")
    zs, ys = zs[order], ys[order]
    ux, first, counts = np.unique(zs, return_index=True, return_counts=True)
    sums = np.add.reduceat(ys, first)
    means, starts = _pava(sums / counts, counts.astype(np.float64))
    ends = np.append(starts[1:], ux.size) - 1
    xs: list[float] = []
    vs: list[float] = []
    for s, e, m in zip(starts.tolist(), ends.tolist(), means.tolist(), strict=True):
        xs.append(float(ux[s]))
        vs.append(m)
        if e != s:
            xs.append(float(ux[e]))
            vs.append(m)
    x, v = np.array(xs), np.array(vs)
    # drop points inside flat runs: equal to both neighbours
    keep = np.ones(x.size, dtype=np.bool_)
    if x.size > 2:
        keep[1:-1] = (v[1:-1] != v[:-2]) | (v[1:-1] != v[2:])
    v = np.clip(v[keep], 0.0, 1.0)
    if v[0] == v[-1]:
        _not_rising(f"the isotonic fit is flat at {v[0]:.3g}", ys.size)
    return ProbabilityMap(method=MapMethod.ISOTONIC, x=x[keep].tolist(), y=v.tolist())


def fit_probability_map(
    z: ArrayLike, y: ArrayLike, method: MapMethod | str = MapMethod.PLATT
) -> ProbabilityMap:
    """Fit a map of ``method`` (``platt`` or ``isotonic``) to logit-scale scores ``z``
    and 0/1 labels ``y``."""
    if MapMethod(method) is MapMethod.PLATT:
        return fit_platt(z, y)
    return fit_isotonic(z, y)


# --------------------------------------------------------------------------- quality


def brier_score(p: ArrayLike, y: ArrayLike) -> float:
    """Mean squared difference of probabilities and 0/1 labels (NaN pairs skipped)."""
    ps, ys = _pairs(p, y)
    return float(np.mean((ps - ys) ** 2)) if ps.size else math.nan


@dataclass(frozen=True, eq=False)
class Reliability:
    """A reliability diagram's data: per equal-width probability bin, the mean predicted
    probability, the observed frequency of relevance and the count (NaN where empty)."""

    predicted: F64
    observed: F64
    counts: NDArray[np.int64]

    @property
    def ece(self) -> float:
        """Expected calibration error: count-weighted mean |predicted - observed|."""
        n = int(self.counts.sum())
        if n == 0:
            return math.nan
        used = self.counts > 0
        gap = np.abs(self.predicted[used] - self.observed[used])
        return float(np.sum(gap * self.counts[used]) / n)


def reliability(p: ArrayLike, y: ArrayLike, bins: int = 10) -> Reliability:
    """Bin probabilities into ``bins`` equal-width bins of [0, 1] (the last closed)."""
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ConfigError(f"bins must be a whole number >= 1, got {bins!r}")
    ps, ys = _pairs(p, y)
    idx = np.clip(np.floor(np.clip(ps, 0.0, 1.0) * bins).astype(np.intp), 0, bins - 1)
    counts = np.bincount(idx, minlength=bins).astype(np.int64)
    psum = np.bincount(idx, weights=ps, minlength=bins)
    ysum = np.bincount(idx, weights=ys, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        predicted = np.where(counts > 0, psum / np.maximum(counts, 1), np.nan)
        observed = np.where(counts > 0, ysum / np.maximum(counts, 1), np.nan)
    return Reliability(predicted, observed, counts)


def expected_calibration_error(p: ArrayLike, y: ArrayLike, bins: int = 10) -> float:
    """ECE over ``bins`` equal-width bins (see ``Reliability``)."""
    return reliability(p, y, bins).ece
