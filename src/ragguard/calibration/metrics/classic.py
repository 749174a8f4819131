r"""Classic ranking metrics, with the conventions of trec_eval, ranx and ir_measures.

Notation for one query: candidates ranked :math:`1..n` (ragguard's tie rule, see
``ragguard.calibration.data.arrays``), grade :math:`g_i` of the candidate at rank
:math:`i` (0 when unjudged), relevant when :math:`g_i \ge 1`, :math:`R` the number of
relevant documents of the query (labelled, retrieved or not, or stated), and the
cutoff :math:`k`. Without a cutoff a metric reads the whole list (:math:`k = n`).

Shared conventions (checked against pytrec_eval and ranx in the tests):

* a query with no relevant document scores 0 and counts in the mean;
* a list shorter than :math:`k` is not padded with anything relevant; precision still
  divides by :math:`k`;
* recall and average precision divide by :math:`R`, not :math:`\min(R, k)`;
* nDCG's ideal ranking uses every relevant document of the query, retrieved or not;
  IDCG = 0 gives nDCG = 0; negative grades count as gain 0.
Each public function returns one float per query; ``cut`` (candidates kept per query)
counts the rest as not retrieved.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics._common import F64, I, discount, divide, window
from ragguard.errors import ConfigError

# --------------------------------------------------------------------------- kernels


def _relevant_in(
    arrays: EvalArrays, k: int | None, cut: ArrayLike | None
) -> tuple[NDArray[np.bool_], F64]:
    w = window(arrays, k, cut)
    rel = w.take(arrays.grades) >= 1
    return rel, w.denominator()


def _evidence_found(arrays: EvalArrays, k: int | None, cut: ArrayLike | None) -> F64:
    w = window(arrays, k, cut)
    out: F64 = (w.take(arrays.grades) >= arrays.rules.relevant_grade).sum(axis=1, dtype=np.float64)
    return out


def _ndcg(gains: F64, ideal: F64) -> F64:
    return divide(gains @ discount(gains.shape[1]), ideal @ discount(ideal.shape[1]))


# --------------------------------------------------------------------------- public


def precision(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""Precision at k: the share of the first k positions holding a relevant document.

    .. math:: P@k = \frac{1}{k} \sum_{i=1}^{\min(k, n)} [g_i \ge 1]

    Edge cases: a list shorter than k still divides by k (trec_eval ``P_k``, ranx).
    Without a cutoff it is the share of the whole list (trec_eval ``set_P``); an empty
    list scores 0.
    """
    rel, den = _relevant_in(arrays, k, cut)
    return divide(rel.sum(axis=1, dtype=np.float64), den)


def recall(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""Recall at k: the share of the query's relevant documents found in the first k.

    .. math:: R@k = \frac{1}{R} \sum_{i=1}^{\min(k, n)} [g_i \ge 1]

    Edge cases: R counts relevant documents that were not retrieved (or the stated
    number, see ``ragguard.calibration.data.arrays``); R = 0 scores 0.
    """
    rel, _ = _relevant_in(arrays, k, cut)
    return divide(rel.sum(axis=1, dtype=np.float64), arrays.n_relevant.astype(np.float64))


def evidence_recall(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Evidence recall at k: the share of the relevant passages **among the query's
    candidates** that the first k keep (the recall a context guard controls).

    .. math:: ER@k = \frac{1}{E} \sum_{i=1}^{\min(k, n)} [g_i \ge g_{rel}]

    with :math:`E` the number of the query's candidates graded at least the rules'
    ``relevant_grade`` :math:`g_{rel}` (``EvalArrays.n_evidence``). Classic ``recall``
    divides by every judged relevant document, retrieved or not; keeping every
    candidate reaches it only up to the retriever's ceiling, while evidence recall
    reaches 1.

    Edge cases: a query with no relevant candidate (:math:`E = 0`) is NA (NaN): no
    context can miss evidence it never had, so it is left out of the mean.
    """
    found = _evidence_found(arrays, k, cut)
    den = arrays.n_evidence.astype(np.float64)
    out: F64 = np.divide(found, den, out=np.full(den.shape, np.nan), where=den > 0)
    return out


def evidence_needed(arrays: EvalArrays, needs: int | None = None) -> I:
    """(Q,) relevant candidates each query needs in its context: ``needs`` for every
    query when given, else the query's stated need (``EvalArrays.n_needed``, the JSONL
    ``needs`` field), else 1; at most the relevant candidates it has
    (``EvalArrays.n_evidence``).

    Raises:
        ConfigError: ``needs`` is not a whole number >= 1.
    """
    if needs is not None and (isinstance(needs, bool) or not isinstance(needs, int) or needs < 1):
        raise ConfigError(f"evidence_coverage: needs must be a whole number >= 1, got {needs!r}")
    stated = arrays.n_needed if arrays.n_needed.size else np.zeros(arrays.n_queries, np.intp)
    want = np.where(stated > 0, stated, 1) if needs is None else np.full(stated.shape, needs)
    out: I = np.minimum(want, arrays.n_evidence).astype(np.intp)
    return out


def evidence_coverage(
    arrays: EvalArrays,
    k: int | None = None,
    *,
    cut: ArrayLike | None = None,
    needs: int | None = None,
) -> F64:
    r"""Evidence coverage at k: 1 if the first k hold the relevant passages the query
    needs, else 0; its mean is the share of answerable queries whose context holds
    their evidence.

    .. math:: EC@k = \Big[\sum_{i=1}^{\min(k, n)} [g_i \ge g_{rel}] \ge \min(\nu, E)\Big]

    with :math:`E` as in ``evidence_recall`` and :math:`\nu` what the query needs
    (``evidence_needed``): ``needs`` for every query when given
    (``"evidence_coverage(needs=2)"``), else its own ``needs`` from the data, else one
    passage. Evidence recall asks for a share of **every** relevant candidate; coverage
    asks for enough of them to answer, so many relevant candidates per query do not
    force a long context.

    Edge cases: a query with no relevant candidate (:math:`E = 0`) is NA (NaN), as in
    evidence recall; a query that needs more than it has needs all it has.
    """
    found = _evidence_found(arrays, k, cut) >= evidence_needed(arrays, needs)
    out: F64 = np.where(arrays.n_evidence > 0, found.astype(np.float64), np.nan)
    return out


def hit_rate(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""Hit rate at k (trec_eval ``success``): 1 if a relevant document is in the first
    k, else 0.

    .. math:: \mathrm{Hit}@k = \max_{i \le \min(k, n)} [g_i \ge 1]

    Edge cases: no relevant document, or an empty list, scores 0.
    """
    rel, _ = _relevant_in(arrays, k, cut)
    out: F64 = np.any(rel, axis=1).astype(np.float64)
    return out


def reciprocal_rank(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Reciprocal rank at k (its mean is MRR): one over the rank of the first relevant
    document within the first k.

    .. math:: RR@k = \frac{1}{\min\{i \le \min(k, n) : g_i \ge 1\}}

    Edge cases: no relevant document within k scores 0. ranx's ``mrr@k`` honours k;
    trec_eval's ``recip_rank`` has none (it equals this without a cutoff).
    """
    rel, _ = _relevant_in(arrays, k, cut)
    if rel.shape[1] == 0:
        return np.zeros(rel.shape[0])
    return np.where(rel.any(axis=1), 1.0 / (rel.argmax(axis=1) + 1.0), 0.0)


def average_precision(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Average precision at k (its mean is MAP): precision at each relevant rank
    within k, summed and divided by R.

    .. math:: AP@k = \frac{1}{R} \sum_{i=1}^{\min(k, n)} [g_i \ge 1]\, P@i

    Edge cases: k only truncates the ranking (trec_eval ``map_cut``); the divisor is
    still R, so relevant documents below k or not retrieved count as misses. R = 0
    scores 0.
    """
    rel, _ = _relevant_in(arrays, k, cut)
    # sparse over the relevant positions only: P@i at the j-th relevant rank i is j / i;
    # bincount adds them per query in rank order, as trec_eval does
    rows, cols = np.divmod(np.flatnonzero(rel), max(rel.shape[1], 1))  # 2-D nonzero is slow
    per_row = np.bincount(rows, minlength=rel.shape[0])
    first = np.cumsum(per_row) - per_row
    found = np.arange(1, rows.size + 1) - first[rows]
    weights = found / (cols + 1.0)
    total = np.bincount(rows, weights=weights, minlength=rel.shape[0]).astype(np.float64)
    return divide(total, arrays.n_relevant.astype(np.float64))


def _gains(arrays: EvalArrays, k: int | None, cut: ArrayLike | None) -> tuple[F64, F64]:
    w = window(arrays, k, cut)
    g = np.maximum(w.take(arrays.grades), 0.0)
    ideal = arrays.ideal_grades if k is None else arrays.ideal_grades[:, :k]
    return g, ideal


def ndcg(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""Normalised discounted cumulative gain at k, linear gain (trec_eval
    ``ndcg_cut``, ranx ``ndcg``).

    .. math::
        DCG@k = \sum_{i=1}^{\min(k, n)} \frac{\max(g_i, 0)}{\log_2(i + 1)}, \qquad
        nDCG@k = \frac{DCG@k}{IDCG@k}

    IDCG@k is the DCG of the query's relevant documents (retrieved or not) sorted by
    grade, cut at k. Edge cases: IDCG = 0 (no relevant document) scores 0; negative
    grades count as gain 0.
    """
    g, ideal = _gains(arrays, k, cut)
    return _ndcg(g, ideal)


def ndcg_burges(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""nDCG at k with exponential gain :math:`2^{g} - 1` (Burges et al.; ranx
    ``ndcg_burges``).

    .. math::
        DCG@k = \sum_{i=1}^{\min(k, n)} \frac{2^{\max(g_i, 0)} - 1}{\log_2(i + 1)}

    Same ideal ranking and edge cases as ``ndcg``. With binary labels both are
    equal.
    """
    g, ideal = _gains(arrays, k, cut)
    return _ndcg(np.exp2(g) - 1.0, np.exp2(ideal) - 1.0)


def f_beta(
    arrays: EvalArrays, k: int | None = None, *, beta: float = 1.0, cut: ArrayLike | None = None
) -> F64:
    r"""F-beta at k: the weighted harmonic mean of precision and recall at k.

    .. math:: F_\beta@k = \frac{(1 + \beta^2)\, P@k\, R@k}{\beta^2\, P@k + R@k}

    ``beta > 1`` weighs recall more, ``beta < 1`` precision; ``beta = 1`` is F1 (ranx
    ``f1@k``). P and R follow ``precision`` and ``recall`` (P@k divides by k).
    Edge cases: P = R = 0 scores 0. trec_eval's ``set_F`` is not this metric for
    ``beta != 1`` (it puts beta where beta squared belongs) and has no cutoff.
    """
    if not (isinstance(beta, int | float) and math.isfinite(beta) and beta > 0):
        raise ConfigError(f"beta must be a positive finite number, got {beta!r}")
    p, r = precision(arrays, k, cut=cut), recall(arrays, k, cut=cut)
    b2 = float(beta) * float(beta)
    return divide((1.0 + b2) * p * r, b2 * p + r)
