"""The result view (``ResultView``): one calibration as every output shows it, derived once;
the console, ``--json``, the report and the provenance render it and compute nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ragguard.calibration._format import finite, format_number
from ragguard.calibration.fit.answerability import AnswerabilityResult
from ragguard.calibration.fit.conflict_sweep import (
    ConflictDetection,
    StageKernels,
    conflict_detection,
    describe_conflicts,
    describe_threshold,
    setting_of,
    similarity_levels,
)
from ragguard.calibration.fit.header import Header
from ragguard.calibration.fit.noise_floor import NoiseFloorResult
from ragguard.calibration.fit.probability import Reliability
from ragguard.calibration.fit.risk import EVIDENCE, GuaranteeResult
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.select import FamilyChoice
from ragguard.calibration.fit.statistics import (
    Comparison,
    Interval,
)
from ragguard.calibration.fit.steps import CommandLine, next_steps, shown_path
from ragguard.calibration.fit.sweep import (
    F64,
    PASSAGES,
    B,
    OptimalK,
    SweepGrid,
    SweepResult,
    choose,
    conflict_threshold,
    describe_point,
    is_plain_top_k,
    lower_is_better,
)
from ragguard.calibration.fit.written import Shortfall, WrittenSetting, shortfalls, written_setting
from ragguard.calibration.metrics import SafetyBand, SafetyBands, compute, safety_band
from ragguard.policy import DEFAULT_ANSWER_SIMILARITY, ConflictDetector, ConflictMode, CutRule
from ragguard.scores import ScoreKind

# --------------------------------------------------------------------------- results


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
    """A paired comparison with plain top-k, as every output shows it."""

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
    """One run's line in the tables of every run (``ResultView.runs``): its choice on the
    calibration queries next to its best plain top-k, and what its config would hold."""

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
class ConstraintCost:
    """What the constraints cost (``ResultView.cost``): the best mean objective on the calibration
    queries with them and without them, the plain top-k that wins without them, and the choice
    against that top-k on the held-out queries."""

    constraints: str
    objective: str
    best: float
    best_setting: str
    free: float
    free_setting: str
    top_k: str
    top_k_value: float
    chosen: str
    check: CheckView
    worse: str | None

    @classmethod
    def of(cls, header: Header, r: RunCalibration) -> ConstraintCost | None:
        """The cost of ``header``'s constraints on run ``r``'s retrieval search
        (``None`` without constraints)."""
        cons, obj = header.constraints, header.objective
        if not cons:
            return None
        best, ok = choose(r.sweep, obj, cons)
        free, _ = choose(r.sweep, obj)
        top = r.baseline if r.unconstrained is None else r.unconstrained
        assert top is not None  # a retrieval search has its plain top-k
        c = r.comparison if r.against_unconstrained is None else r.against_unconstrained
        text = " and ".join(str(x) for x in cons)
        worse = None
        if obj in c.metrics and c.verdict(obj) == "worse":
            worse = (
                f"{c.where()} the choice ({describe_point(r.chosen_params)}) is worse than "
                f"plain {describe_point(r.sweep.points[top])}, the best plain top-k without "
                f"{text}, on {obj} (difference {c.change(obj)}): that is what {text} costs; "
                "without the constraint (--min-recall 0, or constraints=[]) that top-k "
                "competes"
            )
        return cls(
            constraints=text,
            objective=obj,
            best=r.sweep.mean(best, obj) if ok else math.nan,
            best_setting=describe_point(r.sweep.points[best]),
            free=r.sweep.mean(free, obj),
            free_setting=describe_point(r.sweep.points[free]),
            top_k=describe_point(r.sweep.points[top]),
            top_k_value=r.sweep.mean(top, obj),
            chosen=describe_point(r.chosen_params),
            check=CheckView.of(c),
            worse=worse,
        )

    def line(self) -> str:
        """The cost in one line, as the console and the report print it."""
        best = f"{format_number(self.best)} ({self.best_setting})"
        best = best if math.isfinite(self.best) else "none"
        same = ", also the best plain top-k" if self.free_setting == self.top_k else ""
        text = (
            f"mean {self.objective} on the calibration queries {best} with {self.constraints}, "
            f"{format_number(self.free)} ({self.free_setting}{same}) without"
        )
        if not same:
            top = format_number(self.top_k_value)
            text += f"; the best plain top-k without them: {self.top_k} ({top})"
        c, obj = self.check.comparison, self.objective
        if self.worse is not None:
            return f"{text}. {self.worse[0].upper()}{self.worse[1:]}"
        if self.chosen == self.top_k:
            text += f"; the choice is {self.top_k} itself"
        elif obj in c.metrics and c.n_queries:
            text += (
                f"; {c.where()} the choice against {self.top_k}: {c.change(obj)}, {c.verdict(obj)}"
            )
        return text


@dataclass(frozen=True, eq=False)
class GuaranteeView:
    """A recall guarantee as the report shows it (``ResultView.guarantee``,
    ``StageView.guarantee``)."""

    outcome: GuaranteeResult
    names: Callable[[int], str] = field(repr=False)
    n_queries: int
    passages: float

    @classmethod
    def of(cls, r: RunCalibration, n_queries: int) -> GuaranteeView | None:
        """The guarantee of search ``r`` (``None`` without one)."""
        g = r.guarantee
        if g is None:
            return None
        return cls(g, r.describe, n_queries, r.sweep.mean(g.written, PASSAGES))


@dataclass(frozen=True)
class RuleRow:
    """The best setting of one group of settings (a label-free cut rule, a conflict
    setting) on the calibration queries: the group, the setting, whether it meets the
    constraints, and its means (``ResultView.rules``, ``ConflictView.best``)."""

    rule: str
    setting: str
    feasible: bool
    values: tuple[float, ...]


@dataclass(frozen=True)
class Curve:
    """One metric over plain top-k (``ResultView.curves``): each k with its mean on the
    calibration queries, and the chosen setting's mean."""

    metric: str
    ks: tuple[int, ...]
    means: tuple[float, ...]
    chosen: float


@dataclass(frozen=True, eq=False)
class Heatmap:
    """The objective over ``max_k`` x ``relative_threshold`` (``ResultView.heatmap``):
    (nan where not swept), the cells failing the constraints, the chosen cell if on it."""

    max_k: tuple[int, ...]
    thresholds: tuple[float, ...]
    objective: F64
    fails: B
    chosen: tuple[int, int] | None


@dataclass(frozen=True)
class ConflictView:
    """The conflict stage as swept (``ResultView.conflicts``)."""

    swept: tuple[str, ...]
    written: str
    best: tuple[RuleRow, ...]
    max_k: int
    similarity: str | None
    detection: tuple[tuple[str, str, ConflictDetection], ...]


@dataclass(frozen=True)
class Example:
    """One query that gained or lost most (``ResultView.examples``): its id and text,
    the change of the objective, each context as ``(passage id, utility)`` best first,
    and the distractors in either as ``(passage id, kind, kept)``."""

    qid: str
    text: str
    change: float
    baseline: tuple[tuple[str, float], ...]
    guarded: tuple[tuple[str, float], ...]
    distractors: tuple[tuple[str, str, bool], ...]


@dataclass(frozen=True, eq=False)
class StageView:
    """The second stage as every output shows it (``ResultView.stage``)."""

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
    reliability: tuple[Reliability, Reliability] = field(repr=False)
    map_method: str
    settings: Mapping[str, Any]
    guarantee: GuaranteeView | None

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
            reliability=(stage.reliability_raw, stage.reliability_mapped),
            map_method=stage.probability_map.method.value,
            settings=two.guard_settings(),
            guarantee=GuaranteeView.of(two, int(two.sweep.kept.shape[1])),
        )

    def provenance(self) -> dict[str, Any]:
        """The second stage's part of the config's provenance: the reranker, the map, the
        setting and how it was chosen, and its held-out check against retrieval only."""
        two = self.search
        stage, c = two.stage, two.against_retrieval
        assert stage is not None and c is not None
        scores = stage.scores
        out: dict[str, Any] = {
            "reranker": self.reranker,
            "identity": scores.identity.splitlines()[0] if scores.identity else "",
            "cache_key": scores.cache_key or "",
            "setting": self.setting,
            "retrieval_run": self.run,
            "probability_map": self.probability_map,
            "pairs_fitted": self.pairs_fitted,
            "constraints_met": two.feasible,
            "chosen_on_calibration": self.choice,
            "selection": self.selection or "recall guarantee (Learn-then-Test)",
        }
        if two.fallback is not None:
            out["fallback"] = two.fallback
        if self.failures is not None:
            out["rerank_failures"] = self.failures
        for m in c.metrics:
            out[f"vs_retrieval_{m}"] = (
                f"{c.baseline[m].mean:.4f} -> {c.guarded[m].mean:.4f}, difference {c.change(m, 4)}"
            )
        out["brier_raw"], out["brier_mapped"] = (finite(x) for x in self.brier)
        out["ece_raw"], out["ece_mapped"] = (finite(x.ece) for x in self.reliability)
        return out


@dataclass(frozen=True, eq=False)
class ResultView:
    """One calibration result as every output shows it, derived once
    ([`CalibrationResult.view`][ragguard.calibration.CalibrationResult.view]): the console summary,
    ``--json`` (``ragguard.calibration.report.summary``), the report
    (``ragguard.calibration.report``) and the config's provenance
    ([`CalibrationResult.provenance`][ragguard.calibration.CalibrationResult.provenance]) render
    these values and compute none."""

    header: Header
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
    cost: ConstraintCost | None
    next_steps: tuple[tuple[str, tuple[str, ...]], ...]
    answerability: AnswerabilityResult | None
    run_name: str
    score_kind: ScoreKind | None
    fallback: str | None
    chosen_is_baseline: bool
    refitted: bool
    optimal: OptimalK
    oracle_utility: float
    curves: tuple[Curve, ...]
    chosen_max_k: int
    heatmap: Heatmap | None
    passages_kept: float
    conflicts: ConflictView | None
    reranker_code: str | None
    family: FamilyChoice | None
    guarantee: GuaranteeView | None
    recall_ceiling: float | None
    grid: SweepGrid
    n_settings: int
    rules: tuple[RuleRow, ...]
    examples: tuple[tuple[Example, ...], tuple[Example, ...]] | None
    noise_floor: NoiseFloorResult | None = None  # the recommended run's (fit/noise_floor.py)

    @property
    def next_steps_intro(self) -> str:
        """Why next steps are suggested: the written setting's own distractor rate and safety band
        on the checked queries (only meaningful when ``next_steps`` has any)."""
        w = self.written
        band, rate, c = w.checked_band(), w.checked_rate, w.search.comparison
        bands = SafetyBands()
        start = bands.dangerous if band is SafetyBand.DANGEROUS else bands.risky
        seen = ""
        if w.index != w.search.chosen and c.split == "held-out":
            seen = f"; its refit on all {len(self.header.qids)} queries saw them"
        name = "none" if band is None else band.value
        return (
            f"the written setting ({w.setting}) is {name}: mean distractor rate "
            f"{format_number(rate)} {c.where()} ({name} from {start:g}{seen}); to hand "
            "the LLM fewer look-alikes, try"
        )


# --------------------------------------------------------------------------- building


def build_view(
    header: Header,
    r: RunCalibration,
    runs: Sequence[RunCalibration],
    recommended: RunCalibration,
    two: RunCalibration | None,
    answerability: AnswerabilityResult | None,
) -> ResultView:
    """The view of run ``r``'s config, among ``runs`` (``recommended`` the run
    recommended), with the second search ``two`` and the calibrated
    ``answerability`` (the recommended run's; see ``ResultView``); its next steps name
    the eval set by its file (``name_evalset`` names it otherwise)."""
    w = written_setting(r, two, header.objective, header.constraints, header.calibration_rows.size)
    selection = w.two_stage.selection if w.two_stage is not None else r.selection
    mine = answerability if r is recommended else None
    stage = None if w.two_stage is None else w.two_stage.stage
    stopped = None
    if r is recommended and header.on_worse == "stop" and r.fallback is not None:
        stopped = f"stopped (on_worse='stop'): {r.fallback}"
    source = header.evalset.source
    files = [x.source for x in runs if x.source and x.source != source]
    line = CommandLine(shown_path(source) or "EVALSET", runs=tuple(map(shown_path, files)))
    rows, check = header.calibration_rows, CheckView.of(w.search.comparison)
    return ResultView(
        header=header,
        run=r,
        written=w,
        evalset=None,
        objective=header.objective_text(),
        objective_alone=header.objective_text(constraints=False),
        why=_why(header, r),
        unmet=tuple(_unmet(header, w, mine)),
        shortfalls=tuple(shortfalls(w, header.constraints)),
        stopped=stopped,
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
        retrieval_check=CheckView.of(r.comparison),
        check=check,
        stage_check=None
        if two is None or two.against_retrieval is None
        else CheckView.of(two.against_retrieval),
        stage_top_k_check=None if two is None else CheckView.of(two.comparison),
        stage=None if two is None else StageView.of(two, w.two_stage is not None),
        band=None if check.bands is None else check.bands[1],
        runs=tuple(RunRow.of(x, x is recommended) for x in runs),
        cost=ConstraintCost.of(header, r),
        next_steps=next_steps(header, w, line),
        answerability=mine,
        run_name=r.name,
        score_kind=r.score_kind,
        fallback=r.fallback,
        chosen_is_baseline=r.chosen_is_baseline,
        refitted=r.written_params != r.chosen_params,
        optimal=r.optimal,
        oracle_utility=float(np.mean(r.optimal.utility[rows])) if rows.size else math.nan,
        curves=_curves(header, r),
        chosen_max_k=r.sweep.points[r.chosen].max_k,
        heatmap=_heatmap(header, r),
        passages_kept=float(np.mean(r.kernel.values(r.chosen_kept, [PASSAGES])[0])),
        conflicts=_conflicts(header, r),
        reranker_code=None if stage is None else stage.scores.external,
        family=r.selection,
        guarantee=GuaranteeView.of(r, len(header.qids)),
        recall_ceiling=_ceiling(r),
        grid=r.grid or header.grid,
        n_settings=len(r.sweep.points),
        rules=_rules(header, r),
        examples=None if r.chosen_is_baseline else _examples(header, r),
    )


def _drawn(r: RunCalibration) -> list[int]:
    """The settings with the chosen setting's conflict stage (the plots draw one)."""
    drawn = setting_of(r.sweep.points[r.chosen])
    return [i for i, p in enumerate(r.sweep.points) if setting_of(p) == drawn]


def _curves(header: Header, r: RunCalibration) -> tuple[Curve, ...]:
    metrics = ["utility", "udcg"]
    if header.objective not in metrics and header.objective in r.sweep.metrics:
        metrics.append(header.objective)
    top_k = [i for i in _drawn(r) if is_plain_top_k(r.sweep.points[i])]
    return tuple(
        Curve(
            m,
            tuple(r.sweep.points[i].max_k for i in top_k),
            tuple(r.sweep.mean(i, m) for i in top_k),
            r.sweep.mean(r.chosen, m),
        )
        for m in metrics
    )


def _heatmap(header: Header, r: RunCalibration) -> Heatmap | None:
    pts = r.sweep.points
    grid = [p for p in pts if p.cut is CutRule.NONE]
    ks = sorted({p.max_k for p in grid})
    ts = sorted({p.relative_threshold for p in grid})
    if len(ts) < 2:
        return None
    z = np.full((len(ks), len(ts)), np.nan)
    fails = np.zeros(z.shape, dtype=bool)
    obj = r.sweep.column(header.objective)
    violation = np.zeros(len(pts))
    for con in header.constraints:
        violation += con.violation(r.sweep.column(con.metric))
    where: dict[tuple[int, float], tuple[int, int]] = {}
    for i in _drawn(r):
        p = pts[i]
        if p.cut is not CutRule.NONE or p.min_score is not None:
            continue
        a, b = ks.index(p.max_k), ts.index(p.relative_threshold)
        z[a, b] = obj[i]
        fails[a, b] = violation[i] > 0
        where[(p.max_k, p.relative_threshold)] = (a, b)
    c = pts[r.chosen]
    chosen = where.get((c.max_k, c.relative_threshold)) if c.cut is CutRule.NONE else None
    return Heatmap(tuple(ks), tuple(ts), z, fails, chosen)


def _ceiling(r: RunCalibration) -> float | None:
    """The recall of keeping every candidate on the queries of ``r``'s check (``None``:
    the check has no queries, or not both recalls)."""
    c = r.comparison
    if EVIDENCE not in c.metrics or "recall" not in c.metrics or not c.n_queries:
        return None
    every = compute(r.arrays, "recall")[c.rows]
    return float(np.nanmean(every)) if not np.isnan(every).all() else math.nan


def _rules(header: Header, r: RunCalibration) -> tuple[RuleRow, ...]:
    """The best setting of each label-free cut rule of ``r`` on the calibration queries."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(r.sweep.points):
        if p.cut is CutRule.NONE:
            continue
        extra = f"+{p.gap_buffer}" if p.cut is CutRule.GAP else f"@{p.autocut_jumps}"
        groups.setdefault(p.cut.value + extra, []).append(i)
    return _best_of(header, r.sweep, groups, (header.objective, EVIDENCE, "recall"))


def _best_of(
    header: Header, sweep: SweepResult, groups: Mapping[str, list[int]], metrics: Sequence[str]
) -> tuple[RuleRow, ...]:
    """The best setting of each group of ``sweep``'s points, with its means of ``metrics``."""
    rows = []
    for key, members in groups.items():
        i, ok = choose(sweep, header.objective, header.constraints, among=members)
        means = tuple(sweep.mean(i, m) for m in metrics)
        rows.append(RuleRow(key, describe_point(sweep.points[i]), ok, means))
    return tuple(rows)


def _conflicts(header: Header, r: RunCalibration) -> ConflictView | None:
    """The conflict settings swept for ``r``, the best of each, and detection against
    the labels at each similarity swept (``None`` when the stage was not swept)."""
    kernel = r.kernel
    if not isinstance(kernel, StageKernels):
        return None
    obj, sweep = header.objective, r.sweep
    groups = {
        describe_conflicts(c): [i for i, p in enumerate(sweep.points) if setting_of(p) == c]
        for c in kernel.settings
    }
    groups = {name: among for name, among in groups.items() if among}
    best = _best_of(header, sweep, groups, (obj, "distractor_rate", PASSAGES))
    w = r.written_params
    max_k = min(w.max_k, max(kernel.width, 1))
    levels = similarity_levels(kernel.settings)
    splits = [("calibration", header.calibration_rows)]
    if header.heldout_rows.size:
        splits.append(("held-out", header.heldout_rows))
    # near-copy at each level swept, then each other detector at the thresholds swept
    near = [(s, ConflictDetector.NEAR_COPY, DEFAULT_ANSWER_SIMILARITY) for s in levels]
    others = [s[1:] for s in kernel.settings if s[2] is not ConflictDetector.NEAR_COPY]
    found = [*near, *dict.fromkeys(others)]
    detection = tuple(
        (
            conflict_threshold(*at),
            name,
            conflict_detection(kernel, rows, at[0], max_k, at[1], at[2]),
        )
        for at in found
        for name, rows in splits
    )
    return ConflictView(
        swept=tuple(describe_conflicts(c) for c in kernel.settings),
        written=describe_conflicts(setting_of(w)),
        best=best,
        max_k=max_k,
        similarity=None if w.conflicts is ConflictMode.OFF else describe_threshold(setting_of(w)),
        detection=detection,
    )


def _examples(
    header: Header, r: RunCalibration, n: int = 5
) -> tuple[tuple[Example, ...], tuple[Example, ...]] | None:
    """The ``n`` queries of ``r``'s check that gained most and the ``n`` that lost most
    on the objective (``None`` without queries or the objective)."""
    c, obj = r.comparison, header.objective
    if obj not in c.metrics or c.n_queries == 0:
        return None
    j = c.metrics.index(obj)
    delta = c.guarded_values[j] - c.baseline_values[j]
    if lower_is_better(obj):
        delta = -delta
    delta = np.where(np.isnan(delta), 0.0, delta)
    order = np.argsort(-delta, kind="stable")
    gained = [i for i in order[:n].tolist() if delta[i] > 0]
    lost = [i for i in order[::-1][:n].tolist() if delta[i] < 0]
    arrays = r.arrays

    def example(i: int) -> Example:
        row = int(c.rows[i])
        qid = arrays.qids[row]
        ids, u = arrays.doc_ids(row), arrays.utility[row]
        # the passages each setting keeps (the stages after the cut may skip some)
        base = r.kernel.context(row, int(r.baseline_kept[row]))
        guard = r.kernel.context(row, int(r.chosen_kept[row]))
        distractors = tuple(
            (
                ids[pos],
                "known distractor" if arrays.distractor[row, pos] else "hard negative",
                pos in guard,
            )
            for pos in sorted({*base, *guard})
            if u[pos] < 0
        )
        return Example(
            qid,
            header.evalset.queries[qid].text or "",
            float(c.guarded_values[j][i] - c.baseline_values[j][i]),
            tuple((ids[pos], float(u[pos])) for pos in base),
            tuple((ids[pos], float(u[pos])) for pos in guard),
            distractors,
        )

    return tuple(map(example, gained)), tuple(map(example, lost))


def name_evalset(view: ResultView, evalset: str | CommandLine) -> ResultView:
    """``view`` with its next steps repeating ``evalset``: the eval set as they name it,
    or the whole command line they repeat."""
    line = CommandLine(evalset) if isinstance(evalset, str) else evalset
    return replace(
        view, evalset=line.evalset, next_steps=next_steps(view.header, view.written, line)
    )


def _unmet(
    header: Header, w: WrittenSetting, answerability: AnswerabilityResult | None
) -> list[str]:
    out: list[str] = []
    if w.guarantee is not None and not w.guarantee.met:
        line = w.guarantee.statement(w.names)
        if header.heldout_rows.size:
            line += (
                f"; holdout=0 (--holdout 0) certifies on all {len(header.qids)} queries, "
                "with none held out to check it"
            )
        out.append(line)
    a = answerability
    if a is not None and not a.met:
        out.append(a.shortfall())
    caps = "the max_k given" if header.caps_fixed else "the caps grown to the candidates"
    n_all, n_cal = len(header.qids), header.calibration_rows.size
    for s in shortfalls(w, header.constraints):
        line = (
            f"no setting meets {s.constraint} on all {n_all} queries: the best reachable "
            f"{s.constraint.metric} is {format_number(s.best_value)} ({s.best_setting}, caps up to "
            f"{s.max_k}, {caps}; the written setting {w.setting} reaches "
            f"{format_number(s.written_value)})"
        )
        chosen = w.search.sweep.mean(w.search.chosen, s.constraint.metric)
        if n_cal < n_all and s.constraint.violation(np.array([chosen]))[0] == 0:
            missed = s.constraint.violation(np.array([s.written_value]))[0]
            line += (
                f"; it was met where chosen: {w.tested} reaches {format_number(chosen)} on the "
                f"{n_cal} calibration queries, and the written setting misses it on all "
                f"{n_all} by {format_number(missed)}"
            )
        out.append(line)
    return out


def _why(header: Header, r: RunCalibration) -> str:
    obj = header.objective
    chosen = r.sweep.mean(r.chosen, obj)
    base = r.baseline_means[obj]
    n_cal = header.calibration_rows.size
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
        cons = " and ".join(str(c) for c in header.constraints)
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
        text += f"; the best plain top-k ({describe_point(r.baseline_params)}) reaches {base:.3f}"
    if r.fallback is not None:
        text += f"; {r.fallback}, so plain top-k is written"
    if r.written_params != r.chosen_params or r.fallback is not None:
        text += f"; refitted on all {len(header.qids)} queries: {describe_point(r.written_params)}"
    return text
