"""What a search sweeps (``SearchSpace``): its settings, in blocks that cut on one kernel each;
and the first search's space, one run's retrieval settings (``retrieval_space``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.plan import FitPlan
from ragguard.calibration.fit.probability import Reliability
from ragguard.calibration.fit.rerank_scores import RerankScores
from ragguard.calibration.fit.risk import guarantee_paths
from ragguard.calibration.fit.select import fold_count, fold_parts
from ragguard.calibration.fit.sweep import (
    I,
    SweepGrid,
    SweepKernel,
    SweepResult,
    describe_point,
    is_plain_top_k,
    sweep,
)
from ragguard.errors import EvalSetError
from ragguard.policy import PolicyParams
from ragguard.probability import ProbabilityMap

logger = logging.getLogger(__name__)


MAX_K_LIMIT = 100
"""The largest cap the default grid grows to when the constraints (or a guarantee)
need more than ``DEFAULT_MAX_K`` passages. A
``max_k`` given is never exceeded."""


@dataclass(frozen=True, eq=False)
class FittedRerank:
    """The second stage a search's space is built on: its scores, the
    probability map fitted on the calibration queries, how well the raw and the mapped probabilities
    are calibrated, and the queries swept as failed calls."""

    scores: RerankScores
    probability_map: ProbabilityMap
    n_pairs_fit: int
    reliability_raw: Reliability = field(repr=False)
    reliability_mapped: Reliability = field(repr=False)
    brier_raw: float = math.nan
    brier_mapped: float = math.nan
    failed: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    failures: str | None = None

    def table(self, top_n: int, params: PolicyParams) -> dict[str, Any]:
        """The config's ``[rerank]`` settings for the point ``top_n``, ``params``."""
        table: dict[str, Any] = {
            "enabled": True,
            "top_n": top_n,
            "score_kind": self.scores.score_kind,
            "relative_threshold": params.relative_threshold,
            "min_score": params.min_score,
            "expected_utility": params.expected_utility is not None,
            "probability_map": self.probability_map,
        }
        if self.scores.model is not None:
            table["model"] = self.scores.model
        else:
            table["external"] = self.scores.external
        return table


@dataclass(frozen=True, eq=False)
class SearchSpace:
    """The settings one search sweeps, in blocks that each cut on one kernel."""

    run: str
    source: str | None
    arrays: EvalArrays = field(repr=False)
    blocks: tuple[SweepResult, ...] = field(repr=False)
    kernels: tuple[SweepKernel, ...] = field(repr=False)
    top_n: tuple[int, ...] = ()
    paths: Mapping[str, Sequence[int]] | None = None
    grid: SweepGrid | None = None
    stage: FittedRerank | None = None

    @cached_property
    def points(self) -> tuple[PolicyParams, ...]:
        """Every setting, block after block."""
        return tuple(p for b in self.blocks for p in b.points)

    def block_of(self, i: int) -> int:
        """The block point ``i`` belongs to."""
        return i // len(self.blocks[0].points)

    def kernel_of(self, i: int) -> SweepKernel:
        """The kernel point ``i`` cuts on."""
        return self.kernels[self.block_of(i)]

    def top_n_of(self, i: int) -> int | None:
        """Point ``i``'s rerank depth (``None``: a retrieval setting)."""
        return self.top_n[self.block_of(i)] if self.top_n else None

    def describe(self, i: int) -> str:
        """Point ``i`` in words: ``max_k=3, autocut@1``, or with a second stage
        ``rerank top-20, max_k=3, min_score=0.4``."""
        n = self.top_n_of(i)
        p = self.points[i]
        return describe_point(p) if n is None else f"rerank top-{n}, {describe_point(p)}"

    @cached_property
    def swept(self) -> SweepResult:
        """Every setting's means over the calibration queries."""
        return self._joined(list(self.blocks), self.blocks[0].rows)

    def means(self, rows: I) -> SweepResult:
        """Every setting's means over ``rows`` (e.g. a fold, or all queries)."""
        parts = [b.restricted(k, rows) for b, k in zip(self.blocks, self.kernels, strict=True)]
        return self._joined(parts, rows)

    def _joined(self, parts: list[SweepResult], rows: I) -> SweepResult:
        if len(parts) == 1:  # one block: its own result (and its group sums), uncopied
            return parts[0]
        return SweepResult(
            self.points,
            parts[0].metrics,
            np.concatenate([r.means for r in parts]),
            rows,
            np.concatenate([r.kept for r in parts]),
        )

    def guarantee_paths(self) -> Mapping[str, Sequence[int]]:
        """A recall guarantee's fixed sequences of points, by name."""
        return self.paths if self.paths is not None else guarantee_paths(self.points)


# --------------------------------------------------------------------------- retrieval


def _examples(ids: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(repr(i) for i in ids[:n])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > n else "")


def _check_ids_match(evalset: EvalSet, name: str) -> None:
    """Raise when no labelled query has candidates in run ``name``, or none of its documents is
    labelled for its query (the ids come from different schemes)."""
    run = evalset.runs[name]
    qids = evalset.qids
    if not any(run.candidates.get(q) for q in qids):
        raise EvalSetError(
            f"no queries left: run {name!r} has no candidates for any of the "
            f"{len(qids)} labelled queries (do its query ids match the labels?)",
            path=run.source,
        )
    run_docs: dict[str, None] = {}
    label_docs: dict[str, None] = {}
    for q in qids:
        lab = evalset.labels[q]
        labelled = lab.grades.keys() | lab.utilities.keys() | lab.no_response.keys()
        cands = run.candidates.get(q, {})
        if not labelled.isdisjoint(cands):
            return
        run_docs.update(dict.fromkeys(cands))
        label_docs.update(dict.fromkeys(sorted(labelled)))
    raise EvalSetError(
        f"no document matches: none of the {len(run_docs)} document ids of run {name!r} "
        f"is labelled for its query in the {len(qids)} labelled queries (run ids: "
        f"{_examples(list(run_docs))}; labelled ids: {_examples(list(label_docs))}); do "
        "the run's document ids match the labels?",
        path=run.source,
    )


def _extended_caps(caps: Sequence[int], depth: int) -> tuple[int, ...]:
    """``caps`` grown towards ``depth`` in widening steps (12, 15, 20, 25, 30, 40, 50,
    60, 80, 100), ``depth`` itself included."""
    steps = (12, 15, 20, 25, 30, 40, 50, 60, 80, 100)
    more = [k for k in steps if max(caps) < k < depth]
    return tuple(sorted({*caps, *more, depth}))


def retrieval_space(
    evalset: EvalSet, name: str, plan: FitPlan, grid: SweepGrid, *, may_grow: bool
) -> SearchSpace:
    """Run ``name``'s retrieval settings (``grid``, with the stages after the cut of ``plan``, under
    each conflict setting they sweep; plain top-k only for a run without scores), swept over the
    calibration queries."""
    cons, stages, wanted = plan.constraints, plan.stages, plan.metrics
    calib_rows, held_rows = plan.calibration_rows, plan.heldout_rows
    target = plan.target
    # the row groups every mean of the search is a union of: cross-validation folds of
    # the calibration queries (the ones cross_validate draws), the held-out queries
    k_folds = fold_count(int(calib_rows.size), plan.split.folds) if target is None else 0
    parts = fold_parts(calib_rows, k_folds, plan.split.seed) if k_folds else [calib_rows]
    groups = [*parts, held_rows]
    _check_ids_match(evalset, name)
    arrays = evalset.arrays(name, profile=plan.profile, rules=plan.rules)
    if arrays.score_kind is None:
        logger.warning("run %r has no scores: only plain top-k settings apply", name)

    def sweep_on(g: SweepGrid) -> SearchSpace:
        pts = g.points()
        if stages is not None:  # every setting with the stages after the cut
            pts = stages.points(pts)  # (under each conflict setting swept)
        if arrays.score_kind is None:
            pts = tuple(p for p in pts if is_plain_top_k(p))
        width = max(p.max_k for p in pts)
        kern = (
            SweepKernel(arrays, wanted, width)
            if stages is None
            else stages.kernel(arrays, wanted, width)
        )
        swept = sweep(kern, pts, wanted, rows=calib_rows, groups=groups)
        paths = None
        if stages is not None and target is not None:
            paths = stages.paths(swept.points, guarantee_paths)
        source = evalset.runs[name].source
        return SearchSpace(name, source, arrays, (swept,), (kern,), paths=paths, grid=g)

    depth = min(int(arrays.n_valid.max()) if arrays.n_queries else 0, MAX_K_LIMIT)
    wider = None
    if may_grow and depth > max(grid.max_k):
        wider = replace(grid, max_k=_extended_caps(grid.max_k, depth))
    if wider is None or target is None:
        space = sweep_on(grid)
        # met on the calibration queries (the choice's) and on all (the refit's)
        every = np.arange(arrays.n_queries, dtype=np.intp)
        if wider is None or all(
            bool((c.violation(swept.column(c.metric)) == 0).any())
            for swept in (space.swept, space.means(every))
            for c in cons
        ):
            return space
        del space  # the first sweep's tables go before the wider ones are built
    assert wider is not None
    space = sweep_on(wider)
    logger.info("run %r: caps extended to %d", name, max(wider.max_k))
    return space
