"""The drift watch (docs/guides/production.md): what the scores looked like over the
calibration queries (``ScoreReference``, TOML ``[reference]``) and the monitor that tests
the guard's own calls against it (``DriftMonitor``: the test and its false-alarm scheme)."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import ConfigDict, Field, field_validator

from ragguard._fields import ConfigModel

LEVELS = np.linspace(0.0, 1.0, 21)
"""The quantile levels the reference records: 0, 0.05, ..., 1 (minimum to maximum)."""
ALPHA = 0.01
"""The chance that a guard whose scores follow the reference ever alarms."""
STEP = 50
"""Selections (with a valid score) between two checkpoints."""
WINDOW = 500
"""The selections a checkpoint tests: the last ``WINDOW`` (memory: 3 x ``WINDOW`` floats)."""
QUANTITIES = ("top", "cut", "kept")
NAMES = {"top": "the top score", "cut": "the score at the cut", "kept": "passages kept"}


class Quantiles(ConfigModel):
    """One quantity over the calibration queries: its ``n`` values' quantiles at ``LEVELS``
    (``numpy.quantile(..., method="inverted_cdf")``: each is one of the values)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=1, description="Calibration queries the quantity was measured on.")
    quantiles: list[float] = Field(
        description="Its quantiles at 0, 0.05, ..., 1 (21 values, non-decreasing)."
    )

    @field_validator("quantiles")
    @classmethod
    def _shape(cls, value: list[float]) -> list[float]:
        q = np.asarray(value, dtype=np.float64)
        if q.shape != LEVELS.shape or not np.isfinite(q).all() or (np.diff(q) < 0).any():
            raise ValueError(
                f"must be {LEVELS.size} finite, non-decreasing numbers (the quantiles at "
                "0, 0.05, ..., 1); write it again with ragguard calibrate"
            )
        return value

    @classmethod
    def of(cls, values: ArrayLike) -> Quantiles | None:
        """The quantiles of ``values`` (NaN ones left out); ``None`` when none is finite."""
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return None
        q = np.quantile(v, LEVELS, method="inverted_cdf")
        return cls(n=int(v.size), quantiles=[round(float(x), 6) for x in q])

    @cached_property
    def _bounds(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """The distinct quantiles ``v``, and the lower and upper bounds of ``F(v)`` then
        ``F(v-)`` at them (see ``distance``), computed once."""
        q = np.asarray(self.quantiles)
        values, first, counts = np.unique(q, return_index=True, return_counts=True)
        last = first + counts - 1
        top = LEVELS.size - 1
        at_hi = np.where(last < top, LEVELS[np.minimum(last + 1, top)], 1.0)
        left_lo = np.where(first > 0, LEVELS[np.maximum(first - 1, 0)], 0.0)
        left_hi = LEVELS[first].copy()
        left_hi[0] = 0.0  # below the minimum: F is 0
        return values, np.concatenate((LEVELS[last], left_lo)), np.concatenate((at_hi, left_hi))

    def distance(self, window: NDArray[np.float64]) -> float:
        """A lower bound of the Kolmogorov-Smirnov distance between the sorted ``window``
        and the calibration values: at each distinct quantile ``v``, the reference's
        distribution function ``F(v)`` lies in ``[level of its last copy, next level)``
        and ``F(v-)`` in ``[previous level, level of its first copy]``; below the minimum
        ``F`` is 0, at the maximum 1."""
        values, lo, hi = self._bounds
        at = (
            np.concatenate(
                (np.searchsorted(window, values, "right"), np.searchsorted(window, values, "left"))
            )
            / window.size
        )
        return max(0.0, float(np.maximum(lo - at, at - hi).max()))


class ScoreReference(ConfigModel):
    """What the scores looked like over the calibration queries under the written setting
    (``[reference]`` of a config ``ragguard calibrate`` writes); read by the monitor
    (``GuardConfig.monitor``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    top: Quantiles = Field(description="The best normalised score the cut read.")
    cut: Quantiles | None = Field(
        default=None, description="The lowest score the cut kept (queries that kept one)."
    )
    kept: Quantiles = Field(description="How many passages were kept.")

    @classmethod
    def of(cls, top: ArrayLike, cut: ArrayLike, kept: ArrayLike) -> ScoreReference | None:
        """The reference of per-query values (NaN: none; the queries without a top score
        are left out of all three); ``None`` when no query has a valid top score."""
        t = np.asarray(top, dtype=np.float64)
        valid = np.isfinite(t)
        top_q = Quantiles.of(t[valid])
        kept_q = Quantiles.of(np.asarray(kept, dtype=np.float64)[valid])
        if top_q is None or kept_q is None:
            return None
        cut_q = Quantiles.of(np.asarray(cut, dtype=np.float64)[valid])
        return cls(top=top_q, cut=cut_q, kept=kept_q)


def critical_distance(alpha: float, n: int, m: int) -> float:
    """The two-sample Kolmogorov-Smirnov distance of samples of sizes ``n`` and ``m``
    that is exceeded with probability at most ``alpha`` when both come from one
    distribution: ``sqrt(ln(2 / alpha) / 2) / (sqrt(e) + 0.12 + 0.11 / sqrt(e))``,
    ``e = n m / (n + m)`` (the Kolmogorov tail bound ``2 exp(-2 x^2)`` with Stephens'
    small-sample correction)."""
    root = math.sqrt(n * m / (n + m))
    return math.sqrt(math.log(2.0 / alpha) / 2.0) / (root + 0.12 + 0.11 / root)


@dataclass(frozen=True)
class DriftReport:
    """What the drift watch found ([`ContextGuard.drift`][ragguard.ContextGuard.drift],
    ``ragguard drift``).

    Attributes:
        alarm: the scores stopped looking like calibration's at a checkpoint.
        queries: selections observed (with a valid score).
        skipped: selections without a valid top score (NaN, no candidates scored, a
            failed rerank call), left out.
        statistic: the Kolmogorov-Smirnov distance of ``quantity`` at the alarm, or at
            the last checkpoint (NaN before the first).
        threshold: the distance it was tested against there.
        quantity: the quantity closest to (or past) its threshold: ``top``, ``cut`` or
            ``kept`` (``None`` before the first checkpoint).
        moved: every quantity past its threshold (empty without an alarm).
        checkpoint: the checkpoints tested so far (the alarm's, after one).
        at: the selection the alarm fired on (``None``: no alarm).
        alpha: the false-alarm rate over the guard's whole life (``ALPHA``).
    """

    alarm: bool = False
    queries: int = 0
    skipped: int = 0
    statistic: float = math.nan
    threshold: float = math.nan
    quantity: str | None = None
    moved: tuple[str, ...] = ()
    checkpoint: int = 0
    at: int | None = None
    alpha: float = ALPHA

    def __str__(self) -> str:
        skipped = f", {self.skipped} without a valid score skipped" if self.skipped else ""
        if self.quantity is None:
            return (
                f"drift: no checkpoint yet ({self.queries} selections{skipped}; the first "
                f"test comes at {STEP})"
            )
        dist = f"KS distance {self.statistic:.3f}"
        if self.alarm:
            moved = ", ".join(NAMES[q] for q in self.moved)
            return (
                f"drift: ALARM at selection {self.at}: moved away from calibration's: "
                f"{moved} ({NAMES[self.quantity]}: {dist} > {self.threshold:.3f} at "
                f"checkpoint {self.checkpoint}; false-alarm rate {self.alpha:g} over the "
                f"guard's life); {self.queries} selections{skipped}. Recalibrate on "
                "current queries (docs: Keeping a config true in production)"
            )
        return (
            f"drift: no alarm after {self.queries} selections{skipped} ({self.checkpoint} "
            f"checkpoints; closest: {NAMES[self.quantity]}, {dist} against "
            f"{self.threshold:.3f}; false-alarm rate {self.alpha:g} over the guard's life)"
        )


class DriftMonitor:
    """Tests the last ``WINDOW`` selections against ``reference`` after every ``STEP``.
    Thread-safe; memory: 3 x ``WINDOW`` floats.

    Three quantities per selection: ``top``, the best normalised score the cut read (the
    rerank probability with the rerank stage on); ``cut``, the lowest score it kept;
    ``kept``, how many passages the selection kept. At checkpoint ``j`` (1, 2, ...) a
    two-sample Kolmogorov-Smirnov test per quantity spends ``ALPHA / (j (j + 1))``, split
    evenly over the three (Bonferroni): the spendings sum to ``ALPHA``, the chance that a
    guard whose scores keep following the reference ever alarms, however long it runs.
    The distance is read at the reference's quantiles only (``Quantiles.distance``), so it
    never exceeds the exact two-sample distance: the test is conservative. Its
    assumption: production queries are exchangeable with the calibration queries while
    nothing drifts.

    Args:
        reference: what the scores looked like over the calibration queries.
    """

    def __init__(self, reference: ScoreReference) -> None:
        self.reference = reference
        self._window = [[math.nan] * WINDOW for _ in QUANTITIES]  # ring buffers
        self._n = 0
        self._skipped = 0
        self._last = DriftReport()
        self._lock = threading.Lock()

    def add(self, top: float, cut: float, kept: int) -> DriftReport | None:
        """Record one selection; returns the report when this call raised the alarm (once
        per monitor), else ``None``. A NaN ``top`` is counted as skipped; a NaN ``cut``
        (nothing kept) is left out of the ``cut`` test only."""
        if top != top:  # NaN (the normalised scores the cut reads are finite otherwise)
            with self._lock:
                self._skipped += 1
            return None
        with self._lock:
            tops, cuts, kepts = self._window
            i = self._n % WINDOW
            tops[i] = top
            cuts[i] = cut
            kepts[i] = kept
            self._n += 1
            if self._last.alarm or self._n % STEP:
                return None
            self._last = report = self._test()
        return report if report.alarm else None

    def feed(self, observations: Sequence[tuple[float, float, int]]) -> DriftReport:
        """``add`` each of ``observations`` in order; the report after the last."""
        for top, cut, kept in observations:
            self.add(top, cut, kept)
        return self.report()

    def report(self) -> DriftReport:
        """The state of the watch now (see ``DriftReport``)."""
        with self._lock:
            last, n, skipped = self._last, self._n, self._skipped
        return replace(last, queries=n, skipped=skipped)

    def _test(self) -> DriftReport:
        """The checkpoint after ``self._n`` selections (called under the lock)."""
        j = self._n // STEP
        alpha = ALPHA / (j * (j + 1)) / len(QUANTITIES)
        window = np.array(self._window)[:, : min(self._n, WINDOW)]
        found: list[tuple[float, str, float, float]] = []
        for row, name in enumerate(QUANTITIES):
            ref: Quantiles | None = getattr(self.reference, name)
            values = window[row][~np.isnan(window[row])]
            if ref is None or values.size == 0:
                continue
            stat = ref.distance(np.sort(values))
            bar = critical_distance(alpha, int(values.size), ref.n)
            found.append((stat / bar, name, stat, bar))
        if not found:
            return DriftReport(queries=self._n, checkpoint=j)
        _, name, stat, bar = max(found)
        moved = tuple(n for ratio, n, _, _ in found if ratio > 1.0)
        return DriftReport(
            alarm=bool(moved),
            queries=self._n,
            statistic=stat,
            threshold=bar,
            quantity=name,
            moved=moved,
            checkpoint=j,
            at=self._n if moved else None,
        )


# --------------------------------------------------------------------------- selection logs

SPAN_NAME = "ragguard.select"
_SPACE = re.compile(r"\s*")
Observation = tuple[float, float, int]


@dataclass(frozen=True)
class SelectionLog:
    """What ``read_log`` found in a log of ``ragguard.select`` spans.

    Attributes:
        observations: ``(top, cut, kept)`` of each span, in file order (NaN: not
            recorded).
        spans: ``ragguard.select`` spans read.
        problems: one line per record that could not be read (``line N: why``).
    """

    observations: tuple[Observation, ...]
    spans: int
    problems: tuple[str, ...]


def _otlp_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` (``{"intValue": "3"}``, ``{"doubleValue": 0.8}``, ...)."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, v),) = value.items()
        return int(v) if kind == "intValue" else v
    return value


def _span_attributes(record: Any) -> list[dict[str, Any]]:
    """The attributes of each ``ragguard.select`` span of one JSON record: an OTLP/JSON
    export (``resourceSpans``, as the OpenTelemetry Collector's file exporter writes it),
    a span of the SDK's ``ConsoleSpanExporter`` (``span.to_json()``), or a flat object of
    the span's attributes."""
    if not isinstance(record, dict):
        return []
    if "resourceSpans" in record:
        return [
            {a["key"]: _otlp_value(a.get("value")) for a in span.get("attributes", [])}
            for resource in record["resourceSpans"]
            for scope in resource.get("scopeSpans", resource.get("instrumentationLibrarySpans", []))
            for span in scope.get("spans", [])
            if span.get("name") == SPAN_NAME
        ]
    if record.get("name") == SPAN_NAME and isinstance(record.get("attributes"), dict):
        return [record["attributes"]]
    return [record] if "ragguard.kept" in record else []


def _number(attributes: dict[str, Any], key: str) -> float:
    value = attributes.get(key, math.nan)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}={value!r} is not a number")
    return float(value)


def read_log(text: str) -> SelectionLog:
    """The ``(top, cut, kept)`` of every ``ragguard.select`` span in ``text``: JSON records,
    one per line or pretty-printed one after another (each starting a line with ``{``),
    in any of the forms ``_span_attributes`` reads. A record that is not JSON, or a span
    whose ``ragguard.kept``, ``ragguard.score.top`` or ``ragguard.score.cut`` is not a
    number, is one line of ``problems``; other records are ignored."""
    decoder = json.JSONDecoder()
    found: list[Observation] = []
    problems: list[str] = []
    spans = 0
    pos = _SPACE.match(text).end()  # type: ignore[union-attr]
    while pos < len(text):
        line = text.count("\n", 0, pos) + 1
        try:
            record, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
            problems.append(f"line {line}: not JSON ({why}); skipped")
            nxt = text.find("\n{", pos)
            pos = len(text) if nxt < 0 else nxt + 1
            continue
        pos = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        try:
            spans_here = _span_attributes(record)
        except (AttributeError, KeyError, TypeError, ValueError):
            problems.append(f"line {line}: a resourceSpans record of unexpected shape; skipped")
            continue
        for attributes in spans_here:
            spans += 1
            try:
                kept = _number(attributes, "ragguard.kept")
                if math.isnan(kept):
                    raise ValueError("it has no ragguard.kept")
                top = _number(attributes, "ragguard.score.top")
                cut = _number(attributes, "ragguard.score.cut")
            except ValueError as exc:
                problems.append(f"line {line}: a ragguard.select span of no use: {exc}; skipped")
                continue
            found.append((top, cut, int(kept)))
    return SelectionLog(tuple(found), spans, tuple(problems))
