"""Helpers both adapters' tests share: a gate that proves calls overlap, a client object
that cannot be deep-copied, a keyword reranker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence


def keyword_reranker(query: str, texts: Sequence[str]) -> list[float]:
    """A reranker (probabilities): the share of the query's words in each text."""
    words = set(query.lower().split())
    return [len(words & set(t.lower().split())) / len(words) for t in texts]


keyword_reranker.score_kind = "probability"  # type: ignore[attr-defined]


class Client:
    """A client object as pipelines put in metadata: it holds a lock, so it cannot be
    deep-copied."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


GATE_TIMEOUT_S = 60.0  # a failure guard only: a passing run never waits on it


async def through_gate(gate: asyncio.Barrier) -> None:
    """Return once ``gate.parties`` calls are waiting here at the same time; fail when
    they never are (the calls did not run concurrently)."""
    try:
        await asyncio.wait_for(gate.wait(), GATE_TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(
            f"{gate.parties} calls were never inside the retriever at the same time: the "
            "async path does not run them concurrently"
        ) from None
