"""The LlamaIndex adapter on real llama-index-core objects (VectorStoreIndex, query engine)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
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

import ragguard
from ragguard import ContextGuard, GuardConfig, Reason, ScoreWarning, Selection
from ragguard.adapters.llamaindex import (
    GuardedRetriever,
    GuardPostprocessor,
    RagguardSelectionEvent,
)
from ragguard.errors import ArgumentTypeError, ConfigError
from ragguard.rerank import CrossEncoderReranker
from tests.adapters.conftest import (
    NOTES,
    PLANT_CONFLICT,
    PLANT_QUERY,
    PLANTS,
    QUERY,
    keyword_vector,
)
from tests.adapters.helpers import Client, keyword_reranker, through_gate
from tests.rerank_models import IDENTITY, build_cross_encoder


class KeywordEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return keyword_vector(text)


class ListRetriever(BaseRetriever):
    """Returns the same NodeWithScore objects every time."""

    def __init__(self, nodes: list[NodeWithScore]) -> None:
        super().__init__()
        self.nodes = nodes
        self.calls: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append("sync")
        return self.nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append("async")
        return self.nodes


class GatedRetriever(ListRetriever):
    """Its async path returns only once ``gate.parties`` calls are inside it at the same
    time, so calls that do not overlap never return; its sync path must never run."""

    def __init__(self, nodes: list[NodeWithScore], gate: asyncio.Barrier) -> None:
        super().__init__(nodes)
        self.gate = gate

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise AssertionError("the sync path ran; aretrieve must await the async path")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append("async")
        await through_gate(self.gate)
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
        {
            "id": "b",
            "reason": "invalid_score",
            "message": dropped.message,
            "duplicate_of": None,
            "conflict_with": [],
        }
    ]
    assert events[-1].verdict == "answerable" and events[-1].conflicts == []
    kept_last = ContextGuard(
        GuardConfig(max_k=3, relative_threshold=0.5, invalid_scores="keep_last")
    )
    assert node_ids(kept_last.wrap(ListRetriever(originals)).retrieve(QUERY)) == ["a", "c", "b"]
    assert [(n.node.metadata, n.score) for n in originals] == [
        (n.node.metadata, n.score) for n in snapshot
    ]


def test_scoreless_nodes_are_capped_with_a_warning() -> None:
    nodes = [NodeWithScore(node=TextNode(id_=f"n{i}", text="t"), score=None) for i in range(5)]
    with pytest.warns(ScoreWarning, match="no candidate has a numeric score"):
        out = guard().wrap(ListRetriever(nodes)).retrieve(QUERY)
    assert node_ids(out) == ["n0", "n1", "n2"]


def test_empty_and_failing_retrievers() -> None:
    assert guard().wrap(ListRetriever([])).retrieve(QUERY) == []
    with pytest.raises(ConnectionError, match="index unreachable"):
        guard().wrap(FailingRetriever()).retrieve(QUERY)


def test_aretrieve_is_really_async() -> None:
    """Four aretrieve calls are all inside the inner retriever's async path at once (the
    gate opens only then), and its sync path is never touched."""
    nodes = [NodeWithScore(node=TextNode(id_="a", text="a"), score=1.0)]

    async def main() -> tuple[GatedRetriever, list[list[NodeWithScore]]]:
        inner = GatedRetriever(nodes, asyncio.Barrier(4))
        retriever = guard().wrap(inner)
        return inner, await asyncio.gather(*(retriever.aretrieve(QUERY) for _ in range(4)))

    inner, results = asyncio.run(main())
    assert all(node_ids(r) == ["a"] for r in results)
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


def test_metadata_that_cannot_be_deep_copied_is_shared_and_the_rest_copied() -> None:
    lock, client = threading.Lock(), Client()
    nested = {"v": [1], "settings": {"client": client, "retries": 3}}
    node = TextNode(id_="a", text="a", metadata={"lock": lock, "nested": nested})
    originals = [NodeWithScore(node=node, score=0.9)]
    g = guard()
    post = g.as_postprocessor()
    outputs: list[Sequence[NodeWithScore]] = [
        g.wrap(ListRetriever(originals)).retrieve(QUERY),
        asyncio.run(g.wrap(ListRetriever(originals)).aretrieve(QUERY)),
        post.postprocess_nodes(originals, query_str=QUERY),
        asyncio.run(post.apostprocess_nodes(originals, query_str=QUERY)),
    ]
    for out in outputs:
        (kept,) = out
        meta = kept.node.metadata
        assert meta["lock"] is lock and meta["nested"]["settings"]["client"] is client
        assert meta["nested"] is not nested and meta["nested"]["settings"] is not nested["settings"]
        meta["nested"]["v"].append("edited downstream")
        meta["nested"]["settings"]["retries"] = 0
        assert nested == {"v": [1], "settings": {"client": client, "retries": 3}}
        assert meta["ragguard"]["kept"] is True and "ragguard" not in node.metadata


def test_bad_options_are_ragguard_errors() -> None:
    g = guard()
    with pytest.raises(ArgumentTypeError, match=r"expected a llama_index\.core BaseRetriever"):
        GuardedRetriever(object(), g)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="guard must be a ContextGuard"):
        GuardedRetriever(ListRetriever([]), object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="score_kind='cosine'"):
        g.wrap(ListRetriever([]), score_kind="cosine")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['k'\]"):
        g.wrap(ListRetriever([]), k=3)
    with pytest.raises(ConfigError, match="score_kind"):
        g.as_postprocessor(score_kind="cosine")
    with pytest.raises(ConfigError, match="unknown option 'top_k'"):
        g.as_postprocessor(top_k=3)
    with pytest.raises(ConfigError, match="needs a guard"):
        GuardPostprocessor()


def test_postprocessor_round_trips_through_to_dict(
    index: VectorStoreIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = GuardConfig(
        profile="mine",
        profiles={"mine": {"base": "support", "max_k": 2}},
        relative_threshold=0.3,
        min_score=0.2,
        score_kind="similarity",
    )
    original = ContextGuard(config).as_postprocessor(metadata_key="rg")
    nodes = index.as_retriever(similarity_top_k=6).retrieve(QUERY)
    expected = original.postprocess_nodes(nodes, query_str=QUERY)
    # the saved config matters: the default guard keeps something else
    assert node_ids(guard().as_postprocessor().postprocess_nodes(nodes, query_str=QUERY)) != (
        node_ids(expected)
    )

    saved = json.loads(json.dumps(original.to_dict()))  # plain JSON values
    monkeypatch.setenv("RAGGUARD_MAX_K", "6")  # the environment at load time changes nothing
    restored = GuardPostprocessor.from_dict(saved)
    assert isinstance(restored, GuardPostprocessor) and restored.metadata_key == "rg"
    for again in (
        restored.postprocess_nodes(nodes, query_str=QUERY),
        asyncio.run(restored.apostprocess_nodes(nodes, query_str=QUERY)),
        GuardPostprocessor.from_json(original.to_json()).postprocess_nodes(nodes, query_str=QUERY),
    ):
        assert [(n.node.node_id, n.score, n.node.metadata) for n in again] == [
            (n.node.node_id, n.score, n.node.metadata) for n in expected
        ]
    assert restored.to_dict() == original.to_dict()


def test_a_reranker_passed_in_code_must_be_handed_back_to_from_dict(
    index: VectorStoreIndex,
) -> None:
    config = GuardConfig(max_k=2, rerank={"enabled": True, "top_n": 6})
    original = ContextGuard(config, reranker=keyword_reranker).as_postprocessor()
    saved = original.to_dict()
    assert saved["code_reranker"] == "keyword_reranker"
    with pytest.raises(ConfigError, match=re.escape("from_dict(data, reranker=...)")):
        GuardPostprocessor.from_dict(saved)
    nodes = index.as_retriever(similarity_top_k=6).retrieve(QUERY)
    expected = node_ids(original.postprocess_nodes(nodes, query_str=QUERY))
    assert expected[0] == "pr-0302" and len(expected) == 2
    restored = GuardPostprocessor.from_dict(saved, reranker=keyword_reranker)
    assert restored.guard.reranker is keyword_reranker
    assert node_ids(restored.postprocess_nodes(nodes, query_str=QUERY)) == expected
    guard_given = ContextGuard(config, reranker=keyword_reranker)
    assert GuardPostprocessor.from_dict(saved, guard=guard_given).guard is guard_given


def test_a_registered_reranker_is_restored_from_the_registry(index: VectorStoreIndex) -> None:
    config = GuardConfig(max_k=2, rerank={"enabled": True, "top_n": 6})
    ragguard.register_reranker(keyword_reranker, name="keywords")
    try:
        original = ContextGuard(config, reranker=keyword_reranker).as_postprocessor()
        saved = json.loads(original.to_json())
        assert saved["code_reranker"] == "keywords"
        restored = GuardPostprocessor.from_json(json.dumps(saved))
    finally:
        ragguard.unregister_reranker("keywords")
    assert restored.guard.reranker is keyword_reranker
    nodes = index.as_retriever(similarity_top_k=6).retrieve(QUERY)
    expected = node_ids(original.postprocess_nodes(nodes, query_str=QUERY))
    assert node_ids(restored.postprocess_nodes(nodes, query_str=QUERY)) == expected
    with pytest.raises(ConfigError, match="'keywords', which is not registered"):
        GuardPostprocessor.from_dict(saved)


def test_the_built_in_cross_encoder_is_rebuilt_from_the_saved_config(
    index: VectorStoreIndex, tmp_path: Path
) -> None:
    pytest.importorskip("sentence_transformers")
    # a tiny real cross-encoder whose logits put recipe and meeting-q1 first
    logits = {text: float(i) for i, (_, text, _) in enumerate(NOTES)}
    model = build_cross_encoder(tmp_path / "ce", QUERY, logits, activation=IDENTITY)
    config = GuardConfig(max_k=2, rerank={"enabled": True, "model": str(model), "top_n": 6})
    original = ContextGuard(config).as_postprocessor()
    saved = json.loads(original.to_json())
    assert saved["code_reranker"] is None  # config.rerank describes it: data, not code
    nodes = index.as_retriever(similarity_top_k=6).retrieve(QUERY)
    expected = original.postprocess_nodes(nodes, query_str=QUERY)
    assert node_ids(expected) == ["recipe", "meeting-q1"]
    restored = GuardPostprocessor.from_dict(saved)
    assert node_ids(restored.postprocess_nodes(nodes, query_str=QUERY)) == node_ids(expected)
    # a cross-encoder passed in code that the config does not describe is code
    other = CrossEncoderReranker(str(model), batch_size=4)
    passed = ContextGuard(config, reranker=other).as_postprocessor().to_dict()
    assert passed["code_reranker"] == str(model)


# --- the verdict and the conflicts --------------------------------------------------------


@pytest.fixture
def plants() -> VectorStoreIndex:
    nodes = [TextNode(id_=i, text=t, metadata={"date": d or ""}) for i, t, d in PLANTS]
    return VectorStoreIndex(nodes, embed_model=KeywordEmbedding())


def test_the_verdict_and_the_conflicts_reach_node_metadata_and_the_event(
    plants: VectorStoreIndex, events: list[RagguardSelectionEvent]
) -> None:
    retriever = guard(relative_threshold=0.0, conflicts="flag").wrap(
        plants.as_retriever(similarity_top_k=3)
    )
    nodes = retriever.retrieve(PLANT_QUERY)
    assert node_ids(nodes) == ["plant-a", "plant-b", "canteen"]
    meta = {n.node.node_id: n.node.metadata["ragguard"] for n in nodes}
    assert {m["verdict"] for m in meta.values()} == {"conflict"}
    assert meta["plant-a"]["conflicts"] == [PLANT_CONFLICT] and meta["canteen"]["conflicts"] == []
    assert "disagree" not in nodes[0].node.get_content(MetadataMode.LLM)
    assert events[-1].verdict == "conflict"
    assert events[-1].conflicts == [
        {
            "ids": ["plant-a", "plant-b"],
            "spans": [["3,559"], ["4,112"]],
            "kept": [True, True],
            "description": PLANT_CONFLICT,
        }
    ]
    again = asyncio.run(retriever.aretrieve(PLANT_QUERY))
    assert [n.node.metadata for n in again] == [n.node.metadata for n in nodes]


def test_keep_first_in_a_query_engine_names_the_partner(
    plants: VectorStoreIndex, events: list[RagguardSelectionEvent]
) -> None:
    post = guard(relative_threshold=0.0, conflicts="keep_first").as_postprocessor()
    engine = plants.as_query_engine(llm=MockLLM(), similarity_top_k=3, node_postprocessors=[post])
    response = engine.query(PLANT_QUERY)
    assert [n.node.node_id for n in response.source_nodes] == ["plant-a", "canteen"]
    assert events[-1].verdict == "answerable"
    (dropped,) = events[-1].dropped
    assert (dropped["id"], dropped["reason"], dropped["conflict_with"]) == (
        "plant-b",
        "conflict",
        ["plant-a"],
    )


def test_an_insufficient_verdict_reaches_the_event_when_nothing_is_kept(
    plants: VectorStoreIndex, events: list[RagguardSelectionEvent]
) -> None:
    retriever = guard(relative_threshold=0.0, min_evidence=0.99).wrap(
        plants.as_retriever(similarity_top_k=3)
    )
    assert retriever.retrieve("refund policy") == []
    assert events[-1].verdict == "insufficient" and events[-1].kept == []
    assert {d["reason"] for d in events[-1].dropped} == {"insufficient_evidence"}
    assert asyncio.run(retriever.aretrieve("refund policy")) == []
    assert events[-1].verdict == "insufficient"


def test_the_guard_reads_a_nodes_content_without_its_metadata() -> None:
    """A ``TextNode`` gives its text (not its metadata); a node class that overrides
    ``get_content`` gives what that returns."""

    class Shouting(TextNode):
        def get_content(self, metadata_mode: MetadataMode = MetadataMode.NONE) -> str:
            return self.text.upper()

    seen: list[Selection] = []
    guard = ContextGuard(GuardConfig(max_k=2), on_selection=seen.append)
    nodes = [
        NodeWithScore(node=TextNode(id_="a", text="plain", metadata={"m": 1}), score=0.9),
        NodeWithScore(node=Shouting(id_="b", text="loud", metadata={"m": 2}), score=0.8),
    ]
    GuardPostprocessor(guard).postprocess_nodes(nodes, query_str="q")
    assert [c.text for c in seen[0].candidates] == ["plain", "LOUD"]


# issue 37: one guard, a domain per retriever or postprocessor (e.g. per router route)
DOMAINS = {"one": {"max_k": 1}, "two": {"max_k": 2}}


def test_a_domain_routes_the_retriever_and_the_postprocessor(index: VectorStoreIndex) -> None:
    g = guard(domains=DOMAINS)
    base = index.as_retriever(similarity_top_k=6)
    everything = node_ids(g.wrap(base).retrieve(QUERY))
    assert len(everything) == 3
    one = g.wrap(base, domain="one")
    assert node_ids(one.retrieve(QUERY)) == everything[:1]
    assert node_ids(asyncio.run(one.aretrieve(QUERY))) == everything[:1]
    post = g.as_postprocessor(domain="two")
    nodes = base.retrieve(QUERY)
    assert node_ids(post.postprocess_nodes(nodes, query_str=QUERY)) == everything[:2]
    # saved and rebuilt: the domain and the config's domain tables come back
    restored = GuardPostprocessor.from_dict(json.loads(json.dumps(post.to_dict())))
    assert restored.domain == "two" and restored.guard.config.domains == DOMAINS
    assert node_ids(restored.postprocess_nodes(nodes, query_str=QUERY)) == everything[:2]
    assert "domains" not in guard().as_postprocessor().to_dict()["guard_config"]


def test_a_llamaindex_domain_that_is_not_a_str_is_refused(index: VectorStoreIndex) -> None:
    g = guard(domains=DOMAINS)
    with pytest.raises(ConfigError, match=r"^domain must be a str"):
        g.wrap(index.as_retriever(), domain=1)
    with pytest.raises(ConfigError, match=r"domain"):
        g.as_postprocessor(domain=1)
