"""Statistics of a calibration: the query split, the checked rows, and paired bootstrap
comparisons with percentile confidence intervals; it reads sweep kernels and imports no other
fitting module."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, Unpack

import numpy as np

from ragguard.calibration._format import format_interval, format_number
from ragguard.calibration.fit.sweep import F64, PASSAGES, I, SweepKernel, lower_is_better
from ragguard.errors import ConfigError, EvalSetError

_BOOTSTRAP_CHUNK = 100  # resamples per bincount (memory: 2 x chunk x n values)


# --------------------------------------------------------------------------- split


def split_queries(n: int, holdout: float, seed: int) -> tuple[I, I]:
    """Calibration and held-out row indices (each sorted), reproducible by ``seed``."""
    if not (isinstance(holdout, int | float) and 0.0 <= holdout < 1.0):
        raise ConfigError(f"holdout must be a fraction in [0, 1), got {holdout!r}")
    n_held = n - _n_calibration(n, holdout)
    if n - n_held < 1:
        raise EvalSetError(
            f"no queries left to calibrate on: {n} labelled queries, {n_held} held out "
            f"(holdout={holdout:g}); lower --holdout or add queries"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_held:]).astype(np.intp), np.sort(perm[:n_held]).astype(np.intp)


def checked_rows(calibration_rows: I, heldout_rows: I) -> tuple[I, str]:
    """The rows a choice is checked on and their name: the held-out rows, or every
    calibration row (in-sample) when nothing is held out."""
    if heldout_rows.size:
        return heldout_rows, "held-out"
    return calibration_rows, "all queries (in-sample)"


MIN_VALIDATION_QUERIES = 30
"""Usable validation queries (a relevant and a non-relevant candidate each) that
``train-reranker`` needs to write anything."""

VALIDATION = 0.2
"""The share of the calibration queries ``train-reranker`` validates on by default."""


def validation_count(n_calibration: int, validation: float) -> int:
    """Validation queries drawn from ``n_calibration`` calibration queries."""
    return min(max(1, round(validation * n_calibration)), n_calibration - 1)


def _n_calibration(n: int, holdout: float) -> int:
    """Queries left to calibrate on of ``n`` (``split_queries``)."""
    return n - (0 if holdout == 0 else max(1, round(holdout * n)))


def queries_needed(n_queries: int, usable: int, holdout: float, validation: float) -> int:
    """The fewest labelled queries to add to ``n_queries`` for validation to reach
    ``MIN_VALIDATION_QUERIES`` usable ones, with ``usable`` now and each added query
    usable (a relevant and a non-relevant candidate); 0 when there are enough."""
    need = MIN_VALIDATION_QUERIES - usable
    if need <= 0:
        return 0
    now = validation_count(_n_calibration(n_queries, holdout), validation)
    more = 1
    # both counts grow by at most one per added query, so this ends
    while validation_count(_n_calibration(n_queries + more, holdout), validation) < now + need:
        more += 1
    return more


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its percentile bootstrap confidence interval (NaN when undefined)."""

    mean: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        """Whether the whole interval lies on one side of 0."""
        return (self.low > 0 or self.high < 0) and not math.isnan(self.low)

    def as_dict(self) -> dict[str, float]:
        """``{"mean", "low", "high"}``."""
        return {"mean": self.mean, "low": self.low, "high": self.high}


def _weighted_means(weights: F64, values: F64) -> F64:
    """(B, M) means of ``values`` (n, M) under bootstrap count ``weights`` (B, n), skipping NaN."""
    defined = ~np.isnan(values)
    num = weights @ np.where(defined, values, 0.0)
    den = weights @ defined.astype(np.float64)
    out: F64 = np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)
    return out


def bootstrap_means(sample: F64, n_bootstrap: int, rng: np.random.Generator) -> F64:
    """(n_bootstrap, M) means of ``sample`` (n, M) over resamples of its n rows drawn with
    replacement (NaN skipped)."""
    n = sample.shape[0]
    out = np.empty((n_bootstrap, sample.shape[1]))
    for lo in range(0, n_bootstrap, _BOOTSTRAP_CHUNK):
        b = min(_BOOTSTRAP_CHUNK, n_bootstrap - lo)
        draws = rng.integers(0, n, size=(b, n))
        draws += (np.arange(b) * n)[:, None]
        counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
        out[lo : lo + b] = _weighted_means(counts.astype(np.float64), sample)
    return out


def _intervals(sample: F64, boot: F64, level: float) -> list[Interval]:
    """Per column of ``sample`` (n, M): the mean and the percentile interval of its
    bootstrap means ``boot`` (B, M)."""
    alpha = (1.0 - level) / 2.0
    out: list[Interval] = []
    point = _weighted_means(np.ones((1, sample.shape[0])), sample)[0]
    for j in range(sample.shape[1]):
        col = boot[:, j]
        col = col[~np.isnan(col)]
        if col.size == 0 or math.isnan(point[j]):
            out.append(Interval(float(point[j]), math.nan, math.nan))
            continue
        lo, hi = np.quantile(col, [alpha, 1.0 - alpha])
        out.append(Interval(float(point[j]), float(lo), float(hi)))
    return out


def bootstrap_interval(
    values: F64, *, n_bootstrap: int, seed: int, level: float = 0.95, stream: int = 2
) -> Interval:
    """The mean of ``values`` (n,) with its percentile bootstrap interval (NaN without
    values), drawn from its own random stream ``[seed, stream]``: a share of held-out
    queries, say (``ragguard.calibration.fit.answerability``)."""
    sample = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    if sample.shape[0] == 0:
        return Interval(math.nan, math.nan, math.nan)
    boot = bootstrap_means(sample, n_bootstrap, np.random.default_rng([seed, stream]))
    return _intervals(sample, boot, level)[0]


@dataclass(frozen=True, eq=False)
class Comparison:
    """Baseline (plain top-k) against the guarded setting on one set of queries."""

    split: str
    rows: I
    metrics: tuple[str, ...]
    baseline: Mapping[str, Interval]
    guarded: Mapping[str, Interval]
    difference: Mapping[str, Interval]
    baseline_values: F64 = field(repr=False)
    guarded_values: F64 = field(repr=False)
    level: float = 0.95
    n_bootstrap: int = 2000

    @property
    def n_queries(self) -> int:
        """Number of queries compared."""
        return int(self.rows.size)

    def verdict(self, metric: str) -> str:
        """``"better"``, ``"worse"`` or ``"no clear difference"`` for the guarded setting
        on ``metric``, from the interval of the difference."""
        d = self.difference[metric]
        if not d.excludes_zero():
            return "no clear difference"
        gained = d.low > 0
        if lower_is_better(metric):
            gained = not gained
        return "better" if gained else "worse"

    def header(self) -> dict[str, Any]:
        """How the comparison was made: ``{"split", "queries", "level", "n_bootstrap"}``
        (the head of a ``heldout_check`` record in the provenance and the JSON summary)."""
        return {
            "split": self.split,
            "queries": self.n_queries,
            "level": self.level,
            "n_bootstrap": self.n_bootstrap,
        }

    def where(self) -> str:
        """``on the 15 held-out queries``, or ``in-sample on all 51 queries (none held
        out)``: where the comparison was made, for a sentence."""
        if self.split == "held-out":
            return f"on the {self.n_queries} held-out queries"
        return f"in-sample on all {self.n_queries} queries (none held out)"

    def change(self, metric: str, digits: int = 3) -> str:
        """The difference on ``metric`` with its interval, rounded outward:
        ``+0.038 [-0.011, +0.089]``."""
        d = self.difference[metric]
        text = format_number(d.mean, digits, signed=True)
        interval = format_interval(d.low, d.high, digits)
        return f"{text} {interval}" if interval else text

    def passages_verdict(self) -> str:
        """``"fewer"``, ``"more"`` or ``"same"``: the passages the guarded setting keeps
        on average against the baseline (the sign of the mean difference; a count is
        neither better nor worse by itself); ``"n/a"`` without queries."""
        d = self.difference[PASSAGES].mean
        if math.isnan(d):
            return "n/a"
        return "fewer" if d < 0 else "more" if d > 0 else "same"


def metric_values(kernel: SweepKernel, kept: I, metrics: Sequence[str], rows: I) -> F64:
    """(M, len(rows)) per-query values of ``metrics`` on ``rows`` when each query keeps
    ``kept`` passages."""
    out: F64 = kernel.values(kept, metrics)[:, rows]
    return out


class Bootstrap(TypedDict):
    """How a comparison resamples: the split's name, resamples, seed and interval level."""

    split: str
    n_bootstrap: int
    seed: int
    level: NotRequired[float]


def compare(
    kernel: SweepKernel,
    base: I,
    guard: I,
    rows: I,
    metrics: Sequence[str],
    **how: Unpack[Bootstrap],
) -> Comparison:
    """``compare_values`` of two per-query cuts on ``rows``."""
    both = kernel.values(np.stack([base, guard]), metrics)[:, :, rows]
    return compare_values(both[0], both[1], rows, metrics, **how)


def compare_values(
    base: F64, guard: F64, rows: I, metrics: Sequence[str], **how: Unpack[Bootstrap]
) -> Comparison:
    """Paired bootstrap comparison of two settings' per-query values (M, len(rows))."""
    split, n_bootstrap, level = how["split"], how["n_bootstrap"], how.get("level", 0.95)
    diff = guard - base
    n = rows.size
    rng = np.random.default_rng([how["seed"], 1])  # its own stream, apart from the split
    m = base.shape[0]
    sample = np.concatenate((base.T, guard.T, diff.T), axis=1)  # (n, 3M)
    boot = bootstrap_means(sample, n_bootstrap, rng) if n > 0 else np.full((1, 3 * m), np.nan)
    names = tuple(metrics)
    b, g, d = (
        dict(zip(names, _intervals(sample[:, s], boot[:, s], level), strict=True))
        for s in (slice(0, m), slice(m, 2 * m), slice(2 * m, None))
    )
    return Comparison(split, rows, names, b, g, d, base, guard, level, n_bootstrap)
