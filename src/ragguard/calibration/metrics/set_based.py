r"""Set-based metrics on graded 1-5 labels: RA-nWG@K and its diagnostics.

From "Redefining RAG Evaluation: A Set-Based Approach (Beyond nDCG)". The LLM reads a
*set* of K passages, so order inside the set is ignored. Labels follow a 1-5 rubric:
5 decisive, 4 highly relevant, 3 partially useful, 2 weak, 1 distractor or junk.

Rarity-aware weights, per query
-------------------------------
From the query's **labelled pool** :math:`\mathcal{U}` (every labelled passage,
retrieved or not) with :math:`n_g` passages of grade g: base utilities
:math:`b_5 = 1, b_4 = 0.5, b_3 = 0.1, b_2 = b_1 = 0`, prevalence
:math:`p_g = n_g / N`, rarity :math:`r_g = b_g / p_g^\alpha` (:math:`r_g = 0` when
:math:`p_g = 0`), and

.. math:: w_5 = 1,\quad w_4 = \min(r_4 / r_5,\ \mathrm{cap}_4),\quad
          w_3 = \min(r_3 / r_5,\ \mathrm{cap}_3),\quad w_2 = w_1 = 0

with :math:`\alpha = 1`, :math:`\mathrm{cap}_4 = 1`, :math:`\mathrm{cap}_3 = 0.25` by
default. **No grade 5** in the pool (:math:`n_5 = 0`): the fixed fallback
:math:`w_5 = 1, w_4 = 1, w_3 = 0.2`. Unjudged passages and grades <= 0 weigh 0.

Gains at budget K, with :math:`S_K` the first K ranked candidates (the context):

* observed :math:`G_{obs}(K) = \sum_{d \in S_K} w(d)`;
* global oracle :math:`G_{oracle}(K)`: the K largest weights in the labelled pool;
* pool oracle :math:`G_{pool}(K)`: the K largest weights among **all** retrieved
  candidates (the retrieval pool; a ``cut`` shortens :math:`S_K`, not the pool).

NA handling
-----------
A metric that is undefined for a query (zero denominator, as listed per metric) is NA:
NaN in per-query results. Means skip NA queries (the macro-average over queries where
the metric is defined, as the write-up prescribes) and are NaN when every query is NA.
Without a cutoff, K is the length of each query's list (so an empty list is NA for
the ratios above and 0 for Precision4+ and Harm).

Grades must be integers; grades above 5 raise ``ValueError`` (rescale them first).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics._common import F64, divide, window
from ragguard.errors import ConfigError, EvalSetError

BASE_UTILITY = {5: 1.0, 4: 0.5, 3: 0.1}
NO_GRADE_5_WEIGHTS = {5: 1.0, 4: 1.0, 3: 0.2}


def _check_grades(arrays: EvalArrays) -> None:
    if (arrays.max_grade > 5).any():
        q = int(np.flatnonzero(arrays.max_grade > 5)[0])
        raise EvalSetError(
            f"set-based metrics need grades on the 1-5 rubric; query {arrays.qids[q]!r} has "
            f"grade {arrays.max_grade[q]:g}"
        )
    if not arrays.integer_grades:
        raise EvalSetError("set-based metrics need integer grades (1-5)")


def rarity_weights(
    counts: NDArray[np.int64], *, alpha: float = 1.0, cap4: float = 1.0, cap3: float = 0.25
) -> F64:
    """Per-query grade weights (Q, 6) from per-query grade counts (Q, 6).

    Column g holds :math:`w_g` for grade g in 1..5 (column 0, for grades <= 0, is 0).
    See the module docstring for the formula, the caps and the no-grade-5 fallback.
    """
    for name, value in (("alpha", alpha), ("cap4", cap4), ("cap3", cap3)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
    n = counts.astype(np.float64)
    w = np.zeros(n.shape)
    w[:, 5] = 1.0
    n5 = n[:, 5]
    for g, cap in ((4, cap4), (3, cap3)):
        ng = n[:, g]
        ratio = (BASE_UTILITY[g] / BASE_UTILITY[5]) * np.power(
            divide(n5, ng), alpha
        )  # r_g / r_5 = (b_g / b_5) (p_5 / p_g)^alpha
        w[:, g] = np.where(ng > 0, np.minimum(ratio, cap), 0.0)
    none = n5 == 0
    for g, value in NO_GRADE_5_WEIGHTS.items():
        w[none, g] = value
    return w


def _top_weight_sum(weights: F64, counts: F64, budget: F64) -> F64:
    """Sum of the ``budget`` largest weights of a multiset holding ``counts[:, g]``
    copies of ``weights[:, g]`` (grades 3..5; lower grades weigh 0)."""
    w = weights[:, 3:6]
    c = counts[:, 3:6]
    order = np.argsort(-w, axis=1, kind="stable")
    w = np.take_along_axis(w, order, axis=1)
    c = np.take_along_axis(c, order, axis=1)
    left = budget.astype(np.float64).copy()
    total = np.zeros(w.shape[0])
    for j in range(w.shape[1]):
        take = np.minimum(c[:, j], left)
        total += w[:, j] * take
        left -= take
    return total


def _gains(
    arrays: EvalArrays, k: int | None, cut: ArrayLike | None, alpha: float, cap4: float, cap3: float
) -> tuple[F64, F64, F64]:
    """(G_obs, G_oracle, G_pool) per query."""
    _check_grades(arrays)
    win = window(arrays, k, cut)
    weights = rarity_weights(arrays.grade_counts, alpha=alpha, cap4=cap4, cap3=cap3)
    cols = np.clip(win.take(arrays.grades), 0, 5).astype(np.intp)
    cand_w = np.take_along_axis(weights, cols, axis=1)  # padding/unjudged: grade 0 -> 0
    observed = cand_w.sum(axis=1)
    budget = win.denominator()
    oracle = _top_weight_sum(weights, arrays.grade_counts.astype(np.float64), budget)
    pool_counts = arrays.retrieved_grade_counts.astype(np.float64)
    pool = _top_weight_sum(weights, pool_counts, budget)
    return observed, oracle, pool


def ra_nwg(
    arrays: EvalArrays,
    k: int | None = None,
    *,
    alpha: float = 1.0,
    cap4: float = 1.0,
    cap3: float = 0.25,
    cut: ArrayLike | None = None,
) -> F64:
    r"""RA-nWG@K: rarity-aware normalised weighted gain of the context (order-free).

    .. math:: \text{RA-nWG}@K = G_{obs}(K) / G_{oracle}(K)

    1.0 means the context is as good as the best K passages of the labelled pool.
    Edge cases: NA when :math:`G_{oracle}(K) = 0`: no passage of grade >= 3 labelled,
    or K = 0 (an empty list without a cutoff); a list shorter than K is not padded (the
    oracle still gets K slots).
    """
    observed, oracle, _ = _gains(arrays, k, cut, alpha, cap4, cap3)
    return divide(observed, oracle, empty=math.nan)


def proc(
    arrays: EvalArrays,
    k: int | None = None,
    *,
    alpha: float = 1.0,
    cap4: float = 1.0,
    cap3: float = 0.25,
    cut: ArrayLike | None = None,
) -> F64:
    r"""PROC@K, the pool-restricted oracle ceiling: how much of the global oracle's gain
    the best K-subset of the retrieved candidates could reach.

    .. math:: \mathrm{PROC}@K = G_{pool}(K) / G_{oracle}(K)

    A low PROC is a retrieval failure: no selection from this pool can do better.
    Edge cases: NA when :math:`G_{oracle}(K) = 0`. ``cut`` does not change the pool.
    """
    _, oracle, pool = _gains(arrays, k, cut, alpha, cap4, cap3)
    return divide(pool, oracle, empty=math.nan)


def pct_proc(
    arrays: EvalArrays,
    k: int | None = None,
    *,
    alpha: float = 1.0,
    cap4: float = 1.0,
    cap3: float = 0.25,
    cut: ArrayLike | None = None,
) -> F64:
    r"""%PROC@K: the share of the pool's ceiling the actual context realises
    (selection / reranking efficiency).

    .. math:: \%\mathrm{PROC}@K = \text{RA-nWG}@K / \mathrm{PROC}@K
              = G_{obs}(K) / G_{pool}(K)

    Edge cases: NA when RA-nWG or PROC is NA, or PROC = 0 (nothing useful retrieved).
    """
    observed, oracle, pool = _gains(arrays, k, cut, alpha, cap4, cap3)
    defined = (oracle > 0) & (pool > 0)
    return np.where(defined, divide(observed, pool), math.nan)


def _graded(
    arrays: EvalArrays, k: int | None, cut: ArrayLike | None, lowest: int, recall: bool
) -> F64:
    """Grade >= ``lowest`` passages in the context over K, or with ``recall`` over the
    most that fit (NA when none do)."""
    _check_grades(arrays)
    win = window(arrays, k, cut)
    found = (win.take(arrays.grades) >= lowest).sum(axis=1, dtype=np.float64)
    if not recall:
        return divide(found, win.denominator())
    available = arrays.grade_counts[:, lowest:6].sum(axis=1).astype(np.float64)
    return divide(found, np.minimum(win.denominator(), available), empty=math.nan)


def n_recall_4plus(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""N-Recall4+@K: grade >= 4 passages in the context over the most that fit.

    .. math:: \text{N-Recall}_{4+}@K = \frac{G_{4+}(K)}{\min(K, R_{4+})},\quad
              R_{4+} = n_4 + n_5

    Edge cases: NA when the pool has no passage of grade >= 4, and (without a cutoff)
    for an empty list, where K = 0.
    """
    return _graded(arrays, k, cut, 4, recall=True)


def n_recall_5(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""N-Recall5@K: grade-5 passages in the context over the most that fit.

    .. math:: \text{N-Recall}_{5}@K = \frac{G_{5}(K)}{\min(K, n_5)}

    Edge cases: NA when the pool has no grade-5 passage, and (without a cutoff) for an
    empty list, where K = 0.
    """
    return _graded(arrays, k, cut, 5, recall=True)


def precision_4plus(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Precision4+@K: the share of the K slots holding a passage of grade >= 4.

    .. math:: \text{Precision}_{4+}@K = G_{4+}(K) / K

    Edge cases: divides by K even when the list is shorter; 0 for an empty list
    without a cutoff.
    """
    return _graded(arrays, k, cut, 4, recall=False)


def harm(
    arrays: EvalArrays, k: int | None = None, *, harm_grade: int = 2, cut: ArrayLike | None = None
) -> F64:
    r"""Harm@K: the share of the K slots holding a passage labelled harmful or junk.

    .. math:: \mathrm{Harm}@K = \frac{1}{K} \sum_{d \in S_K} [d \text{ labelled},\
              g(d) \le \mathrm{harm\_grade}]

    ``harm_grade`` is 2 by default (grades 1-2; use 1 for "grade 1 only", as the
    write-up allows). Unjudged passages are not counted: nothing says they harm.
    Judged passages with grade <= 0 count. Edge cases: divides by K even when the list
    is shorter; 0 for an empty list without a cutoff.
    """
    _check_grades(arrays)
    if isinstance(harm_grade, bool) or not isinstance(harm_grade, int):
        raise ConfigError(f"harm_grade must be an int, got {harm_grade!r}")
    win = window(arrays, k, cut)
    bad = win.take(arrays.judged, False) & (win.take(arrays.grades) <= harm_grade)
    return divide(bad.sum(axis=1, dtype=np.float64), win.denominator())
