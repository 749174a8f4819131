"""``retrieve_run`` runs the queries through the framework's own concurrency (LangChain
``batch_as_completed``, LlamaIndex ``aretrieve`` under a semaphore) and records exactly
what the retriever returns for each query on its own."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from llama_index.core.base.base_retriever import BaseRetriever as LIRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ragguard.calibration import load_inputs
from ragguard.calibration.data.inputs import retrieve_run
from ragguard.errors import RetrieverError
from tests.calibration.retrievers import (
    NOTES,
    make_langchain_retriever,
    make_llamaindex_retriever,
)


@pytest.fixture(scope="module")
def es() -> Any:
    return load_inputs(NOTES, folder_runs_too=False)


def test_langchain_batch_equals_the_store_query_by_query(es: Any) -> None:
    retriever = make_langchain_retriever()
    calls: list[int] = []
    run = retrieve_run(es, retriever, max_concurrency=4, on_query=lambda d, _t: calls.append(d))
    assert calls == list(range(1, len(es.qids) + 1))  # the bar moves query by query
    store = retriever.vectorstore
    for qid in es.qids:
        expected = store.similarity_search_with_score(es.queries[qid].text, k=10)
        assert run.candidates[qid] == pytest.approx({d.id: s for d, s in expected})
        assert list(run.candidates[qid]) == [d.id for d, _ in expected]  # and their order


def test_llamaindex_gather_equals_retrieve_query_by_query(es: Any) -> None:
    retriever = make_llamaindex_retriever()
    calls: list[int] = []
    run = retrieve_run(es, retriever, max_concurrency=3, on_query=lambda d, _t: calls.append(d))
    assert calls == list(range(1, len(es.qids) + 1))
    for qid in es.qids:
        expected = retriever.retrieve(es.queries[qid].text)
        assert list(run.candidates[qid]) == [n.node.node_id for n in expected]
        assert list(run.candidates[qid].values()) == pytest.approx([n.score for n in expected])


class _InFlight:
    """Counts the calls running at once. Each call stays inside until ``limit`` calls have
    been inside together, so the count measures the framework's concurrency, whatever the
    machine's speed; the 60 s wait is a failure guard only (a passing run never waits)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.now = 0
        self.most = 0
        self.cond = threading.Condition()

    def _never(self) -> AssertionError:
        return AssertionError(f"{self.limit} calls were never in flight at once ({self.most})")

    def enter(self) -> None:
        with self.cond:
            self.now += 1
            self.most = max(self.most, self.now)
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.most >= self.limit, timeout=60):
                raise self._never()

    async def aenter(self) -> None:
        with self.cond:
            self.now += 1
            self.most = max(self.most, self.now)
        deadline = time.monotonic() + 60
        while self.most < self.limit:  # the others run on this event loop: yield to them
            if time.monotonic() > deadline:
                raise self._never()
            await asyncio.sleep(0.001)

    def leave(self) -> None:
        with self.cond:
            self.now -= 1


class _SlowLangChain(BaseRetriever):
    meter: Any

    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
        self.meter.enter()
        self.meter.leave()
        if query.startswith("What is my squat"):
            raise ConnectionError("shard 3 is down")
        return [Document(page_content=query, id=f"doc-{len(query)}", metadata={"score": 0.5})]


class _SlowLlamaIndex(LIRetriever):
    def __init__(self, meter: _InFlight) -> None:
        super().__init__()
        self.meter = meter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise AssertionError("the async path is expected")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await self.meter.aenter()
        self.meter.leave()
        text = query_bundle.query_str
        return [NodeWithScore(node=TextNode(id_=f"n-{len(text)}", text=text), score=0.5)]


def test_queries_overlap_up_to_max_concurrency_and_a_failure_names_its_query(es: Any) -> None:
    meter = _InFlight(4)
    with pytest.raises(RetrieverError, match=r"failed on query 'q02': ConnectionError: shard 3"):
        retrieve_run(es, _SlowLangChain(meter=meter), max_concurrency=4)
    assert meter.most == 4  # all four slots in use together, never a fifth
    meter = _InFlight(5)
    run = retrieve_run(es, _SlowLlamaIndex(meter), max_concurrency=5)
    assert meter.most == 5
    assert run.candidates["q01"] == {f"n-{len(es.queries['q01'].text)}": 0.5}


def test_retrieve_run_works_inside_a_running_event_loop(es: Any) -> None:
    async def inside() -> Any:
        return retrieve_run(es, make_llamaindex_retriever(), max_concurrency=2)

    run = asyncio.run(inside())
    assert len(run.candidates) == len(es.qids)


def test_max_concurrency_must_be_positive(es: Any) -> None:
    with pytest.raises(RetrieverError, match="max_concurrency"):
        retrieve_run(es, make_llamaindex_retriever(), max_concurrency=0)
