"""The option objects of [`Calibrator`][ragguard.calibration.Calibrator]: small frozen groups
of settings, one job each, checked when built (a bad value raises
[`ConfigError`][ragguard.ConfigError] naming the option, before any data is read)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from numpy.typing import NDArray

from ragguard._fields import is_real
from ragguard.calibration.data.utility import as_profile
from ragguard.calibration.fit.conflict_sweep import conflict_settings
from ragguard.calibration.fit.risk import parse_guarantee
from ragguard.calibration.fit.select import DEFAULT_FOLDS
from ragguard.calibration.fit.sweep import (
    DEFAULT_METRICS,
    SweepGrid,
    check_cut_rules,
    check_grid_values,
    cut_rule_points,
)
from ragguard.config import profile_utility_cut
from ragguard.errors import ConfigError
from ragguard.policy import ConflictMode, CutRule, PolicyParams
from ragguard.probability import MapMethod
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.calibration.fit.rerank_scores import RerankScores
    from ragguard.profiles import Profile
    from ragguard.rerank import Reranker

__all__ = [
    "Answerability",
    "Check",
    "Domains",
    "Guarantee",
    "NoiseFloor",
    "RerankGrid",
    "RerankSearch",
    "Search",
    "Split",
    "Stages",
]


def _whole(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name} must be an int >= {least}, got {value!r}")


def _open_unit(name: str, value: object) -> None:
    if not (is_real(value) and 0.0 < value < 1.0):  # type: ignore[operator]
        raise ConfigError(f"{name} must be in (0, 1), got {value!r}")


@dataclass(frozen=True, slots=True)
class RerankGrid:
    """The rerank cuts a two-stage sweep tries, at every ``top_n`` and ``max_k``.

    Attributes:
        top_n: candidates sent to the reranker (capped at the deepest retrieval list).
        thresholds: relative thresholds on the calibrated probabilities.
        min_scores: floors on the calibrated probability (``rerank.min_score``).
        cut_rules: gap / autocut settings on the probabilities.
        expected_utility: also try the expected-utility rule of the profile.
    """

    top_n: tuple[int, ...] = (5, 10, 20, 50)
    thresholds: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(10))
    min_scores: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 10))
    cut_rules: tuple[tuple[CutRule, int], ...] = (
        (CutRule.GAP, 0),
        (CutRule.GAP, 1),
        (CutRule.AUTOCUT, 1),
    )
    expected_utility: bool = True

    def __post_init__(self) -> None:
        check_grid_values("top_n", self.top_n, int)
        check_grid_values("thresholds", self.thresholds, float)
        check_grid_values("min_scores", self.min_scores, float)
        if not self.top_n or any(n < 1 for n in self.top_n):
            raise ConfigError(f"top_n values must be ints >= 1, got {self.top_n!r}")
        if any(not 0.0 <= t <= 1.0 for t in (*self.thresholds, *self.min_scores)):
            raise ConfigError(
                "rerank thresholds and min_scores are probabilities in [0, 1], got "
                f"thresholds={self.thresholds!r}, min_scores={self.min_scores!r}"
            )
        check_cut_rules(self.cut_rules)
        if not isinstance(self.expected_utility, bool):
            raise ConfigError(
                f"expected_utility must be true or false, got {self.expected_utility!r}"
            )

    def points(self, max_k: Sequence[int], min_k: int, profile: Profile) -> list[PolicyParams]:
        """Every rerank cut at every cap."""
        eu = profile_utility_cut(profile)
        pts: list[PolicyParams] = []
        for k in max_k:
            base = PolicyParams(max_k=k, min_k=min(min_k, k))
            pts += [PolicyParams(k, base.min_k, relative_threshold=t) for t in self.thresholds]
            pts += [PolicyParams(k, base.min_k, min_score=f) for f in self.min_scores]
            pts += cut_rule_points(k, base.min_k, self.cut_rules)
            if self.expected_utility:
                pts.append(PolicyParams(k, base.min_k, expected_utility=eu))
        return list(dict.fromkeys(pts))


@dataclass(frozen=True, slots=True, kw_only=True)
class Search:
    """The retrieval settings swept for every run.

    Attributes:
        max_k: the largest cap tried (grid ``1..max_k``), a constraint: the caps never
            grow past it. ``None`` (the default): caps ``1..``
            ``DEFAULT_MAX_K``, which grow to the
            candidate depth (at most ``MAX_K_LIMIT``)
            when no setting meets the constraints (on the calibration queries or on
            all), or with a guarantee. Ignored when
            ``grid`` is given (a grid never grows).
        grid: the settings to try (default
            [`SweepGrid.up_to(max_k)`][ragguard.calibration.SweepGrid.up_to]).
        metrics: metrics computed at every setting (the objective and constraint
            metrics are added).
    """

    max_k: int | None = None
    grid: SweepGrid | None = None
    metrics: Sequence[str] = DEFAULT_METRICS

    def __post_init__(self) -> None:
        if self.max_k is not None:
            _whole("max_k", self.max_k, 1)
        if self.grid is not None and not isinstance(self.grid, SweepGrid):
            raise ConfigError(f"grid must be a SweepGrid, got {type(self.grid).__name__}")
        if isinstance(self.metrics, str) or not all(isinstance(m, str) for m in self.metrics):
            raise ConfigError(f"metrics must be a sequence of metric names, got {self.metrics!r}")

    @property
    def grows(self) -> bool:
        """Whether the caps may grow to the candidate depth: neither a grid nor a cap
        was given."""
        return self.grid is None and self.max_k is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """Which queries choose and which check.

    Attributes:
        holdout: fraction of queries held out for the check (0 disables it).
        seed: seed of the split, the folds and the bootstrap (a whole number >= 0).
        folds: cross-validation folds for the choice of rule family (fewer on small
            sets; see ``ragguard.calibration.fit.select``).
    """

    holdout: float = 0.3
    seed: int = 0
    folds: int = DEFAULT_FOLDS

    def __post_init__(self) -> None:
        h = self.holdout
        if not (is_real(h) and 0.0 <= h < 1.0):
            raise ConfigError(f"holdout must be a fraction in [0, 1), got {h!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a whole number >= 0, got {self.seed!r}")
        _whole("folds", self.folds, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """The held-out check of a choice against plain top-k.

    Attributes:
        n_bootstrap: bootstrap resamples for the paired intervals.
        level: confidence level of the intervals.
        baseline_k: compare with plain top-``baseline_k`` instead of the best plain
            top-k of the grid (one of the grid's caps).
        on_worse: when the held-out check finds the choice worse than the baseline on
            the objective: ``"top-k"`` writes plain top-k instead, ``"stop"`` writes
            nothing
            ([`CalibrationResult.save_config`][ragguard.calibration.CalibrationResult.save_config]
            raises).
    """

    n_bootstrap: int = 2000
    level: float = 0.95
    baseline_k: int | None = None
    on_worse: Literal["top-k", "stop"] = "top-k"

    def __post_init__(self) -> None:
        n = self.n_bootstrap
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"n_bootstrap must be a whole number >= 1, got {n!r}")
        _open_unit("level", self.level)
        if self.baseline_k is not None:
            _whole("baseline_k", self.baseline_k, 1)
        if self.on_worse not in ("top-k", "stop"):
            raise ConfigError(f"on_worse must be 'top-k' or 'stop', got {self.on_worse!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Guarantee:
    """A finite-sample recall guarantee: choose the smallest context whose mean evidence
    recall on new queries is at least ``recall`` with probability ``confidence``
    (Learn-then-Test with Hoeffding-Bentkus p-values, Angelopoulos et al. 2021; see
    ``ragguard.calibration.fit.risk``). The objective is then reported, not optimised.

    Attributes:
        recall: the guaranteed mean evidence recall, in (0, 1).
        confidence: the probability that the guarantee holds, in (0, 1).
    """

    recall: float
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not (is_real(self.recall) and 0.0 < self.recall < 1.0):
            raise ConfigError(f"the guaranteed recall must lie in (0, 1), got {self.recall!r}")
        _open_unit("confidence", self.confidence)

    @classmethod
    def parse(cls, text: str, confidence: float = 0.95) -> Guarantee:
        """``Guarantee.parse("recall>=0.9")``: the guarantee a string states.

        Raises:
            ConfigError: another metric or operator, or a target outside (0, 1).
        """
        _open_unit("confidence", confidence)
        return cls(recall=parse_guarantee(text), confidence=confidence)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stages:
    """The runtime's stages after the cut, applied to every setting swept.

    Attributes:
        max_tokens: a token budget of the kept passages (texts from the eval set, a
            ``corpus.jsonl`` beside it and the corpus passed to ``fit``), so the choice
            respects it; the config carries it.
        token_counter: how ``max_tokens`` counts (``ragguard.tokens``).
        near_duplicate_threshold: near-duplicate control on at this similarity.
        conflicts: conflict modes to sweep (``"off"``, ``"flag"``, ``"keep_first"``,
            ``"drop"``; not ``"prefer"``, whose metadata eval sets do not carry): every
            setting is tried under each, at each of ``conflict_similarities``, and the
            choice among them is made on the objective like any other
            (``ragguard.calibration.fit.conflict_sweep``). Empty: not swept.
        conflict_similarities: the ``conflict_similarity`` values swept (default
            ``DEFAULT_CONFLICT_SIMILARITY``).
        conflict_detectors: the ``conflict_detector`` values swept (``"near-copy"``,
            ``"answers"``, ``"both"``; default near-copy).
        conflict_answer_similarities: the ``conflict_answer_similarity`` values swept
            with the answers detector (default ``DEFAULT_ANSWER_SIMILARITY``).
    """

    max_tokens: int | None = None
    token_counter: str = "chars:4"
    near_duplicate_threshold: float | None = None
    conflicts: Sequence[str | ConflictMode] = ()
    conflict_similarities: Sequence[float] = ()
    conflict_detectors: Sequence[str] = ()
    conflict_answer_similarities: Sequence[float] = ()

    def __post_init__(self) -> None:
        if self.max_tokens is not None:
            _whole("max_tokens", self.max_tokens, 1)  # a whole budget, as GuardConfig's
        PolicyParams(  # the runtime's own checks of the value
            max_k=1, near_duplicate_threshold=self.near_duplicate_threshold
        )
        if not isinstance(self.token_counter, str):
            raise ConfigError(
                f"token_counter must be a counter spec such as 'chars:4', got "
                f"{self.token_counter!r}"
            )
        lists = (
            ("conflicts", self.conflicts, '["drop"]'),
            ("conflict_similarities", self.conflict_similarities, "[0.5]"),
            ("conflict_detectors", self.conflict_detectors, '["near-copy", "answers"]'),
            ("conflict_answer_similarities", self.conflict_answer_similarities, "[0.4]"),
        )
        for name, value, example in lists:
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(f"{name} takes a list, e.g. {example}; got {value!r}")
            object.__setattr__(self, name, tuple(value))  # a numpy array reads as a list
        conflict_settings(
            self.conflicts,
            self.conflict_similarities,
            self.conflict_detectors,
            self.conflict_answer_similarities,
        )

    @property
    def read_texts(self) -> bool:
        """Whether a stage reads the passage texts."""
        return (
            self.max_tokens is not None
            or self.near_duplicate_threshold is not None
            or bool(self.conflicts)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RerankSearch:
    """A second stage calibrated with the recommended run: the reranker's scores are
    computed once per (model, query, passage text) and cached
    (``ragguard.calibration.fit.rerank_scores``), or given; a probability map is fitted
    and retrieval depth x rerank cut x ``max_k`` is swept
    (``ragguard.calibration.fit.second_stage``); the config then enables the stage.

    Attributes:
        reranker: the second stage ([`Reranker`][ragguard.Reranker]: a callable
            ``reranker(query, texts) -> scores``;
            [`load_reranker`][ragguard.load_reranker] builds one from a cross-encoder name
            or folder).
        scores: precomputed second-stage scores instead of a ``reranker``
            (``read_rerank_run``).
        score_kind: what the reranker returns, when it does not declare it.
        grid: the rerank cuts and depths tried (default ``RerankGrid()``).
        probability_map: ``"platt"`` (default) or ``"isotonic"``.
        cache_dir: the rerank score cache (``True``: the default folder; ``None``: off).
        on_query: progress callback ``(queries done, queries)`` while scoring.
    """

    reranker: Reranker | None = None
    scores: RerankScores | None = None
    score_kind: ScoreKind | str | None = None
    grid: RerankGrid = field(default_factory=RerankGrid)
    probability_map: MapMethod | str = MapMethod.PLATT
    cache_dir: str | os.PathLike[str] | bool | None = True
    on_query: Callable[[int, int], None] | None = None

    def __post_init__(self) -> None:
        if self.reranker is not None and self.scores is not None:
            raise ConfigError("RerankSearch: pass reranker= or scores=, not both; drop one of them")
        if self.reranker is None and self.scores is None:
            raise ConfigError("RerankSearch needs a reranker or precomputed scores; pass one")
        if self.reranker is not None and not callable(self.reranker):
            raise ConfigError(
                "reranker must be callable as reranker(query, texts) -> scores, got "
                f"{type(self.reranker).__name__}; for a cross-encoder name or folder pass "
                "ragguard.load_reranker(name) or ragguard.CrossEncoderReranker(name)"
            )
        if not isinstance(self.grid, RerankGrid):
            raise ConfigError(f"grid must be a RerankGrid, got {type(self.grid).__name__}")
        MapMethod(self.probability_map)  # an unknown method: ConfigError naming the allowed


@dataclass(frozen=True, slots=True, kw_only=True)
class Answerability:
    """Calibrate ``min_evidence`` (answerability) for the written setting: the highest
    floor on the best candidate's score (the rerank probability when the config holds
    the second stage) under which at most ``max_false_abstain`` of answerable queries
    abstain on new queries, with probability ``confidence``, by Learn-then-Test on the
    calibration queries; the held-out queries report the shares of unanswerable queries
    caught and of answerable ones lost (``ragguard.calibration.fit.answerability``).
    Floors are set by the unanswerable queries (judged, none relevant); with none, the
    answerable queries are taken as in scope and the floor is the one-sided conformal order
    statistic of their best scores (``fit_in_scope``: at most ``max_false_abstain`` of new
    in-scope queries abstain with probability ``confidence``, assuming them exchangeable
    with these; what it catches is not measured). Not combined with a guarantee.

    Attributes:
        max_false_abstain: the share of answerable queries that may abstain, in (0, 1).
        confidence: the probability that the share holds, in (0, 1).
    """

    max_false_abstain: float
    confidence: float = 0.95

    def __post_init__(self) -> None:
        x = self.max_false_abstain
        if isinstance(x, bool) or not isinstance(x, int | float) or not 0.0 < x < 1.0:
            raise ConfigError(
                f"--max-false-abstain (max_false_abstain) must be a share in (0, 1), got {x!r}"
            )
        _open_unit("confidence", self.confidence)


@dataclass(frozen=True, slots=True, kw_only=True)
class Domains:
    """Calibrate each domain of the eval set as well: one search per domain over the same
    settings, on that domain's calibration and held-out queries of the global split, with
    its own profile; the global config is still fitted on all queries
    (``ragguard.calibration.fit.domains``; docs/guides/calibrate.md).

    Attributes:
        by: the per-query field naming a query's domain: ``domain`` (its own field) or a
            key of its JSONL ``metadata``.
        profiles: ``{domain: profile}``, a domain's tolerance profile (a built-in name or a
            ``Profile``); a domain not named uses the calibration's profile.
    """

    by: str = "domain"
    profiles: Mapping[str, Profile | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.by, str) or not self.by.strip():
            raise ConfigError(f"--by (by) must name a per-query field, got {self.by!r}")
        if not isinstance(self.profiles, Mapping):
            raise ConfigError(
                f"profiles must map a domain to a profile, got {type(self.profiles).__name__}"
            )
        for name, profile in self.profiles.items():
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"--profile: a domain name must not be empty, got {name!r}")
            as_profile(profile)  # an unknown profile: ConfigError


def needed_samples(alpha: float) -> int:
    """The fewest unrelated scores whose order statistic bounds a share ``alpha``: the
    smallest ``n`` with ``ceil((n + 1) * (1 - alpha)) <= n``, i.e. ``n >= (1 - alpha) /
    alpha``."""
    return max(1, math.ceil((1.0 - alpha) / alpha - 1e-9))


@dataclass(frozen=True, slots=True, kw_only=True)
class NoiseFloor:
    """Calibrate ``min_score`` without labels: score every calibration query against
    passages drawn at random (the corpus, else the other queries' candidates) and write
    the floor that admits at most a share ``alpha`` of such unrelated passages
    (``ragguard.calibration.fit.noise_floor``).

    Attributes:
        alpha: the share of unrelated passages the floor may admit, in (0, 1).
        scorer: scores ``(query, texts)`` on the scale of the run the config holds (the
            embedding model the run was retrieved with); checked against the run's own
            scores before it is used.
        samples: the (query, passage) pairs drawn, at least ``ceil((1 - alpha) / alpha)``.
    """

    alpha: float
    scorer: Callable[[str, Sequence[str]], Sequence[float] | NDArray[Any]]
    samples: int = 2000

    def __post_init__(self) -> None:
        a = self.alpha
        if not (is_real(a) and 0.0 < a < 1.0):
            raise ConfigError(f"--noise-floor (alpha) must be a share in (0, 1), got {a!r}")
        _whole("samples", self.samples, 1)
        need = needed_samples(float(a))
        if self.samples < need:
            raise ConfigError(
                f"--noise-floor {a:g} needs at least {need} unrelated passages for its "
                f"order-statistic bound, got samples={self.samples}; raise samples "
                f"(NoiseFloor(samples={need})) or alpha"
            )
        if not callable(self.scorer):
            raise ConfigError(
                "the noise floor's scorer must be callable as scorer(query, texts) -> scores, "
                f"got {type(self.scorer).__name__}"
            )
