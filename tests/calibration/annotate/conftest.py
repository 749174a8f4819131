"""Fixtures for the annotation tests: a fake estimator, a fake OpenAI-compatible server,
and SmolLM2 through the GGUF backend (the file: tests/conftest.py).

Everything here runs offline: no model hub (HF_HUB_OFFLINE=1), no network but servers
the tests start on 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration.annotate import Pair
from tests.calibration.annotate.fake_server import FakeServer

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


class FakeEstimator:
    """p(NO-RESPONSE) from a function of the pair; records what it was asked."""

    def __init__(
        self, p: Callable[[Pair], float], model_id: str = "fake-llm", version: int = 1
    ) -> None:
        self.p = p
        self._model_id = model_id
        self.version = version
        self.asked: list[Pair] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    def settings(self) -> Mapping[str, object]:
        return {"backend": "fake", "model": self._model_id, "version": self.version}

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        for i, pair in enumerate(pairs):
            self.asked.append(pair)
            yield i, self.p(pair)


@pytest.fixture(scope="session")
def smollm(gguf_path: Path) -> Any:
    """SmolLM2-135M-Instruct (Q4_1) through the GGUF backend, loaded once (about 20 s)."""
    from ragguard.calibration.annotate import TransformersEstimator

    return TransformersEstimator.from_gguf(gguf_path, batch_size=4)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()
