"""The promise of :mod:`ragguard.errors`: every failure a user can cause raises a
:class:`~ragguard.errors.RagguardError` subclass, never a bare ``ValueError`` /
``TypeError`` or pydantic's ``ValidationError``.

Each public constructor and function of ``ragguard.__all__``,
``ragguard.calibration.__all__`` and the ``__all__`` of the calibration modules whose
names left the package's face (metrics, the sweep, options, utilities) that takes
options is probed with bad values (a wrong
type, a value out of range, NaN, an unknown name); each probe names the error class it
expects and a word its one-line message must hold. Every option class of those lists
(a pydantic model, or a dataclass that validates in ``__post_init__``) must have a probe,
so a new one cannot join the public face unchecked.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import ragguard
import ragguard.calibration as cal
import ragguard.calibration.data.utility as cal_utility
import ragguard.calibration.fit.options as cal_options
import ragguard.calibration.fit.sweep as cal_sweep
import ragguard.calibration.metrics as cal_metrics
from ragguard import (
    AnnotationError,
    ArgumentTypeError,
    CandidateError,
    ConfigError,
    EvalSetError,
    RagguardError,
    RerankModelError,
    RetrieverError,
)
from ragguard.calibration import RerankGrid
from ragguard.calibration.annotate import Outputs, Relevance
from ragguard.calibration.data.arrays import build_arrays
from ragguard.calibration.data.inputs import retrieve_run
from ragguard.calibration.data.utility import candidate_utilities
from ragguard.calibration.fit.probability import (
    brier_score,
    expected_calibration_error,
    fit_probability_map,
)
from ragguard.calibration.fit.rerank_scores import RerankScores
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.calibration.fit.statistics import split_queries
from ragguard.calibration.fit.sweep import optimal_k, sweep
from ragguard.calibration.metrics import (
    SafetyBands,
    UDCGTheta,
    compute,
    fit_udcg_theta,
    parse_metric,
    safety_band,
    udcg_theta,
)
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
from ragguard.calibration.train.reranker import Negatives, RerankerTrainer, Training
from ragguard.profiles import ProfileSpec, resolve_profile
from ragguard.scores import ScoreKind


def _evalset() -> cal.EvalSet:
    """Twelve queries of three candidates, the first relevant: enough for calibrate()."""
    qrels = {f"q{i}": {f"q{i}-d0": 1, f"q{i}-d1": 0} for i in range(12)}
    run = {f"q{i}": {f"q{i}-d{j}": 1.0 - 0.2 * j for j in range(3)} for i in range(12)}
    return cal.EvalSet.from_dicts(qrels, {"r": run})


NOTES = Path(__file__).resolve().parents[1] / "examples" / "notes"
ES = _evalset()
ARRAYS = A = ES.arrays("r")
SUPPORT = ragguard.BUILTIN_PROFILES["support"].model_dump()


def _oracle(query: str, texts: list[str]) -> list[float]:
    return [0.0 for _ in texts]


_oracle.score_kind = "logit"


@dataclass(frozen=True)
class Probe:
    """``call()`` must raise ``error`` (a RagguardError subclass) whose message holds
    ``says``; ``target`` is the public object probed."""

    id: str
    target: object
    call: Callable[[], object]
    error: type[RagguardError]
    says: str


def _calibrate(**options: Any) -> object:
    return cal.calibrate(ES, **{"check": cal.Check(n_bootstrap=20), **options})


NAN = math.nan

PROBES: list[Probe] = [
    # ----------------------------------------------------------------- ragguard
    Probe("Candidate id int", ragguard.Candidate,
          lambda: ragguard.Candidate(3, "t"), CandidateError, "id"),
    Probe("Candidate score str", ragguard.Candidate,
          lambda: ragguard.Candidate("a", "t", "x"), CandidateError, "score"),
    Probe("ContextGuard config int", ragguard.ContextGuard,
          lambda: ragguard.ContextGuard(3), ConfigError, "GuardConfig"),
    Probe("ContextGuard max_k 0", ragguard.ContextGuard,
          lambda: ragguard.ContextGuard(max_k=0), ConfigError, "max_k"),
    Probe("ContextGuard unknown setting", ragguard.ContextGuard,
          lambda: ragguard.ContextGuard(max_kk=3), ConfigError, "max_kk"),
    Probe("ContextGuard reranker int", ragguard.ContextGuard,
          lambda: ragguard.ContextGuard(reranker=3), ConfigError, "reranker"),
    Probe("CrossEncoderReranker model int", ragguard.CrossEncoderReranker,
          lambda: ragguard.CrossEncoderReranker(3), ConfigError, "model"),
    Probe("CrossEncoderReranker batch_size 0", ragguard.CrossEncoderReranker,
          lambda: ragguard.CrossEncoderReranker(batch_size=0), ConfigError, "batch_size"),
    Probe("CrossEncoderReranker score_kind", ragguard.CrossEncoderReranker,
          lambda: ragguard.CrossEncoderReranker(score_kind="cosine"), ConfigError, "cosine"),
    Probe("GuardConfig max_k 0", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(max_k=0), ConfigError, "max_k"),
    Probe("GuardConfig max_k str", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(max_k="a"), ConfigError, "max_k"),
    Probe("GuardConfig threshold NaN", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(relative_threshold=NAN), ConfigError, "relative_threshold"),
    Probe("GuardConfig profile", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(profile="nope"), ConfigError, "nope"),
    Probe("GuardConfig unknown key", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(max_kk=3), ConfigError, "max_kk"),
    Probe("GuardConfig rerank.top_n", ragguard.GuardConfig,
          lambda: ragguard.GuardConfig(rerank={"top_n": 0}), ConfigError, "rerank.top_n"),
    Probe("ScoreReference quantiles", ragguard.ScoreReference,
          lambda: ragguard.ScoreReference(top={"n": 3, "quantiles": [0.5, 0.1]},
                                          kept={"n": 3, "quantiles": [1.0] * 21}),
          ConfigError, "top.quantiles"),
    Probe("ScoreReference count", ragguard.ScoreReference,
          lambda: ragguard.ScoreReference(top={"n": 0, "quantiles": [0.5] * 21},
                                          kept={"n": 3, "quantiles": [1.0] * 21}),
          ConfigError, "top.n"),
    Probe("ProbabilityMap method", ragguard.ProbabilityMap,
          lambda: ragguard.ProbabilityMap(method="nope"), ConfigError, "method"),
    Probe("ProbabilityMap slope", ragguard.ProbabilityMap,
          lambda: ragguard.ProbabilityMap(method="platt", a=-1.0, b=0.0), ConfigError, "slope"),
    Probe("ProbabilityMap NaN", ragguard.ProbabilityMap,
          lambda: ragguard.ProbabilityMap(method="platt", a=NAN, b=0.0), ConfigError, "a=nan"),
    Probe("ProbabilityMap isotonic order", ragguard.ProbabilityMap,
          lambda: ragguard.ProbabilityMap(method="isotonic", x=[1.0, 0.0], y=[0.1, 0.2]),
          ConfigError, "increasing"),
    Probe("ProbabilityMap unknown key", ragguard.ProbabilityMap,
          lambda: ragguard.ProbabilityMap(method="platt", a=1.0, b=0.0, c=1.0), ConfigError, "'c'"),
    Probe("Profile max_k 0", ragguard.Profile,
          lambda: ragguard.Profile(**{**SUPPORT, "max_k": 0}),
          ConfigError, "max_k"),
    Probe("Profile missing", ragguard.Profile,
          lambda: ragguard.Profile(name="x"), ConfigError, "missing"),
    Probe("ProfileSpec ratio", ProfileSpec,
          lambda: ProfileSpec(distractor_score_ratio=2.0), ConfigError, "distractor_score_ratio"),
    Probe("resolve_profile unknown", resolve_profile,
          lambda: resolve_profile("nope"), ConfigError, "nope"),
    Probe("resolve_profile grades", resolve_profile,
          lambda: resolve_profile("x", {"x": ProfileSpec(partial_grade=1)}),
          ConfigError, "partial_grade"),
    Probe("RerankConfig top_n 0", ragguard.RerankConfig,
          lambda: ragguard.RerankConfig(top_n=0), ConfigError, "top_n"),
    Probe("RerankConfig on_failure", ragguard.RerankConfig,
          lambda: ragguard.RerankConfig(on_failure="nope"), ConfigError, "on_failure"),
    Probe("RerankConfig bool number", ragguard.RerankConfig,
          lambda: ragguard.RerankConfig(top_n=True), ConfigError, "top_n"),
    Probe("RerankConfig unknown key", ragguard.RerankConfig,
          lambda: ragguard.RerankConfig(topn=3), ConfigError, "topn"),
    Probe("UtilityCut gain NaN", ragguard.UtilityCut,
          lambda: ragguard.UtilityCut(NAN, 1.0), ConfigError, "gain"),
    Probe("UtilityCut gain 0", ragguard.UtilityCut,
          lambda: ragguard.UtilityCut(0.0, 1.0), ConfigError, "gain"),
    Probe("UtilityCut penalty < 0", ragguard.UtilityCut,
          lambda: ragguard.UtilityCut(1.0, -1.0), ConfigError, "penalty"),
    Probe("UtilityCut gain str", ragguard.UtilityCut,
          lambda: ragguard.UtilityCut("a", 1.0), ConfigError, "gain"),
    Probe("UtilityCut gain bool", ragguard.UtilityCut,
          lambda: ragguard.UtilityCut(True, 1.0), ConfigError, "gain"),
    Probe("load_reranker empty", ragguard.load_reranker,
          lambda: ragguard.load_reranker(""), RerankModelError, "--rerank"),
    Probe("load_reranker int", ragguard.load_reranker,
          lambda: ragguard.load_reranker(3), RerankModelError, "3"),
    Probe("load_reranker score_kind", ragguard.load_reranker,
          lambda: ragguard.load_reranker("tests.test_errors_promise:_oracle", score_kind="cos"),
          ConfigError, "cos"),
    Probe("register_reranker not callable", ragguard.register_reranker,
          lambda: ragguard.register_reranker("x"), ConfigError, "callable"),
    # ------------------------------------------------------ ragguard.calibration
    Probe("Constraint metric", cal.Constraint,
          lambda: cal.Constraint("nope", ">=", 0.5), ConfigError, "nope"),
    Probe("Constraint op", cal.Constraint,
          lambda: cal.Constraint("recall", "==", 0.5), ConfigError, "=="),
    Probe("Constraint NaN", cal.Constraint,
          lambda: cal.Constraint("recall", ">=", NAN), ConfigError, "nan"),
    Probe("Constraint bound str", cal.Constraint,
          lambda: cal.Constraint("recall", ">=", "a"), ConfigError, "bound"),
    Probe("SafetyBands NaN", SafetyBands,
          lambda: SafetyBands(NAN, 0.5), ConfigError, "risky"),
    Probe("SafetyBands order", SafetyBands,
          lambda: SafetyBands(0.6, 0.5), ConfigError, "risky"),
    Probe("SafetyBands str", SafetyBands,
          lambda: SafetyBands("a", 0.5), ConfigError, "risky"),
    Probe("SweepGrid max_k 0", cal.SweepGrid,
          lambda: cal.SweepGrid(max_k=(0,)), ConfigError, "max_k"),
    Probe("SweepGrid max_k int", cal.SweepGrid,
          lambda: cal.SweepGrid(max_k=3), ConfigError, "max_k"),
    Probe("SweepGrid max_k str", cal.SweepGrid,
          lambda: cal.SweepGrid(max_k=("a",)), ConfigError, "max_k"),
    Probe("SweepGrid thresholds NaN", cal.SweepGrid,
          lambda: cal.SweepGrid(thresholds=(NAN,)), ConfigError, "thresholds"),
    Probe("SweepGrid cut rule", cal.SweepGrid,
          lambda: cal.SweepGrid(cut_rules=(("nope", 1),)), ConfigError, "nope"),
    Probe("SweepGrid min_k str", cal.SweepGrid,
          lambda: cal.SweepGrid(min_k="a"), ConfigError, "min_k"),
    Probe("UDCGTheta NaN", UDCGTheta,
          lambda: UDCGTheta((NAN,), (1.0,)), ConfigError, "finite"),
    Probe("UDCGTheta lengths", UDCGTheta,
          lambda: UDCGTheta((1.0,), (1.0, 2.0)), ConfigError, "length"),
    Probe("UDCGTheta floats", UDCGTheta, lambda: UDCGTheta(1.0, 1.0), ConfigError, "alpha"),
    Probe("UtilityRules NaN", cal.UtilityRules,
          lambda: cal.UtilityRules(NAN), ConfigError, "relevant_grade"),
    Probe("UtilityRules order", cal.UtilityRules,
          lambda: cal.UtilityRules(1, 2), ConfigError, "partial_grade"),
    Probe("RerankScores score_kind unknown", RerankScores,
          lambda: RerankScores(name="m", score_kind="logits", scores={}),  # type: ignore[arg-type]
          ConfigError, "score_kind"),
    Probe("RerankScores probability above 1", RerankScores,
          lambda: RerankScores(name="m", score_kind=ScoreKind.PROBABILITY,
                               scores={"q": {"d": 1.5}}),
          EvalSetError, "outside [0, 1]"),
    Probe("RerankGrid top_n 0", RerankGrid, lambda: RerankGrid(top_n=(0,)), ConfigError, "top_n"),
    Probe("RerankGrid top_n str", RerankGrid, lambda: RerankGrid(top_n="a"), ConfigError, "top_n"),
    Probe("RerankGrid thresholds NaN", RerankGrid,
          lambda: RerankGrid(thresholds=(NAN,)), ConfigError, "thresholds"),
    Probe("RerankGrid min_scores > 1", RerankGrid,
          lambda: RerankGrid(min_scores=(2.0,)), ConfigError, "min_scores"),
    Probe("RerankGrid cut rule", RerankGrid,
          lambda: RerankGrid(cut_rules=(("gap", -1),)), ConfigError, "gap"),
    Probe("Search max_k 0", cal.Search, lambda: cal.Search(max_k=0), ConfigError, "max_k"),
    Probe("Search max_k bool", cal.Search, lambda: cal.Search(max_k=True), ConfigError, "max_k"),
    Probe("Search grid", cal.Search, lambda: cal.Search(grid=(1, 2)), ConfigError, "SweepGrid"),
    Probe("Search metrics str", cal.Search,
          lambda: cal.Search(metrics="udcg"), ConfigError, "metrics"),
    Probe("Split holdout NaN", cal.Split, lambda: cal.Split(holdout=NAN), ConfigError, "holdout"),
    Probe("Split holdout 1", cal.Split, lambda: cal.Split(holdout=1.0), ConfigError, "holdout"),
    Probe("Split holdout negative", cal.Split,
          lambda: cal.Split(holdout=-0.1), ConfigError, "holdout"),
    Probe("Split seed float", cal.Split, lambda: cal.Split(seed=1.5), ConfigError, "seed"),
    Probe("Split folds negative", cal.Split, lambda: cal.Split(folds=-1), ConfigError, "folds"),
    Probe("Split seed negative", cal.Split, lambda: cal.Split(seed=-1), ConfigError, "seed"),
    Probe("Check n_bootstrap 0", cal.Check,
          lambda: cal.Check(n_bootstrap=0), ConfigError, "n_bootstrap"),
    Probe("Check level NaN", cal.Check, lambda: cal.Check(level=NAN), ConfigError, "level"),
    Probe("Check level 1", cal.Check, lambda: cal.Check(level=1.0), ConfigError, "level"),
    Probe("Check baseline_k str", cal.Check,
          lambda: cal.Check(baseline_k="3"), ConfigError, "baseline_k"),
    Probe("Check on_worse", cal.Check, lambda: cal.Check(on_worse="nope"), ConfigError, "on_worse"),
    Probe("Guarantee recall NaN", cal.Guarantee,
          lambda: cal.Guarantee(recall=NAN), ConfigError, "recall"),
    Probe("Guarantee recall 1", cal.Guarantee,
          lambda: cal.Guarantee(recall=1.0), ConfigError, "recall"),
    Probe("Guarantee recall str", cal.Guarantee,
          lambda: cal.Guarantee(recall="0.9"), ConfigError, "recall"),
    Probe("Guarantee confidence negative", cal.Guarantee,
          lambda: cal.Guarantee(recall=0.9, confidence=-0.5), ConfigError, "confidence"),
    Probe("Guarantee.parse metric", cal.Guarantee,
          lambda: cal.Guarantee.parse("udcg>=0.5"), ConfigError, "udcg>=0.5"),
    Probe("Stages max_tokens 0", cal.Stages,
          lambda: cal.Stages(max_tokens=0), ConfigError, "max_tokens"),
    Probe("Stages max_tokens fractional", cal.Stages,
          lambda: cal.Stages(max_tokens=1.5), ConfigError, "max_tokens"),
    Probe("Stages near_duplicate_threshold NaN", cal.Stages,
          lambda: cal.Stages(near_duplicate_threshold=NAN), ConfigError, "near_duplicate"),
    Probe("Stages token_counter", cal.Stages,
          lambda: cal.Stages(token_counter=4), ConfigError, "token_counter"),
    Probe("Stages conflicts", cal.Stages,
          lambda: cal.Stages(conflicts=["prefer"]), ConfigError, "prefer"),
    Probe("Stages conflict similarity", cal.Stages,
          lambda: cal.Stages(conflicts=["drop"], conflict_similarities=[1.5]),
          ConfigError, "similarity"),
    Probe("Stages conflicts str", cal.Stages,
          lambda: cal.Stages(conflicts="drop"), ConfigError,
          'conflicts takes a list, e.g. ["drop"]'),
    Probe("Stages conflict_similarities float", cal.Stages,
          lambda: cal.Stages(conflicts=["drop"], conflict_similarities=0.5),
          ConfigError, "conflict_similarities takes a list"),
    Probe("calibrate conflicts str", cal.calibrate,
          lambda: _calibrate(stages=cal.Stages(conflicts="drop")),
          ConfigError, "conflicts takes a list"),
    Probe("RerankSearch neither", cal.RerankSearch, lambda: cal.RerankSearch(), ConfigError,
          "reranker"),
    Probe("RerankSearch both", cal.RerankSearch,
          lambda: cal.RerankSearch(reranker=_oracle, scores=RerankScores.__new__(RerankScores)),
          ConfigError, "scores="),
    Probe("RerankSearch reranker int", cal.RerankSearch,
          lambda: cal.RerankSearch(reranker=42), ConfigError, "reranker must be callable"),
    Probe("RerankSearch reranker model name", cal.RerankSearch,
          lambda: cal.RerankSearch(reranker="cross-encoder/ms-marco-MiniLM-L6-v2"), ConfigError,
          "load_reranker(name)"),
    Probe("RerankSearch grid", cal.RerankSearch,
          lambda: cal.RerankSearch(reranker=_oracle, grid=(5,)), ConfigError, "RerankGrid"),
    Probe("RerankSearch probability_map", cal.RerankSearch,
          lambda: cal.RerankSearch(reranker=_oracle, probability_map="nope"), ConfigError, "nope"),
    Probe("Answerability share 1", cal.Answerability,
          lambda: cal.Answerability(max_false_abstain=1.0), ConfigError, "max_false_abstain"),
    Probe("Answerability share NaN", cal.Answerability,
          lambda: cal.Answerability(max_false_abstain=NAN), ConfigError, "max_false_abstain"),
    Probe("NoiseFloor alpha NaN", cal.NoiseFloor,
          lambda: cal.NoiseFloor(alpha=NAN, scorer=_oracle), ConfigError, "--noise-floor"),
    Probe("NoiseFloor too few samples", cal.NoiseFloor,
          lambda: cal.NoiseFloor(alpha=0.01, scorer=_oracle, samples=10), ConfigError, "99"),
    Probe("NoiseFloor scorer", cal.NoiseFloor,
          lambda: cal.NoiseFloor(alpha=0.1, scorer=1), ConfigError, "callable"),  # type: ignore[arg-type]
    Probe("Answerability confidence", cal.Answerability,
          lambda: cal.Answerability(max_false_abstain=0.1, confidence=2), ConfigError,
          "confidence"),
    Probe("Domains by empty", cal.Domains, lambda: cal.Domains(by=""), ConfigError, "--by"),
    Probe("Domains by int", cal.Domains, lambda: cal.Domains(by=3), ConfigError, "--by"),
    Probe("Domains profiles str", cal.Domains,
          lambda: cal.Domains(profiles="legal"), ConfigError, "profiles must map"),
    Probe("Domains profile unknown", cal.Domains,
          lambda: cal.Domains(profiles={"a": "nope"}), ConfigError, "nope"),
    Probe("Domains domain empty", cal.Domains,
          lambda: cal.Domains(profiles={" ": "legal"}), ConfigError, "must not be empty"),
    Probe("Calibrator domains", cal.Calibrator,
          lambda: cal.Calibrator(domains="domain"), ConfigError, "domains must be a Domains"),
    Probe("Calibrator objective", cal.Calibrator,
          lambda: cal.Calibrator(objective="nope"), ConfigError, "nope"),
    Probe("Calibrator constraint", cal.Calibrator,
          lambda: cal.Calibrator(constraints=["recall>>1"]), ConfigError, "recall>>1"),
    Probe("Calibrator constraints str", cal.Calibrator,
          lambda: cal.Calibrator(constraints="recall>=0.5"), ConfigError, "constraints"),
    Probe("Calibrator profile", cal.Calibrator,
          lambda: cal.Calibrator(profile="nope"), ConfigError, "nope"),
    Probe("Calibrator split type", cal.Calibrator,
          lambda: cal.Calibrator(split=0.3), ConfigError, "split"),
    Probe("Calibrator guarantee type", cal.Calibrator,
          lambda: cal.Calibrator(guarantee="recall>=0.9"), ConfigError, "guarantee"),
    Probe("Calibrator baseline_k off the grid", cal.Calibrator,
          lambda: cal.Calibrator(search=cal.Search(max_k=3), check=cal.Check(baseline_k=5)),
          ConfigError, "baseline_k"),
    Probe("Calibrator fit a path", cal.Calibrator,
          lambda: cal.Calibrator().fit("examples/ramdocs/evalset.jsonl"), ArgumentTypeError,
          "load it first, fit(load_evalset(path))"),
    Probe("Calibrator fit None", cal.Calibrator,
          lambda: cal.Calibrator().fit(None), ArgumentTypeError, "load_evalset"),
    Probe("Calibrator fit seed negative", cal.Calibrator,
          lambda: cal.Calibrator(split=cal.Split(seed=-1)).fit(ES), ConfigError, "seed"),
    Probe("calibrate seed negative", cal.calibrate,
          lambda: _calibrate(split=cal.Split(seed=-1)), ConfigError, "seed"),
    Probe("Calibrator fit run", cal.Calibrator,
          lambda: cal.Calibrator(runs=["nope"]).fit(ES), EvalSetError, "nope"),
    Probe("Calibrator fit guarantee and answerability", cal.Calibrator,
          lambda: cal.Calibrator(guarantee=cal.Guarantee(recall=0.8),
                                 answerability=cal.Answerability(max_false_abstain=0.1)).fit(ES),
          ConfigError, "--guarantee"),
    Probe("Negatives same_query negative", Negatives,
          lambda: Negatives(same_query=-1), ConfigError, "same_query_negatives"),
    Probe("Negatives random float", Negatives,
          lambda: Negatives(random=1.5), ConfigError, "random_negatives"),
    Probe("Negatives pretrain bool", Negatives,
          lambda: Negatives(pretrain=True), ConfigError, "pretrain_negatives"),
    Probe("Training max_length 4", Training,
          lambda: Training(max_length=4), ConfigError, "max_length"),
    Probe("Training epochs 0", Training, lambda: Training(epochs=0), ConfigError, "epochs"),
    Probe("Training learning_rate NaN", Training,
          lambda: Training(learning_rate=NAN), ConfigError, "learning_rate"),
    Probe("Training learning_rate negative", Training,
          lambda: Training(learning_rate=-1e-5), ConfigError, "learning_rate"),
    Probe("RerankerTrainer validation NaN", RerankerTrainer,
          lambda: RerankerTrainer(validation=NAN), ConfigError, "validation"),
    Probe("RerankerTrainer holdout 1", RerankerTrainer,
          lambda: RerankerTrainer(holdout=1.0), ConfigError, "holdout"),
    Probe("RerankerTrainer seed str", RerankerTrainer,
          lambda: RerankerTrainer(seed="a"), ConfigError, "seed"),
    Probe("RerankerTrainer training type", RerankerTrainer,
          lambda: RerankerTrainer(training=3), ConfigError, "training"),
    Probe("Relevance unjudged", Relevance,
          lambda: Relevance(unjudged="nope"), AnnotationError, "nope"),
    Probe("Relevance judge missing", Relevance,
          lambda: Relevance(unjudged="judge"), AnnotationError, "needs a judge"),
    Probe("Outputs out a folder", Outputs,
          lambda: Outputs(out=Path(__file__).parent), AnnotationError, "folder"),
    Probe("calibrate objective", cal.calibrate,
          lambda: _calibrate(objective="nope"), ConfigError, "nope"),
    Probe("calibrate constraint", cal.calibrate,
          lambda: _calibrate(constraints=["recall>>1"]), ConfigError, "recall>>1"),
    Probe("calibrate constraint NaN", cal.calibrate,
          lambda: _calibrate(constraints=["evidence_recall>=nan"]), ConfigError, "nan"),
    Probe("calibrate max_k 0", cal.calibrate,
          lambda: _calibrate(search=cal.Search(max_k=0)), ConfigError, "max_k"),
    Probe("calibrate holdout", cal.calibrate,
          lambda: _calibrate(split=cal.Split(holdout=2.0)), ConfigError, "holdout"),
    Probe("calibrate n_bootstrap", cal.calibrate,
          lambda: _calibrate(check=cal.Check(n_bootstrap=-1)), ConfigError, "n_bootstrap"),
    Probe("calibrate n_bootstrap str", cal.calibrate,
          lambda: _calibrate(check=cal.Check(n_bootstrap="a")), ConfigError, "n_bootstrap"),
    Probe("calibrate seed str", cal.calibrate,
          lambda: _calibrate(split=cal.Split(seed="a")), ConfigError, "seed"),
    Probe("calibrate level str", cal.calibrate,
          lambda: _calibrate(check=cal.Check(level="a")), ConfigError, "level"),
    Probe("calibrate constraint bound str", cal.calibrate,
          lambda: _calibrate(constraints=["evidence_recall>=a"]), ConfigError, "'a'"),
    Probe("calibrate confidence NaN", cal.calibrate,
          lambda: _calibrate(guarantee=cal.Guarantee(recall=0.9, confidence=NAN)),
          ConfigError, "confidence"),
    Probe("calibrate metric", cal.calibrate,
          lambda: _calibrate(search=cal.Search(metrics=("nope",))), ConfigError, "nope"),
    Probe("calibrate profile", cal.calibrate,
          lambda: _calibrate(profile="nope"), ConfigError, "nope"),
    Probe("calibrate run", cal.calibrate, lambda: _calibrate(runs=["nope"]), EvalSetError, "nope"),
    Probe("calibrate reranker and scores", cal.calibrate,
          lambda: _calibrate(
              rerank=cal.RerankSearch(reranker=_oracle, scores=RerankScores.__new__(RerankScores))),
          ConfigError, "scores="),
    Probe("calibrate probability_map", cal.calibrate,
          lambda: _calibrate(
              rerank=cal.RerankSearch(reranker=_oracle, probability_map="nope", cache_dir=None)),
          ConfigError, "nope"),
    Probe("calibrate rerank_score_kind", cal.calibrate,
          lambda: _calibrate(
              rerank=cal.RerankSearch(reranker=_oracle, score_kind="cosine", cache_dir=None)),
          ConfigError, "cosine"),
    Probe("calibrate folds", cal.calibrate,
          lambda: _calibrate(split=cal.Split(folds=-1)), ConfigError, "folds"),
    Probe("calibrate on_worse", cal.calibrate,
          lambda: _calibrate(check=cal.Check(on_worse="nope")), ConfigError, "nope"),
    Probe("calibrate guarantee", cal.calibrate,
          lambda: _calibrate(guarantee=cal.Guarantee.parse("nope")), ConfigError, "nope"),
    Probe("calibrate conflicts", cal.calibrate,
          lambda: _calibrate(stages=cal.Stages(conflicts=["nope"])), ConfigError, "nope"),
    Probe("evaluate metric", cal.evaluate,
          lambda: cal.evaluate(ES, "r", ["nope"]), ConfigError, "nope"),
    Probe("evaluate profile", cal.evaluate,
          lambda: cal.evaluate(ES, "r", profile="nope"), ConfigError, "nope"),
    Probe("evaluate run", cal.evaluate, lambda: cal.evaluate(ES, "nope"), EvalSetError, "nope"),
    Probe("parse_metric unknown", parse_metric,
          lambda: parse_metric("nope"), ConfigError, "nope"),
    Probe("parse_metric cutoff", parse_metric,
          lambda: parse_metric("ndcg@x"), ConfigError, "ndcg@x"),
    Probe("compute metric", compute, lambda: compute(ARRAYS, "nope"), ConfigError, "nope"),
    Probe("optimal_k 0", optimal_k, lambda: optimal_k(ARRAYS, 0), ConfigError, "max_k"),
    Probe("split_queries holdout", split_queries,
          lambda: split_queries(10, 2.0, 0), ConfigError, "holdout"),
    Probe("safety_band NaN", safety_band, lambda: safety_band(NAN), ConfigError, "nan"),
    Probe("sweep metric", sweep,
          lambda: sweep(ARRAYS, metrics=["nope"]), ConfigError, "nope"),
    Probe("udcg_theta weights", udcg_theta,
          lambda: udcg_theta(ARRAYS, 3), ArgumentTypeError, "UDCGTheta"),
    Probe("fit_udcg_theta k", fit_udcg_theta,
          lambda: fit_udcg_theta(ARRAYS, [1.0] * 12, 0), ConfigError, "k"),
    Probe("fit_udcg_theta l2", fit_udcg_theta,
          lambda: fit_udcg_theta(ARRAYS, [1.0] * 12, 2, l2=NAN), ConfigError, "l2"),
    Probe("fit_probability_map lengths", fit_probability_map,
          lambda: fit_probability_map([0.1, 0.2], [1]), EvalSetError, "length"),
    Probe("fit_probability_map labels", fit_probability_map,
          lambda: fit_probability_map([0.1, 0.2], [1, 2]), EvalSetError, "0 or 1"),
    Probe("fit_probability_map one class", fit_probability_map,
          lambda: fit_probability_map([0.1, 0.2], [1, 1]), EvalSetError, "relevant"),
    Probe("fit_probability_map method", fit_probability_map,
          lambda: fit_probability_map([0.1, 0.2], [1, 0], "nope"), ConfigError, "nope"),
    Probe("brier_score lengths", brier_score,
          lambda: brier_score([0.1], [1, 0]), EvalSetError, "length"),
    Probe("expected_calibration_error bins", expected_calibration_error,
          lambda: expected_calibration_error([0.1], [1], bins=0), ConfigError, "bins"),
    Probe("expected_calibration_error bins str", expected_calibration_error,
          lambda: expected_calibration_error([0.1], [1], bins="a"), ConfigError, "bins"),
    Probe("arrays_from_dicts list", arrays_from_dicts,
          lambda: arrays_from_dicts([], {}), ArgumentTypeError, "qrels"),
    Probe("arrays_from_dicts score_kind", arrays_from_dicts,
          lambda: arrays_from_dicts({}, {}, score_kind="cosine"), ConfigError, "cosine"),
    Probe("build_arrays lengths", build_arrays,
          lambda: build_arrays(["q"], [], []), EvalSetError, "1 queries"),
    Probe("candidate_utilities profile", candidate_utilities,
          lambda: candidate_utilities(A.grades, A.scores, A.valid, A.valid, profile="nope"),
          ConfigError, "nope"),
    Probe("data_fingerprint run", data_fingerprint,
          lambda: data_fingerprint(ES, ["nope"]), EvalSetError, "nope"),
    Probe("load_evalset format", cal.load_evalset,
          lambda: cal.load_evalset(Path(__file__), format="nope"), EvalSetError, "nope"),
    Probe("load_inputs score_kind", cal.load_inputs,
          lambda: cal.load_inputs(NOTES, score_kind="cosine"), EvalSetError, "cosine"),
    Probe("retrieve_run retriever", retrieve_run,
          lambda: retrieve_run(ES, 3), RetrieverError, "retriever"),
    Probe("retrieve_run concurrency", retrieve_run,
          lambda: retrieve_run(ES, _oracle, max_concurrency=0),
          RetrieverError, "max_concurrency"),
]  # fmt: skip


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_a_bad_option_raises_a_ragguard_error_of_one_line(probe: Probe) -> None:
    with pytest.raises(RagguardError) as caught:
        probe.call()
    assert isinstance(caught.value, probe.error), repr(caught.value)
    message = str(caught.value)
    assert "\n" not in message, message
    assert probe.says.lower() in message.lower(), message


def _option_classes(module: object) -> list[type]:
    """The classes of ``module.__all__`` that validate what they are built with: pydantic
    models and dataclasses with a ``__post_init__``."""
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not inspect.isclass(obj):
            continue
        if issubclass(obj, BaseModel) or (
            dataclasses.is_dataclass(obj) and hasattr(obj, "__post_init__")
        ):
            out.append(obj)
    return out


PUBLIC_MODULES = [ragguard, cal, cal_metrics, cal_sweep, cal_options, cal_utility]


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_every_public_option_class_is_probed(module: object) -> None:
    probed = {id(p.target) for p in PROBES}
    missing = [c.__name__ for c in _option_classes(module) if id(c) not in probed]
    assert missing == [], f"add probes of bad values to PROBES for {missing}"


def test_the_option_classes_are_found() -> None:
    """The introspection sees the option classes it must (so the check above can fail)."""
    names = {c.__name__ for m in PUBLIC_MODULES for c in _option_classes(m)}
    assert {"GuardConfig", "RerankConfig", "ProbabilityMap", "Profile", "UtilityCut",
            "SweepGrid", "Constraint", "Calibrator", "Split", "Guarantee", "SafetyBands",
            "UDCGTheta", "UtilityRules", "RerankGrid"} <= names  # fmt: skip
