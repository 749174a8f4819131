"""Answerability: ``min_evidence`` certified by Learn-then-Test so that at most a share
``max_false_abstain`` of answerable queries abstain (floors set by the unanswerable calibration
queries alone, tested from the lowest up; with none, the one-sided conformal order statistic of
the in-scope queries' best scores, ``fit_in_scope``); docs/guides/calibrate.md says what it
assumes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration._format import (
    ceil_number,
    finite,
    format_interval,
    format_number,
    json_number,
    json_numbers,
)
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.fit.options import Answerability
from ragguard.calibration.fit.plan import FitPlan
from ragguard.calibration.fit.risk import (
    Certification,
    binomial_cdf,
    certify_means,
    risk_upper_bound,
)
from ragguard.calibration.fit.statistics import (
    Comparison,
    Interval,
    bootstrap_interval,
    checked_rows,
    compare,
)
from ragguard.calibration.fit.sweep import F64, ROW_CELLS, B, I, SweepKernel
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import PolicyParams, abstains, cut_ranked

if TYPE_CHECKING:
    from ragguard.calibration.data.evalset import EvalSet


MAX_FLOORS = 256
"""The most floors one calibration tests (evenly spaced among the candidates beyond)."""

DIGITS = 4
"""Significant digits of a candidate floor (``floor_above``)."""

RETRIEVAL_SCALE = "normalised retrieval score"
RERANK_SCALE = "rerank probability"


def check_max_false_abstain(evalset: EvalSet, calibration_rows: I, *, guarantee: bool) -> None:
    """Fail before any sweep when the floor cannot be calibrated."""
    if guarantee:
        raise ConfigError(
            "--max-false-abstain cannot be combined with --guarantee yet: abstentions lower "
            "the guaranteed evidence recall; calibrate one, then the other"
        )
    unanswerable = evalset.unanswerable  # none: the queries are in scope (``fit_in_scope``)
    others = set(evalset.qids).difference(unanswerable)  # judged relevant, or not judged
    if not any(
        max(labels.grades.values(), default=0) >= 1 or (labels.n_relevant or 0) > 0
        for labels in (evalset.labels[q] for q in evalset.qids if q in others)
    ):  # stops at the first query with a relevant passage
        raise EvalSetError(
            f"--max-false-abstain cannot calibrate min_evidence: none of the "
            f"{len(evalset.qids)} labelled queries has a relevant passage, so no answerable "
            "query bounds the share that abstains; add queries with relevant passages "
            "(JSONL: relevant ids; qrels: a positive grade)",
            path=evalset.source,
        )
    index = {q: i for i, q in enumerate(evalset.qids)}
    rows = np.array([index[q] for q in unanswerable], dtype=np.intp)
    if rows.size and not np.isin(rows, calibration_rows).any():
        raise EvalSetError(
            f"--max-false-abstain cannot calibrate min_evidence: all {rows.size} "
            "unanswerable queries were drawn into the held-out part; lower --holdout, "
            "change --seed or add unanswerable queries",
            path=evalset.source,
        )


def evidence_tops(arrays: EvalArrays) -> F64:
    """(Q,) the score ``min_evidence`` reads on each row of ``arrays``: the runtime
    policy's top normalised score (NaN where no score is valid), chunk by chunk."""
    out = np.empty(arrays.n_queries)
    step = max(1, ROW_CELLS // max(arrays.shape[1], 1))
    probe = PolicyParams(max_k=1)
    for lo in range(0, arrays.n_queries, step):
        hi = min(lo + step, arrays.n_queries)
        out[lo:hi] = cut_ranked(arrays.row_slice(lo, hi).ranked(), probe).top
    return out


def floor_above(top: float, digits: int = DIGITS) -> float:
    """The floor that catches a query whose best score is ``top``: the number of ``digits``
    significant digits just above it (``0.61234 -> 0.6124``, ``0.6 -> 0.6001``, ``-0.25 ->
    -0.2499``, ``0.0 -> 0.0001``)."""
    if not math.isfinite(top):
        raise ConfigError(f"a floor lies above a finite score, got {top}")
    d = Decimal(repr(float(top)))
    step = Decimal(1).scaleb(d.adjusted() - (digits - 1))
    up = d.quantize(step, rounding=ROUND_CEILING)
    if up <= d:
        up += step
    out = float(up)
    return out if out > top else math.nextafter(top, math.inf)


def candidate_floors(unanswerable_tops: F64, limit: int = MAX_FLOORS) -> F64:
    """The floors to test, increasing: ``floor_above`` each finite score of
    ``unanswerable_tops`` (one floor per distinct value); at most ``limit``, evenly
    spaced order statistics (the highest kept) when there are more."""
    tops = np.asarray(unanswerable_tops, dtype=np.float64)
    tops = tops[np.isfinite(tops)]
    floors = np.unique(np.array([floor_above(float(t)) for t in tops], dtype=np.float64))
    if floors.size > limit:
        keep = np.unique(np.round(np.linspace(0, floors.size - 1, limit)).astype(np.intp))
        floors = floors[keep]
    return floors


def fit_floor(
    answerable_tops: F64,
    floors: F64,
    *,
    max_false_abstain: float,
    confidence: float,
) -> tuple[Certification, float | None, float]:
    """Learn-then-Test along ``floors`` (increasing) on the best scores of the answerable
    calibration queries."""
    a = np.asarray(answerable_tops, dtype=np.float64)
    n = int(a.size)
    nan = np.isnan(a)  # no valid score: abstains under every floor
    lost = int(nan.sum()) + np.searchsorted(np.sort(a[~nan]), floors, side="left")  # top < floor
    risks = lost / n if n else np.ones(floors.size)
    delta = 1.0 - confidence
    cert = certify_means(risks, n, max_false_abstain, delta)
    if not cert.certified:
        return cert, None, math.nan
    last = cert.last
    return cert, float(floors[last]), risk_upper_bound(float(cert.risks[last]), n, delta)


def fit_in_scope(
    in_scope_tops: F64, *, max_false_abstain: float, confidence: float
) -> tuple[Certification, float | None, float, F64]:
    """The floor without unanswerable queries: the ``j``-th smallest best score of the
    ``n`` in-scope calibration queries (NaN counts as lowest), ``j`` the largest with
    ``P(Bin(n, X) <= j - 1) <= 1 - confidence``; then at most a share ``X`` of new in-scope
    queries score below it, with probability ``confidence`` (the order statistic's share
    is Beta(j, n - j + 1)). Returns the certification, the floor (``None``: too few queries,
    ``needed_answerable``), the exact upper bound on the share lost, and the floor tried."""
    a = np.sort(np.nan_to_num(np.asarray(in_scope_tops, np.float64), nan=-np.inf))
    n, delta = int(a.size), 1.0 - confidence
    j = 0
    while j < n and binomial_cdf(j, n, max_false_abstain) <= delta:
        j += 1  # order statistic j + 1 is certified too
    if not j or not math.isfinite(a[j - 1]):
        risk = np.array([float(np.mean(a < a[0])) if n else 1.0])
        return (
            Certification(0, np.array([binomial_cdf(0, n, max_false_abstain)]), risk, n),
            None,
            math.nan,
            a[:1],
        )
    floor = float(a[j - 1])
    lo, hi = 0.0, 1.0  # the Clopper-Pearson bound: binomial_cdf(j - 1, n, p) = delta
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if binomial_cdf(j - 1, n, mid) > delta else (lo, mid)
    p = binomial_cdf(j - 1, n, max_false_abstain)
    cert = Certification(1, np.array([p]), np.array([float(np.mean(a < floor))]), n)
    return cert, floor, hi, np.array([floor])


def _share(mask: B) -> float:
    return float(mask.mean()) if mask.size else math.nan


def needed_answerable(max_false_abstain: float, confidence: float) -> int:
    """The fewest answerable calibration queries that can certify any floor, even with
    none of them lost: the smallest ``n`` with ``(1 - X)**n <= 1 - confidence``."""
    return math.ceil(math.log(1.0 - confidence) / math.log1p(-max_false_abstain) - 1e-12)


@dataclass(frozen=True, eq=False)
class AnswerabilityResult:
    """The calibrated ``min_evidence``."""

    max_false_abstain: float
    confidence: float
    scale: str
    setting: str
    floor: float | None
    floors: F64 = field(repr=False)
    certification: Certification = field(repr=False)
    lost_bound: float
    calibration_answerable: int
    calibration_unanswerable: int
    calibration_lost: float
    calibration_caught: float
    split: str
    heldout_answerable: int
    heldout_unanswerable: int
    caught: Interval
    lost: Interval
    top: F64 = field(repr=False)
    abstained: B = field(repr=False)
    answerable: B = field(repr=False)
    unanswerable: B = field(repr=False)
    effect: Comparison | None = field(default=None, repr=False)
    level: float = 0.95

    @property
    def met(self) -> bool:
        """Whether a floor is certified (and written)."""
        return self.floor is not None

    def _where(self, n: int, what: str) -> str:
        if self.split == "held-out":
            return f"the {n} held-out {what} queries"
        return f"the {n} {what} queries (in-sample: none held out)"

    @property
    def in_scope_only(self) -> bool:
        """Whether no unanswerable query was given: the answerable ones are taken as the
        in-scope queries and the floor is their order statistic (``fit_in_scope``)."""
        return not self.calibration_unanswerable

    def statement(self) -> str:
        """The floor and its guarantee in words, with the assumptions (or why there is
        none: ``shortfall``)."""
        if self.floor is None:
            return self.shortfall()
        pct = f"{self.confidence:.0%}"
        if self.in_scope_only:
            return (
                f"min_evidence {self.floor:g} on the {self.scale} of {self.setting}: at most "
                f"{self.max_false_abstain:g} of in-scope new queries abstain, with probability "
                f">= {pct} (one-sided conformal: a low order statistic of the best scores of the "
                f"{self.calibration_answerable} answerable calibration "
                f"queries, exact binomial bound {ceil_number(self.lost_bound)}); assumes new "
                "in-scope queries exchangeable with these (same distribution of queries, corpus "
                "and retriever); no unanswerable query was given, so what it catches is not "
                "measured: a floor catches off-topic questions and noise, not on-topic "
                "questions the corpus cannot answer"
            )
        return (
            f"min_evidence {self.floor:g} on the {self.scale} of {self.setting}: at most "
            f"{self.max_false_abstain:g} of answerable new queries abstain, with "
            f"probability >= {pct} (Learn-then-Test, Hoeffding-Bentkus p-values, "
            f"fixed-sequence over {self.floors.size} floors set by the "
            f"{self.calibration_unanswerable} unanswerable calibration queries, lowest "
            f"first; {self.calibration_answerable} answerable calibration queries; "
            f"certified upper bound {ceil_number(self.lost_bound)}); assumes new queries "
            "exchangeable with these (same distribution of queries, corpus, retriever "
            "and reranker); the share of unanswerable queries caught is measured, not "
            "guaranteed"
        )

    def calibration_line(self) -> str:
        """What the floor does on the calibration queries, in one line."""
        if self.floor is None:
            return "no floor is written, so nothing abstains for lack of evidence"
        if self.in_scope_only:
            return (
                f"on the calibration queries it loses {format_number(self.calibration_lost)} "
                f"of the {self.calibration_answerable} answerable (in scope)"
            )
        return (
            f"on the calibration queries it catches {format_number(self.calibration_caught)} "
            f"of the {self.calibration_unanswerable} unanswerable and loses "
            f"{format_number(self.calibration_lost)} of the {self.calibration_answerable} "
            "answerable"
        )

    def heldout_line(self) -> str:
        """The shares caught and lost on the checked queries, with their intervals."""
        if self.floor is None:
            return "no floor is certified, so there is nothing to check on held-out queries"
        pct = f"{self.level:.0%}"
        parts = []
        for iv, n, what, verb in (
            (self.caught, self.heldout_unanswerable, "unanswerable", "catches"),
            (self.lost, self.heldout_answerable, "answerable", "loses"),
        ):
            if not n:
                parts.append(f"no {what} query is checked")
                continue
            interval = format_interval(iv.low, iv.high, signed=False)
            parts.append(
                f"{verb} {format_number(iv.mean)} {interval} of {self._where(n, what)}".replace(
                    "  ", " "
                )
            )
        check = "held-out check" if self.split == "held-out" else "in-sample check"
        return f"{check} of min_evidence {self.floor:g} ({pct} intervals): " + "; ".join(parts)

    def effect_line(self, metrics: Sequence[str]) -> str | None:
        """The written setting without and with the floor on ``metrics``, paired, or
        ``None`` without a floor or queries."""
        c = self.effect
        if c is None or not c.n_queries:
            return None
        shown = [m for m in metrics if m in c.metrics]
        if not shown:
            return None
        changes = ", ".join(
            f"{m} {format_number(c.baseline[m].mean)} -> {format_number(c.guarded[m].mean)} "
            f"({c.change(m)})"
            for m in shown
        )
        return f"with the floor {c.where()}: {changes}"

    def shortfall(self) -> str:
        """Why no floor is written (empty when one is)."""
        if self.floor is not None:
            return ""
        pct = f"{self.confidence:.0%}"
        x = self.max_false_abstain
        n = self.calibration_answerable
        need = needed_answerable(x, self.confidence)
        if self.in_scope_only:
            return (
                f"no min_evidence floor keeps the share of in-scope queries that abstain <= "
                f"{x:g} at {pct} confidence on the {n} answerable calibration queries (no "
                f"unanswerable query given; at least {need} answerable calibration queries "
                "with a score are needed)"
            )
        text = (
            f"no min_evidence floor keeps the share of answerable queries that abstain <= "
            f"{x:g} at {pct} confidence on the {n} answerable calibration queries"
        )
        if not self.floors.size:
            return text + (
                " (no unanswerable calibration query has a valid score to set a floor by)"
            )
        risk0 = float(self.certification.risks[0])
        text += (
            f" (the lowest floor tried, {self.floors[0]:g}, loses {format_number(risk0)} of them"
        )
        if n < need:
            text += f"; at least {need} answerable calibration queries are needed"
        return text + ")"

    def _calibration(self, number: Callable[[float], object]) -> dict[str, object]:
        return {
            "answerable": self.calibration_answerable,
            "unanswerable": self.calibration_unanswerable,
            "lost": number(self.calibration_lost),
            "caught": number(self.calibration_caught),
            "lost_upper_bound": number(self.lost_bound),
        }

    def provenance(self) -> dict[str, Any]:
        """The answerability part of the config's provenance (TOML-ready)."""
        out: dict[str, Any] = {
            "max_false_abstain": self.max_false_abstain,
            "confidence": self.confidence,
            "met": self.met,
            "min_evidence": "none" if self.floor is None else self.floor,
            "scale": self.scale,
            "setting": self.setting,
            "method": "Learn-then-Test, Hoeffding-Bentkus p-values, fixed-sequence testing "
            "over floors set by the unanswerable calibration queries, lowest first",
            "assumptions": "answerable queries exchangeable with the answerable calibration "
            "queries; per-query loss 1 when an answerable query abstains",
            **(
                {
                    "method": "one-sided conformal: the order statistic of the answerable "
                    "calibration queries' best scores with an exact binomial bound (no "
                    "unanswerable query given)",
                    "assumptions": "new in-scope queries exchangeable with the answerable "
                    "calibration queries; what the floor catches is not measured",
                }
                if self.in_scope_only
                else {}
            ),
            "certified_on": "calibration queries",
            "floors_tested": int(self.floors.size),
            "calibration": self._calibration(finite),
            "check": {
                "split": self.split,
                "answerable": self.heldout_answerable,
                "unanswerable": self.heldout_unanswerable,
                "caught": finite(self.caught.mean),
                "caught_interval": [finite(self.caught.low), finite(self.caught.high)],
                "lost": finite(self.lost.mean),
                "lost_interval": [finite(self.lost.low), finite(self.lost.high)],
            },
        }
        if self.floor is None:
            out["shortfall"] = self.shortfall()
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``ragguard calibrate --json``; NaN as ``None``)."""
        c = self.effect
        return {
            "max_false_abstain": self.max_false_abstain,
            "confidence": self.confidence,
            "met": self.met,
            "min_evidence": self.floor,
            "scale": self.scale,
            "setting": self.setting,
            "floors_tested": int(self.floors.size),
            "statement": self.statement(),
            "calibration": self._calibration(json_number),
            "check": {
                "split": self.split,
                "level": self.level,
                "answerable": self.heldout_answerable,
                "unanswerable": self.heldout_unanswerable,
                "caught": json_numbers(self.caught.as_dict()),
                "lost": json_numbers(self.lost.as_dict()),
            },
            "effect": None
            if c is None
            else {
                m: {
                    "without": json_number(c.baseline[m].mean),
                    "with": json_number(c.guarded[m].mean),
                    "difference": json_numbers(c.difference[m].as_dict()),
                }
                for m in c.metrics
            },
        }


def fit_answerability(
    top: F64,
    arrays: EvalArrays,
    kernel: SweepKernel,
    written: NDArray[np.integer[Any]],
    *,
    scale: str,
    setting: str,
    metrics: Sequence[str],
    plan: FitPlan,
    option: Answerability,
) -> AnswerabilityResult:
    """Calibrate ``min_evidence`` for one written setting: certified on the calibration queries,
    checked on the held-out ones."""
    calibration_rows, heldout_rows = plan.calibration_rows, plan.heldout_rows
    max_false_abstain, confidence = option.max_false_abstain, option.confidence
    n_bootstrap, seed, level = plan.check.n_bootstrap, plan.split.seed, plan.check.level
    answerable = arrays.n_evidence > 0
    unanswerable = np.asarray(arrays.unanswerable, dtype=np.bool_)
    calib = calibration_rows
    ans_cal = calib[answerable[calib]]
    un_cal = calib[unanswerable[calib]]
    if un_cal.size:
        floors = candidate_floors(top[un_cal])
        cert, floor, bound = fit_floor(
            top[ans_cal], floors, max_false_abstain=max_false_abstain, confidence=confidence
        )
    else:  # no unanswerable query: the answerable ones are the in-scope queries
        cert, floor, bound, floors = fit_in_scope(
            top[ans_cal], max_false_abstain=max_false_abstain, confidence=confidence
        )
    abstained = abstains(top, floor) if floor is not None else np.zeros(top.size, np.bool_)
    rows, split = checked_rows(calib, heldout_rows)
    ans_rows, un_rows = rows[answerable[rows]], rows[unanswerable[rows]]
    caught, lost = (
        bootstrap_interval(
            abstained[part].astype(np.float64),
            n_bootstrap=n_bootstrap,
            seed=seed,
            level=level,
            stream=stream,
        )
        for part, stream in ((un_rows, 3), (ans_rows, 4))
    )
    effect = None
    if floor is not None:
        without = written.astype(np.intp)
        with_floor = np.where(abstained, 0, without).astype(np.intp)
        effect = compare(kernel, without, with_floor, rows, metrics, **plan.bootstrap(split))
    return AnswerabilityResult(
        max_false_abstain=float(max_false_abstain),
        confidence=confidence,
        scale=scale,
        setting=setting,
        floor=floor,
        floors=floors,
        certification=cert,
        lost_bound=bound,
        calibration_answerable=int(ans_cal.size),
        calibration_unanswerable=int(un_cal.size),
        calibration_lost=_share(abstained[ans_cal]) if floor is not None else math.nan,
        calibration_caught=_share(abstained[un_cal]) if floor is not None else math.nan,
        split=split,
        heldout_answerable=int(ans_rows.size),
        heldout_unanswerable=int(un_rows.size),
        caught=caught,
        lost=lost,
        top=top,
        abstained=abstained,
        answerable=answerable,
        unanswerable=unanswerable,
        effect=effect,
        level=level,
    )
