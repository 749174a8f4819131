"""``ragguard drift LOG``: a guard's spans, written as a user's exporter writes them, read
back offline say what the guard's own ``drift()`` says; a bad log is one clear line."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragguard import Candidate, ContextGuard, DriftWarning, GuardConfig, ScoreReference
from tests.cli.checks import error_line, invoke

FACTORS = (1.0, 0.9, 0.85, 0.6, 0.5)


def console_json(spans: Sequence[ReadableSpan]) -> str:
    """What the SDK's ConsoleSpanExporter writes: each span's pretty JSON, one after another."""
    return "".join(s.to_json() + "\n" for s in spans)


def _otlp(value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # OTLP/JSON writes 64-bit integers as strings
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def otlp_lines(spans: Sequence[ReadableSpan]) -> str:
    """What the OpenTelemetry Collector's file exporter writes: OTLP/JSON, a line per batch
    (here two spans a batch, with a span of another instrumentation among them)."""
    lines = []
    for i in range(0, len(spans), 2):
        batch = [
            {
                "name": s.name,
                "attributes": [
                    {"key": k, "value": _otlp(v)} for k, v in (s.attributes or {}).items()
                ],
            }
            for s in spans[i : i + 2]
        ]
        batch.append({"name": "http.get", "attributes": []})
        record = {"resourceSpans": [{"scopeSpans": [{"spans": batch}]}]}
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def attribute_lines(spans: Sequence[ReadableSpan]) -> str:
    """One object of span attributes per line (an application that logs them itself)."""
    return "".join(json.dumps(dict(s.attributes or {})) + "\n" for s in spans)


def run_guard(
    tmp_path: Path, spans: InMemorySpanExporter, squash: bool
) -> tuple[ContextGuard, Path, list[ReadableSpan]]:
    rng = np.random.default_rng(11)
    top = rng.uniform(0.5, 0.9, 300)
    reference = ScoreReference.of(top, 0.85 * top, np.full(300, 3))
    settings = {"score_kind": "similarity", "max_k": 4, "relative_threshold": 0.8}
    config = GuardConfig(reference=reference, **settings).save(tmp_path / "ragguard.toml")
    guard = ContextGuard.from_file(config, monitor=True)
    with pytest.warns(DriftWarning) if squash else nullcontext():
        for t in rng.uniform(0.5, 0.9, 180):
            score = float(t) ** 2 if squash else float(t)
            guard.select("q", [Candidate(f"p{i}", score=score * f) for i, f in enumerate(FACTORS)])
    recorded = [s for s in spans.get_finished_spans() if s.name == "ragguard.select"]
    assert len(recorded) == 180
    return guard, config, list(recorded)


@pytest.mark.parametrize("write", [console_json, otlp_lines, attribute_lines])
@pytest.mark.parametrize("squash", [False, True], ids=["steady", "squashed"])
def test_the_log_says_what_the_guard_said(
    tmp_path: Path,
    spans: InMemorySpanExporter,
    write: Callable[[Sequence[ReadableSpan]], str],
    squash: bool,
) -> None:
    guard, config, recorded = run_guard(tmp_path, spans, squash)
    log = tmp_path / "spans.log"
    log.write_text(write(recorded), encoding="utf-8")
    result = invoke("drift", log, "--config", config)
    assert result.exit_code == (3 if squash else 0), result.output
    report = guard.drift()
    assert report.alarm is squash
    assert result.stdout.splitlines() == [f"{log}: 180 ragguard.select spans read", str(report)]
    assert result.stderr == ""


def test_corrupt_records_are_one_warning_line_each_and_the_rest_is_read(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    _, config, recorded = run_guard(tmp_path, spans, squash=False)
    lines = attribute_lines(recorded).splitlines()
    broken = json.loads(lines[5])
    broken["ragguard.score.top"] = "high"
    lines[3] = lines[3][: len(lines[3]) // 2]  # truncated
    lines[5] = json.dumps(broken)
    log = tmp_path / "spans.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke("drift", log, "--config", config)
    assert result.exit_code == 0, result.output
    warned = result.stderr.splitlines()
    assert len(warned) == 2
    assert warned[0].startswith(f"warning: {log}: line 4: not JSON (")
    assert warned[1] == (
        f"warning: {log}: line 6: a ragguard.select span of no use: ragguard.score.top='high' "
        "is not a number; skipped"
    )
    assert f"{log}: 179 ragguard.select spans read" in result.stdout


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ("  \n\n", "is empty"),
        ('{"name": "http.get", "attributes": {}}\n', "holds no ragguard.select span"),
        ("not json at all\n", "holds no ragguard.select span"),
        (
            '{"ragguard.kept": 3, "ragguard.candidates": 5}\n' * 4,
            "none of the 4 ragguard.select spans in",
        ),
    ],
    ids=["empty", "blank", "other spans", "not json", "old spans"],
)
def test_a_log_of_no_use_is_one_error_line(
    tmp_path: Path, spans: InMemorySpanExporter, text: str, says: str
) -> None:
    _, config, _ = run_guard(tmp_path, spans, squash=False)
    log = tmp_path / "spans.log"
    log.write_text(text, encoding="utf-8")
    assert says in error_line(invoke("drift", log, "--config", config))


def test_a_config_without_a_reference_or_a_missing_log_is_one_error_line(tmp_path: Path) -> None:
    config = GuardConfig(score_kind="similarity").save(tmp_path / "ragguard.toml")
    log = tmp_path / "spans.log"
    log.write_text('{"ragguard.kept": 1, "ragguard.score.top": 0.5}\n', encoding="utf-8")
    assert "has no [reference]" in error_line(invoke("drift", log, "--config", config))
    reference = ScoreReference.of([0.5, 0.7], [0.4, 0.6], [1, 2])
    config = GuardConfig(score_kind="similarity", reference=reference).save(config)
    missing = error_line(invoke("drift", tmp_path / "spans.missing", "-c", config))
    assert "spans.missing: No such file or directory" in missing
