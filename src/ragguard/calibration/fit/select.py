"""Choosing a rule family by cross-validation with the one-standard-error rule (simplest first:
plain top-k, then one-rule families; a conflict stage is one more rule), and refitting its
point (``refit``) on the rows at hand."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ragguard.calibration.fit.sweep import Constraint, I, SweepResult, choose, lower_is_better
from ragguard.policy import ConflictMode, CutRule, PolicyParams

DEFAULT_FOLDS = 5
_FAMILY_ORDER = ("top-k", "threshold", "min_score", "gap", "autocut", "expected utility")


def rule_family(params: PolicyParams) -> tuple[int, str]:
    """``(number of score rules, family name)`` of a setting, for simplicity ordering."""
    names: list[str] = []
    if params.relative_threshold > 0:
        names.append("threshold")
    if params.min_score is not None:
        names.append("min_score")
    if params.cut is CutRule.GAP:
        names.append("gap")
    elif params.cut is CutRule.AUTOCUT:
        names.append("autocut")
    if params.expected_utility is not None:
        names.append("expected utility")
    name = "+".join(names) or "top-k"
    if params.conflicts is not ConflictMode.OFF:  # one more rule, whatever its level
        return len(names) + 1, f"{name}+conflicts={params.conflicts.value}"
    return len(names), name


def _simplicity(family: tuple[int, str]) -> tuple[int, int, str]:
    rules, name = family
    first = name.split("+")[0]
    rank = _FAMILY_ORDER.index(first) if first in _FAMILY_ORDER else len(_FAMILY_ORDER)
    return rules, rank, name


def fold_count(n: int, folds: int = DEFAULT_FOLDS) -> int:
    """Folds used for ``n`` queries: ``folds``, fewer so that each holds at least 2
    queries, 0 (no cross-validation) below 4 queries."""
    k = min(int(folds), n // 2)
    return k if k >= 2 else 0


def fold_parts(rows: I, k: int, seed: int) -> list[I]:
    """The ``k`` folds ``cross_validate`` splits ``rows`` into (a seeded shuffle cut into near-equal
    parts; unsorted)."""
    return list(np.array_split(np.random.default_rng([seed, 2]).permutation(rows), k))


@dataclass(frozen=True, eq=False)
class FamilyChoice:
    """What ``cross_validate`` found: the rule family chosen and the cross-validated figures of
    every family (not the runtime [`ragguard.Selection`][ragguard.Selection]); ``bar``: the
    cross-validated objective within one standard error of the best."""

    families: tuple[tuple[int, str], ...]
    members: tuple[tuple[int, ...], ...]
    cv_mean: tuple[float, ...]
    cv_se: tuple[float, ...]
    cv_feasible: tuple[bool, ...]
    folds: int
    chosen: int
    best: int
    bar: float

    @property
    def family(self) -> str:
        """The chosen family's name."""
        return self.families[self.chosen][1]

    def describe(self) -> str:
        """One sentence: the family chosen and why."""
        if self.folds == 0:
            return f"rule family {self.family} (too few queries to cross-validate)"
        c, b = self.chosen, self.best
        text = (
            f"rule family {self.family} by {self.folds}-fold cross-validation "
            f"({self.cv_mean[c]:.3f} +/- {self.cv_se[c]:.3f})"
        )
        if c != b:
            text += (
                f", the simplest within one standard error of the best "
                f"({self.families[b][1]}: {self.cv_mean[b]:.3f} +/- {self.cv_se[b]:.3f})"
            )
        return text


def refit(
    result: SweepResult,
    members: Sequence[int],
    objective: str,
    constraints: Sequence[Constraint],
) -> tuple[int, bool]:
    """The family's best point on ``result``'s rows."""
    return choose(result, objective, constraints, among=list(members))


def cross_validate(
    means: Callable[[I], SweepResult],
    points: Sequence[PolicyParams],
    rows: I,
    objective: str,
    constraints: Sequence[Constraint],
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> FamilyChoice:
    """Choose a rule family by ``folds``-fold cross-validation over ``rows`` with the
    one-standard-error rule."""
    fams: dict[tuple[int, str], list[int]] = {}
    for i, p in enumerate(points):
        fams.setdefault(rule_family(p), []).append(i)
    order = sorted(fams, key=_simplicity)
    members = tuple(tuple(fams[f]) for f in order)
    k = fold_count(int(rows.size), folds)
    sign = -1.0 if lower_is_better(objective) else 1.0
    n_f = len(order)
    # (choose on, score on) per fold; without folds, both are every row
    splits: list[tuple[I, I | None]] = [(rows, None)]
    if k:
        parts = fold_parts(rows, k, seed)
        splits = [
            (np.sort(np.concatenate(parts[:f] + parts[f + 1 :])), np.sort(parts[f]))
            for f in range(k)
        ]
    scores = np.empty((len(splits), n_f))
    cons_vals = np.empty((len(splits), n_f, len(constraints)))
    for f, (train, val) in enumerate(splits):
        tr = means(train)
        va = tr if val is None else means(val)
        for j, m in enumerate(members):
            i, _ = refit(tr, m, objective, constraints)
            scores[f, j] = va.mean(i, objective)
            cons_vals[f, j] = [va.mean(i, c.metric) for c in constraints]
    with np.errstate(invalid="ignore"):
        cv = np.nanmean(scores, axis=0)
        se = np.nanstd(scores, axis=0, ddof=1) / math.sqrt(k) if k >= 2 else np.zeros(n_f)
        cons_cv = np.nanmean(cons_vals, axis=0)  # (families, constraints)
    violation = np.zeros(n_f)
    for c_i, c in enumerate(constraints):
        violation += c.violation(cons_cv[:, c_i])
    feasible = violation == 0
    pool = (
        np.flatnonzero(feasible) if feasible.any() else np.flatnonzero(violation == violation.min())
    )
    signed = np.where(np.isnan(cv), -np.inf, sign * cv)
    best = int(pool[np.argmax(signed[pool])])
    margin = 0.0 if math.isnan(se[best]) else float(se[best])
    within = [int(j) for j in pool if signed[j] >= signed[best] - margin - 1e-12]
    chosen = min(within)  # families are sorted simplest first
    return FamilyChoice(
        families=tuple(order),
        members=members,
        cv_mean=tuple(float(v) for v in cv),
        cv_se=tuple(float(v) for v in se),
        cv_feasible=tuple(bool(v) for v in feasible),
        folds=k,
        chosen=chosen,
        best=best,
        bar=float(cv[best] - sign * se[best]),
    )
