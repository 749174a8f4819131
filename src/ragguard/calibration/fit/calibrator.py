"""``calibrate`` / ``Calibrator``: from an eval set and its runs to a recommended guard config
(split, search per run, second stage, answerability, the run recommended); the steps are those
of docs/guides/calibrate.md and DESIGN.md."""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.data.utility import UtilityRules, as_profile
from ragguard.calibration.fit.answerability import (
    RERANK_SCALE,
    RETRIEVAL_SCALE,
    AnswerabilityResult,
    check_max_false_abstain,
    evidence_tops,
    fit_answerability,
)
from ragguard.calibration.fit.conflict_sweep import stage_sweep
from ragguard.calibration.fit.domains import (
    MIN_DOMAIN_QUERIES,
    DomainCalibration,
    DomainResults,
    differing,
    domain_comparison,
    not_clearly_better,
    pooled,
)
from ragguard.calibration.fit.header import SMALL_SET, Header
from ragguard.calibration.fit.noise_floor import check_noise_floor, fit_noise_floor
from ragguard.calibration.fit.options import (
    Answerability,
    Check,
    Domains,
    Guarantee,
    NoiseFloor,
    RerankSearch,
    Search,
    Split,
    Stages,
)
from ragguard.calibration.fit.plan import FitPlan
from ragguard.calibration.fit.rerank_scores import score_candidates
from ragguard.calibration.fit.result import CalibrationResult, data_fingerprint
from ragguard.calibration.fit.risk import EVIDENCE
from ragguard.calibration.fit.search import Reference, RunCalibration, search
from ragguard.calibration.fit.second_stage import rerank_space
from ragguard.calibration.fit.space import retrieval_space
from ragguard.calibration.fit.statistics import Bootstrap, split_queries
from ragguard.calibration.fit.sweep import (
    PASSAGES,
    Constraint,
    I,
    SweepGrid,
    choose,
    describe_point,
    is_plain_top_k,
    lower_is_better,
)
from ragguard.calibration.metrics import parse_metric
from ragguard.config import ENV_PREFIX, OTHER_VARIABLES
from ragguard.errors import ArgumentTypeError, ConfigError, EvalSetError
from ragguard.profiles import Profile

logger = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------- files


def _file_hashes(evalset: EvalSet, runs: Sequence[str]) -> dict[str, str]:
    paths = [evalset.source] + [evalset.runs[n].source for n in runs]
    out: dict[str, str] = {}
    for p in paths:
        if p and Path(p).is_file() and p not in out:
            with Path(p).open("rb") as f:  # in blocks: a run file can be gigabytes
                out[p] = hashlib.file_digest(f, "sha256").hexdigest()
    return out


# --------------------------------------------------------------------------- calibrate


@dataclass(frozen=True, kw_only=True)
class Calibrator:
    """Calibration as an estimator: the settings of a calibration, grouped into option
    objects and checked when built (a bad value raises
    [`ConfigError`][ragguard.ConfigError] before any data is read), and
    [`fit`][ragguard.calibration.Calibrator.fit], which runs it on an eval set (the steps of
    docs/guides/calibrate.md).

    ::

        from ragguard.calibration import Calibrator, Check, Split

        calibrator = Calibrator(
            objective="udcg",
            constraints=["evidence_coverage>=0.9"],
            split=Split(holdout=0.3, seed=0),
            check=Check(n_bootstrap=2000),
        )
        result = calibrator.fit(evalset)
        result.save_config("ragguard.toml")

    [`calibrate`][ragguard.calibration.calibrate] takes the same fields as keyword arguments.

    Attributes:
        objective: the metric to optimise (a registry metric string or ``passages``);
            distractor rate and harm are minimised, everything else maximised.
        constraints: ``Constraint`` objects or strings like ``"evidence_coverage>=0.9"``
            (the share of answerable queries whose context holds the relevant passages
            they need, ``evidence_coverage(needs=2)`` for two; ``ragguard calibrate``'s
            default) or ``"evidence_recall>=0.8"`` (recall among the candidates); none
            by default.
        profile: tolerance profile for utilities (default ``support``); its name goes
            into the config.
        rules: which grades are relevant / partially relevant (default: the profile's).
        runs: the runs to calibrate (default: all).
        search: the retrieval settings swept ([`Search`][ragguard.calibration.Search]).
        split: calibration / held-out queries and folds
            ([`Split`][ragguard.calibration.Split]).
        check: the held-out check ([`Check`][ragguard.calibration.Check]).
        guarantee: a recall guarantee instead of the objective's optimum
            ([`Guarantee`][ragguard.calibration.Guarantee]).
        stages: the stages after the cut swept with every setting
            ([`Stages`][ragguard.calibration.Stages]).
        rerank: a second stage calibrated with the recommended run
            ([`RerankSearch`][ragguard.calibration.RerankSearch]).
        answerability: calibrate ``min_evidence`` for the written setting
            ([`Answerability`][ragguard.calibration.Answerability]).
        domains: calibrate each domain too ([`Domains`][ragguard.calibration.Domains]).
        noise_floor: write ``min_score`` from unrelated passages, no labels read
            ([`NoiseFloor`][ragguard.calibration.NoiseFloor]).
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
    domains: Domains | None = None
    noise_floor: NoiseFloor | None = None

    def __post_init__(self) -> None:
        options: tuple[tuple[str, object, type, bool], ...] = (
            ("search", self.search, Search, False),
            ("split", self.split, Split, False),
            ("check", self.check, Check, False),
            ("guarantee", self.guarantee, Guarantee, True),
            ("stages", self.stages, Stages, False),
            ("rerank", self.rerank, RerankSearch, True),
            ("answerability", self.answerability, Answerability, True),
            ("domains", self.domains, Domains, True),
            ("noise_floor", self.noise_floor, NoiseFloor, True),
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
        if self.domains is not None and self.rerank is not None:
            raise ConfigError(
                "--by (domains=) with a second stage (--rerank / --rerank-run, rerank=) is "
                "not supported yet; calibrate the second stage without --by"
            )

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
        """Sweep every run, choose a setting per run, check it on held-out queries; with
        ``domains``, search each domain too (``CalibrationResult.domains``).

        Args:
            evalset: labelled queries and their runs.
            corpus: JSONL corpus files with passage texts, for a reranker and the stages
                after the cut; added to ``evalset.texts``
                ([`EvalSet.with_texts`][ragguard.calibration.EvalSet.with_texts]), each read once.
            passages: more passage texts, ``{passage id: text}``.
            on_sweep: progress callback ``(sweeps done, sweeps)``: one sweep per run,
                and one for the second stage.

        The config starts from the defaults and what was measured: ``RAGGUARD_*``
        variables, which configure a runtime guard, are not read (a warning is logged
        naming them).

        Raises:
            ArgumentTypeError: ``evalset`` is not an
                [`EvalSet`][ragguard.calibration.EvalSet] (a path: load it first).
            EvalSetError: no runs, an unknown run, or nothing to calibrate on: no
                queries left (an empty split, a run with no candidates for any labelled
                query) or a run none of whose document ids is labelled for its query
                (the ids of the run and of the labels do not match); with
                ``answerability``, no unanswerable query among the calibration queries,
                or no query with a relevant passage; with ``domains``, no query has its
                ``by`` field, or a value cannot name a domain.
            ConfigError: ``answerability`` with a ``guarantee``; a token counter that
                cannot be built; ``domains.profiles`` names a domain no query has.
        """
        checked = self.domains is not None and isinstance(evalset, EvalSet)
        groups = self._groups(evalset) if checked else None  # (else _fit_rows raises why)
        if isinstance(evalset, EvalSet):  # read once, when needed
            evalset = evalset.with_texts(corpus=corpus, passages=passages)
        found = self._fit_rows(evalset, None, on_sweep)
        if groups is None:
            return found
        return replace(found, domains=self._fit_domains(evalset, groups, found))

    def _groups(self, evalset: EvalSet) -> dict[str, tuple[str, ...]]:
        """The domains of ``evalset`` (``Domains.by``), each profile named for one checked."""
        assert self.domains is not None
        groups = evalset.domains(self.domains.by)
        unknown = sorted(set(self.domains.profiles) - set(groups))
        if unknown:
            raise ConfigError(
                f"--profile names domain {unknown[0]!r}, which no query has (--by "
                f"{self.domains.by}); domains: {', '.join(groups)}"
            )
        return groups

    def _fit_domains(
        self, evalset: EvalSet, groups: Mapping[str, Sequence[str]], found: CalibrationResult
    ) -> DomainResults:
        """One search per domain on its queries of the global split (``Domains``), each
        against the global choice on its held-out queries; a domain falls back to the global
        config when it has fewer than ``MIN_DOMAIN_QUERIES`` calibration queries, none held
        out (when the split holds some out), a result it may not write, or a setting a
        domain table cannot state."""
        assert self.domains is not None
        h = found.header
        row_of = {q: i for i, q in enumerate(h.qids)}
        in_calibration = np.zeros(len(h.qids), dtype=bool)
        in_calibration[h.calibration_rows] = True
        how = Bootstrap(
            split="held-out",
            n_bootstrap=self.check.n_bootstrap,
            seed=self.split.seed,
            level=self.check.level,
        )
        base = found.config()
        out: list[DomainCalibration] = []
        for name, qids in groups.items():
            cal = in_calibration[[row_of[q] for q in qids]]
            local_cal = np.flatnonzero(cal).astype(np.intp)
            local_held = np.flatnonzero(~cal).astype(np.intp)
            profile = as_profile(self.domains.profiles.get(name, h.profile))
            d = DomainCalibration(name, profile.name, len(qids), local_cal.size, local_held.size)
            if not local_cal.size:
                out.append(
                    replace(
                        d,
                        fallback=f"all {len(qids)} of its queries are held out: nothing to "
                        "choose on",
                    )
                )
                continue
            if local_cal.size < MIN_DOMAIN_QUERIES:
                out.append(
                    replace(
                        d,
                        fallback=(
                            f"{local_cal.size} calibration queries, fewer than "
                            f"{MIN_DOMAIN_QUERIES} (two cross-validation folds of two): too "
                            "few to choose reliably"
                        ),
                    )
                )
                continue
            # the run the global config recommends: the retriever the guard will run behind
            own = replace(self, profile=profile, domains=None, runs=(found.recommended.name,))
            sub = evalset.subset(qids)
            try:
                res = own._fit_rows(sub, (local_cal, local_held), None)
            except EvalSetError as exc:
                out.append(replace(d, fallback=f"cannot be calibrated alone: {exc}"))
                continue
            cfg = res.config()
            d = replace(d, config=cfg, setting=res.written_setting().setting)
            compared = domain_comparison(
                res.recommended, res.runs, found.recommended, local_held, how
            )
            if compared is not None:
                d = replace(d, against_global=compared[0], values=compared[1])
            why = res.stopped or "; ".join(res.unmet()) or None
            if why is None and h.heldout_rows.size and not local_held.size:
                why = "none of its queries is held out: its choice cannot be checked"
            if why is None and self.guarantee is None:  # (a guarantee is certified per domain)
                why = not_clearly_better(
                    res.recommended, res.runs, found.recommended, local_cal, how, self.objective
                )
            if why is None:
                try:
                    differing(base, cfg, name)
                except ConfigError as exc:
                    why = str(exc)
            out.append(replace(d, fallback=why))
        domains = tuple(out)
        return DomainResults(self.domains.by, self.objective, domains, pooled(domains, how))

    def _fit_rows(
        self,
        evalset: EvalSet,
        rows: tuple[I, I] | None,
        on_sweep: Callable[[int, int], None] | None,
    ) -> CalibrationResult:
        """``fit`` on the calibration and held-out rows ``rows`` of ``evalset``'s queries
        (``None``: ``Split``'s)."""
        names = self._run_names(evalset)
        objective, split, check = self.objective, self.split, self.check
        cons = [c for c in self.constraints if isinstance(c, Constraint)]
        grid = self.grid
        qids = evalset.qids
        calib_rows, held_rows = rows or split_queries(len(qids), split.holdout, split.seed)
        if self.answerability is not None:
            check_max_false_abstain(evalset, calib_rows, guarantee=self.guarantee is not None)
        if self.noise_floor is not None:
            if self.rerank is not None:
                raise ConfigError(
                    "--noise-floor sets min_score on retrieval scores and cannot be combined "
                    "with a second stage yet; calibrate without --rerank"
                )
            check_noise_floor(evalset, names)
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
                conflict_detectors=st.conflict_detectors,
                conflict_answer_similarities=st.conflict_answer_similarities,
            ),
        )
        n_sweeps = len(names) + (self.rerank is not None)
        progress = on_sweep or (lambda done, total: None)
        progress(0, n_sweeps)
        results: list[RunCalibration] = []
        for name in names:
            results.append(
                # a domain's search (rows given) does not warn: its table shows its size
                _search_run(
                    evalset, name, plan, grid, self.search.grows, first=not results and not rows
                )
            )
            progress(len(results), n_sweeps)

        sign = -1.0 if lower_is_better(objective) else 1.0

        def rank_key(r: RunCalibration) -> tuple[bool, bool, float]:
            value = r.full.mean(r.written, objective)
            ok = r.guarantee.met if r.guarantee is not None else True
            return (ok, r.written_feasible, sign * value if not math.isnan(value) else -math.inf)

        best = max(results, key=rank_key)  # first of equals: the eval set's order
        two_stage = None
        if self.rerank is not None:
            two_stage = _two_stage(evalset, best, self.rerank, plan, best.grid or grid)
            progress(n_sweeps, n_sweeps)
        stated = self.guarantee or self.answerability  # whose confidence the result states
        calibrated = CalibrationResult(
            header=Header(
                evalset=evalset,
                profile=plan.profile,
                objective=objective,
                constraints=tuple(cons),
                runs=tuple(r.name for r in results),
                qids=qids,
                calibration_rows=calib_rows,
                heldout_rows=held_rows,
                holdout=float(split.holdout),
                seed=split.seed,
                created=datetime.now(UTC),
                data_sha256=data_fingerprint(evalset, names),
                target=plan.target,
                confidence=0.95 if stated is None else stated.confidence,
                on_worse=check.on_worse,
                caps_fixed=not self.search.grows,
                grid=grid,
            ),
            runs=tuple(results),
            recommended=best,
            files=_file_hashes(evalset, names),
            rerank=two_stage,
            folds=split.folds,
            stage_settings={} if plan.stages is None else plan.stages.base.config_settings(),
        )
        a, nf = self.answerability, self.noise_floor
        if a is not None:
            calibrated = replace(
                calibrated, answerability=calibrate_answerability(calibrated, plan, a)
            )
        if nf is not None:
            calibrated = replace(
                calibrated,
                noise_floor=fit_noise_floor(
                    evalset,
                    best.arrays,
                    calib_rows,
                    nf,
                    run=best.name,
                    written_min_score=best.written_params.min_score,
                    seed=split.seed,
                ),
            )
        return calibrated

    def _run_names(self, evalset: EvalSet) -> list[str]:
        """The runs to calibrate, checked against ``evalset`` (see ``fit``'s Raises)."""
        if not isinstance(evalset, EvalSet):
            given = (
                f"the path {os.fspath(evalset)!r}"
                if isinstance(evalset, str | os.PathLike)
                else type(evalset).__name__
            )
            raise ArgumentTypeError(
                f"fit takes an EvalSet, got {given}: load it first, "
                "fit(load_evalset(path)) or fit(load_inputs(path)) for a folder with its runs"
            )
        ignored = sorted(
            k
            for k in os.environ
            if k.upper().startswith(ENV_PREFIX) and k.upper() not in OTHER_VARIABLES
        )
        if ignored:
            logger.warning(
                "%s not read: calibration starts from the defaults and the eval set, and "
                "the config holds what it measured (%s* variables configure a runtime guard)",
                ", ".join(ignored),
                ENV_PREFIX,
            )
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
        return names


def _search_run(
    evalset: EvalSet, name: str, plan: FitPlan, grid: SweepGrid, may_grow: bool, *, first: bool
) -> RunCalibration:
    """Sweep run ``name``'s retrieval settings, take its best plain top-k as the baseline, and
    search; ``first`` warns about a small eval set."""
    objective, cons, stages = plan.objective, plan.constraints, plan.stages
    baseline_k = plan.check.baseline_k
    space = retrieval_space(evalset, name, plan, grid, may_grow=may_grow)
    swept, points = space.swept, space.points
    # the baseline: plain top-k (under the first conflict setting swept)
    top_idx = [
        i
        for i, p in enumerate(points)
        if is_plain_top_k(p) and (stages is None or stages.is_base(p))
    ]
    if baseline_k is None:
        baseline, _ = choose(swept, objective, cons, among=top_idx)
    else:
        baseline = next(i for i in top_idx if points[i].max_k == baseline_k)

    def plain(i: int) -> Reference:
        kept = swept.kept[i].astype(np.intp)
        return Reference(f"plain {describe_point(points[i])}", space.kernels[0], kept, point=i)

    free, _ = choose(swept, objective, (), among=top_idx)  # the constraints' cost
    found = search(
        space,
        plan,
        plain(baseline),
        fallback_family=top_idx if baseline_k is None else [baseline],
        unconstrained=plain(free) if cons and free != baseline else None,
    )
    n_queries = len(evalset.qids)
    comparison = found.comparison
    if n_queries < SMALL_SET and objective in comparison.metrics and first:
        d = comparison.guarded[objective]
        logger.warning(
            "only %d labelled queries (%d or more advised): the %s interval of mean "
            "%s is %.3f wide, so small gains cannot be told from noise",
            n_queries,
            SMALL_SET,
            comparison.split,
            objective,
            d.high - d.low,
        )
    logger.info(
        "run %r: chose %s (%s %.4f), wrote %s",
        name,
        describe_point(found.chosen_params),
        objective,
        swept.mean(found.chosen, objective),
        describe_point(found.written_params),
    )
    return found


def calibrate(
    evalset: EvalSet,
    *,
    corpus: Sequence[str | os.PathLike[str]] = (),
    passages: Mapping[str, str] | None = None,
    on_sweep: Callable[[int, int], None] | None = None,
    **options: Any,
) -> CalibrationResult:
    """``Calibrator(**options).fit(evalset, ...)``: sweep every run, choose a setting per
    run, check it on held-out queries.

    ::

        result = calibrate(
            evalset,
            constraints=["evidence_coverage>=0.9"],
            split=Split(holdout=0.3, seed=0),
            stages=Stages(conflicts=["off", "drop"]),
        )

    Args:
        evalset: labelled queries and their runs.
        corpus: JSONL corpus files with passage texts
            ([`Calibrator.fit`][ragguard.calibration.Calibrator.fit]).
        passages: more passage texts, ``{passage id: text}``.
        on_sweep: progress callback ``(sweeps done, sweeps)``.
        **options: the settings, as the fields of
            [`Calibrator`][ragguard.calibration.Calibrator] (``objective``, ``constraints``,
            ``profile``, ``rules``, ``runs`` and the option objects ``search``, ``split``,
            ``check``, ``guarantee``, ``stages``, ``rerank``, ``answerability``).

    Raises:
        ConfigError: a setting out of range or of the wrong type (raised when its option
            object is built), an unknown metric or profile, a malformed constraint.
        EvalSetError: as [`Calibrator.fit`][ragguard.calibration.Calibrator.fit].
    """
    return Calibrator(**options).fit(evalset, corpus=corpus, passages=passages, on_sweep=on_sweep)


def calibrate_answerability(
    result: CalibrationResult, plan: FitPlan, option: Answerability
) -> AnswerabilityResult:
    """Calibrate ``min_evidence`` for the setting ``result``'s config holds
    (``ragguard.calibration.fit.answerability.fit_answerability`` on the scores the floor reads
    under that setting): certified on the calibration queries of ``plan``, checked on its held-out
    ones, with the share and confidence of ``option``."""
    w = result.written_setting()
    r = w.run
    arrays = r.arrays
    two = w.two_stage
    if two is None:
        if arrays.score_kind is None:
            raise ConfigError(
                f"--max-false-abstain cannot calibrate min_evidence for run {r.name!r}: it "
                "has no scores, and min_evidence reads the best candidate's score; pass "
                "--score-kind or a run with scores"
            )
        top, scale, kernel = evidence_tops(arrays), RETRIEVAL_SCALE, r.kernel
    else:
        n, stage = two.space.top_n_of(w.index), two.stage
        assert n is not None and stage is not None
        kernel = two.space.kernel_of(w.index)
        top = evidence_tops(kernel.arrays)
        failed = np.isin(np.asarray(arrays.qids, dtype=object), list(stage.failed.get(n, ())))
        top[failed] = np.inf  # a failed call: the guard does not apply the floor
        scale = RERANK_SCALE
    return fit_answerability(
        top,
        arrays,
        kernel,
        w.search.full.kept[w.index],
        scale=scale,
        setting=w.setting,
        metrics=w.search.comparison.metrics,
        plan=plan,
        option=option,
    )


def _two_stage(
    evalset: EvalSet, best: RunCalibration, rerank: RerankSearch, plan: FitPlan, grid: SweepGrid
) -> RunCalibration:
    """The second search: score ``best``'s candidates (unless given), build ``rerank_space`` and
    search it against the run's retrieval-only choice and its best plain top-k."""
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
            evalset,
            rerank.reranker,
            pairs,
            score_kind=rerank.score_kind,
            cache_dir=rerank.cache_dir,
            on_query=rerank.on_query,
        )
    kernel = best.kernel
    space = rerank_space(
        evalset, best.name, scores, plan=plan, retrieval_kernel=kernel, caps=grid, option=rerank
    )
    found = search(
        space,
        plan,
        Reference("plain top-k", kernel, best.baseline_kept),
        retrieval=Reference("the retrieval-only choice", kernel, best.chosen_kept),
    )
    logger.info(
        "two-stage: chose %s (%s %.4f)",
        found.describe(found.written),
        plan.objective,
        found.sweep.mean(found.chosen, plan.objective),
    )
    return found
