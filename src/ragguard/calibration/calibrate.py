"""``calibrate``: from an eval set and its runs to a recommended guard config.

::

    from ragguard.calibration import calibrate, load_evalset

    result = calibrate(load_evalset("eval.jsonl"), objective="udcg", min_recall=0.8)
    result.recommended.chosen_params       # PolicyParams(max_k=4, relative_threshold=0.8, ...)
    result.save_config("ragguard.toml")    # ContextGuard.from_file("ragguard.toml")

Steps, per run (retrieval profile):

1. split the labelled queries into a **calibration** part and a **held-out** part
   (``holdout`` of them, drawn with ``seed``; the same split for every run);
2. sweep the grid (:mod:`ragguard.calibration.sweep`) and choose the best setting by
   the objective under the constraints, **on the calibration queries only**;
3. choose the **baseline**, plain top-k, the same way (the best fixed k on the same
   queries, or the ``baseline_k`` you give), so the comparison asks whether the guard
   beats a tuned k, not an arbitrary one;
4. compare baseline and guarded on the **held-out** queries with paired bootstrap
   confidence intervals (percentile, ``n_bootstrap`` resamples of the queries): the gain
   is real when the interval of the difference excludes 0. With ``holdout=0`` the
   comparison is in-sample and says so;
5. compute each query's optimal context size (where cumulative utility peaks).

The run whose chosen setting scores best on the calibration queries (meeting the
constraints first) is recommended; :meth:`CalibrationResult.config` turns it into a
:class:`~ragguard.config.GuardConfig` with provenance (data hash, date, profile,
objective, constraints, the chosen point's metrics).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.arrays import EvalArrays
from ragguard.calibration.evalset import EvalSet
from ragguard.calibration.metrics import parse_metric
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
    is_plain_top_k,
    lower_is_better,
    optimal_k,
    sweep,
)
from ragguard.calibration.utility import UtilityRules, as_profile
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import CutRule, PolicyParams
from ragguard.profiles import BUILTIN_PROFILES, Profile, ProfileSpec
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.calibration.pipeline import RerankGrid, TwoStageCalibration
    from ragguard.calibration.rerank_scores import RerankScores
    from ragguard.probability import MapMethod
    from ragguard.rerank import Reranker

__all__ = [
    "CalibrationResult",
    "Comparison",
    "Interval",
    "RunCalibration",
    "calibrate",
    "data_fingerprint",
    "split_queries",
]

logger = logging.getLogger(__name__)

F64 = NDArray[np.float64]
I = NDArray[np.intp]  # noqa: E741

REPORTED: tuple[str, ...] = (
    "udcg",
    "utility",
    "recall",
    "precision",
    "ndcg",
    "distractor_rate",
    "distractor_harm",
    PASSAGES,
)
"""Metrics compared between baseline and guarded (plus the objective and constraints)."""

_BOOTSTRAP_CHUNK = 250


# --------------------------------------------------------------------------- split


def split_queries(n: int, holdout: float, seed: int) -> tuple[I, I]:
    """Calibration and held-out row indices (each sorted), reproducible by ``seed``.

    ``round(holdout * n)`` queries are held out (at least one when ``holdout > 0``), drawn
    by a permutation from ``numpy.random.default_rng(seed)``.

    Raises:
        ConfigError: ``holdout`` outside [0, 1).
        EvalSetError: no query would be left to calibrate on (or to hold out).
    """
    if not (isinstance(holdout, int | float) and 0.0 <= holdout < 1.0):
        raise ConfigError(f"holdout must be a fraction in [0, 1), got {holdout!r}")
    n_held = 0 if holdout == 0 else max(1, round(holdout * n))
    if n - n_held < 1:
        raise EvalSetError(
            f"no queries left to calibrate on: {n} labelled queries, {n_held} held out "
            f"(holdout={holdout:g}); lower --holdout or add queries"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_held:]).astype(np.intp), np.sort(perm[:n_held]).astype(np.intp)


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its percentile bootstrap confidence interval (NaN when undefined)."""

    mean: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        """Whether the whole interval lies on one side of 0."""
        return (self.low > 0 or self.high < 0) and not math.isnan(self.low)

    def as_dict(self) -> dict[str, float]:
        """``{"mean", "low", "high"}``."""
        return {"mean": self.mean, "low": self.low, "high": self.high}


def _weighted_means(weights: NDArray[np.int64], values: F64) -> F64:
    """(B, M) means of ``values`` (n, M) under bootstrap count ``weights`` (B, n),
    skipping NaN."""
    defined = ~np.isnan(values)
    num = weights @ np.where(defined, values, 0.0)
    den = weights @ defined.astype(np.float64)
    out: F64 = np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)
    return out


def _intervals(sample: F64, weights: list[NDArray[np.int64]], level: float) -> list[Interval]:
    """Per column of ``sample`` (n, M): the mean and its percentile interval."""
    means = np.concatenate([_weighted_means(w, sample) for w in weights], axis=0)
    alpha = (1.0 - level) / 2.0
    out: list[Interval] = []
    point = _weighted_means(np.ones((1, sample.shape[0]), dtype=np.int64), sample)[0]
    for j in range(sample.shape[1]):
        col = means[:, j]
        col = col[~np.isnan(col)]
        if col.size == 0 or math.isnan(point[j]):
            out.append(Interval(float(point[j]), math.nan, math.nan))
            continue
        lo, hi = np.quantile(col, [alpha, 1.0 - alpha])
        out.append(Interval(float(point[j]), float(lo), float(hi)))
    return out


@dataclass(frozen=True, eq=False)
class Comparison:
    """Baseline (plain top-k) against the guarded setting on one set of queries.

    Attributes:
        split: ``"held-out"``, or ``"all queries (in-sample)"`` without a hold-out.
        rows: the query rows compared.
        metrics: the metrics compared.
        baseline: per metric, the baseline's mean and interval.
        guarded: per metric, the guarded setting's mean and interval.
        difference: per metric, guarded minus baseline (paired), mean and interval.
        baseline_values: (M, n) per-query values of the baseline.
        guarded_values: (M, n) per-query values of the guarded setting.
        level: the intervals' confidence level.
        n_bootstrap: resamples drawn.
    """

    split: str
    rows: I
    metrics: tuple[str, ...]
    baseline: Mapping[str, Interval]
    guarded: Mapping[str, Interval]
    difference: Mapping[str, Interval]
    baseline_values: F64 = field(repr=False)
    guarded_values: F64 = field(repr=False)
    level: float = 0.95
    n_bootstrap: int = 2000

    @property
    def n_queries(self) -> int:
        """Number of queries compared."""
        return int(self.rows.size)

    def verdict(self, metric: str) -> str:
        """``"better"``, ``"worse"`` or ``"no clear difference"`` for the guarded setting
        on ``metric``, from the interval of the difference."""
        d = self.difference[metric]
        if not d.excludes_zero():
            return "no clear difference"
        gained = d.low > 0
        if lower_is_better(metric):
            gained = not gained
        return "better" if gained else "worse"

    def passages_verdict(self) -> str:
        """``"fewer"``, ``"more"`` or ``"same"``: the passages the guarded setting keeps
        on average against the baseline (the sign of the mean difference; a count is
        neither better nor worse by itself); ``"n/a"`` without queries."""
        d = self.difference[PASSAGES].mean
        if math.isnan(d):
            return "n/a"
        return "fewer" if d < 0 else "more" if d > 0 else "same"


def compare(
    kernel: SweepKernel,
    baseline_kept: I,
    guarded_kept: I,
    rows: I,
    metrics: Sequence[str],
    *,
    split: str,
    n_bootstrap: int,
    seed: int,
    level: float = 0.95,
) -> Comparison:
    """Paired bootstrap comparison of two per-query cuts on ``rows``."""
    idx = [kernel.metrics.index(m) for m in metrics]
    base = kernel.values(baseline_kept)[idx][:, rows]
    guard = kernel.values(guarded_kept)[idx][:, rows]
    return compare_values(
        base, guard, rows, metrics, split=split, n_bootstrap=n_bootstrap, seed=seed, level=level
    )


def compare_values(
    base: F64,
    guard: F64,
    rows: I,
    metrics: Sequence[str],
    *,
    split: str,
    n_bootstrap: int,
    seed: int,
    level: float = 0.95,
) -> Comparison:
    """Paired bootstrap comparison of two settings' per-query values (M, len(rows))."""
    diff = guard - base
    n = rows.size
    rng = np.random.default_rng([seed, 1])  # its own stream, apart from the split
    weights: list[NDArray[np.int64]] = []
    left = n_bootstrap
    while left > 0 and n > 0:
        b = min(left, _BOOTSTRAP_CHUNK)
        weights.append(rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.int64))
        left -= b
    if not weights:
        weights = [np.ones((1, max(n, 0)), dtype=np.int64)]
    b_iv = _intervals(base.T, weights, level)
    g_iv = _intervals(guard.T, weights, level)
    d_iv = _intervals(diff.T, weights, level)
    names = tuple(metrics)
    return Comparison(
        split,
        rows,
        names,
        dict(zip(names, b_iv, strict=True)),
        dict(zip(names, g_iv, strict=True)),
        dict(zip(names, d_iv, strict=True)),
        base,
        guard,
        level,
        n_bootstrap,
    )


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
    def baseline_kept(self) -> I:
        """(Q,) passages kept per query under the baseline (all queries)."""
        out: I = self.sweep.kept[self.baseline].astype(np.intp)
        return out


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
            rerank scores were given (:mod:`ragguard.calibration.pipeline`); its choice
            goes into the config.
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
    stage_settings: Mapping[str, Any] = field(default_factory=dict)
    """Config fields of the stages after the cut every setting ran with (max_tokens,
    token_counter, near_duplicate_threshold; :mod:`ragguard.calibration.stages`)."""

    def run(self, name: str) -> RunCalibration:
        """The calibration of run ``name``."""
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run named {name!r}; runs: {', '.join(r.name for r in self.runs)}")

    def why(self, run: RunCalibration | None = None) -> str:
        """One sentence: what was chosen for ``run`` (default the recommended) and why."""
        r = run or self.recommended
        obj = self.objective
        chosen = r.sweep.mean(r.chosen, obj)
        base = r.sweep.mean(r.baseline, obj)
        cons = " and ".join(str(c) for c in self.constraints)
        among = f"{len(r.sweep.points)} settings"
        if cons:
            among += f" with {cons}" if r.feasible else f" (none meets {cons}; closest chosen)"
        word = "lowest" if lower_is_better(obj) else "highest"
        passages = r.sweep.mean(r.chosen, PASSAGES)
        return (
            f"{describe_point(r.chosen_params)} has the {word} mean {obj} ({chosen:.3f}) among "
            f"{among} on {self.calibration_rows.size} calibration queries, keeping "
            f"{passages:.2f} passages on average; the best plain top-k "
            f"({describe_point(r.baseline_params)}) reaches {base:.3f}"
        )

    def config(self, run: str | None = None) -> GuardConfig:
        """The guard config of ``run``'s chosen setting (default: the recommended run),
        with provenance."""
        r = self.recommended if run is None else self.run(run)
        p = r.chosen_params
        settings: dict[str, Any] = {
            "profile": self.profile.name,
            "score_kind": r.score_kind,
            "max_k": p.max_k,
            "min_k": p.min_k,
            "relative_threshold": p.relative_threshold,
            "cut": p.cut,
        }
        if p.cut is CutRule.GAP:
            settings["gap_buffer"] = p.gap_buffer
        if p.cut is CutRule.AUTOCUT:
            settings["autocut_jumps"] = p.autocut_jumps
        if (
            self.profile.name not in BUILTIN_PROFILES
            or BUILTIN_PROFILES[self.profile.name] != self.profile
        ):
            fields = self.profile.model_dump(exclude={"name"})
            settings["profiles"] = {self.profile.name: ProfileSpec(base="support", **fields)}
        settings.update(self.stage_settings)
        settings["provenance"] = self.provenance(r)
        two = self.rerank
        if two is not None and r.name == two.run:
            settings.update(two.guard_settings())
            settings["rerank"] = two.rerank_table()
            settings["provenance"]["rerank"] = two.provenance()
        return GuardConfig(**settings)

    def provenance(self, run: RunCalibration | None = None) -> dict[str, Any]:
        """Where the config comes from: data, date, profile, objective, metrics."""
        from ragguard import __version__

        r = run or self.recommended
        chosen = {m: _finite(v) for m, v in r.sweep.point_means(r.chosen).items()}
        baseline = {m: _finite(v) for m, v in r.sweep.point_means(r.baseline).items()}
        c = r.comparison
        check: dict[str, Any] = {
            "split": c.split,
            "queries": c.n_queries,
            "level": c.level,
            "n_bootstrap": c.n_bootstrap,
        }
        for m in c.metrics:
            d = c.difference[m]
            check[m] = (
                f"{c.baseline[m].mean:.4f} -> {c.guarded[m].mean:.4f}, difference "
                f"{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}]"
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
            "constraints_met": r.feasible,
            "setting": describe_point(r.chosen_params),
            "baseline": describe_point(r.baseline_params),
            "queries": {
                "total": len(self.qids),
                "calibration": int(self.calibration_rows.size),
                "heldout": int(self.heldout_rows.size),
            },
            "holdout": self.holdout,
            "seed": self.seed,
            "metrics": chosen,
            "baseline_metrics": baseline,
            "heldout_check": check,
        }
        if r.source:
            out["run_source"] = r.source
        if self.files:
            out["files"] = dict(self.files)
        return out

    def save_config(self, path: str | os.PathLike[str], run: str | None = None) -> Path:
        """Write :meth:`config` as TOML that ``ContextGuard.from_file`` loads.

        The file is written in a temporary folder beside it and moved into place with
        :func:`os.replace`: ``path`` holds either its old content or the whole new
        config, and nothing temporary is left behind, whatever fails.

        Raises:
            ConfigError: ``path`` is a folder, or lies under a file.
            OSError: the file cannot be written (permissions, a full disk).
        """
        p = check_output_path(path, folder=False, what="the config")
        cfg = self.config(run)
        p.parent.mkdir(parents=True, exist_ok=True)
        with staging_folder(p.parent) as tmp:
            os.replace(cfg.save(tmp / p.name), p)
        return p


def _finite(value: float) -> float | str:
    """TOML-friendly: rounded to 6 significant digits; NaN as the string "nan"."""
    return float(f"{value:.6g}") if math.isfinite(value) else "nan"


# --------------------------------------------------------------------------- files


def check_output_path(path: str | os.PathLike[str], *, folder: bool, what: str) -> Path:
    """``path`` as a :class:`~pathlib.Path`, checked before anything is written: a file
    to write (``folder=False``) must not be a folder, a folder to write into must not be
    a file, and no existing parent may be a file.

    Raises:
        ConfigError: naming the path, ``what`` it was meant for, and what to give instead.
    """
    p = Path(path)
    if folder and p.exists() and not p.is_dir():
        raise ConfigError(f"{p} is a file; {what} is a folder of files: give a folder name")
    if not folder and p.is_dir():
        raise ConfigError(
            f"{p} is a folder; {what} is a file: give a file name (e.g. {p / 'ragguard.toml'})"
        )
    parent = next((a for a in p.parents if a.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"cannot write {what} to {p}: {parent} is a file, not a folder")
    return p


@contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """A new hidden folder inside ``folder`` to write files in before :func:`os.replace`
    moves each into place (the same file system, so each move is atomic). It is removed
    on the way out, with whatever is still in it, on success or failure."""
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=".ragguard-", suffix=".tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- fingerprint


def data_fingerprint(evalset: EvalSet, runs: Sequence[str] | None = None) -> str:
    """sha256 of the labels and the given runs, independent of file layout: the same
    data loaded from JSONL or TREC files hashes alike."""
    h = hashlib.sha256()
    for qid in evalset.qids:
        lab = evalset.labels[qid]
        h.update(
            json.dumps(
                [
                    qid,
                    sorted(lab.grades.items()),
                    sorted(lab.distractors),
                    sorted(lab.utilities.items()),
                    sorted(lab.no_response.items()),
                    lab.n_relevant,
                ],
                separators=(",", ":"),
            ).encode()
        )
    for name in runs if runs is not None else list(evalset.runs):
        run = evalset.runs[name]
        h.update(json.dumps(["run", name, run.score_kind and run.score_kind.value]).encode())
        for qid in evalset.qids:
            cands = run.candidates.get(qid, {})
            scores = [None if math.isnan(s) else s for s in cands.values()]
            h.update(json.dumps([qid, list(cands), scores], separators=(",", ":")).encode())
    return h.hexdigest()


def _file_hashes(evalset: EvalSet, runs: Sequence[str]) -> dict[str, str]:
    paths = [evalset.source] + [evalset.runs[n].source for n in runs]
    out: dict[str, str] = {}
    for p in paths:
        if p and Path(p).is_file() and p not in out:
            out[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
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


def calibrate(
    evalset: EvalSet,
    *,
    runs: Sequence[str] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    objective: str = "udcg",
    constraints: Sequence[Constraint | str] = (),
    min_recall: float | None = None,
    max_k: int = 10,
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
    max_tokens: int | None = None,
    token_counter: str = "chars:4",
    near_duplicate_threshold: float | None = None,
) -> CalibrationResult:
    """Sweep every run, choose a setting per run, check it on held-out queries.

    Args:
        evalset: labelled queries and their runs.
        runs: the runs to calibrate (default: all).
        profile: tolerance profile for utilities (default ``support``); its name goes
            into the config.
        rules: which grades are relevant / partially relevant.
        objective: the metric to optimise (a registry metric string or ``passages``);
            distractor rate and harm are minimised, everything else maximised.
        constraints: ``Constraint`` objects or strings like ``"recall>=0.8"``.
        min_recall: shorthand for the constraint ``recall>=min_recall``.
        max_k: the largest cap tried (grid ``1..max_k``); ignored when ``grid`` is given.
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
        corpus: JSONL corpus files with passage texts, for ``reranker``.
        passages: more passage texts, ``{passage id: text}``.
        cache_dir: the rerank score cache (``True``: the default folder; ``None``: off).
        on_rerank_query: progress callback ``(queries done, queries)`` while scoring.
        max_tokens: sweep every setting with this token budget applied after the cut
            (texts from the eval set, a ``corpus.jsonl`` beside it, ``corpus`` and
            ``passages``), so the choice respects it; the config carries it.
        token_counter: how ``max_tokens`` counts (:mod:`ragguard.tokens`).
        near_duplicate_threshold: sweep every setting with near-duplicate control on.

    Raises:
        EvalSetError: no runs, an unknown run, or nothing to calibrate on: no queries
            left (an empty split, a run with no candidates for any labelled query) or a
            run none of whose document ids is labelled for its query (the ids of the
            run and of the labels do not match).
        ConfigError: a parameter out of range (``holdout``, ``min_recall``, ``level``,
            ``n_bootstrap``, ``baseline_k``).
        ValueError: an unknown metric or profile, or a malformed constraint.
    """
    if not evalset.runs:
        raise EvalSetError(
            "the eval set has no runs to calibrate; pass run files (--run) or a retriever "
            "(--retriever)",
            path=evalset.source,
        )
    names = list(evalset.runs) if runs is None else list(runs)
    for n in names:
        if n not in evalset.runs:
            raise EvalSetError(f"no run named {n!r}; runs: {', '.join(evalset.runs)}")
    if not names:
        raise EvalSetError("no runs selected")
    if n_bootstrap < 1:
        raise ConfigError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must be in (0, 1), got {level}")
    prof = as_profile(profile)
    cons = [Constraint.parse(c) if isinstance(c, str) else c for c in constraints]
    if min_recall is not None:
        if not 0.0 <= min_recall <= 1.0:
            raise ConfigError(f"min_recall must be in [0, 1], got {min_recall}")
        cons.append(Constraint("recall", ">=", float(min_recall)))
    if objective != PASSAGES:
        parse_metric(objective)  # fail early on a bad name
    grid = grid or SweepGrid.up_to(max_k)
    if baseline_k is not None and baseline_k not in grid.max_k:
        raise ConfigError(f"baseline_k={baseline_k} is not among the grid's max_k {grid.max_k}")
    wanted = tuple(dict.fromkeys([objective, *(c.metric for c in cons), *metrics, *REPORTED]))
    reported = tuple(dict.fromkeys([objective, *(c.metric for c in cons), *REPORTED]))

    qids = evalset.qids
    calib_rows, held_rows = split_queries(len(qids), holdout, seed)
    from ragguard.calibration.stages import passage_stages

    stages = passage_stages(
        evalset, max_tokens=max_tokens, token_counter_spec=token_counter,
        near_duplicate_threshold=near_duplicate_threshold, corpus=corpus, passages=passages,
    )  # fmt: skip
    if stages is not None and (reranker is not None or rerank_scores is not None):
        raise ConfigError(
            "max_tokens / near_duplicate_threshold cannot be calibrated with a rerank stage "
            "yet; calibrate without --rerank, or set them in the config by hand"
        )
    all_points = grid.points()
    if stages is not None:  # every setting with the stages after the cut
        all_points = tuple(stages.params(p) for p in all_points)
    top_k_points = tuple(p for p in all_points if is_plain_top_k(p))

    results: list[RunCalibration] = []
    for name in names:
        _check_ids_match(evalset, name)
        arrays = evalset.arrays(name, profile=prof, rules=rules)
        points = all_points if arrays.score_kind is not None else top_k_points
        if arrays.score_kind is None:
            logger.warning("run %r has no scores: only plain top-k settings apply", name)
        width = max(p.max_k for p in points)
        run_stages = None if stages is None else stages.for_run(arrays, width)
        kernel = SweepKernel(arrays, wanted, width, stages=run_stages)
        result = sweep(kernel, points, wanted, rows=calib_rows)
        chosen, feasible = choose(result, objective, cons)
        top_idx = [i for i, p in enumerate(points) if is_plain_top_k(p)]
        if baseline_k is None:
            baseline, _ = choose(result, objective, cons, among=top_idx)
        else:
            baseline = next(i for i in top_idx if points[i].max_k == baseline_k)
        if held_rows.size:
            rows, split = held_rows, "held-out"
        else:
            rows, split = calib_rows, "all queries (in-sample)"
        comparison = compare(
            kernel,
            result.kept[baseline].astype(np.intp),
            result.kept[chosen].astype(np.intp),
            rows,
            reported,
            split=split,
            n_bootstrap=n_bootstrap,
            seed=seed,
            level=level,
        )
        run = evalset.runs[name]
        results.append(
            RunCalibration(
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
                optimal=optimal_k(arrays, max(grid.max_k)),
            )
        )
        logger.info(
            "run %r: chose %s (%s %.4f)",
            name,
            describe_point(result.points[chosen]),
            objective,
            result.mean(chosen, objective),
        )

    sign = -1.0 if lower_is_better(objective) else 1.0

    def rank_key(r: RunCalibration) -> tuple[bool, float]:
        value = r.sweep.mean(r.chosen, objective)
        return (r.feasible, sign * value if not math.isnan(value) else -math.inf)

    best = max(results, key=rank_key)  # first of equals: the eval set's order
    two_stage = None
    if reranker is not None or rerank_scores is not None:
        two_stage = _two_stage(
            evalset, best, reranker, rerank_scores, rerank_score_kind, rerank_grid,
            probability_map, corpus, passages, cache_dir, on_rerank_query,
            prof=prof, rules=rules, objective=objective, constraints=cons, metrics=wanted,
            reported=reported, grid=grid, calib_rows=calib_rows, held_rows=held_rows,
            n_bootstrap=n_bootstrap, seed=seed, level=level,
        )  # fmt: skip
    return CalibrationResult(
        runs=tuple(results),
        recommended=best,
        objective=objective,
        constraints=tuple(cons),
        profile=prof,
        grid=grid,
        holdout=float(holdout),
        seed=seed,
        qids=qids,
        calibration_rows=calib_rows,
        heldout_rows=held_rows,
        evalset=evalset,
        data_sha256=data_fingerprint(evalset, names),
        files=_file_hashes(evalset, names),
        rerank=two_stage,
        stage_settings={} if stages is None else stages.config_settings(),
    )


def _two_stage(
    evalset: EvalSet,
    best: RunCalibration,
    reranker: Reranker | None,
    scores: RerankScores | None,
    score_kind: ScoreKind | str | None,
    rerank_grid: RerankGrid | None,
    method: MapMethod | str,
    corpus: Sequence[str | os.PathLike[str]],
    passages: Mapping[str, str] | None,
    cache_dir: str | os.PathLike[str] | bool | None,
    on_query: Any,
    **common: Any,
) -> TwoStageCalibration:
    """Score the recommended run's candidates (or take the given scores) and sweep the
    two-stage pipeline (:func:`ragguard.calibration.pipeline.calibrate_two_stage`)."""
    from ragguard.calibration.pipeline import RerankGrid, calibrate_two_stage
    from ragguard.calibration.rerank_scores import passage_texts, score_candidates

    if reranker is not None and scores is not None:
        raise ValueError("pass a reranker or precomputed rerank_scores, not both")
    rgrid = rerank_grid or RerankGrid()
    arrays = best.arrays
    if scores is None:
        assert reranker is not None
        depth = max(rgrid.top_n)
        pairs = {
            qid: arrays.doc_ids(row)[: int(arrays.n_valid[row])][:depth]
            for row, qid in enumerate(arrays.qids)
        }
        texts = passage_texts(evalset, corpus=corpus, passages=passages)
        scores = score_candidates(
            evalset, reranker, pairs, texts=texts, score_kind=score_kind,
            cache_dir=cache_dir, on_query=on_query,
        )  # fmt: skip
    grid: SweepGrid = common["grid"]
    return calibrate_two_stage(
        evalset,
        best.name,
        scores,
        retrieval_kernel=best.kernel,
        retrieval_chosen=best.chosen_kept,
        retrieval_baseline=best.baseline_kept,
        profile=common["prof"],
        rules=common["rules"] or UtilityRules(),
        objective=common["objective"],
        constraints=common["constraints"],
        metrics=common["metrics"],
        reported=common["reported"],
        max_k=grid.max_k,
        min_k=grid.min_k,
        calibration_rows=common["calib_rows"],
        heldout_rows=common["held_rows"],
        grid=rgrid,
        method=method,
        n_bootstrap=common["n_bootstrap"],
        seed=common["seed"],
        level=common["level"],
    )
