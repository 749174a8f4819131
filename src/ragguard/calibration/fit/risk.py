"""Finite-sample recall guarantees: Learn-then-Test (Angelopoulos et al., arXiv:2110.01052)
with the Hoeffding-Bentkus p-value, fixed-sequence testing along paths fixed in advance
(largest context first), Bonferroni across paths; docs/guides/calibrate.md says what it assumes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ragguard.calibration._format import floor_number, format_number
from ragguard.calibration.fit.sweep import (
    F64,
    PASSAGES,
    Constraint,
    I,
    SweepKernel,
    SweepResult,
    distinct_rows,
    is_plain_top_k,
)
from ragguard.errors import ConfigError
from ragguard.policy import CutRule, PolicyParams

EVIDENCE = "evidence_recall"
"""The metric a recall guarantee is on: evidence recall, the recall a guard controls."""


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
    terms = [
        base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _h1(a: float, b: float) -> float:
    def xlogy(x: float, y: float) -> float:
        return 0.0 if x == 0 else x * math.log(x / y)

    return xlogy(a, b) + xlogy(1.0 - a, 1.0 - b)


def hb_p_value(risk: float, n: int, alpha: float) -> float:
    """Hoeffding-Bentkus p-value of ``H: R > alpha`` from the mean loss ``risk`` (R^) of
    ``n`` queries, losses in [0, 1] (Bates et al. 2021; LTT section 3):
    ``min(exp(-n h1(min(R^, alpha), alpha)), e P(Bin(n, alpha) <= ceil(n R^)))`` with
    ``h1(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b))``."""
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
    """What ``certify`` found on one path of settings."""

    certified: int
    p_values: F64
    risks: F64
    n: int

    @property
    def last(self) -> int:
        """Index of the last certified setting (the smallest certified context), or -1."""
        return self.certified - 1


def certify(losses: ArrayLike, alpha: float, delta: float) -> Certification:
    """Learn-then-Test along one path: ``losses`` is (queries, settings) with the settings in a
    fixed order from the largest context to the smallest, each loss in [0, 1]."""
    loss = np.asarray(losses, dtype=np.float64)
    if loss.ndim != 2:
        raise ConfigError(f"losses must be (queries, settings), got shape {loss.shape}")
    if loss.size and (np.isnan(loss).any() or loss.min() < 0.0 or loss.max() > 1.0):
        raise ConfigError("losses must lie in [0, 1] (no NaN)")
    n = int(loss.shape[0])
    return certify_means(loss.mean(axis=0) if n else np.ones(loss.shape[1]), n, alpha, delta)


def certify_means(risks: ArrayLike, n: int, alpha: float, delta: float) -> Certification:
    """``certify`` from the mean loss of each setting over ``n`` queries (path order, largest
    context first), when the losses need not be held: 0/1 losses of a threshold, say, whose means
    come from one sort (``ragguard.calibration.fit.answerability``)."""
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
    return Certification(fixed_sequence(p.tolist(), delta), p, means, n)


# --------------------------------------------------------------------------- the sweep's guarantee


def parse_guarantee(text: str) -> float:
    """The recall target of ``"recall>=0.9"`` (``evidence_recall>=0.9`` alike): the guarantee is
    always on evidence recall, the recall a guard controls."""
    c = Constraint.parse(text)
    if c.metric not in ("recall", EVIDENCE) or c.op != ">=":
        raise ConfigError(f"a guarantee reads 'recall>=TARGET' (on evidence recall), got {text!r}")
    if not 0.0 < c.bound < 1.0:
        raise ConfigError(f"the guaranteed recall must lie in (0, 1), got {c.bound:g}")
    return float(c.bound)


@dataclass(frozen=True, eq=False)
class GuaranteeResult:
    """A finite-sample recall guarantee (Learn-then-Test, ``ragguard.calibration.fit.risk``)."""

    target: float
    confidence: float
    paths: tuple[str, ...]
    point: int | None
    n_calibration: int
    recall_bound: float
    best_bound: float
    best_point: int
    heldout_recall: float
    heldout_queries: int

    @property
    def met(self) -> bool:
        """Whether a setting carries the guarantee."""
        return self.point is not None

    @property
    def written(self) -> int:
        """The setting written: the certified one, or the largest context standing in."""
        return self.point if self.point is not None else self.best_point

    @property
    def test_level(self) -> float:
        """Each sequence's test level (Bonferroni over ``paths``)."""
        return (1.0 - self.confidence) / max(1, len(self.paths))

    def statement(self, name: Callable[[int], str]) -> str:
        """The guarantee in words, with its assumptions; ``name(i)`` names point ``i``."""
        pct = f"{self.confidence:.0%}"
        if self.point is None:
            return (
                f"no setting guarantees mean evidence recall >= {self.target:g} at {pct} "
                f"confidence on {self.n_calibration} calibration queries with evidence; the "
                f"most that can be guaranteed is {floor_number(self.best_bound)} "
                f"({name(self.best_point)})"
            )
        return (
            f"{name(self.point)}: mean evidence recall >= {self.target:g} on new queries "
            f"with probability >= {pct} (Learn-then-Test, Hoeffding-Bentkus p-values, "
            f"fixed-sequence over {len(self.paths)} path(s), {self.n_calibration} "
            f"calibration queries with evidence; certified lower bound "
            f"{floor_number(self.recall_bound)}); assumes new queries exchangeable with "
            "these (same distribution of queries, corpus and retriever) and counts only "
            "queries whose candidates hold evidence"
        )

    def heldout_line(self, name: Callable[[int], str]) -> str:
        """What the held-out queries say about the guarantee, in one line."""
        if self.point is None:
            return "no setting is certified, so there is nothing to check on held-out queries"
        if not self.heldout_queries:
            return (
                f"no queries with evidence were held out: nothing checks {name(self.point)} "
                "on queries it has not seen"
            )
        ok = "meets" if self.heldout_recall >= self.target else "falls short of"
        return (
            f"held-out check: {name(self.point)} reaches mean evidence recall "
            f"{format_number(self.heldout_recall)} on the {self.heldout_queries} held-out "
            f"queries with evidence, never used to certify it ({ok} the target "
            f"{self.target:g})"
        )


def guarantee_paths(points: Sequence[PolicyParams]) -> dict[str, list[int]]:
    """Fixed sequences of settings, largest context first, fixed before any data is read: plain
    top-k from the largest cap down, and the relative threshold rising at the largest cap."""
    top_k = sorted(
        (i for i, p in enumerate(points) if is_plain_top_k(p)),
        key=lambda i: -points[i].max_k,
    )
    paths = {"top-k": top_k} if top_k else {}
    if top_k:
        cap = points[top_k[0]].max_k
        thr = sorted(
            (
                i
                for i, p in enumerate(points)
                if p.max_k == cap
                and p.cut is CutRule.NONE
                and p.min_score is None
                and p.expected_utility is None
            ),
            key=lambda i: points[i].relative_threshold,
        )
        if len(thr) > 1:
            paths["threshold"] = thr
    return paths


def certify_paths(
    paths: Mapping[str, Sequence[int]],
    evidence: F64,
    passages: F64,
    target: float,
    confidence: float,
) -> tuple[int | None, float, float, int]:
    """Learn-then-Test over ``paths`` (Bonferroni: ``delta / len(paths)`` each)."""
    alpha = 1.0 - target
    delta = (1.0 - confidence) / max(1, len(paths))
    best: int | None = None
    best_bound = -math.inf
    best_start = next(iter(paths.values()))[0]
    bound = math.nan
    for path in paths.values():
        ev = evidence[list(path)]
        has = ~np.isnan(ev).any(axis=0)
        loss = 1.0 - ev[:, has].T  # (queries with evidence, settings)
        cert = certify(loss, alpha, delta)
        start_bound = 1.0 - risk_upper_bound(float(cert.risks[0]), cert.n, delta)
        if start_bound > best_bound:
            best_bound, best_start = start_bound, path[0]
        for j in range(cert.certified):
            i = path[j]
            if best is None or passages[i] < passages[best] - 1e-12:
                best = i
                bound = 1.0 - risk_upper_bound(float(cert.risks[j]), cert.n, delta)
    return best, bound, best_bound, best_start


def certify_guarantee(
    kernel: SweepKernel,
    result: SweepResult,
    target: float,
    confidence: float,
    held_rows: I,
    paths: Mapping[str, Sequence[int]] | None = None,
    kernel_of: Callable[[int], SweepKernel] | None = None,
) -> GuaranteeResult:
    """The recall guarantee of ``result``'s sweep: certified on the calibration queries
    (``result.rows``) by Learn-then-Test along ``paths`` (by default ``guarantee_paths``), and the
    certified setting, the one written, measured on the held-out queries ``held_rows``."""
    points = result.points
    paths = paths if paths is not None else guarantee_paths(points)
    if not paths:
        raise ConfigError("a recall guarantee needs plain top-k settings in the grid")
    kern = kernel_of or (lambda i: kernel)
    members = sorted({i for path in paths.values() for i in path})
    ev = np.full((len(points), kernel.n_queries), np.nan)
    on_kernel: dict[int, list[int]] = {}  # settings cutting alike on one kernel: one pass
    for i in members:
        on_kernel.setdefault(id(kern(i)), []).append(i)
    for same in on_kernel.values():
        first, which = distinct_rows(result.kept[same])
        ev[same] = kern(same[0]).values(result.kept[same][first], [EVIDENCE])[which, 0]
    calib = result.rows
    point, bound, best_bound, best_start = certify_paths(
        paths, ev[:, calib], result.column(PASSAGES), target, confidence
    )
    has = ~np.isnan(ev[members[0]])
    held = held_rows[has[held_rows]]
    held_recall = float(np.mean(ev[point, held])) if point is not None and held.size else math.nan
    return GuaranteeResult(
        target=target,
        confidence=confidence,
        paths=tuple(paths),
        point=point,
        n_calibration=int(has[calib].sum()),
        recall_bound=bound,
        best_bound=best_bound,
        best_point=best_start,
        heldout_recall=held_recall,
        heldout_queries=int(held.size),
    )
