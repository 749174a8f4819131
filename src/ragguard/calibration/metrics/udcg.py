r"""The UDCG family (Trappolini et al.): utility- and distraction-aware scores of the context.

Notation: per-candidate utilities :math:`u_i \in [-1, 1]` (``EvalArrays.utility``; see
``ragguard.calibration.data.utility``), the context the first :math:`m = \min(k, n)`
ranked candidates (or the first ``cut``), :math:`u^+ = \max(u, 0)`,
:math:`u^- = \min(u, 0)`. Each function's docstring holds its formula.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ragguard._fields import is_real
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics._common import F64, discount, divide, window
from ragguard.errors import ArgumentTypeError, ConfigError, EvalSetError

DEFAULT_GAMMA = 1.0 / 3.0


def _sigmoid(x: F64) -> F64:
    return 1.0 / (1.0 + np.exp(-x))


def udcg(
    arrays: EvalArrays,
    k: int | None = None,
    *,
    gamma: float = DEFAULT_GAMMA,
    cut: ArrayLike | None = None,
) -> F64:
    r"""Training-free UDCG (Eq. 4) of each query's context.

    .. math:: \mathrm{UDCG}@k = \sigma\Big(\frac{1}{m}\sum_{i=1}^{m} u_i^+
              + \frac{\gamma}{m}\sum_{i=1}^{m} u_i^-\Big),\quad m = \min(k, n)

    Args:
        arrays: evaluation arrays (their utilities are used).
        k: context size; ``None`` uses every passage given, as the authors do.
        gamma: weight of the distracting (negative) part, in [0, 1]; the paper's 1/3
            by default.
        cut: optional per-query number of candidates kept.

    Edge cases: :math:`m` is the number of passages actually in the context (a list
    shorter than k is not padded); an empty context scores 0.0, as in the authors'
    code (whose sample outputs used ``gamma=0.333``). Values lie in (0, 1) otherwise.
    """
    if not (isinstance(gamma, int | float) and 0.0 <= gamma <= 1.0):
        raise ConfigError(f"gamma must be in [0, 1], got {gamma!r}")
    w = window(arrays, k, cut)
    u = w.take(arrays.utility)
    pos, neg = np.maximum(u, 0.0).sum(axis=1), np.minimum(u, 0.0).sum(axis=1)
    x = divide(pos + float(gamma) * neg, w.length.astype(np.float64))
    return np.where(w.length > 0, _sigmoid(x), 0.0)


def udcg_dcg(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""DCG with signed utilities (the practitioner write-up's UDCG@k).

    .. math:: \mathrm{UDCG\text{-}DCG}@k = \sum_{i=1}^{\min(k, n)} \frac{u_i}{\log_2(i + 1)}

    A distractor subtracts, more so near the top. Edge cases: an empty context scores 0;
    unbounded above and below.
    """
    w = window(arrays, k, cut)
    u = w.take(arrays.utility)
    out: F64 = u @ discount(u.shape[1])
    return out


def context_utility(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Total utility of the context: the sum of its passages' utilities.

    .. math:: U@k = \sum_{i=1}^{\min(k, n)} u_i

    No position discount and no normalisation: each relevant passage adds its utility,
    each distractor subtracts its penalty. The per-query optimal context size of a
    calibration sweep is where this peaks. Edge cases: an empty context scores 0; values
    lie in [-m, m].
    """
    w = window(arrays, k, cut)
    out: F64 = w.take(arrays.utility).sum(axis=1) + 0.0  # + 0.0 turns -0.0 into 0.0
    return out


def udcg_ndcg(arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None) -> F64:
    r"""UDCG-DCG normalised by the best possible context's DCG.

    .. math:: \mathrm{nUDCG}@k = \frac{\mathrm{UDCG\text{-}DCG}@k}
              {\sum_{i=1}^{\min(k, M)} u^*_i / \log_2(i + 1)}

    where :math:`u^*_1 \ge u^*_2 \ge \dots` are the positive label utilities of the
    query's labelled passages (retrieved or not, plus stated unlabelled relevant ones at
    grade 1). Edge cases:
    an ideal of 0 scores 0; at most 1, negative when harm outweighs gain.
    """
    top = udcg_dcg(arrays, k, cut=cut)
    ideal = arrays.ideal_utilities if k is None else arrays.ideal_utilities[:, :k]
    best: F64 = ideal @ discount(ideal.shape[1])
    return divide(top, best)


@dataclass(frozen=True, slots=True)
class UDCGTheta:
    """Positional weights of UDCG_theta (Eq. 3) for contexts of up to ``k`` passages.

    Attributes:
        alpha: weight of the positive utility at each position (1..k).
        beta: weight of the negative utility at each position (1..k); a positive beta
            lowers the score for a distractor, since negative utilities are <= 0.
    """

    alpha: tuple[float, ...]
    beta: tuple[float, ...]

    def __post_init__(self) -> None:
        for name, values in (("alpha", self.alpha), ("beta", self.beta)):
            if not isinstance(values, Sequence) or not all(is_real(v) for v in values):
                raise ConfigError(f"UDCGTheta {name} must be a tuple of numbers, got {values!r}")
        if len(self.alpha) != len(self.beta) or not self.alpha:
            raise ConfigError(
                f"alpha and beta need the same non-zero length, got {len(self.alpha)} and "
                f"{len(self.beta)}"
            )
        if not all(math.isfinite(x) for x in (*self.alpha, *self.beta)):
            raise ConfigError("UDCG_theta weights must be finite")

    @property
    def k(self) -> int:
        """The largest context size the weights cover."""
        return len(self.alpha)


def _features(arrays: EvalArrays, k: int, cut: ArrayLike | None) -> F64:
    w = window(arrays, k, cut)
    u = w.take(arrays.utility)
    if u.shape[1] < k:
        u = np.pad(u, ((0, 0), (0, k - u.shape[1])))
    return np.concatenate((np.maximum(u, 0.0), np.minimum(u, 0.0)), axis=1)


def udcg_theta(arrays: EvalArrays, weights: UDCGTheta, *, cut: ArrayLike | None = None) -> F64:
    r"""UDCG_theta (Eq. 3): a sigmoid of position-weighted positive and negative
    utilities, with weights learned for one context size.

    .. math:: \mathrm{UDCG}_\theta = \sigma\Big(\sum_{i=1}^{k}\alpha_i u_i^+
              + \sum_{i=1}^{k}\beta_i u_i^-\Big)

    The context is the first ``weights.k`` candidates (or fewer: missing positions
    contribute 0). With :math:`\alpha_i = 1/k` and :math:`\beta_i = \gamma/k` it equals
    ``udcg`` on contexts of exactly k passages. Edge cases: an empty context scores
    :math:`\sigma(0) = 0.5` (Eq. 3 has no special case; compare UDCG's 0.0).
    """
    if not isinstance(weights, UDCGTheta):
        raise ArgumentTypeError(
            f"udcg_theta: weights must be a UDCGTheta (fit one with fit_udcg_theta), "
            f"got {type(weights).__name__}"
        )
    x = _features(arrays, weights.k, cut)
    theta = np.asarray((*weights.alpha, *weights.beta), dtype=np.float64)
    return _sigmoid(x @ theta)


def fit_udcg_theta(
    arrays: EvalArrays,
    correct: Mapping[str, float] | Sequence[float] | ArrayLike,
    k: int,
    *,
    l2: float = 1e-3,
    cut: ArrayLike | None = None,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> UDCGTheta:
    r"""Learn UDCG_theta's positional weights from end-to-end answer correctness.

    Fits :math:`P(\text{correct} \mid C) = \sigma(\sum_i \alpha_i u_i^+ +
    \sum_i \beta_i u_i^-)` by L2-regularised logistic regression without intercept
    (Newton's method), on the feature vector
    :math:`[u_1^+, \dots, u_k^+, u_1^-, \dots, u_k^-]` of each query's first k
    candidates. The paper learns the same linear form with a ranking SVM; a logistic
    fit keeps the sigmoid's output a probability of a correct answer.

    Args:
        arrays: evaluation arrays whose contexts were answered end to end.
        correct: per query, whether the LLM answered correctly with that context (1/0,
            or a score in [0, 1]): a mapping from query id, or a sequence in row order.
        k: context size the weights are for.
        l2: ridge penalty on the weights (> 0 keeps the fit defined when a position
            never holds a distractor).
        cut: optional per-query number of candidates in each context.
        max_iter: Newton iterations at most.
        tol: stop when the largest step is below this.

    Raises:
        ValueError: labels missing for a query, outside [0, 1], or bad parameters.
    """
    if not (l2 > 0 and math.isfinite(l2)):
        raise ConfigError(f"l2 must be a positive finite number, got {l2!r}")
    if isinstance(correct, Mapping):
        missing = [q for q in arrays.qids if q not in correct]
        if missing:
            raise EvalSetError(
                f"no correctness label for {len(missing)} queries, e.g. {missing[0]!r}"
            )
        y = np.asarray([float(correct[q]) for q in arrays.qids])
    else:
        y = np.asarray(correct, dtype=np.float64).reshape(-1)
        if y.shape[0] != arrays.n_queries:
            raise EvalSetError(f"{y.shape[0]} correctness labels for {arrays.n_queries} queries")
    if not ((y >= 0) & (y <= 1)).all():
        raise EvalSetError("correctness labels must lie in [0, 1]")
    x = _features(arrays, k, cut)
    theta = np.zeros(x.shape[1])
    eye = np.eye(x.shape[1])
    for _ in range(max_iter):
        p = _sigmoid(x @ theta)
        grad = x.T @ (p - y) + l2 * theta
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + l2 * eye
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < tol:
            break
    return UDCGTheta(tuple(theta[:k].tolist()), tuple(theta[k:].tolist()))
