"""The search over one space of settings (``ragguard.calibration.fit.space``): choose on the
calibration queries, check against ``Reference`` settings on the held-out ones, refit on all;
the same for a run's retrieval settings and for the second stage (docs/guides/calibrate.md)."""

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
    """A setting a search's choice is checked against on the held-out queries."""

    name: str
    kernel: SweepKernel = field(repr=False)
    kept: I = field(repr=False)
    point: int | None = None


@dataclass(frozen=True, eq=False)
class RunCalibration:
    """What one search over one run found (``search``): over the run's retrieval settings, or over
    the second stage's (``stage``)."""

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
        """What the run's retrieval scores are (``None``: no scores; only plain top-k applies)."""
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
    """Choose, check and refit over ``space``."""
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
    ours = metric_values(
        space.kernel_of(chosen), swept.kept[chosen].astype(np.intp), reported, rows
    )
    refs = ([] if retrieval is None else [retrieval]) + [top_k]
    if unconstrained is not None:
        refs.append(unconstrained)
    comparisons: list[Comparison] = []
    for ref in refs:
        theirs = metric_values(ref.kernel, ref.kept, reported, rows)
        comparisons.append(compare_values(theirs, ours, rows, reported, **plan.bootstrap(split)))
    fallback = None
    if g_result is None and objective in reported:
        what = "the two-stage choice" if space.stage else f"the choice ({space.describe(chosen)})"
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
    members = (chosen,) if selection is None else selection.members[selection.chosen]
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
