"""OpenTelemetry spans for [`ContextGuard.select`][ragguard.ContextGuard.select] / ``aselect``
(extra ``otel``; attributes in docs/operations/tracing.md). ``opentelemetry`` is looked up on
the first call; a failing tracer never breaks a selection (logged once at WARNING, then DEBUG)."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ragguard._version import __version__
from ragguard.drift import DriftReport
from ragguard.policy import ConflictMode
from ragguard.select_stages import scores_read

if TYPE_CHECKING:
    from ragguard.candidate import Selection
    from ragguard.config import GuardConfig
    from ragguard.selecting import State

SPAN_NAME = "ragguard.select"

Record = Callable[["Selection", "State"], "Selection"]

logger = logging.getLogger(__name__)
_report_lock = threading.Lock()
_reported = False  # a tracing failure was logged at WARNING in this process


def _failed(step: str, exc: Exception) -> None:
    """Log a tracing failure: at WARNING the first time in the process, then at DEBUG."""
    global _reported
    with _report_lock:
        level = logging.DEBUG if _reported else logging.WARNING
        _reported = True
    logger.log(
        level,
        "OpenTelemetry tracing of ragguard.select failed while %s (%s: %s); the selection "
        "is made and returned as without tracing. Check the tracer provider, span "
        "processors and exporter the application set up (further failures are logged "
        "at DEBUG)",
        step,
        type(exc).__name__,
        exc,
    )


def _identity(selection: Selection, state: State) -> Selection:
    return selection


_OFF: nullcontext[Record] = nullcontext(_identity)  # tracing off: the selection as it is
_UNDECIDED: Any = object()
_tracer: Any = _UNDECIDED  # the tracer, or None when opentelemetry cannot be imported
_provider: Callable[[], object] = object  # opentelemetry's get_tracer_provider
_silent: tuple[type, ...] = ()  # the providers that record nothing (none configured)


def _decide() -> Any:
    """The tracer for ragguard's spans, or ``None`` when opentelemetry-api is absent."""
    global _tracer, _provider, _silent
    tracer = None
    if importlib.util.find_spec("opentelemetry") is not None:
        try:
            from opentelemetry import trace
        except ImportError:
            pass
        else:
            tracer = trace.get_tracer("ragguard", __version__)
            _provider = trace.get_tracer_provider
            _silent = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    _tracer = tracer
    return tracer


class _Span:
    """A span, current while the call runs; what the tracer raises never reaches the caller."""

    __slots__ = ("_config", "_context", "_max_k", "_span", "_start", "_tracer")

    def __init__(self, tracer: Any, config: GuardConfig, max_k: int | None) -> None:
        self._tracer = tracer
        self._config = config
        self._max_k = max_k
        self._context: Any = None
        self._span: Any = None
        self._start = 0.0

    def __enter__(self) -> Record:
        try:
            context = self._tracer.start_as_current_span(SPAN_NAME)
            self._span = context.__enter__()
        except Exception as exc:
            _failed("starting its span", exc)
            return _identity
        self._context = context
        self._start = time.perf_counter()
        return self.record

    def record(self, selection: Selection, state: State) -> Selection:
        try:
            if self._span.is_recording():
                elapsed_ms = (time.perf_counter() - self._start) * 1000.0
                self._span.set_attributes(
                    attributes(selection, self._config, self._max_k, elapsed_ms, state)
                )
        except Exception as exc:
            _failed("recording its attributes", exc)
        return selection

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if self._context is None:  # the span never started
            return
        try:
            if exc_type is not None and self._span.is_recording():
                self._span.set_attribute("error.type", exc_type.__qualname__)
            self._context.__exit__(exc_type, exc, tb)
        except Exception as error:
            if error is not exc:  # the call's own error goes on as it is
                _failed("ending its span", error)


def selecting(config: GuardConfig, max_k: int | None) -> nullcontext[Record] | _Span:
    """The context of one select() call; entering it gives what records its selection."""
    tracer = _tracer if _tracer is not _UNDECIDED else _decide()
    if tracer is None or isinstance(_provider(), _silent):  # no provider: no-op spans
        return _OFF
    return _Span(tracer, config, max_k)


def attributes(
    selection: Selection, config: GuardConfig, max_k: int | None, elapsed_ms: float, state: State
) -> dict[str, str | bool | int | float]:
    """The span attributes of one selection (see the module docstring); ``state``: its
    call's, for the scores the cut read and a drift alarm."""
    outcome, kind = selection.rerank, selection.score_kind
    reranked = outcome is not None and not outcome.failed
    params = config.rerank_policy_params() if reranked else config.policy_params()
    cap = params.max_k if max_k is None else max_k
    out: dict[str, str | bool | int | float] = {
        "ragguard.candidates": len(selection.candidates),
        "ragguard.kept": len(selection.kept),
        "ragguard.dropped": len(selection.dropped),
        "ragguard.cut": params.cut.value,
        "ragguard.max_k": cap,
        "ragguard.min_k": min(params.min_k, cap),
        "ragguard.relative_threshold": params.relative_threshold,
        "ragguard.score_kind": "none" if kind is None else kind.value,
        "ragguard.profile": config.profile,
        "ragguard.warnings": len(selection.warnings),
        "ragguard.rerank.enabled": config.rerank.enabled,
        "ragguard.duration_ms": elapsed_ms,
        "ragguard.verdict": selection.verdict.value,
        "ragguard.conflict_groups": len(selection.conflicts),
    }
    if params.min_score is not None:
        out["ragguard.min_score"] = params.min_score
    if params.min_evidence is not None:
        out["ragguard.min_evidence"] = params.min_evidence
    if params.conflicts is not ConflictMode.OFF:
        out["ragguard.conflict_mode"] = params.conflicts.value
    if selection.domain is not None:
        out["ragguard.domain"] = selection.domain
    top, cut = scores_read(state)
    if top == top:  # not NaN
        out["ragguard.score.top"] = top
    if cut == cut:
        out["ragguard.score.cut"] = cut
    for w in state.warnings:
        if isinstance(w.key, DriftReport):  # the alarm fired on this call
            d = w.key
            out["ragguard.drift.alarm"] = True
            out["ragguard.drift.moved"] = ",".join(d.moved)
            out["ragguard.drift.statistic"] = d.statistic
            out["ragguard.drift.threshold"] = d.threshold
    reasons = Counter(d.reason.value for d in selection.dropped if d.reason is not None)
    for reason, count in sorted(reasons.items()):
        out[f"ragguard.dropped.{reason}"] = count
    if outcome is not None:
        out["gen_ai.request.model"] = outcome.reranker
        out["ragguard.rerank.top_n"] = outcome.top_n
        out["ragguard.rerank.failed"] = outcome.failed
        out["ragguard.rerank.cache_hits"] = outcome.cache_hits
        out["ragguard.rerank.duration_ms"] = outcome.elapsed_ms
    return out
