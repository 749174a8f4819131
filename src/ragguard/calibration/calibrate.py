"""``calibrate``: from an eval set and its runs to a recommended guard config.

::

    from ragguard.calibration import calibrate, load_evalset

    result = calibrate(load_evalset("eval.jsonl"), objective="udcg", min_recall=0.8)
    result.recommended.chosen_params       # PolicyParams(max_k=4, relative_threshold=0.8, ...)
    result.save_config("ragguard.toml")    # ContextGuard.from_file("ragguard.toml")

Steps, per run (retrieval profile):

1. split the labelled queries into a **calibration** part and a **held-out** part
   (``holdout`` of them, drawn with ``seed``; the same split for every run);
2. sweep the grid (:mod:`ragguard.calibration.sweep`) on the **calibration queries
   only**, and choose a rule family by ``folds``-fold cross-validation with the
   one-standard-error rule, preferring plain top-k, then fewer rules
   (:mod:`ragguard.calibration.select`); the family's best point on the calibration
   queries is the choice checked in step 4. When no setting of the default grid meets
   the constraints, the caps grow to the candidate depth (at most
   :data:`MAX_K_LIMIT`) and the sweep runs again; a ``max_k`` or a ``grid`` you give
   is a constraint, never exceeded. With ``guarantee`` the choice is instead the
   smallest context whose evidence recall the calibration queries certify by
   Learn-then-Test (:mod:`ragguard.calibration.risk`);
3. choose the **baseline**, plain top-k, the same way (the best fixed k on the same
   queries, or the ``baseline_k`` you give), so the comparison asks whether the guard
   beats a tuned k, not an arbitrary one;
4. compare baseline and guarded on the **held-out** queries with paired bootstrap
   confidence intervals (percentile, ``n_bootstrap`` resamples of the queries): the gain
   is real when the interval of the difference excludes 0. With ``holdout=0`` the
   comparison is in-sample and says so;
5. when the held-out interval of the objective's difference says the choice is
   **worse** than the best plain top-k, write plain top-k instead (``on_worse="top-k"``,
   the default) or write nothing (``on_worse="stop"``: :meth:`CalibrationResult.save_config`
   raises), and say why;
6. **refit**: re-select the chosen family's point on **all** queries; that is the
   setting the config holds (:attr:`RunCalibration.written`). A guarantee is not
   refitted: the certified setting is written, and the held-out queries, never used to
   certify it, check it;
7. compute each query's optimal context size (where cumulative utility peaks);
8. with ``max_false_abstain``, calibrate ``min_evidence`` for the written setting on the
   calibration queries and check it on the held-out ones
   (:mod:`ragguard.calibration.answerability`).

With a second stage (``reranker`` or ``rerank_scores``) the recommended run's
two-stage setting is written, or the retrieval-only one with the reason
(:meth:`CalibrationResult.written_setting`: the one description of what the config
holds, which the console, ``--json``, the report and the provenance all print).

When the written setting misses a constraint (or no setting can carry the guarantee),
:meth:`CalibrationResult.unmet` names the best reachable value and the setting that
reaches it, and :meth:`~CalibrationResult.save_config` refuses unless
``allow_unmet=True`` (then the shortfall is recorded in the provenance).

The run whose chosen setting scores best on the calibration queries (meeting the
constraints first) is recommended; :meth:`CalibrationResult.config` turns it into a
:class:`~ragguard.config.GuardConfig` with provenance (data hash, date, profile,
objective, constraints, the chosen point's metrics).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from ragguard._fields import is_real
from ragguard.calibration._format import finite, floor_number, format_number
from ragguard.calibration._output import check_output_path, staging_folder
from ragguard.calibration.answerability import (
    RERANK_SCALE,
    RETRIEVAL_SCALE,
    AnswerabilityResult,
    check_max_false_abstain,
    evidence_tops,
    fit_answerability,
)
from ragguard.calibration.arrays import EvalArrays
from ragguard.calibration.conflict_sweep import StageKernels, describe_conflicts, stage_sweep
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.metrics import SafetyBand, parse_metric, safety_band
from ragguard.calibration.options import (
    Answerability,
    Check,
    Guarantee,
    RerankGrid,
    RerankSearch,
    Search,
    Split,
    Stages,
)
from ragguard.calibration.pipeline import TwoStageCalibration, calibrate_two_stage
from ragguard.calibration.plan import FitPlan
from ragguard.calibration.rerank_scores import RerankScores, score_candidates
from ragguard.calibration.risk import (
    EVIDENCE,
    GuaranteeResult,
    certify_guarantee,
    guarantee_paths,
)
from ragguard.calibration.select import (
    DEFAULT_FOLDS,
    FamilyChoice,
    cross_validate,
    fold_count,
    fold_parts,
    refit,
)
from ragguard.calibration.statistics import (
    Comparison,
    checked_rows,
    compare,
    split_queries,
)
from ragguard.calibration.sweep import (
    DEFAULT_METRICS,
    PASSAGES,
    Constraint,
    OptimalK,
    SweepGrid,
    SweepKernel,
    SweepResult,
    choose,
    describe_point,
    guard_settings,
    is_plain_top_k,
    lower_is_better,
    meets_constraints,
    optimal_k,
    sweep,
)
from ragguard.calibration.utility import UtilityRules, as_profile
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import ConflictMode, PolicyParams
from ragguard.probability import MapMethod
from ragguard.profiles import BUILTIN_PROFILES, Profile, ProfileSpec
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.rerank import Reranker

__all__ = [
    "DEFAULT_MAX_K",
    "MAX_K_LIMIT",
    "CalibrationResult",
    "RunCalibration",
    "Shortfall",
    "WrittenSetting",
    "calibrate",
    "data_fingerprint",
]

logger = logging.getLogger(__name__)

F64 = NDArray[np.float64]
I = NDArray[np.intp]  # noqa: E741

REPORTED: tuple[str, ...] = (
    "udcg",
    "utility",
    "evidence_recall",
    "recall",
    "precision",
    "ndcg",
    "distractor_rate",
    "distractor_harm",
    PASSAGES,
)
"""Metrics compared between baseline and guarded (plus the objective and constraints)."""

DEFAULT_MAX_K = 10
"""The largest cap of the default grid (``max_k=None``), before it grows."""

MAX_K_LIMIT = 100
"""The largest cap the default grid grows to when the constraints (or a guarantee)
need more than :data:`DEFAULT_MAX_K` passages. A ``max_k`` given is never exceeded."""

SMALL_SET = 50
"""Fewer labelled queries than this get a warning with the held-out interval's width."""

# --------------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class RunCalibration:
    """The calibration of one run (retrieval profile).

    Attributes:
        name: the run's name.
        score_kind: what its scores are (``None``: no scores; only plain top-k applies).
        source: the file it came from, if any.
        arrays: the run against its labels (all queries).
        kernel: the ranked arrays with their metric tables.
        sweep: every setting's means over the calibration queries.
        chosen: index of the chosen setting in ``sweep.points``.
        baseline: index of the baseline (plain top-k) setting.
        feasible: whether the chosen setting meets every constraint.
        comparison: baseline against guarded on the held-out queries.
        optimal: per-query optimal k over all queries.
        grid: the grid swept (the default grid's caps grow when needed).
        selection: the cross-validated choice of rule family (``None`` with a
            guarantee, or for a run without scores).
        full: every setting's means over **all** queries (the refit's sweep).
        written: index (in ``sweep.points``) of the setting refitted on all queries:
            the one the config holds.
        written_feasible: whether it meets every constraint on all queries.
        fallback: why plain top-k is written instead of the choice (the held-out
            check found the choice worse), or ``None``.
        guarantee: the recall guarantee, when one was asked for.
    """

    name: str
    score_kind: ScoreKind | None
    source: str | None
    arrays: EvalArrays = field(repr=False)
    kernel: SweepKernel = field(repr=False)
    sweep: SweepResult = field(repr=False)
    chosen: int
    baseline: int
    feasible: bool
    comparison: Comparison = field(repr=False)
    optimal: OptimalK = field(repr=False)
    full: SweepResult = field(repr=False)
    written: int
    grid: SweepGrid | None = None
    selection: FamilyChoice | None = None
    written_feasible: bool = True
    fallback: str | None = None
    guarantee: GuaranteeResult | None = None

    @property
    def written_params(self) -> PolicyParams:
        """The setting the config holds (refitted on all queries)."""
        return self.sweep.points[self.written]

    @property
    def chosen_is_baseline(self) -> bool:
        """Whether the choice is the baseline itself (then there is nothing to compare)."""
        return self.chosen == self.baseline

    @property
    def chosen_params(self) -> PolicyParams:
        """The chosen setting."""
        return self.sweep.points[self.chosen]

    @property
    def baseline_params(self) -> PolicyParams:
        """The baseline setting (plain top-k)."""
        return self.sweep.points[self.baseline]

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
        out: I = self.sweep.kept[self.baseline].astype(np.intp)
        return out


@dataclass(frozen=True)
class Shortfall:
    """A constraint the written setting misses (:meth:`CalibrationResult.shortfalls`).

    Attributes:
        constraint: the constraint.
        best: the setting that comes closest to it on all queries.
        best_value: its value there: the best reachable.
        written_value: the written setting's value.
        max_k: the largest cap tried.
        best_setting: ``best`` in words (with a second stage, its rerank depth too).
    """

    constraint: Constraint
    best: PolicyParams
    best_value: float
    written_value: float
    max_k: int
    best_setting: str = ""


def _shortfalls(
    full: SweepResult,
    index: int,
    constraints: Sequence[Constraint],
    name: Callable[[int], str],
    cap: int,
) -> list[Shortfall]:
    """The ``constraints`` point ``index`` of ``full`` misses, each with the best
    reachable value and the point that reaches it."""
    out: list[Shortfall] = []
    for c in constraints:
        col = full.column(c.metric)
        if c.violation(col[[index]])[0] == 0:
            continue
        signed = np.where(np.isnan(col), -np.inf, col if c.op == ">=" else -col)
        best = int(np.flatnonzero(signed == signed.max())[0])
        out.append(
            Shortfall(c, full.points[best], float(col[best]), float(col[index]), cap, name(best))
        )
    return out


@dataclass(frozen=True, eq=False)
class WrittenSetting:
    """What the config holds, described once (:meth:`CalibrationResult.written_setting`).
    The console, ``--json``, the report and the provenance all read it, and
    :meth:`CalibrationResult.config` writes it, so every one names the same setting.

    Attributes:
        run: the run's calibration.
        two_stage: the second stage the config enables, or ``None`` (retrieval only).
        setting: the setting the config holds, in words (``max_k=2, autocut@1``;
            with a second stage ``rerank top-5, max_k=3, min_score=0.2``).
        tested: the setting the held-out check tests, in words: the choice on the
            calibration queries (the written setting is that choice's rule family
            refitted on all queries; with a guarantee the two are the same).
        full: every setting's means over all queries, of the sweep holding it.
        index: the written setting's index in ``full``.
        names: names point ``i`` of ``full`` in words.
        feasible: whether the written setting meets every constraint on all queries.
        guarantee: the recall guarantee of the stage written, when one was asked for.
        comparison: the held-out check of ``tested`` against the best plain top-k.
        stage: one line, ``written: ...`` or ``left off: ...``: why the second stage is
            in the config or not (``None`` without a second stage).
        cap: the largest cap the written stage's sweep tried.
    """

    run: RunCalibration
    two_stage: TwoStageCalibration | None
    setting: str
    tested: str
    full: SweepResult = field(repr=False)
    index: int
    names: Callable[[int], str] = field(repr=False)
    feasible: bool
    guarantee: GuaranteeResult | None
    comparison: Comparison = field(repr=False)
    stage: str | None
    cap: int

    @property
    def params(self) -> PolicyParams:
        """The written setting (the rerank policy's, with a second stage)."""
        return self.full.points[self.index]

    @property
    def met(self) -> bool:
        """Whether it meets every constraint and, when asked for, the guarantee."""
        return self.feasible and (self.guarantee is None or self.guarantee.met)

    @property
    def metrics(self) -> dict[str, float]:
        """Its mean metrics over all queries."""
        return self.full.point_means(self.index)

    @property
    def tested_metrics(self) -> dict[str, float]:
        """The tested setting's mean metrics over the calibration queries."""
        if self.two_stage is not None:
            return self.two_stage.sweep.point_means(self.two_stage.chosen)
        return self.run.sweep.point_means(self.run.chosen)

    @property
    def tested_feasible(self) -> bool:
        """Whether the tested setting meets every constraint on the calibration queries."""
        return self.two_stage.feasible if self.two_stage is not None else self.run.feasible

    def band(self) -> SafetyBand | None:
        """The safety band of the tested setting's mean distractor rate on the held-out
        queries (``None`` without queries or a distractor rate)."""
        c = self.comparison
        if not c.n_queries or "distractor_rate" not in c.metrics:
            return None
        rate = c.guarded["distractor_rate"].mean
        return None if math.isnan(rate) else safety_band(min(max(rate, 0.0), 1.0))


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """What :func:`calibrate` found: every run's sweep, choice and held-out check.

    Attributes:
        runs: one :class:`RunCalibration` per run, in the eval set's order.
        recommended: the run whose config is recommended.
        objective: the objective metric.
        constraints: the constraints.
        profile: the tolerance profile whose rules gave the utilities.
        grid: the grid swept.
        holdout: the fraction of queries held out.
        seed: the seed of the split and the bootstrap.
        qids: every labelled query id, in row order.
        calibration_rows: rows the settings were chosen on.
        heldout_rows: rows held out (empty without a hold-out).
        evalset: the eval set (query texts, labels).
        data_sha256: hash of the labels and runs used (see :func:`data_fingerprint`).
        files: sha256 of each input file that exists on disk, by path.
        created: when the calibration ran (UTC).
        rerank: the two-stage calibration of the recommended run, when a reranker or
            rerank scores were given (:mod:`ragguard.calibration.pipeline`); the
            config holds its choice unless :meth:`written_setting` says why not.
        caps_fixed: the caps could not grow (``max_k`` or a ``grid`` was given).
    """

    runs: tuple[RunCalibration, ...]
    recommended: RunCalibration
    objective: str
    constraints: tuple[Constraint, ...]
    profile: Profile
    grid: SweepGrid
    holdout: float
    seed: int
    qids: tuple[str, ...]
    calibration_rows: I = field(repr=False)
    heldout_rows: I = field(repr=False)
    evalset: EvalSet = field(repr=False)
    data_sha256: str = ""
    files: Mapping[str, str] = field(default_factory=dict)
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    rerank: TwoStageCalibration | None = None
    on_worse: str = "top-k"
    target: float | None = None
    confidence: float = 0.95
    folds: int = DEFAULT_FOLDS
    caps_fixed: bool = False

    def written_setting(self, run: RunCalibration | None = None) -> WrittenSetting:
        """What the config of ``run`` (default: the recommended) holds, in words, with
        why the second stage is written or left off (see :class:`WrittenSetting`)."""
        r = run or self.recommended

        def name(i: int) -> str:
            return describe_point(r.sweep.points[i])

        retrieval = WrittenSetting(
            run=r,
            two_stage=None,
            setting=describe_point(r.written_params),
            tested=describe_point(r.chosen_params),
            full=r.full,
            index=r.written,
            names=name,
            feasible=r.written_feasible,
            guarantee=r.guarantee,
            comparison=r.comparison,
            stage=None,
            cap=max((r.grid or self.grid).max_k),
        )
        two = self.rerank
        if two is None or two.run != r.name:
            return retrieval
        written = WrittenSetting(
            run=r,
            two_stage=two,
            setting=two.describe(),
            tested=two.describe_chosen(),
            full=two.full if two.full is not None else two.sweep,
            index=two.written_index,
            names=two.name,
            feasible=two.written_feasible,
            guarantee=two.guarantee,
            comparison=two.vs_top_k,
            stage=None,
            cap=max(p.max_k for _, p in two.points),
        )
        on, why = self._stage_decision(retrieval, written)
        return replace(written if on else retrieval, stage=why)

    def _stage_decision(self, one: WrittenSetting, two: WrittenSetting) -> tuple[bool, str]:
        """Whether the config enables the second stage, and why, in one line that starts
        with ``written:`` or ``left off:``. ``one`` is the retrieval-only setting,
        ``two`` the two-stage one.

        With a guarantee the smaller certified context is written; otherwise the second
        stage is written unless it was worse on held-out queries (its ``fallback``) or
        misses a constraint on all queries that retrieval only meets."""
        stage = two.two_stage
        assert stage is not None
        obj = self.objective
        g1, g2 = one.guarantee, two.guarantee
        if g1 is not None and g2 is not None:  # the smallest certified context wins
            p1 = one.run.sweep.mean(one.index, PASSAGES)
            p2 = stage.sweep.mean(two.index, PASSAGES)
            if not g2.met:
                return False, (
                    f"left off: no two-stage setting is certified for recall>={g2.target:g} "
                    f"(the most it can guarantee is {floor_number(g2.best_bound)})"
                )
            if g1.met and p1 < p2:
                return False, (
                    f"left off: {two.setting} is certified but keeps {p2:.2f} passages on "
                    f"average against {p1:.2f} for retrieval only ({one.setting}), and the "
                    "smallest certified context is written"
                )
            return True, (
                f"written: {two.setting} is the smallest certified context, keeping "
                f"{p2:.2f} passages on average on the calibration queries"
                + (
                    f" against {p1:.2f} for retrieval only ({one.setting})"
                    if g1.met
                    else "; retrieval alone certifies none"
                )
            )
        if stage.fallback is not None:
            return False, f"left off: {stage.fallback}"
        missed_two = _shortfalls(two.full, two.index, self.constraints, two.names, two.cap)
        missed_one = _shortfalls(one.full, one.index, self.constraints, one.names, one.cap)
        also_one = {s.constraint for s in missed_one}
        worse = [s.constraint for s in missed_two if s.constraint not in also_one]
        if worse:
            return False, (
                f"left off: {two.setting} misses {' and '.join(map(str, worse))} on all "
                f"queries, which retrieval only ({one.setting}) meets"
            )
        a = stage.vs_retrieval
        if obj not in a.metrics or not a.n_queries:
            return True, f"written (no queries to compare it with retrieval only on {obj})"
        verdict = a.verdict(obj)
        if verdict == "better":
            return True, (
                f"written: better than retrieval only ({one.tested}) on {obj} {a.where()}, "
                f"difference {a.change(obj)}"
            )
        cal_two = stage.sweep.mean(stage.chosen, obj)
        cal_one = one.run.sweep.mean(one.run.chosen, obj)
        return True, (
            f"written: {verdict} from retrieval only ({one.tested}) on {obj} {a.where()} "
            f"(difference {a.change(obj)}); the stage is left off only when clearly worse, "
            f"and on the {self.calibration_rows.size} calibration queries it scored "
            f"{format_number(cal_two)} against {format_number(cal_one)}"
        )

    def shortfalls(self, run: RunCalibration | None = None) -> list[Shortfall]:
        """The constraints the written setting of ``run`` (default: the recommended)
        misses on all queries, each with the best reachable value and the setting that
        reaches it."""
        w = self.written_setting(run)
        return _shortfalls(w.full, w.index, self.constraints, w.names, w.cap)

    def unmet(self, run: RunCalibration | None = None) -> list[str]:
        """What the written setting of ``run`` (default: the recommended) cannot meet,
        each with the best reachable value and the setting that reaches it (on all
        queries); empty when every constraint (and the guarantee) is met."""
        w = self.written_setting(run)
        out: list[str] = []
        if w.guarantee is not None and not w.guarantee.met:
            line = w.guarantee.statement(w.names)
            if self.heldout_rows.size:
                line += (
                    f"; holdout=0 (--holdout 0) certifies on all {len(self.qids)} queries, "
                    "with none held out to check it"
                )
            out.append(line)
        a = self.answerability
        if a is not None and not a.met and w.run is self.recommended:
            out.append(a.shortfall())
        caps = "the max_k given" if self.caps_fixed else "the caps grown to the candidates"
        for s in _shortfalls(w.full, w.index, self.constraints, w.names, w.cap):
            out.append(
                f"no setting meets {s.constraint}: the best reachable {s.constraint.metric} "
                f"is {_fmt(s.best_value)} ({s.best_setting}, caps up to {s.max_k}, "
                f"{caps}; the written setting {w.setting} reaches {_fmt(s.written_value)})"
            )
        return out

    @property
    def stopped(self) -> str | None:
        """Why nothing may be written (``on_worse="stop"`` and the choice was worse),
        or ``None``."""
        r = self.recommended
        if self.on_worse == "stop" and r.fallback is not None:
            return f"stopped (on_worse='stop'): {r.fallback}"
        return None

    stage_settings: Mapping[str, Any] = field(default_factory=dict)
    """Config fields of the stages after the cut every setting ran with (max_tokens,
    token_counter, near_duplicate_threshold; :mod:`ragguard.calibration.stages`); a swept
    conflict setting is the written setting's own (:func:`guard_settings`)."""

    answerability: AnswerabilityResult | None = None
    """The calibrated ``min_evidence`` of the recommended run's written setting, when
    ``max_false_abstain`` was given (:mod:`ragguard.calibration.answerability`)."""

    def run(self, name: str) -> RunCalibration:
        """The calibration of run ``name``."""
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run named {name!r}; runs: {', '.join(r.name for r in self.runs)}")

    def objective_text(self, constraints: bool = True) -> str:
        """The objective in words: ``maximise mean udcg subject to
        evidence_recall>=0.8``, or the guarantee that replaces it (without ``subject to``
        when not ``constraints``)."""
        cons = " and ".join(str(c) for c in self.constraints) if constraints else ""
        if self.target is not None:
            text = (
                f"the smallest context whose mean evidence recall on new queries is >= "
                f"{self.target:g} with {self.confidence:.0%} confidence (Learn-then-Test; "
                f"{self.objective} reported, not optimised)"
            )
            return text + (f", subject to {cons}" if cons else "")
        goal = "minimise" if lower_is_better(self.objective) else "maximise"
        return f"{goal} mean {self.objective}" + (f" subject to {cons}" if cons else "")

    def why(self, run: RunCalibration | None = None) -> str:
        """What was chosen for ``run`` (default the recommended) on retrieval scores and
        why, what the config holds of it, and any fallback. With a second stage,
        :attr:`WrittenSetting.stage` says which of the two the config holds."""
        r = run or self.recommended
        obj = self.objective
        chosen = r.sweep.mean(r.chosen, obj)
        base = r.sweep.mean(r.baseline, obj)
        n_cal = self.calibration_rows.size
        passages = r.sweep.mean(r.chosen, PASSAGES)
        word = "lowest" if lower_is_better(obj) else "highest"
        if r.guarantee is not None:
            g = r.guarantee
            text = (
                f"{describe_point(r.chosen_params)} is the smallest context whose mean "
                f"evidence recall >= {g.target:g} is certified at {g.confidence:.0%} "
                f"confidence on the {n_cal} calibration queries"
                if g.point is not None
                else f"no retrieval-only setting is certified for recall>={g.target:g} on the "
                f"{n_cal} calibration queries; the largest context "
                f"({describe_point(r.chosen_params)}) stands in"
            )
            text += f", keeping {passages:.2f} passages on average ({obj} {chosen:.3f})"
        else:
            cons = " and ".join(str(c) for c in self.constraints)
            among = f"{len(r.sweep.points)} settings"
            if cons:
                among += f" with {cons}" if r.feasible else f" (none meets {cons}; closest chosen)"
            how = f"; {r.selection.describe()}" if r.selection is not None else ""
            text = (
                f"{describe_point(r.chosen_params)} has the {word} mean {obj} ({chosen:.3f}) "
                f"of its rule family among {among} on {n_cal} calibration queries{how}, "
                f"keeping {passages:.2f} passages on average"
            )
        if r.chosen_is_baseline:
            text += "; it is the best plain top-k itself, so there is nothing to compare"
        else:
            text += (
                f"; the best plain top-k ({describe_point(r.baseline_params)}) reaches {base:.3f}"
            )
        if r.fallback is not None:
            text += f"; {r.fallback}, so plain top-k is written"
        if r.written_params != r.chosen_params or r.fallback is not None:
            text += (
                f"; refitted on all {len(self.qids)} queries: {describe_point(r.written_params)}"
            )
        return text

    def next_steps(self, evalset: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
        """What to try when the written setting is still DANGEROUS by the safety band
        on the held-out queries (empty otherwise): ``(what, commands)`` pairs, the
        commands naming ``evalset`` (default: the eval set's file) and run one after
        the other."""
        w = self.written_setting()
        if w.band() is not SafetyBand.DANGEROUS:
            return []
        source = self.evalset.source
        where = evalset or _shown_path(source) or "EVALSET"
        steps: list[tuple[str, tuple[str, ...]]] = []
        if w.two_stage is None:
            steps.append(
                (
                    "a second stage, which reads query and passage together",
                    (f"ragguard calibrate {where} --rerank cross-encoder/ms-marco-MiniLM-L6-v2",),
                )
            )
        steps.append(
            (
                "a second stage trained on your own labels",
                (
                    f"ragguard train-reranker {where} --out scorer/",
                    f"ragguard calibrate {where} --rerank scorer/",
                ),
            )
        )
        annotate = f"ragguard annotate {_shown_path(source) or where}"
        if w.run.source:
            annotate += f" --run {_shown_path(w.run.source)}"
        corpus = Path(source).with_name("corpus.jsonl") if source else None
        if corpus is not None and corpus.is_file():
            annotate += f" --corpus {_shown_path(str(corpus))}"
        steps.append(
            (
                "utilities measured by the LLM that reads the passages",
                (
                    annotate + " --backend transformers --model MODEL --out utilities.jsonl",
                    "ragguard calibrate utilities.jsonl",
                ),
            )
        )
        n = len(self.qids)
        c, obj = w.comparison, self.objective
        more = f"more labelled queries, with their distractors marked ({n} now"
        if n < SMALL_SET:
            more += f", {SMALL_SET} or more advised"
        if obj in c.metrics and not math.isnan(c.difference[obj].low):
            d = c.difference[obj]
            more += f"; the {c.split} interval of the {obj} difference is {d.high - d.low:.2f} wide"
        steps.append((more + ")", ()))
        return steps

    def config(self, run: str | None = None) -> GuardConfig:
        """The guard config of ``run``'s written setting (default: the recommended run),
        with provenance: :meth:`written_setting` says what it holds."""
        r = self.recommended if run is None else self.run(run)
        w = self.written_setting(r)
        settings: dict[str, Any] = {
            "profile": self.profile.name,
            **guard_settings(r.written_params, r.score_kind),
        }
        if (
            self.profile.name not in BUILTIN_PROFILES
            or BUILTIN_PROFILES[self.profile.name] != self.profile
        ):
            fields = self.profile.model_dump(exclude={"name"})
            settings["profiles"] = {self.profile.name: ProfileSpec(base="support", **fields)}
        settings.update(self.stage_settings)
        settings["provenance"] = self.provenance(r)
        a = self.answerability
        if a is not None and r is self.recommended:  # the floor of the recommended run only
            if a.floor is not None:
                settings["min_evidence"] = a.floor
            settings["provenance"]["answerability"] = a.provenance()
        if w.two_stage is not None:
            settings.update(w.two_stage.guard_settings())
            settings["rerank"] = w.two_stage.rerank_table()
            settings["provenance"]["rerank"] = w.two_stage.provenance()
        return GuardConfig(**settings)

    def provenance(self, run: RunCalibration | None = None) -> dict[str, Any]:
        """Where the config comes from: data, date, profile, objective, the setting
        written (:meth:`written_setting`) with its metrics, and the held-out check."""
        from ragguard import __version__

        r = run or self.recommended
        w = self.written_setting(r)
        two = w.two_stage
        written = {m: finite(v) for m, v in w.metrics.items()}
        baseline = {m: finite(v) for m, v in r.sweep.point_means(r.baseline).items()}
        c = w.comparison
        check = c.header()
        check["setting"] = w.tested
        nothing = two is None and r.chosen_is_baseline
        if nothing:
            check["note"] = "the choice is the best plain top-k itself: nothing compared"
        for m in c.metrics:
            check[m] = (
                f"{c.guarded[m].mean:.4f}"
                if nothing
                else f"{c.baseline[m].mean:.4f} -> {c.guarded[m].mean:.4f}, difference "
                f"{c.change(m, 4)}"
            )
        selection = two.selection if two is not None else r.selection
        out: dict[str, Any] = {
            "tool": f"ragguard calibrate {__version__}",
            "created": self.created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data_sha256": self.data_sha256,
            "source": self.evalset.source or "",
            "run": r.name,
            "profile": self.profile.name,
            "objective": self.objective,
            "constraints": [str(c) for c in self.constraints],
            "constraints_met": w.met,
            "setting": w.setting,
            "chosen_on_calibration": w.tested,
            "selection": (
                selection.describe()
                if selection is not None
                else "recall guarantee (Learn-then-Test)"
                if w.guarantee is not None
                else ""
            ),
            "refit": "the chosen rule family re-selected on all queries"
            if w.guarantee is None
            else "none: the setting certified on the calibration queries is written",
            "baseline": describe_point(r.baseline_params),
            "queries": {
                "total": len(self.qids),
                "calibration": int(self.calibration_rows.size),
                "heldout": int(self.heldout_rows.size),
                "unanswerable": len(self.evalset.unanswerable),
            },
            "holdout": self.holdout,
            "seed": self.seed,
            "metrics": written,
            "chosen_metrics": {m: finite(v) for m, v in w.tested_metrics.items()},
            "baseline_metrics": baseline,
            "heldout_check": check,
        }
        if w.stage is not None:
            out["second_stage"] = w.stage
        if two is not None:
            out["retrieval_setting"] = describe_point(r.written_params)
        if r.fallback is not None:
            out["fallback"] = r.fallback
        shortfall = self.unmet(r)
        if shortfall:
            out["shortfall"] = shortfall
        g = w.guarantee
        if g is not None:
            out["guarantee"] = {
                "target": g.target,
                "confidence": g.confidence,
                "method": "Learn-then-Test, Hoeffding-Bentkus p-values, fixed-sequence "
                "testing (Angelopoulos et al. 2021)",
                "assumptions": "queries exchangeable with the calibration queries; "
                "per-query loss 1 - evidence recall in [0, 1]; queries without evidence "
                "left out",
                "paths": list(g.paths),
                "met": g.met,
                "certified_on": "calibration queries",
                "queries_with_evidence": g.n_calibration,
                "recall_lower_bound": finite(g.recall_bound),
                "heldout_recall": finite(g.heldout_recall),
                "heldout_queries": g.heldout_queries,
            }
        if isinstance(r.kernel, StageKernels):  # what the conflict setting was chosen from
            out["conflicts_swept"] = [describe_conflicts(c) for c in r.kernel.settings]
        if r.source:
            out["run_source"] = r.source
        if self.files:
            out["files"] = dict(self.files)
        return out

    def save_config(
        self,
        path: str | os.PathLike[str],
        run: str | None = None,
        *,
        allow_unmet: bool = False,
    ) -> Path:
        """Write :meth:`config` as TOML that ``ContextGuard.from_file`` loads.

        A setting that misses a constraint or the guarantee (:meth:`unmet`) is written
        only with ``allow_unmet=True``, the shortfall recorded in the provenance; with
        ``on_worse="stop"`` and a choice worse than plain top-k nothing is written.

        The file is written in a temporary folder beside it and moved into place with
        :func:`os.replace`: ``path`` holds either its old content or the whole new
        config, and nothing temporary is left behind, whatever fails.

        Raises:
            ConfigError: ``path`` is a folder, or lies under a file; a constraint or the
                guarantee is unmet without ``allow_unmet``; the calibration stopped.
            OSError: the file cannot be written (permissions, a full disk).
        """
        r = self.recommended if run is None else self.run(run)
        if self.stopped is not None and r is self.recommended:
            raise ConfigError(f"no config written: {self.stopped}")
        unmet = self.unmet(r)
        if unmet and not allow_unmet:
            raise ConfigError(
                "no config written: " + "; ".join(unmet) + "; lower the floor, raise "
                "--max-k, or pass --allow-unmet (allow_unmet=True) to write it anyway"
            )
        p = check_output_path(path, folder=False, what="the config")
        cfg = self.config(run)
        p.parent.mkdir(parents=True, exist_ok=True)
        with staging_folder(p.parent) as tmp:
            os.replace(cfg.save(tmp / p.name), p)
        return p


def _shown_path(path: str | None) -> str:
    """``path`` relative to the current folder when it lies under it (as a user would
    type it), else as given; ``""`` for none."""
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


# --------------------------------------------------------------------------- files


# --------------------------------------------------------------------------- fingerprint


def data_fingerprint(evalset: EvalSet, runs: Sequence[str] | None = None) -> str:
    """sha256 of the labels and the given runs, independent of file layout: the same
    data loaded from JSONL or TREC files, column-wise or not, hashes alike."""
    from ragguard.calibration.data.columns import ColumnarCandidates, fingerprint

    names = runs if runs is not None else list(evalset.runs)
    for n in names:
        if n not in evalset.runs:
            raise EvalSetError(f"no run named {n!r}; runs: {', '.join(evalset.runs) or 'none'}")
    chosen = [evalset.runs[n] for n in names]
    parts = []
    for r in chosen:
        assert isinstance(r.candidates, ColumnarCandidates)  # (an EvalSet holds columns)
        parts.append((r.name, r.score_kind.value if r.score_kind else None, r.candidates))
    return fingerprint(evalset.qids, evalset.labels, parts)


def _file_hashes(evalset: EvalSet, runs: Sequence[str]) -> dict[str, str]:
    paths = [evalset.source] + [evalset.runs[n].source for n in runs]
    out: dict[str, str] = {}
    for p in paths:
        if p and Path(p).is_file() and p not in out:
            with Path(p).open("rb") as f:  # in blocks: a run file can be gigabytes
                out[p] = hashlib.file_digest(f, "sha256").hexdigest()
    return out


# --------------------------------------------------------------------------- calibrate


def _examples(ids: Sequence[str], n: int = 3) -> str:
    shown = ", ".join(repr(i) for i in ids[:n])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > n else "")


def _check_ids_match(evalset: EvalSet, name: str) -> None:
    """Raise when run ``name`` cannot be scored against the labels: no labelled query
    has candidates in it, or not one of its documents is labelled for its query (the
    run's ids and the labels' ids come from different schemes)."""
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


def needs_texts(
    *,
    reranker: bool = False,
    max_tokens: int | None = None,
    near_duplicate_threshold: float | None = None,
    conflicts: Sequence[str | ConflictMode] = (),
) -> bool:
    """Whether :func:`calibrate` with these options reads passage texts: a ``reranker``
    scores (query, passage text) pairs, and the token budget, near-duplicate and conflict
    stages after the cut read the ranked passages. Precomputed ``rerank_scores`` and
    the rest of a calibration read none, so an eval set loaded with
    ``load_evalset(..., texts=False)`` serves them (and holds no corpus text)."""
    return (
        reranker
        or max_tokens is not None
        or near_duplicate_threshold is not None
        or bool(conflicts)
    )


@dataclass(frozen=True, kw_only=True)
class Calibrator:
    """Calibration as an estimator: the settings of a calibration, grouped into option
    objects and checked when built (a bad value raises
    :class:`~ragguard.errors.ConfigError` before any data is read), and :meth:`fit`,
    which runs it on an eval set (the steps of the module docstring).

    ::

        from ragguard.calibration import Calibrator, Check, Split

        calibrator = Calibrator(
            objective="udcg",
            constraints=["evidence_recall>=0.8"],
            split=Split(holdout=0.3, seed=0),
            check=Check(n_bootstrap=2000),
        )
        result = calibrator.fit(evalset)
        result.save_config("ragguard.toml")

    :func:`calibrate` takes the same settings as keyword arguments.

    Attributes:
        objective: the metric to optimise (a registry metric string or ``passages``);
            distractor rate and harm are minimised, everything else maximised.
        constraints: ``Constraint`` objects or strings like ``"evidence_recall>=0.8"``
            (evidence recall: recall among the candidates, the recall a guard controls).
        profile: tolerance profile for utilities (default ``support``); its name goes
            into the config.
        rules: which grades are relevant / partially relevant (default: the profile's).
        runs: the runs to calibrate (default: all).
        search: the retrieval settings swept (:class:`~ragguard.calibration.options.Search`).
        split: calibration / held-out queries and folds
            (:class:`~ragguard.calibration.options.Split`).
        check: the held-out check (:class:`~ragguard.calibration.options.Check`).
        guarantee: a recall guarantee instead of the objective's optimum
            (:class:`~ragguard.calibration.options.Guarantee`).
        stages: the stages after the cut swept with every setting
            (:class:`~ragguard.calibration.options.Stages`).
        rerank: a second stage calibrated with the recommended run
            (:class:`~ragguard.calibration.options.RerankSearch`).
        answerability: calibrate ``min_evidence`` for the written setting
            (:class:`~ragguard.calibration.options.Answerability`).
    """

    objective: str = "udcg"
    constraints: Sequence[Constraint | str] = ()
    profile: Profile | str | None = None
    rules: UtilityRules | None = None
    runs: Sequence[str] | None = None
    search: Search = field(default_factory=Search)
    split: Split = field(default_factory=Split)
    check: Check = field(default_factory=Check)
    guarantee: Guarantee | None = None
    stages: Stages = field(default_factory=Stages)
    rerank: RerankSearch | None = None
    answerability: Answerability | None = None

    def __post_init__(self) -> None:
        options: tuple[tuple[str, object, type, bool], ...] = (
            ("search", self.search, Search, False),
            ("split", self.split, Split, False),
            ("check", self.check, Check, False),
            ("guarantee", self.guarantee, Guarantee, True),
            ("stages", self.stages, Stages, False),
            ("rerank", self.rerank, RerankSearch, True),
            ("answerability", self.answerability, Answerability, True),
        )
        for name, value, kind, optional in options:
            if not isinstance(value, kind) and not (optional and value is None):
                raise ConfigError(
                    f"{name} must be a {kind.__name__}{' or None' if optional else ''}, got "
                    f"{type(value).__name__}"
                )
        if self.rules is not None and not isinstance(self.rules, UtilityRules):
            raise ConfigError(
                f"rules must be UtilityRules or None, got {type(self.rules).__name__}"
            )
        as_profile(self.profile)  # an unknown profile: ConfigError
        if isinstance(self.constraints, str):
            raise ConfigError(f"constraints must be a sequence of rules, got {self.constraints!r}")
        cons = tuple(Constraint.parse(c) if isinstance(c, str) else c for c in self.constraints)
        object.__setattr__(self, "constraints", cons)
        if isinstance(self.runs, str):
            raise ConfigError(f"runs must be a sequence of run names, got {self.runs!r}")
        if not isinstance(self.objective, str):
            raise ConfigError(f"objective must be a metric name, got {self.objective!r}")
        if self.objective != PASSAGES:
            parse_metric(self.objective)  # fail early on a bad name
        baseline_k = self.check.baseline_k
        grid = self.grid
        if baseline_k is not None and baseline_k not in grid.max_k:
            raise ConfigError(f"baseline_k={baseline_k} is not among the grid's max_k {grid.max_k}")

    @property
    def grid(self) -> SweepGrid:
        """The grid swept first: the one given, or the default grid up to the cap."""
        s = self.search
        return s.grid or SweepGrid.up_to(DEFAULT_MAX_K if s.max_k is None else s.max_k)

    def fit(
        self,
        evalset: EvalSet,
        *,
        corpus: Sequence[str | os.PathLike[str]] = (),
        passages: Mapping[str, str] | None = None,
        on_sweep: Callable[[int, int], None] | None = None,
    ) -> CalibrationResult:
        """Sweep every run, choose a setting per run, check it on held-out queries.

        Args:
            evalset: labelled queries and their runs.
            corpus: JSONL corpus files with passage texts, for a reranker and the stages
                after the cut; added to ``evalset.texts`` (:meth:`EvalSet.with_texts`),
                each read once.
            passages: more passage texts, ``{passage id: text}``.
            on_sweep: progress callback ``(sweeps done, sweeps)``: one sweep per run,
                and one for the second stage.

        Raises:
            EvalSetError: no runs, an unknown run, or nothing to calibrate on: no
                queries left (an empty split, a run with no candidates for any labelled
                query) or a run none of whose document ids is labelled for its query
                (the ids of the run and of the labels do not match); with
                ``answerability``, no unanswerable query among the calibration queries.
            ConfigError: ``answerability`` with a ``guarantee``; a token counter that
                cannot be built.
        """
        if not evalset.runs:
            raise EvalSetError(
                "the eval set has no runs to calibrate; pass run files (--run) or a "
                "retriever (--retriever)",
                path=evalset.source,
            )
        names = list(evalset.runs) if self.runs is None else list(self.runs)
        for n in names:
            if n not in evalset.runs:
                raise EvalSetError(f"no run named {n!r}; runs: {', '.join(evalset.runs)}")
        if not names:
            raise EvalSetError("no runs selected")
        objective, split, check = self.objective, self.split, self.check
        cons = [c for c in self.constraints if isinstance(c, Constraint)]
        grid = self.grid
        qids = evalset.qids
        calib_rows, held_rows = split_queries(len(qids), split.holdout, split.seed)
        if self.answerability is not None:
            check_max_false_abstain(
                evalset,
                self.answerability.max_false_abstain,
                calib_rows,
                guarantee=self.guarantee is not None,
            )
        evalset = evalset.with_texts(corpus=corpus, passages=passages)  # read once, when needed
        st = self.stages
        plan = FitPlan(
            profile=as_profile(self.profile),
            rules=self.rules,
            objective=objective,
            constraints=tuple(cons),
            metrics=tuple(
                dict.fromkeys(
                    [
                        objective,
                        *(c.metric for c in cons),
                        *self.search.metrics,
                        *REPORTED,
                        EVIDENCE,
                    ]
                )
            ),
            reported=tuple(dict.fromkeys([objective, *(c.metric for c in cons), *REPORTED])),
            calibration_rows=calib_rows,
            heldout_rows=held_rows,
            split=split,
            check=check,
            guarantee=self.guarantee,
            stages=stage_sweep(
                evalset,
                max_tokens=st.max_tokens,
                token_counter_spec=st.token_counter,
                near_duplicate_threshold=st.near_duplicate_threshold,
                conflicts=st.conflicts,
                conflict_similarities=st.conflict_similarities,
            ),
        )
        n_sweeps = len(names) + (self.rerank is not None)

        def report_sweeps(done: int) -> None:
            if on_sweep is not None:
                on_sweep(done, n_sweeps)

        report_sweeps(0)
        results: list[RunCalibration] = []
        for name in names:
            results.append(
                _search_run(evalset, name, plan, grid, self.search.grows, first=not results)
            )
            report_sweeps(len(results))

        sign = -1.0 if lower_is_better(objective) else 1.0

        def rank_key(r: RunCalibration) -> tuple[bool, bool, float]:
            value = r.full.mean(r.written, objective)
            ok = r.guarantee.met if r.guarantee is not None else True
            return (ok, r.written_feasible, sign * value if not math.isnan(value) else -math.inf)

        best = max(results, key=rank_key)  # first of equals: the eval set's order
        two_stage = None
        if self.rerank is not None:
            two_stage = _two_stage(evalset, best, self.rerank, plan, best.grid or grid)
            report_sweeps(n_sweeps)
        g = self.guarantee
        calibrated = CalibrationResult(
            runs=tuple(results),
            recommended=best,
            objective=objective,
            constraints=tuple(cons),
            profile=plan.profile,
            grid=grid,
            holdout=float(split.holdout),
            seed=split.seed,
            qids=qids,
            calibration_rows=calib_rows,
            heldout_rows=held_rows,
            evalset=evalset,
            data_sha256=data_fingerprint(evalset, names),
            files=_file_hashes(evalset, names),
            rerank=two_stage,
            on_worse=check.on_worse,
            target=plan.target,
            confidence=_confidence(g, self.answerability),
            folds=split.folds,
            stage_settings={} if plan.stages is None else plan.stages.config_settings(),
            caps_fixed=not self.search.grows,
        )
        a = self.answerability
        if a is None:
            return calibrated
        answerability = calibrate_answerability(calibrated, plan, a)
        return replace(calibrated, answerability=answerability)


def _confidence(guarantee: Guarantee | None, answerability: Answerability | None) -> float:
    """The confidence a result states: its guarantee's, else its floor's, else 0.95."""
    if guarantee is not None:
        return guarantee.confidence
    return 0.95 if answerability is None else answerability.confidence


def _search_run(
    evalset: EvalSet, name: str, plan: FitPlan, grid: SweepGrid, may_grow: bool, *, first: bool
) -> RunCalibration:
    """Sweep run ``name`` (caps grown when ``may_grow`` and no setting meets the
    constraints, or with a guarantee), choose by cross-validation or certify the
    guarantee, compare with plain top-k, fall back when worse, refit on all queries
    (steps 1-7 of the module docstring); ``first``: the first run, which warns about a
    small eval set."""
    objective, cons, stages = plan.objective, plan.constraints, plan.stages
    wanted, reported = plan.metrics, plan.reported
    calib_rows, held_rows = plan.calibration_rows, plan.heldout_rows
    seed, folds = plan.split.seed, plan.split.folds
    check, target = plan.check, plan.target
    baseline_k = check.baseline_k
    qids = evalset.qids
    all_rows = np.arange(len(qids), dtype=np.intp)
    # the row groups every mean below is a union of: cross-validation folds of the
    # calibration queries (the ones cross_validate draws), the held-out queries
    k_folds = fold_count(int(calib_rows.size), folds) if target is None else 0
    groups = [*(fold_parts(calib_rows, k_folds, seed) if k_folds else [calib_rows]), held_rows]
    _check_ids_match(evalset, name)
    arrays = evalset.arrays(name, profile=plan.profile, rules=plan.rules)
    run_grid = grid
    if arrays.score_kind is None:
        logger.warning("run %r has no scores: only plain top-k settings apply", name)

    def sweep_on(g: SweepGrid, ar: EvalArrays = arrays) -> tuple[SweepKernel, SweepResult]:
        pts = g.points()
        if stages is not None:  # every setting with the stages after the cut
            pts = stages.points(pts)  # (under each conflict setting swept)
        if ar.score_kind is None:
            pts = tuple(p for p in pts if is_plain_top_k(p))
        width = max(p.max_k for p in pts)
        if stages is None:
            kern = SweepKernel(ar, wanted, width)
        else:
            kern = stages.kernel(ar, wanted, width)
        return kern, sweep(kern, pts, wanted, rows=calib_rows, groups=groups)

    # the caps grow to the candidate depth when no setting meets the constraints, and
    # always for a guarantee (whose first sweep would go unused: it is skipped)
    depth = min(int(arrays.n_valid.max()) if arrays.n_queries else 0, MAX_K_LIMIT)
    wider = None
    if may_grow and depth > max(run_grid.max_k):
        wider = replace(run_grid, max_k=_extended_caps(run_grid.max_k, depth))
    swept = None
    if wider is None or target is None:
        swept = sweep_on(run_grid)
        if all(bool((c.violation(swept[1].column(c.metric)) == 0).any()) for c in cons):
            wider = None
    if wider is not None:
        swept = None  # the first sweep's tables go before the wider ones are built
        run_grid = wider
        swept = sweep_on(run_grid)
        logger.info("run %r: caps extended to %d", name, max(run_grid.max_k))
    assert swept is not None
    kernel, result = swept
    points = result.points
    # the baseline: plain top-k (under the first conflict setting swept)
    top_idx = [
        i
        for i, p in enumerate(points)
        if is_plain_top_k(p) and (stages is None or stages.is_base(p))
    ]
    full = result.restricted(kernel, all_rows)

    def means(rows: I, kern: SweepKernel = kernel, res: SweepResult = result) -> SweepResult:
        return res.restricted(kern, rows)

    selection = None
    g_result = None
    if target is not None:
        paths = None if stages is None else stages.paths(points, guarantee_paths)
        assert plan.guarantee is not None
        g_result = certify_guarantee(
            kernel, result, target, plan.guarantee.confidence, held_rows, paths
        )
        chosen = g_result.written
        feasible = meets_constraints(result, chosen, cons)
    else:
        selection = cross_validate(
            means, points, calib_rows, objective, cons, folds=folds, seed=seed
        )
        chosen, feasible = refit(result, selection.members[selection.chosen], objective, cons)
    if baseline_k is None:
        baseline, _ = choose(result, objective, cons, among=top_idx)
    else:
        baseline = next(i for i in top_idx if points[i].max_k == baseline_k)
    rows, split = checked_rows(calib_rows, held_rows)
    comparison = compare(
        kernel,
        result.kept[baseline].astype(np.intp),
        result.kept[chosen].astype(np.intp),
        rows,
        reported,
        split=split,
        n_bootstrap=check.n_bootstrap,
        seed=seed,
        level=check.level,
    )
    if len(qids) < SMALL_SET and objective in comparison.metrics and first:
        d = comparison.guarded[objective]
        logger.warning(
            "only %d labelled queries (%d or more advised): the %s interval of mean "
            "%s is %.3f wide, so small gains cannot be told from noise",
            len(qids),
            SMALL_SET,
            comparison.split,
            objective,
            d.high - d.low,
        )
    fallback = None
    if (
        target is None
        and chosen != baseline
        and objective in comparison.metrics
        and comparison.verdict(objective) == "worse"
    ):
        fallback = (
            f"{comparison.where()} the choice ({describe_point(points[chosen])}) is "
            f"worse than plain {describe_point(points[baseline])} on {objective} "
            f"(difference {comparison.change(objective)})"
        )
    # refit on all queries: the family (plain top-k after a fallback) re-selected;
    # a guarantee is not refitted (what the calibration queries certify is written,
    # and the held-out queries check it)
    if g_result is not None:
        written = chosen
        written_feasible = meets_constraints(full, written, cons)
    else:
        assert selection is not None
        members = top_idx if fallback is not None else selection.members[selection.chosen]
        if fallback is not None and baseline_k is not None:
            members = [baseline]
        written, written_feasible = refit(full, members, objective, cons)
    run = evalset.runs[name]
    run_calibration = RunCalibration(
        name=name,
        score_kind=arrays.score_kind,
        source=run.source,
        arrays=arrays,
        kernel=kernel,
        sweep=result,
        chosen=chosen,
        baseline=baseline,
        feasible=feasible,
        comparison=comparison,
        optimal=optimal_k(arrays, max(run_grid.max_k)),
        grid=run_grid,
        selection=selection,
        full=full,
        written=written,
        written_feasible=written_feasible,
        fallback=fallback,
        guarantee=g_result,
    )
    logger.info(
        "run %r: chose %s (%s %.4f), wrote %s",
        name,
        describe_point(points[chosen]),
        objective,
        result.mean(chosen, objective),
        describe_point(points[written]),
    )
    return run_calibration


def calibrate(  # noqa: PLR0913 - the keyword face of Calibrator, kept for callers
    evalset: EvalSet,
    *,
    runs: Sequence[str] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    objective: str = "udcg",
    constraints: Sequence[Constraint | str] = (),
    min_recall: float | None = None,
    max_k: int | None = None,
    grid: SweepGrid | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    holdout: float = 0.3,
    seed: int = 0,
    baseline_k: int | None = None,
    n_bootstrap: int = 2000,
    level: float = 0.95,
    reranker: Reranker | None = None,
    rerank_scores: RerankScores | None = None,
    rerank_score_kind: ScoreKind | str | None = None,
    rerank_grid: RerankGrid | None = None,
    probability_map: MapMethod | str = "platt",
    corpus: Sequence[str | os.PathLike[str]] = (),
    passages: Mapping[str, str] | None = None,
    cache_dir: str | os.PathLike[str] | bool | None = True,
    on_rerank_query: Any = None,
    folds: int = DEFAULT_FOLDS,
    on_worse: Literal["top-k", "stop"] = "top-k",
    guarantee: str | None = None,
    confidence: float = 0.95,
    max_tokens: int | None = None,
    token_counter: str = "chars:4",
    near_duplicate_threshold: float | None = None,
    on_sweep: Callable[[int, int], None] | None = None,
    max_false_abstain: float | None = None,
    conflicts: Sequence[str | ConflictMode] = (),
    conflict_similarities: Sequence[float] = (),
) -> CalibrationResult:
    """Sweep every run, choose a setting per run, check it on held-out queries: a
    :class:`Calibrator` built from these keyword arguments, fitted on ``evalset``
    (``Calibrator(...).fit(evalset)`` groups them into option objects).

    Args:
        evalset: labelled queries and their runs.
        runs: the runs to calibrate (default: all).
        profile: tolerance profile for utilities (default ``support``); its name goes
            into the config.
        rules: which grades are relevant / partially relevant.
        objective: the metric to optimise (a registry metric string or ``passages``);
            distractor rate and harm are minimised, everything else maximised.
        constraints: ``Constraint`` objects or strings like ``"evidence_recall>=0.8"``.
        min_recall: shorthand for the constraint ``evidence_recall>=min_recall`` (recall
            among the candidates: the recall a guard controls; classic ``recall``, over
            every judged document, stays in the report as the retriever's ceiling).
        max_k: the largest cap tried (grid ``1..max_k``), a constraint: the caps never
            grow past it. ``None`` (the default): caps ``1..`` :data:`DEFAULT_MAX_K`,
            which grow to the candidate depth (at most :data:`MAX_K_LIMIT`) when no
            setting meets the constraints, or with ``guarantee``. Ignored when ``grid``
            is given (a grid never grows).
        grid: the settings to try (default :meth:`SweepGrid.up_to(max_k)
            <ragguard.calibration.sweep.SweepGrid.up_to>`).
        metrics: metrics computed at every setting (the objective and constraint metrics
            are added).
        holdout: fraction of queries held out for the check (0 disables it).
        seed: seed of the split and of the bootstrap.
        baseline_k: compare with plain top-``baseline_k`` instead of the best plain
            top-k of the grid.
        n_bootstrap: bootstrap resamples for the intervals.
        level: confidence level of the intervals.
        reranker: a second stage (:class:`~ragguard.rerank.Reranker`) to calibrate with
            the recommended run: its scores are computed once per (model, query,
            passage text) and cached (:mod:`ragguard.calibration.rerank_scores`), a
            probability map is fitted, and retrieval depth x rerank cut x max_k is swept
            (:mod:`ragguard.calibration.pipeline`); the config then enables the stage.
        rerank_scores: precomputed second-stage scores instead of a ``reranker``
            (:func:`~ragguard.calibration.rerank_scores.read_rerank_run`).
        rerank_score_kind: what the reranker returns, when it does not declare it.
        rerank_grid: the rerank cuts and depths tried (default ``RerankGrid()``).
        probability_map: ``"platt"`` (default) or ``"isotonic"``.
        corpus: JSONL corpus files with passage texts, for ``reranker`` and the stages
            after the cut; added to ``evalset.texts`` (:meth:`EvalSet.with_texts`), each
            read once.
        passages: more passage texts, ``{passage id: text}``.
        cache_dir: the rerank score cache (``True``: the default folder; ``None``: off).
        on_rerank_query: progress callback ``(queries done, queries)`` while scoring.
        folds: cross-validation folds for the choice of rule family (fewer on small
            sets; see :mod:`ragguard.calibration.select`).
        on_worse: when the held-out check finds the choice worse than the best plain
            top-k on the objective: ``"top-k"`` writes plain top-k instead, ``"stop"``
            writes nothing (:meth:`CalibrationResult.save_config` raises).
        guarantee: ``"recall>=0.9"``: choose the smallest context whose mean evidence
            recall on new queries is at least 0.9 with probability ``confidence``
            (Learn-then-Test with Hoeffding-Bentkus p-values, Angelopoulos et al. 2021;
            see :mod:`ragguard.calibration.risk`). The objective is then reported, not
            optimised.
        confidence: the confidence level of the guarantee and of ``max_false_abstain``.
        max_tokens: sweep every setting with this token budget applied after the cut
            (texts from the eval set, a ``corpus.jsonl`` beside it, ``corpus`` and
            ``passages``), so the choice respects it; the config carries it.
        token_counter: how ``max_tokens`` counts (:mod:`ragguard.tokens`).
        near_duplicate_threshold: sweep every setting with near-duplicate control on.
        on_sweep: progress callback ``(sweeps done, sweeps)``: one sweep per run, and
            one for the second stage.
        max_false_abstain: calibrate ``min_evidence`` (answerability) for the written
            setting: the highest floor on the best candidate's score (the rerank
            probability when the config holds the second stage) under which at most
            this share of answerable queries abstain on new queries, with probability
            ``confidence``, by Learn-then-Test on the calibration queries; the held-out
            queries report the shares of unanswerable queries caught and of answerable
            ones lost (:mod:`ragguard.calibration.answerability`). Needs unanswerable
            queries (judged, none relevant); default off.
        conflicts: conflict modes to sweep (``"off"``, ``"flag"``, ``"keep_first"``,
            ``"drop"``; not ``"prefer"``, whose metadata eval sets do not carry): every
            setting is tried under each, at each of ``conflict_similarities``, with the
            runtime's conflict stage after the cut, and the choice among them is made
            on the objective like any other (a conflict mode counts as one more rule;
            :mod:`ragguard.calibration.conflict_sweep`). The held-out check compares
            with plain top-k under the simplest one swept (``off`` when given). Empty
            (the default): the conflict stage is not swept.
        conflict_similarities: the ``conflict_similarity`` values swept (default
            :data:`~ragguard.policy.DEFAULT_CONFLICT_SIMILARITY`).

    Raises:
        EvalSetError: no runs, an unknown run, or nothing to calibrate on: no queries
            left (an empty split, a run with no candidates for any labelled query) or a
            run none of whose document ids is labelled for its query (the ids of the
            run and of the labels do not match); with ``max_false_abstain``, no
            unanswerable query among the calibration queries.
        ConfigError: a parameter out of range or of the wrong type (``holdout``,
            ``min_recall``, ``level``, ``n_bootstrap``, ``seed``, ``baseline_k``,
            ``probability_map``, ...), an unknown metric or profile, a malformed
            constraint, or both ``reranker`` and ``rerank_scores``.
    """
    MapMethod(probability_map)  # fail early on an unknown method (ConfigError)
    if not (is_real(confidence) and 0.0 < confidence < 1.0):  # checked even when unused
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    cons = [Constraint.parse(c) if isinstance(c, str) else c for c in constraints]
    if min_recall is not None:
        if not (is_real(min_recall) and 0.0 <= min_recall <= 1.0):
            raise ConfigError(f"min_recall must be in [0, 1], got {min_recall!r}")
        cons.append(Constraint(EVIDENCE, ">=", float(min_recall)))
    rerank = None
    if reranker is not None or rerank_scores is not None:
        rerank = RerankSearch(
            reranker=reranker,
            scores=rerank_scores,
            score_kind=rerank_score_kind,
            grid=rerank_grid or RerankGrid(),
            probability_map=probability_map,
            cache_dir=cache_dir,
            on_query=on_rerank_query,
        )
    calibrator = Calibrator(
        objective=objective,
        constraints=cons,
        profile=profile,
        rules=rules,
        runs=runs,
        search=Search(max_k=max_k, grid=grid, metrics=metrics),
        split=Split(holdout=holdout, seed=seed, folds=folds),
        check=Check(n_bootstrap=n_bootstrap, level=level, baseline_k=baseline_k, on_worse=on_worse),
        guarantee=None if guarantee is None else Guarantee.parse(guarantee, confidence),
        stages=Stages(
            max_tokens=max_tokens,
            token_counter=token_counter,
            near_duplicate_threshold=near_duplicate_threshold,
            conflicts=conflicts,
            conflict_similarities=conflict_similarities,
        ),
        rerank=rerank,
        answerability=None
        if max_false_abstain is None
        else Answerability(max_false_abstain=max_false_abstain, confidence=confidence),
    )
    return calibrator.fit(evalset, corpus=corpus, passages=passages, on_sweep=on_sweep)


def calibrate_answerability(
    result: CalibrationResult, plan: FitPlan, option: Answerability
) -> AnswerabilityResult:
    """Calibrate ``min_evidence`` for the setting ``result``'s config holds
    (:func:`ragguard.calibration.answerability.fit_answerability` on the scores the floor
    reads under that setting): certified on the calibration queries of ``plan``, checked
    on its held-out ones, with the share and confidence of ``option``.

    Raises:
        ConfigError: the written setting's scores cannot carry a floor (a run without
            scores and no rerank stage).
    """
    w = result.written_setting()
    r = w.run
    arrays = r.arrays
    retrieval = (
        evidence_tops(arrays)
        if arrays.score_kind is not None
        else np.full(arrays.n_queries, math.inf)  # no score rule applies, min_evidence neither
    )
    two = w.two_stage
    if two is None:
        if arrays.score_kind is None:
            raise ConfigError(
                f"--max-false-abstain cannot calibrate min_evidence for run {r.name!r}: it "
                "has no scores, and min_evidence reads the best candidate's score; pass "
                "--score-kind or a run with scores"
            )
        top, scale, kernel = retrieval, RETRIEVAL_SCALE, r.kernel
    else:
        n = two.points[w.index][0]
        kernel = two.kernels[n]
        top = evidence_tops(kernel.arrays)
        failed = np.isin(np.asarray(arrays.qids, dtype=object), list(two.failed.get(n, ())))
        top[failed] = np.inf  # a failed call: the guard does not apply the floor
        scale = RERANK_SCALE
    return fit_answerability(
        top, arrays, kernel, w.full.kept[w.index],
        scale=scale, setting=w.setting, metrics=w.comparison.metrics, plan=plan, option=option,
    )  # fmt: skip


def _extended_caps(caps: Sequence[int], depth: int) -> tuple[int, ...]:
    """``caps`` grown towards ``depth`` in widening steps (12, 15, 20, 25, 30, 40, 50,
    60, 80, 100), ``depth`` itself included."""
    steps = (12, 15, 20, 25, 30, 40, 50, 60, 80, 100)
    more = [k for k in steps if max(caps) < k < depth]
    return tuple(sorted({*caps, *more, depth}))


def _two_stage(
    evalset: EvalSet, best: RunCalibration, rerank: RerankSearch, plan: FitPlan, grid: SweepGrid
) -> TwoStageCalibration:
    """Score the recommended run's candidates (or take the given scores) and sweep the
    two-stage pipeline (:func:`ragguard.calibration.pipeline.calibrate_two_stage`) over
    ``grid``'s caps; the passage texts are ``evalset.texts``."""
    arrays = best.arrays
    scores = rerank.scores
    if scores is None:
        assert rerank.reranker is not None
        depth = max(rerank.grid.top_n)
        pairs = {
            qid: arrays.doc_ids(row)[: int(arrays.n_valid[row])][:depth]
            for row, qid in enumerate(arrays.qids)
        }
        scores = score_candidates(
            evalset, rerank.reranker, pairs, texts=evalset.texts.get,
            score_kind=rerank.score_kind, cache_dir=rerank.cache_dir, on_query=rerank.on_query,
        )  # fmt: skip
    return calibrate_two_stage(
        evalset,
        best.name,
        scores,
        plan=plan,
        retrieval_kernel=best.kernel,
        retrieval_chosen=best.chosen_kept,
        retrieval_baseline=best.baseline_kept,
        max_k=grid.max_k,
        min_k=grid.min_k,
        grid=rerank.grid,
        method=rerank.probability_map,
    )
