"""OpenTelemetry spans of select() / aselect(), read back from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragguard import (
    Candidate,
    ConfigError,
    ContextGuard,
    DriftWarning,
    GuardConfig,
    ScoreReference,
)
from ragguard.drift import STEP

QUERY = "what was my 500 lb deadlift PR"
CANDIDATES = [
    Candidate("a", score=0.9),
    Candidate("b", score=None),
    Candidate("c", score=0.8),
    Candidate("d", score=0.2),  # below 0.5 x 0.9
    Candidate("e", score=0.7),
    Candidate("f", score=0.6),  # fourth above the bar: over max_k=3
]


def guard_spans(exporter: InMemorySpanExporter) -> Sequence[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "ragguard.select"]


def test_select_records_a_span_with_counts_per_reason_and_the_rule(
    spans: InMemorySpanExporter,
) -> None:
    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.5, score_kind="similarity"))
    selection = guard.select(QUERY, CANDIDATES)
    assert [c.id for c in selection.kept] == ["a", "c", "e"]
    (span,) = guard_spans(spans)
    attributes = dict(span.attributes or {})
    assert attributes.pop("ragguard.duration_ms") > 0  # type: ignore[operator]
    assert attributes == {
        "ragguard.candidates": 6,
        "ragguard.kept": 3,
        "ragguard.dropped": 3,
        "ragguard.dropped.below_relative_threshold": 1,
        "ragguard.dropped.invalid_score": 1,
        "ragguard.dropped.over_max_k": 1,
        "ragguard.cut": "none",
        "ragguard.max_k": 3,
        "ragguard.min_k": 1,
        "ragguard.relative_threshold": 0.5,
        "ragguard.score_kind": "similarity",
        "ragguard.profile": "support",
        "ragguard.warnings": 0,
        "ragguard.rerank.enabled": False,
        "ragguard.verdict": "answerable",
        "ragguard.conflict_groups": 0,
        "ragguard.score.top": 0.9,  # the scores the drift watch reads: the best one ...
        "ragguard.score.cut": 0.7,  # ... and the lowest kept (e)
    }
    assert span.kind is trace.SpanKind.INTERNAL and span.status.status_code is StatusCode.UNSET
    assert QUERY not in str(span.to_json())  # no content is recorded


PLANT = (
    "In 2019 the Austin plant of the company built {} electric cars and employed about two "
    "thousand people on three shifts."
)


def test_the_verdict_and_the_conflict_groups_are_recorded(spans: InMemorySpanExporter) -> None:
    settings = {"max_k": 3, "relative_threshold": 0.0, "score_kind": "similarity",
                "min_evidence": 0.5}  # fmt: skip
    guard = ContextGuard(GuardConfig(conflicts="flag", **settings))
    texts = [PLANT.format("3,559"), PLANT.format("4,112"), "Lunch is served from noon."]
    cands = [
        Candidate(f"p{i}", t, s)
        for i, (t, s) in enumerate(zip(texts, [0.9, 0.8, 0.7], strict=True))
    ]
    assert guard.select(QUERY, cands).verdict.value == "conflict"
    assert guard.select(QUERY, [Candidate("x", "t", 0.2)]).kept == []  # below min_evidence
    asyncio.run(guard.aselect(QUERY, cands[2:]))
    flagged, abstained, plain = (dict(s.attributes or {}) for s in guard_spans(spans))
    assert (flagged["ragguard.verdict"], flagged["ragguard.conflict_groups"]) == ("conflict", 1)
    assert flagged["ragguard.conflict_mode"] == "flag"
    assert flagged["ragguard.min_evidence"] == 0.5
    assert (abstained["ragguard.verdict"], abstained["ragguard.conflict_groups"]) == (
        "insufficient",
        0,
    )
    assert abstained["ragguard.dropped.insufficient_evidence"] == 1
    assert abstained["ragguard.score.top"] == 0.2 and "ragguard.score.cut" not in abstained
    assert (plain["ragguard.verdict"], plain["ragguard.conflict_groups"]) == ("answerable", 0)
    # drop: the group is still counted, its members are dropped for the conflict
    guard = ContextGuard(GuardConfig(conflicts="drop", **settings))
    guard.select(QUERY, cands)
    dropped = dict(guard_spans(spans)[-1].attributes or {})
    assert (dropped["ragguard.verdict"], dropped["ragguard.conflict_groups"]) == ("answerable", 1)
    assert dropped["ragguard.dropped.conflict"] == 2 and dropped["ragguard.kept"] == 1


def test_the_span_is_a_child_of_the_current_span_and_aselect_records_too(
    spans: InMemorySpanExporter,
) -> None:
    guard = ContextGuard(max_k=2, relative_threshold=0.0, score_kind="similarity")
    with trace.get_tracer("app").start_as_current_span("retrieve-and-answer") as parent:
        asyncio.run(guard.aselect(QUERY, CANDIDATES, max_k=1))
    (span,) = guard_spans(spans)
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.attributes is not None
    assert span.attributes["ragguard.kept"] == 1 and span.attributes["ragguard.max_k"] == 1
    assert span.attributes["ragguard.dropped.over_max_k"] == 4


def test_a_selection_routed_to_a_domain_records_it_and_its_settings(
    spans: InMemorySpanExporter,
) -> None:
    config = GuardConfig(max_k=3, score_kind="similarity", domains={"legal": {"max_k": 1}})
    guard = ContextGuard(config)
    guard.select(QUERY, CANDIDATES, domain="legal")
    guard.select(QUERY, CANDIDATES)
    routed, plain = (span.attributes or {} for span in guard_spans(spans))
    assert routed["ragguard.domain"] == "legal" and routed["ragguard.max_k"] == 1
    assert "ragguard.domain" not in plain and plain["ragguard.max_k"] == 3


def test_the_drift_alarm_is_recorded_on_the_span_of_the_call_that_raised_it(
    spans: InMemorySpanExporter,
) -> None:
    top = [0.5 + 0.4 * i / 99 for i in range(100)]
    reference = ScoreReference.of(top, top, [1] * 100)
    guard = ContextGuard(
        GuardConfig(score_kind="similarity", max_k=1, reference=reference, monitor=True)
    )
    with pytest.warns(DriftWarning):
        for i in range(STEP + 1):
            guard.select(QUERY, [Candidate("a", score=0.1 + i / 1000)])
    recorded = [dict(s.attributes or {}) for s in guard_spans(spans)]
    alarms = [i for i, a in enumerate(recorded) if "ragguard.drift.alarm" in a]
    assert alarms == [STEP - 1]
    alarm = recorded[STEP - 1]
    report = guard.drift()
    assert alarm["ragguard.drift.moved"] == "top,cut"
    assert alarm["ragguard.drift.statistic"] == report.statistic == 1.0
    assert alarm["ragguard.drift.threshold"] == report.threshold
    assert alarm["ragguard.warnings"] == 1


def test_a_rerank_stage_names_its_model_and_its_rule(spans: InMemorySpanExporter) -> None:
    def overlap(query: str, texts: Sequence[str]) -> list[float]:
        return [0.9, 0.1, 0.8][: len(texts)]

    overlap.score_kind = "probability"  # type: ignore[attr-defined]
    config = GuardConfig(
        max_k=3,
        relative_threshold=0.5,
        score_kind="similarity",
        rerank={"enabled": True, "top_n": 3, "relative_threshold": 0.6, "min_score": 0.05},
    )
    cands = [Candidate(i, text=i, score=s) for i, s in [("x", 0.9), ("y", 0.8), ("z", 0.7)]]
    selection = ContextGuard(config, reranker=overlap).select(QUERY, cands)
    assert [c.id for c in selection.kept] == ["x", "z"]  # 0.1 < 0.6 x 0.9
    (span,) = guard_spans(spans)
    a = span.attributes or {}
    assert a["gen_ai.request.model"] == overlap.__qualname__
    assert a["ragguard.rerank.enabled"] is True and a["ragguard.rerank.failed"] is False
    assert a["ragguard.rerank.top_n"] == 3 and a["ragguard.rerank.cache_hits"] == 0
    assert a["ragguard.relative_threshold"] == 0.6 and a["ragguard.min_score"] == 0.05
    assert a["ragguard.dropped.below_relative_threshold"] == 1
    assert isinstance(a["ragguard.rerank.duration_ms"], float)


def test_a_failed_call_records_the_error(spans: InMemorySpanExporter) -> None:
    guard = ContextGuard(max_k=2, score_kind="similarity")
    with pytest.raises(ConfigError, match="max_k must be an int"):
        guard.select(QUERY, CANDIDATES, max_k=0)
    (span,) = guard_spans(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "ConfigError"
    assert [e.name for e in span.events] == ["exception"]


def test_a_tracer_that_raises_never_breaks_the_selection_and_is_reported_once() -> None:
    # OT-03: a tracer out of OpenTelemetry's no-throw contract made select() raise
    code = """
import asyncio
from opentelemetry import trace
class T:
    def start_as_current_span(self, *a, **k): raise RuntimeError("exporter down")
class P:
    def get_tracer(self, *a, **k): return T()
trace.set_tracer_provider(P())
from ragguard import Candidate, ContextGuard
guard = ContextGuard(score_kind="similarity", max_k=1)
cands = [Candidate("a", "t", 0.9), Candidate("b", "u", 0.8)]
for _ in range(2):
    print([c.id for c in guard.select("q", cands).kept])
print([c.id for c in asyncio.run(guard.aselect("q", cands)).kept])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['a']", "['a']", "['a']"]
    # logged once, at WARNING (Python's last-resort handler prints it: no logging set up)
    assert out.stderr.strip().splitlines() == [
        "OpenTelemetry tracing of ragguard.select failed while starting its span "
        "(RuntimeError: exporter down); the selection is made and returned as without "
        "tracing. Check the tracer provider, span processors and exporter the application "
        "set up (further failures are logged at DEBUG)"
    ]


class FailingProcessor(SpanProcessor):
    """A span processor that raises when a span starts or ends, while armed."""

    def __init__(self) -> None:
        self.fail_on: str | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.fail_on == "start":
            raise RuntimeError("collector unreachable")

    def on_end(self, span: ReadableSpan) -> None:
        if self.fail_on == "end":
            raise RuntimeError("collector unreachable")


@pytest.mark.parametrize("fail_on", ["start", "end"])
def test_a_span_processor_that_raises_never_breaks_the_selection(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture, fail_on: str
) -> None:
    processor = FailingProcessor()
    provider.add_span_processor(processor)  # the SDK cannot remove it: disarmed below
    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.5, score_kind="similarity"))
    processor.fail_on = fail_on
    try:
        with caplog.at_level(logging.DEBUG, logger="ragguard._tracing"):
            kept = [c.id for c in guard.select(QUERY, CANDIDATES).kept]
            with pytest.raises(ConfigError, match="max_k must be an int"):  # its own error
                guard.select(QUERY, CANDIDATES, max_k=0)
    finally:
        processor.fail_on = None
    assert kept == ["a", "c", "e"]
    step = "starting its span" if fail_on == "start" else "ending its span"
    records = [r for r in caplog.records if r.name == "ragguard._tracing"]
    assert len(records) == 2 and all(step in r.getMessage() for r in records)
    assert all("RuntimeError: collector unreachable" in r.getMessage() for r in records)
    assert [r.levelno for r in records].count(logging.WARNING) <= 1  # once per process


def test_select_works_without_opentelemetry_and_tries_the_import_once() -> None:
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
import importlib.util
from ragguard import Candidate, ContextGuard, _tracing
looks = []
real_find_spec = importlib.util.find_spec
def counting(name, *args):
    looks.append(name)
    return real_find_spec(name, *args)
importlib.util.find_spec = counting
guard = ContextGuard(max_k=1, score_kind="similarity")
for _ in range(3):
    kept = guard.select("q", [Candidate("a", score=0.9), Candidate("b", score=0.8)]).kept
print([c.id for c in kept], _tracing._tracer, looks)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['a'] None ['opentelemetry']"  # looked for once
