"""The search: over one space of settings (``ragguard.calibration.fit.space``),
choose a setting on the calibration queries, check it on the held-out ones, refit it
on all of them. ``search`` runs it and ``RunCalibration`` is what it found,
for a run's retrieval settings and for the second stage alike.

::

    space = retrieval_space(evalset, "bm25", plan, grid, may_grow=True)
    b = space.points.index(PolicyParams(max_k=3))     # the baseline: plain top-3
    top_k = Reference("plain max_k=3", space.kernels[0], space.swept.kept[b], point=b)
    found = search(space, plan, top_k)
    found.describe(found.written)                     # what the config holds

Steps (the module docstring of ``ragguard.calibration.fit.calibrator`` tells them
for a whole calibration):

1. **choose** on the calibration queries: a rule family by cross-validation with the
   one-standard-error rule (``ragguard.calibration.fit.select``) and its best point;
   with a recall guarantee, the smallest context certified by Learn-then-Test along
   the space's fixed sequences (``ragguard.calibration.fit.risk``) instead;
2. **check** the choice on the held-out queries against the best plain top-k (for a
   second stage, against the retrieval-only choice first), each a ``Reference``,
   with paired bootstrap intervals; the first it is **worse** than on the objective
   (the interval of the difference excludes 0) is its ``fallback``; with constraints,
   also against the best plain top-k **without** them (``unconstrained``), which only
   shows what the constraints cost: it is never fallen back to;
3. **refit**: the chosen family's point re-selected on **all** queries, which the config
   holds; after a fallback, the ``fallback_family`` given (plain top-k in the space)
   re-selected instead. A guarantee is not refitted: the certified point is written,
   and the held-out queries check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.fit.plan import FitPlan
from ragguard.calibration.fit.risk import GuaranteeResult, certify_guarantee
from ragguard.calibration.fit.select import FamilyChoice, cross_validate, refit
from ragguard.calibration.fit.space import FittedRerank, SearchSpace
from ragguard.calibration.fit.statistics import (
    Comparison,
    checked_rows,
    compare_values,
    metric_values,
)
from ragguard.calibration.fit.sweep import (
    I,
    OptimalK,
    SweepGrid,
    SweepKernel,
    SweepResult,
    guard_settings,
    meets_constraints,
    optimal_k,
)
from ragguard.policy import PolicyParams
from ragguard.scores import ScoreKind


@dataclass(frozen=True, eq=False)
class Reference:
    """A setting a search's choice is checked against on the held-out queries.

    Attributes:
        name: the setting in words, as a fallback names it (``plain max_k=3``,
            ``the retrieval-only choice``).
        kernel: the kernel it cuts on.
        kept: (Q,) passages it keeps per query.
        point: its index in the search's own space, or ``None`` when it lies outside
            it (then the choice is never the reference itself).
    """

    name: str
    kernel: SweepKernel = field(repr=False)
    kept: I = field(repr=False)
    point: int | None = None


@dataclass(frozen=True, eq=False)
class RunCalibration:
    """What one search over one run found (``search``): over the run's retrieval
    settings, or over the second stage's (``stage``).

    Attributes:
        space: what was swept: the points, their kernels, the run's arrays.
        chosen: index of the chosen setting in ``sweep.points``.
        feasible: whether the chosen setting meets every constraint.
        comparison: the choice against the best plain top-k on the held-out queries.
        full: every setting's means over **all** queries (the refit's sweep).
        written: index (in ``sweep.points``) of the setting refitted on all queries:
            the one the config holds.
        written_feasible: whether it meets every constraint on all queries.
        selection: the cross-validated choice of rule family (``None`` with a
            guarantee).
        fallback: why the choice is not written: the held-out check found it worse
            than a reference (a retrieval search then writes plain top-k; the config
            leaves a second stage off), or ``None``.
        guarantee: the recall guarantee, when one was asked for.
        baseline: index of the best plain top-k among the points (``None`` for a
            second stage, checked against the retrieval run's).
        against_retrieval: a second stage's choice against the retrieval-only choice
            on the held-out queries (``None`` for a retrieval search).
        unconstrained: index of the best plain top-k without the constraints, when it
            is not ``baseline`` (``None`` otherwise).
        against_unconstrained: the choice against it on the held-out queries.
    """

    space: SearchSpace = field(repr=False)
    chosen: int
    feasible: bool
    comparison: Comparison = field(repr=False)
    full: SweepResult = field(repr=False)
    written: int
    written_feasible: bool = True
    selection: FamilyChoice | None = None
    fallback: str | None = None
    guarantee: GuaranteeResult | None = None
    baseline: int | None = None
    against_retrieval: Comparison | None = field(default=None, repr=False)
    unconstrained: int | None = None
    against_unconstrained: Comparison | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The run's name."""
        return self.space.run

    @property
    def source(self) -> str | None:
        """The file the run came from, if any."""
        return self.space.source

    @property
    def arrays(self) -> EvalArrays:
        """The run against its labels (all queries, retrieval order)."""
        return self.space.arrays

    @property
    def score_kind(self) -> ScoreKind | None:
        """What the run's retrieval scores are (``None``: no scores; only plain top-k
        applies)."""
        return self.space.arrays.score_kind

    @property
    def sweep(self) -> SweepResult:
        """Every setting's means over the calibration queries."""
        return self.space.swept

    @property
    def grid(self) -> SweepGrid | None:
        """The retrieval grid swept (the default grid's caps grow when needed)."""
        return self.space.grid

    @property
    def stage(self) -> FittedRerank | None:
        """The second stage the settings rerank with (``None``: retrieval only)."""
        return self.space.stage

    @property
    def kernel(self) -> SweepKernel:
        """The kernel the written setting cuts on (a retrieval search has one)."""
        return self.space.kernel_of(self.written)

    @property
    def cap(self) -> int:
        """The largest cap swept."""
        return max(p.max_k for p in self.sweep.points)

    @cached_property
    def optimal(self) -> OptimalK:
        """Per-query optimal k of the run's retrieval order over all queries, up to the
        largest cap."""
        return optimal_k(self.arrays, self.cap)

    def describe(self, i: int) -> str:
        """Point ``i`` in words (``SearchSpace.describe``)."""
        return self.space.describe(i)

    @property
    def top_n(self) -> int | None:
        """The written setting's rerank depth (``None``: retrieval only)."""
        return self.space.top_n_of(self.written)

    @property
    def written_params(self) -> PolicyParams:
        """The setting the config holds (refitted on all queries)."""
        return self.sweep.points[self.written]

    @property
    def chosen_params(self) -> PolicyParams:
        """The chosen setting."""
        return self.sweep.points[self.chosen]

    @property
    def chosen_is_baseline(self) -> bool:
        """Whether the choice is the baseline itself (then there is nothing to compare)."""
        return self.chosen == self.baseline

    @property
    def baseline_params(self) -> PolicyParams:
        """The baseline setting (plain top-k)."""
        return self.sweep.points[self._baseline()]

    @property
    def baseline_means(self) -> dict[str, float]:
        """The baseline's means over the calibration queries."""
        return self.sweep.point_means(self._baseline())

    @property
    def chosen_kept(self) -> I:
        """(Q,) passages kept per query under the chosen setting (all queries)."""
        out: I = self.sweep.kept[self.chosen].astype(np.intp)
        return out

    @property
    def written_kept(self) -> I:
        """(Q,) passages kept per query under the written setting (all queries)."""
        out: I = self.sweep.kept[self.written].astype(np.intp)
        return out

    @property
    def baseline_kept(self) -> I:
        """(Q,) passages kept per query under the baseline (all queries)."""
        out: I = self.sweep.kept[self._baseline()].astype(np.intp)
        return out

    def _baseline(self) -> int:
        if self.baseline is None:
            raise ValueError(f"run {self.name!r}'s second stage has no plain top-k of its own")
        return self.baseline

    def guard_settings(self) -> dict[str, Any]:
        """The guard-level config fields of the written setting (its cap and cut)."""
        return guard_settings(self.written_params, self.score_kind)


def search(
    space: SearchSpace,
    plan: FitPlan,
    top_k: Reference,
    *,
    retrieval: Reference | None = None,
    fallback_family: Sequence[int] | None = None,
    unconstrained: Reference | None = None,
) -> RunCalibration:
    """Choose, check and refit over ``space`` (see the module docstring).

    Args:
        space: the settings swept, with their means over the calibration queries.
        plan: the fit: objective, constraints, calibration and held-out queries, the
            check's bootstrap, the guarantee, the folds and seed.
        top_k: the best plain top-k, which the choice is checked against.
        retrieval: a second stage's retrieval-only choice, checked against first.
        fallback_family: the points re-selected on all queries after a fallback
            (``None``: the choice's family still is, and the caller leaves it out).
        unconstrained: the best plain top-k without the constraints, compared (never
            fallen back to) when it is not ``top_k``.
    """
    objective, cons, reported = plan.objective, plan.constraints, plan.reported
    calib_rows, held_rows = plan.calibration_rows, plan.heldout_rows
    swept = space.swept
    full = space.means(np.arange(space.arrays.n_queries, dtype=np.intp))
    selection = None
    g_result = None
    if plan.guarantee is not None:
        g_result = certify_guarantee(
            space.kernels[0],
            swept,
            plan.guarantee.recall,
            plan.guarantee.confidence,
            held_rows,
            space.guarantee_paths(),
            kernel_of=space.kernel_of,
        )
        chosen = g_result.written
        feasible = meets_constraints(swept, chosen, cons)
    else:
        selection = cross_validate(
            space.means,
            swept.points,
            calib_rows,
            objective,
            cons,
            folds=plan.split.folds,
            seed=plan.split.seed,
        )
        chosen, feasible = refit(swept, selection.members[selection.chosen], objective, cons)

    # the held-out check, against each reference in turn
    rows, split = checked_rows(calib_rows, held_rows)
    check = plan.check
    ours = metric_values(
        space.kernel_of(chosen), swept.kept[chosen].astype(np.intp), reported, rows
    )
    refs = ([] if retrieval is None else [retrieval]) + [top_k]
    if unconstrained is not None:
        refs.append(unconstrained)
    comparisons: list[Comparison] = []
    for ref in refs:
        theirs = metric_values(ref.kernel, ref.kept, reported, rows)
        comparison = compare_values(
            theirs,
            ours,
            rows,
            reported,
            split=split,
            n_bootstrap=check.n_bootstrap,
            seed=plan.split.seed,
            level=check.level,
        )
        comparisons.append(comparison)
    fallback = None
    if g_result is None and objective in reported:
        what = f"the choice ({space.describe(chosen)})"
        if space.stage is not None:
            what = "the two-stage choice"
        for ref, comp in zip(refs, comparisons, strict=True):
            if ref is unconstrained:
                break
            if ref.point != chosen and comp.verdict(objective) == "worse":
                fallback = (
                    f"{comp.where()} {what} is worse than {ref.name} on {objective} "
                    f"(difference {comp.change(objective)})"
                )
                break

    # refit on all queries: the family (fallback_family after a fallback) re-selected;
    # a guarantee is not refitted (what the calibration queries certify is written, and
    # the held-out queries check it)
    if g_result is not None:
        written = chosen
        written_feasible = meets_constraints(full, written, cons)
    else:
        assert selection is not None
        members = selection.members[selection.chosen]
        if fallback is not None and fallback_family is not None:
            members = tuple(fallback_family)
        written, written_feasible = refit(full, members, objective, cons)
    return RunCalibration(
        space=space,
        chosen=chosen,
        feasible=feasible,
        comparison=comparisons[refs.index(top_k)],
        full=full,
        written=written,
        written_feasible=written_feasible,
        selection=selection,
        fallback=fallback,
        guarantee=g_result,
        baseline=top_k.point,
        against_retrieval=None if retrieval is None else comparisons[0],
        unconstrained=None if unconstrained is None else unconstrained.point,
        against_unconstrained=None if unconstrained is None else comparisons[-1],
    )
