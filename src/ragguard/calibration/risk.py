r"""Finite-sample recall guarantees: Learn-then-Test with a Hoeffding-Bentkus p-value.

The question: which settings keep the **expected** per-query loss
:math:`R(\lambda) = E[L_q(\lambda)]` of new queries at most :math:`\alpha`, with
probability at least :math:`1 - \delta` over the draw of the :math:`n` calibration
queries? For recall, :math:`L_q = 1 - \mathrm{evidence\ recall}_q \in [0, 1]`, so
:math:`R \le \alpha` is "mean evidence recall >= :math:`1 - \alpha`".

Learn-then-Test (Angelopoulos, Bates, Candès, Jordan, Lei, *Learn then Test:
Calibrating Predictive Algorithms to Achieve Risk Control*, 2021, arXiv:2110.01052)
turns this into multiple testing: for each setting :math:`\lambda` test the null
:math:`H_\lambda: R(\lambda) > \alpha` with a valid p-value, and certify the settings
whose nulls a family-wise-error-controlling procedure rejects. Every certified setting
then has :math:`R(\lambda) \le \alpha`, simultaneously, with probability
:math:`\ge 1 - \delta`.

**The p-value** (Bates, Angelopoulos, Lei, Malik, Jordan, *Distribution-free,
risk-controlling prediction sets*, 2021, and LTT Section 3): with :math:`\hat R` the
mean loss over the :math:`n` queries,

.. math::

    p^{HB} = \min\Big( \exp\{-n\, h_1(\min(\hat R, \alpha), \alpha)\},\;
             e \cdot P\big(\mathrm{Bin}(n, \alpha) \le \lceil n \hat R \rceil\big) \Big),
    \qquad h_1(a, b) = a \log\tfrac{a}{b} + (1 - a) \log\tfrac{1 - a}{1 - b},

valid for losses bounded in :math:`[0, 1]` (Hoeffding's and Bentkus' inequalities).

**The procedure** (fixed-sequence testing, LTT Section 4): settings are ordered in
advance, without looking at the data, from the largest context to the smallest; they
are tested in that order at level :math:`\delta` each, stopping at the first that is not
rejected. Contexts only shrink along a path, so the risk only grows, and the procedure
controls the family-wise error at :math:`\delta`. Several paths (a ``max_k`` path and a
threshold path, say) share :math:`\delta` by Bonferroni: each runs at
:math:`\delta / m`.

**Assumptions.** The calibration queries and the new ones are exchangeable (i.i.d.
draws from one distribution of queries; a shift in queries, corpus or retriever voids
the guarantee), and the per-query loss is bounded in [0, 1]. The guarantee is on the
mean over new queries, not on every query.

The binomial tail is a stable sum of log terms (``math.lgamma``), so no SciPy is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.errors import ConfigError

__all__ = [
    "Certification",
    "binomial_cdf",
    "certify",
    "certify_means",
    "fixed_sequence",
    "hb_p_value",
    "risk_upper_bound",
]

F64 = NDArray[np.float64]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """:math:`P(\\mathrm{Bin}(n, p) \\le k)`, summed in log space (exact to rounding)."""
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    terms = [base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k + 1)]  # fmt: skip
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _h1(a: float, b: float) -> float:
    def xlogy(x: float, y: float) -> float:
        return 0.0 if x == 0 else x * math.log(x / y)

    return xlogy(a, b) + xlogy(1.0 - a, 1.0 - b)


def hb_p_value(risk: float, n: int, alpha: float) -> float:
    """Hoeffding-Bentkus p-value of :math:`H: R > \\alpha` from the mean loss ``risk``
    of ``n`` queries (losses in [0, 1]); see the module docstring."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if n <= 0:
        return 1.0
    if not 0.0 <= risk <= 1.0:
        raise ConfigError(f"the mean loss must lie in [0, 1], got {risk}")
    hoeffding = math.exp(-n * _h1(min(risk, alpha), alpha))
    # ceil(n R) with a guard against rounding: n R = 3.0000000001 means 3
    successes = math.ceil(n * risk - 1e-9)
    bentkus = math.e * binomial_cdf(successes, n, alpha)
    return min(1.0, hoeffding, bentkus)


def fixed_sequence(p_values: Sequence[float], delta: float) -> int:
    """Fixed-sequence testing: how many leading hypotheses are rejected at level
    ``delta`` (testing stops at the first p-value above it)."""
    n = 0
    for p in p_values:
        if p > delta:
            break
        n += 1
    return n


def risk_upper_bound(risk: float, n: int, delta: float) -> float:
    """The smallest :math:`\\alpha` whose null :math:`R > \\alpha` the HB p-value
    rejects at ``delta``: an upper confidence bound on the risk (1.0 when none)."""
    if n <= 0:
        return 1.0
    lo, hi = risk, 1.0
    if hi <= lo or hb_p_value(risk, n, min(1.0 - 1e-12, hi - 1e-12)) > delta:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if mid <= 0.0 or hb_p_value(risk, n, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True, slots=True)
class Certification:
    """What :func:`certify` found on one path of settings.

    Attributes:
        certified: how many leading settings of the path are certified (0: none).
        p_values: the HB p-value of every setting tested, in path order (NaN after
            the first one not rejected: testing stops there).
        risks: the mean loss of every setting over the queries.
        n: queries the losses come from.
        alpha: the risk level (``1 - target`` for recall).
        delta: the level the path was tested at (``1 - confidence``, over the paths).
    """

    certified: int
    p_values: F64
    risks: F64
    n: int
    alpha: float
    delta: float

    @property
    def last(self) -> int:
        """Index of the last certified setting (the smallest certified context), or -1."""
        return self.certified - 1


def certify(losses: ArrayLike, alpha: float, delta: float) -> Certification:
    """Learn-then-Test along one path: ``losses`` is (queries, settings) with the
    settings in a fixed order from the largest context to the smallest, each loss in
    [0, 1]. Returns how many leading settings have risk <= ``alpha`` certified at
    family-wise error ``delta``.

    Raises:
        ConfigError: losses outside [0, 1] or NaN, ``alpha`` or ``delta`` outside (0, 1).
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta}")
    loss = np.asarray(losses, dtype=np.float64)
    if loss.ndim != 2:
        raise ConfigError(f"losses must be (queries, settings), got shape {loss.shape}")
    if loss.size and (np.isnan(loss).any() or loss.min() < 0.0 or loss.max() > 1.0):
        raise ConfigError("losses must lie in [0, 1] (no NaN)")
    n = int(loss.shape[0])
    return certify_means(loss.mean(axis=0) if n else np.ones(loss.shape[1]), n, alpha, delta)


def certify_means(risks: ArrayLike, n: int, alpha: float, delta: float) -> Certification:
    """:func:`certify` from the mean loss of each setting over ``n`` queries (path
    order, largest context first), when the losses need not be held: 0/1 losses of a
    threshold, say, whose means come from one sort (``ragguard.calibration.answerability``).

    Raises:
        ConfigError: a mean outside [0, 1] or NaN, ``alpha`` or ``delta`` outside (0, 1).
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta}")
    means = np.asarray(risks, dtype=np.float64)
    if means.ndim != 1:
        raise ConfigError(f"risks must be one mean loss per setting, got shape {means.shape}")
    if means.size and (np.isnan(means).any() or means.min() < -1e-12 or means.max() > 1 + 1e-12):
        raise ConfigError("mean losses must lie in [0, 1] (no NaN)")
    means = np.clip(means, 0.0, 1.0)
    p = np.full(means.size, np.nan)  # settings after the first failure are not tested
    for i, r in enumerate(means.tolist()):
        p[i] = hb_p_value(r, n, alpha)
        if p[i] > delta:
            break
    return Certification(fixed_sequence(p.tolist(), delta), p, means, n, alpha, delta)
