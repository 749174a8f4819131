"""The LlamaIndex adapter on real llama-index-core objects (VectorStoreIndex, query engine)."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from ragguard import ContextGuard, GuardConfig, Reason, ScoreWarning, Selection
from ragguard.adapters.llamaindex import (
    GuardedRetriever,
    GuardPostprocessor,
    RagguardSelectionEvent,
)
from tests.adapters.conftest import NOTES, QUERY, keyword_vector


class KeywordEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return keyword_vector(text)


class ListRetriever(BaseRetriever):
    """Returns the same NodeWithScore objects every time; the async path sleeps."""

    def __init__(self, nodes: list[NodeWithScore], delay: float = 0.0) -> None:
        super().__init__()
        self.nodes = nodes
        self.delay = delay
        self.calls: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append("sync")
        return self.nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await asyncio.sleep(self.delay)
        self.calls.append("async")
        return self.nodes


class FailingRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise ConnectionError("index unreachable")


class EventLog(BaseEventHandler):
    events: list[BaseEvent] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "EventLog"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, RagguardSelectionEvent):
            self.events.append(event)


@pytest.fixture
def index() -> VectorStoreIndex:
    nodes = [TextNode(id_=i, text=t, metadata={"topic": topic}) for i, t, topic in NOTES]
    return VectorStoreIndex(nodes, embed_model=KeywordEmbedding())


@pytest.fixture
def events() -> Any:
    log = EventLog(events=[])
    root = get_dispatcher()
    root.add_event_handler(log)
    yield log.events
    root.event_handlers.remove(log)


def guard(**settings: Any) -> ContextGuard:
    return ContextGuard(GuardConfig(**{"max_k": 3, "relative_threshold": 0.5, **settings}))


def node_ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


def test_wrap_returns_a_llamaindex_retriever(index: VectorStoreIndex) -> None:
    base = index.as_retriever(similarity_top_k=6)
    raw = base.retrieve(QUERY)
    expected = [
        n.node.node_id for n in raw if n.score is not None and n.score >= 0.5 * raw[0].score
    ][:3]
    retriever = guard().wrap(base)
    assert isinstance(retriever, BaseRetriever) and isinstance(retriever, GuardedRetriever)
    nodes = retriever.retrieve(QUERY)
    assert node_ids(nodes) == expected and expected[0] == "pr-0302"
    assert nodes[0].score == raw[0].score
    meta = nodes[0].node.metadata["ragguard"]
    assert meta["kept"] and meta["score_kind"] == "similarity" and meta["rank"] == 0
    # the decision never reaches a prompt or an embedding
    assert "ragguard" not in nodes[0].node.get_content(MetadataMode.LLM)
    assert "ragguard" not in nodes[0].node.get_content(MetadataMode.EMBED)
    assert "topic: lifting" in nodes[0].node.get_content(MetadataMode.LLM)


def test_sync_and_async_agree_and_index_nodes_are_untouched(index: VectorStoreIndex) -> None:
    before = {i: copy.deepcopy(index.docstore.get_node(i).metadata) for i, _, _ in NOTES}
    retriever = guard().wrap(index.as_retriever(similarity_top_k=6))
    sync = retriever.retrieve(QUERY)
    asynchronous = asyncio.run(retriever.aretrieve(QUERY))
    assert [(n.node.node_id, n.score, n.node.metadata) for n in sync] == [
        (n.node.node_id, n.score, n.node.metadata) for n in asynchronous
    ]
    after = {i: index.docstore.get_node(i).metadata for i, _, _ in NOTES}
    assert after == before


def test_none_scores_follow_the_policy_not_silently(events: list[RagguardSelectionEvent]) -> None:
    originals = [
        NodeWithScore(node=TextNode(id_="a", text="a"), score=0.9),
        NodeWithScore(node=TextNode(id_="b", text="b"), score=None),
        NodeWithScore(node=TextNode(id_="c", text="c"), score=0.8),
    ]
    snapshot = copy.deepcopy(originals)
    seen: list[Selection] = []
    g = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.5), on_selection=seen.append)
    out = g.wrap(ListRetriever(originals)).retrieve(QUERY)
    assert node_ids(out) == ["a", "c"]
    (dropped,) = seen[0].dropped
    assert dropped.candidate.id == "b" and dropped.reason is Reason.INVALID_SCORE
    assert events[-1].dropped == [
        {"id": "b", "reason": "invalid_score", "message": dropped.message}
    ]
    kept_last = ContextGuard(
        GuardConfig(max_k=3, relative_threshold=0.5, invalid_scores="keep_last")
    )
    assert node_ids(kept_last.wrap(ListRetriever(originals)).retrieve(QUERY)) == ["a", "c", "b"]
    assert [(n.node.metadata, n.score) for n in originals] == [
        (n.node.metadata, n.score) for n in snapshot
    ]


def test_scoreless_nodes_are_capped_with_a_warning() -> None:
    nodes = [NodeWithScore(node=TextNode(id_=f"n{i}", text="t"), score=None) for i in range(5)]
    with pytest.warns(ScoreWarning, match="returned no scores"):
        out = guard().wrap(ListRetriever(nodes)).retrieve(QUERY)
    assert node_ids(out) == ["n0", "n1", "n2"]


def test_empty_and_failing_retrievers() -> None:
    assert guard().wrap(ListRetriever([])).retrieve(QUERY) == []
    with pytest.raises(ConnectionError, match="index unreachable"):
        guard().wrap(FailingRetriever()).retrieve(QUERY)


def test_aretrieve_is_really_async() -> None:
    nodes = [NodeWithScore(node=TextNode(id_="a", text="a"), score=1.0)]
    inner = ListRetriever(nodes, delay=0.3)
    retriever = guard().wrap(inner)

    async def main() -> float:
        start = time.perf_counter()
        results = await asyncio.gather(*(retriever.aretrieve(QUERY) for _ in range(4)))
        assert all(node_ids(r) == ["a"] for r in results)
        return time.perf_counter() - start

    assert asyncio.run(main()) < 0.3 * 4 * 0.75
    assert inner.calls == ["async"] * 4


def test_postprocessor_in_a_query_engine(
    index: VectorStoreIndex, events: list[RagguardSelectionEvent]
) -> None:
    post = guard(max_k=2).as_postprocessor()
    assert isinstance(post, BaseNodePostprocessor) and isinstance(post, GuardPostprocessor)
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=6, node_postprocessors=[post])
    response = engine.query(QUERY)
    assert len(response.source_nodes) == 2
    assert response.source_nodes[0].node.node_id == "pr-0302"
    assert events[-1].kept == [n.node.node_id for n in response.source_nodes]
    assert post.postprocess_nodes([], query_str=QUERY) == []
    again = asyncio.run(
        post.apostprocess_nodes(
            index.as_retriever(similarity_top_k=6).retrieve(QUERY), query_str=QUERY
        )
    )
    assert node_ids(again) == node_ids(response.source_nodes)


def test_explicit_score_kind_overrides_the_convention() -> None:
    nodes = [
        NodeWithScore(node=TextNode(id_=i, text=i), score=d)
        for i, d in [("near", 0.1), ("far", 3.0)]
    ]
    out = (
        guard(relative_threshold=0.0)
        .wrap(ListRetriever(nodes), score_kind="distance")
        .retrieve(QUERY)
    )
    assert node_ids(out) == ["near", "far"]
    assert out[0].node.metadata["ragguard"]["score_kind"] == "distance"
