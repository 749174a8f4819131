"""The LangChain adapter on real langchain-core objects (InMemoryVectorStore, chains)."""

from __future__ import annotations

import asyncio
import copy
import threading
import warnings
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    BaseCallbackHandler,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from pydantic import Field

from ragguard import ContextGuard, GuardConfig, Reason, ScoreWarning, Selection
from ragguard.adapters.langchain import (
    DOMAIN_KEY,
    GuardCompressor,
    GuardedRetriever,
    candidate_ids,
    store_score_kind,
)
from ragguard.errors import ConfigError, RagguardError
from ragguard.scores import ScoreKind
from tests.adapters.conftest import (
    NOTES,
    PLANT_CONFLICT,
    PLANT_QUERY,
    PLANTS,
    QUERY,
    keyword_vector,
)
from tests.adapters.helpers import Client, keyword_reranker, through_gate


class KeywordEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [keyword_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return keyword_vector(text)


class ListRetriever(BaseRetriever):
    """A retriever that returns the same Document objects every time (the caller's)."""

    docs: list[Document]
    calls: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.calls.append({"sync": True, **kwargs})
        return self.docs

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.calls.append({"sync": False, **kwargs})
        return self.docs


class GatedRetriever(BaseRetriever):
    """Its async path returns only once ``gate.parties`` calls are inside it at the same
    time, so calls that do not overlap never return; its sync path must never run."""

    docs: list[Document]
    gate: asyncio.Barrier
    calls: list[dict[str, Any]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        raise AssertionError("the sync path ran; ainvoke must await the async path")

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        self.calls.append(kwargs)
        await through_gate(self.gate)
        return self.docs


class FailingRetriever(BaseRetriever):
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        raise ConnectionError("index unreachable")


class L2Store(VectorStore):
    """A vector store that returns Euclidean distances, as FAISS does by default."""

    distance_strategy = "EUCLIDEAN_DISTANCE"

    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: Any = None, **kw: Any
    ) -> L2Store:
        raise NotImplementedError

    def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:
        raise NotImplementedError

    def _select_relevance_score_fn(self) -> Any:
        return self._euclidean_relevance_score_fn

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        q = keyword_vector(query)
        scored = [
            (
                d,
                sum((a - b) ** 2 for a, b in zip(q, keyword_vector(d.page_content), strict=True))
                ** 0.5,
            )
            for d in self.docs
        ]
        return sorted(scored, key=lambda pair: pair[1])[:k]


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.prompts: list[str] = []

    def on_retriever_start(
        self,
        serialized: Any,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kw: Any,
    ) -> None:
        self.starts.append(
            {"name": kw.get("name"), "run_id": run_id, "parent": parent_run_id, "tags": tags or []}
        )

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kw: Any) -> None:
        self.events.append({"name": name, "data": data, "run_id": run_id})

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self.prompts.extend(m.content for batch in messages for m in batch)


@pytest.fixture
def store() -> InMemoryVectorStore:
    vs = InMemoryVectorStore(KeywordEmbeddings())
    vs.add_documents(
        [
            Document(id=i, page_content=t, metadata={"topic": topic, "tags": ["note"]})
            for i, t, topic in NOTES
        ]
    )
    return vs


def sim_guard(**settings: Any) -> ContextGuard:
    return ContextGuard(GuardConfig(**{"max_k": 3, "relative_threshold": 0.5, **settings}))


def ids(docs: Sequence[Document]) -> list[str | None]:
    return [d.id for d in docs]


def test_wrap_returns_a_langchain_retriever_that_keeps_the_best(store: InMemoryVectorStore) -> None:
    base = store.as_retriever(search_kwargs={"k": 6})
    retriever = sim_guard().wrap(base)
    assert isinstance(retriever, BaseRetriever) and isinstance(retriever, GuardedRetriever)
    raw = store.similarity_search_with_score(QUERY, k=6)
    top = raw[0][1]
    expected = [d.id for d, s in raw if s >= 0.5 * top][:3]
    docs = retriever.invoke(QUERY)
    assert ids(docs) == expected and expected[0] == "pr-0302"
    meta = docs[0].metadata["ragguard"]
    assert meta["kept"] is True and meta["rank"] == 0 and meta["score_kind"] == "similarity"
    assert meta["score"] == pytest.approx(top)
    assert docs[0].metadata["topic"] == "lifting"


def test_sync_and_async_give_the_same_documents(store: InMemoryVectorStore) -> None:
    retriever = sim_guard().wrap(store.as_retriever(search_kwargs={"k": 6}))
    sync = retriever.invoke(QUERY)
    asynchronous = asyncio.run(retriever.ainvoke(QUERY))
    assert [(d.id, d.page_content, d.metadata) for d in sync] == [
        (d.id, d.page_content, d.metadata) for d in asynchronous
    ]


def test_invoke_k_and_constructor_k_cap(store: InMemoryVectorStore) -> None:
    guard = sim_guard(relative_threshold=0.0, max_k=5)
    retriever = guard.wrap(store.as_retriever(search_kwargs={"k": 6}))
    assert len(retriever.invoke(QUERY, k=2)) == 2
    assert len(guard.wrap(store.as_retriever(search_kwargs={"k": 6}), k=1).invoke(QUERY)) == 1
    assert len(retriever.invoke(QUERY)) == 5


def test_extra_invoke_kwargs_reach_the_vector_store(store: InMemoryVectorStore) -> None:
    retriever = sim_guard(relative_threshold=0.0, max_k=6).wrap(
        store.as_retriever(search_kwargs={"k": 6})
    )
    docs = retriever.invoke(QUERY, filter=lambda d: d.metadata["topic"] == "lifting")
    assert set(ids(docs)) == {"pr-0302", "log-0210", "squat-0316"}


def test_relevance_score_search_type_uses_probabilities() -> None:
    store = L2Store([Document(id=i, page_content=t) for i, t, _ in NOTES])
    base = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"k": 6, "score_threshold": 0.0}
    )
    docs = sim_guard().wrap(base).invoke(QUERY)
    assert ids(docs)[0] == "pr-0302"
    meta = docs[0].metadata["ragguard"]
    assert meta["score_kind"] == "probability"
    # LangChain's Euclidean relevance: 1 - d / sqrt(2)
    distance = store.similarity_search_with_score(QUERY, k=1)[0][1]
    assert meta["score"] == pytest.approx(1 - distance / 2**0.5)


def test_distances_from_the_store_are_flipped() -> None:
    docs = [Document(id=i, page_content=t) for i, t, _ in NOTES]
    store = L2Store(docs)
    assert store_score_kind(store) is ScoreKind.DISTANCE
    retriever = sim_guard(relative_threshold=0.0).wrap(store.as_retriever(search_kwargs={"k": 6}))
    out = retriever.invoke(QUERY)
    assert ids(out)[0] == "pr-0302"  # the smallest distance ranks first
    assert out[0].metadata["ragguard"]["score_kind"] == "distance"
    # declared explicitly, the adapter's score_kind wins over what the store tells
    wrong = sim_guard(relative_threshold=0.0).wrap(
        store.as_retriever(search_kwargs={"k": 6}), score_kind="similarity"
    )
    assert ids(wrong.invoke(QUERY))[0] != "pr-0302"  # as declared, far ranks first


def test_scores_in_metadata_are_used() -> None:
    docs = [
        Document(id="a", page_content="x", metadata={"relevance_score": 0.2}),
        Document(id="b", page_content="y", metadata={"relevance_score": 0.9}),
        Document(id="c", page_content="z", metadata={"score": 0.8}),
    ]
    retriever = sim_guard(score_kind="probability", relative_threshold=0.5).wrap(
        ListRetriever(docs=docs)
    )
    assert ids(retriever.invoke(QUERY)) == ["b", "c"]


def test_scoreless_retriever_only_caps_with_one_warning() -> None:
    docs = [Document(id=f"d{i}", page_content=f"text {i}") for i in range(5)]
    retriever = sim_guard(score_kind="similarity").wrap(ListRetriever(docs=docs))
    with pytest.warns(ScoreWarning, match="no candidate has a numeric score"):
        out = retriever.invoke(QUERY)
    assert ids(out) == ["d0", "d1", "d2"]  # retriever order, capped at max_k
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        retriever.invoke(QUERY)  # warned once per guard


def test_scores_given_as_strings_are_not_read_and_the_warning_says_so() -> None:
    # AD-07: the warning said "the retriever returned no scores" although every document
    # had one, as a string, under "score"
    docs = [
        Document(id=f"s{i}", page_content=f"text {i}", metadata={"score": s})
        for i, s in enumerate(["0.9", "0.1", "0.05"])
    ]
    compressor = sim_guard(score_kind="similarity", max_k=2).as_compressor()
    with pytest.warns(ScoreWarning) as caught:
        out = compressor.compress_documents(docs, QUERY)
    assert ids(out) == ["s0", "s1"]  # input order, capped at max_k: no score rule ran
    messages = [str(w.message) for w in caught]
    assert not any("returned no scores" in m for m in messages)
    (unread,) = [m for m in messages if "not numbers" in m]
    assert "metadata key 'score'" in unread and "'0.9', a str, on document 's0'" in unread
    assert "only max_k / min_k apply" in unread
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compressor.compress_documents(docs, QUERY)  # warned once per adapter and key
    # beside numeric scores, a string one counts as no score: invalid_scores drops it
    mixed = [
        Document(id="a", page_content="x", metadata={"score": 0.9}),
        Document(id="b", page_content="y", metadata={"relevance_score": "high"}),
    ]
    guard = sim_guard(score_kind="similarity", relative_threshold=0.0)
    with pytest.warns(ScoreWarning, match=r"key 'relevance_score'.*invalid_scores decides"):
        selected = guard.as_compressor().compress_documents(mixed, QUERY)
    assert ids(selected) == ["a"]


def test_documents_without_ids_are_not_merged() -> None:
    docs = [
        Document(page_content="same", metadata={"score": 0.9}),
        Document(page_content="same", metadata={"score": 0.8}),
    ]
    out = sim_guard(score_kind="similarity").wrap(ListRetriever(docs=docs)).invoke(QUERY)
    assert len(out) == 2 and all(d.id is None for d in out)


def test_empty_result() -> None:
    assert sim_guard(score_kind="similarity").wrap(ListRetriever(docs=[])).invoke(QUERY) == []


def test_inner_errors_propagate_unchanged() -> None:
    retriever = sim_guard().wrap(FailingRetriever())
    with pytest.raises(ConnectionError, match="index unreachable"):
        retriever.invoke(QUERY)


def test_callers_documents_are_not_mutated() -> None:
    docs = [
        Document(id=f"d{i}", page_content=f"t{i}", metadata={"score": s, "nested": {"v": [i]}})
        for i, s in enumerate([0.9, 0.1, 0.8])
    ]
    snapshot = copy.deepcopy(docs)
    out = sim_guard(score_kind="similarity").wrap(ListRetriever(docs=docs)).invoke(QUERY)
    out[0].metadata["nested"]["v"].append("changed downstream")
    assert [d.model_dump() for d in docs] == [d.model_dump() for d in snapshot]
    assert ids(out) == ["d0", "d2"]


def test_dropped_reasons_reach_callbacks_on_selection_and_tags_pass_through(
    store: InMemoryVectorStore,
) -> None:
    seen: list[Selection] = []
    guard = ContextGuard(GuardConfig(max_k=2, relative_threshold=0.5), on_selection=seen.append)
    retriever = guard.wrap(store.as_retriever(search_kwargs={"k": 6}, tags=["inner-tag"]))
    recorder = Recorder()
    retriever.invoke(QUERY, config={"callbacks": [recorder], "tags": ["outer-tag"]})
    outer, inner = recorder.starts
    assert inner["parent"] == outer["run_id"]
    assert "outer-tag" in inner["tags"] and "inner-tag" in inner["tags"]
    (event,) = recorder.events
    assert event["name"] == "ragguard_selection" and event["run_id"] == outer["run_id"]
    assert len(event["data"]["kept"]) == 2
    dropped = {d["id"]: d["reason"] for d in event["data"]["dropped"]}
    assert len(dropped) == 4 and set(dropped.values()) <= {r.value for r in Reason}
    assert [c.id for c in seen[0].kept] == event["data"]["kept"]


def test_the_selection_event_names_the_id_a_near_duplicate_repeats() -> None:
    refund = "Refunds are issued within fourteen days of the return reaching our warehouse."
    docs = [
        Document(id="faq-7", page_content=refund, metadata={"score": 0.91}),
        Document(id="kb-12", page_content=refund + " (copied)", metadata={"score": 0.9}),
    ]
    guard = sim_guard(score_kind="similarity", near_duplicate_threshold=0.7)
    recorder = Recorder()
    out = guard.wrap(ListRetriever(docs=docs)).invoke(QUERY, config={"callbacks": [recorder]})
    assert ids(out) == ["faq-7"]
    (event,) = recorder.events
    (dropped,) = event["data"]["dropped"]
    assert (dropped["id"], dropped["reason"]) == ("kb-12", "near_duplicate")
    assert dropped["duplicate_of"] == "faq-7"  # the id, not the input position 0


def test_async_path_is_really_async() -> None:
    """Four ainvoke calls are all inside the inner retriever's async path at once (the
    gate opens only then), and its sync path is never touched."""
    docs = [Document(id="a", page_content="x", metadata={"score": 1.0})]

    async def main() -> tuple[GatedRetriever, list[list[Document]]]:
        inner = GatedRetriever(docs=docs, gate=asyncio.Barrier(4))
        retriever = sim_guard(score_kind="similarity").wrap(inner)
        results = await asyncio.gather(*(retriever.ainvoke(QUERY, flavour=i) for i in range(4)))
        return inner, results

    inner, results = asyncio.run(main())
    assert all(ids(r) == ["a"] for r in results)
    assert sorted(c["flavour"] for c in inner.calls) == [0, 1, 2, 3]


def test_async_compressor_runs_concurrently() -> None:
    docs = [Document(id="a", page_content="x", metadata={"score": 1.0})]
    compressor = sim_guard(score_kind="similarity").as_compressor()

    async def main() -> list[list[str | None]]:
        pipeline = ContextualCompressionRetriever(
            base_compressor=compressor,
            base_retriever=GatedRetriever(docs=docs, gate=asyncio.Barrier(3)),
        )
        results = await asyncio.gather(*(pipeline.ainvoke(QUERY) for _ in range(3)))
        return [ids(r) for r in results]

    assert asyncio.run(main()) == [["a"]] * 3


def _guard_paths(docs: list[Document]) -> list[Sequence[Document]]:
    """The kept documents from the retriever and the compressor, sync and async."""
    guard = sim_guard(score_kind="similarity", relative_threshold=0.0)
    retriever = guard.wrap(ListRetriever(docs=docs))
    compressor = guard.as_compressor()
    return [
        retriever.invoke(QUERY),
        asyncio.run(retriever.ainvoke(QUERY)),
        compressor.compress_documents(docs, QUERY),
        asyncio.run(compressor.acompress_documents(docs, QUERY)),
    ]


def test_metadata_that_cannot_be_deep_copied_is_shared_and_the_rest_copied() -> None:
    lock, client = threading.Lock(), Client()
    nested = {"v": [1], "tags": ("a", "b")}
    around = {"client": client, "settings": {"retries": 3}}
    docs = [
        Document(
            id="a",
            page_content="x",
            metadata={"score": 0.9, "lock": lock, "nested": nested, "around": around},
        )
    ]
    for out in _guard_paths(docs):
        (doc,) = out
        meta = doc.metadata
        assert meta["lock"] is lock and meta["around"]["client"] is client
        assert meta["nested"] == {"v": [1], "tags": ("a", "b")} and meta["nested"] is not nested
        assert meta["around"] is not around and meta["around"]["settings"] is not around["settings"]
        meta["nested"]["v"].append("edited downstream")
        meta["around"]["settings"]["retries"] = 0
        assert nested == {"v": [1], "tags": ("a", "b")}
        assert around["settings"] == {"retries": 3}
        assert meta["ragguard"]["kept"] is True
        assert "ragguard" not in docs[0].metadata


def test_a_document_without_id_never_collides_with_a_real_id() -> None:
    docs = [
        Document(id="#1", page_content="has the id '#1'", metadata={"score": 0.9}),
        Document(page_content="has no id", metadata={"score": 0.8}),
    ]
    for out in _guard_paths(docs):
        assert [(d.id, d.page_content) for d in out] == [
            ("#1", "has the id '#1'"),
            (None, "has no id"),
        ]


def test_candidate_ids_differ_from_every_real_id() -> None:
    docs = [
        Document(id="#1", page_content="a"),
        Document(page_content="b"),
        Document(page_content="c"),
        Document(id="##2", page_content="d"),
        Document(id="x", page_content="e"),
    ]
    # '#1' and then '##2' are taken, so the id-less documents (positions 1 and 2) get '###'
    assert candidate_ids(docs) == ["#1", "###1", "###2", "##2", "x"]
    assert candidate_ids([Document(page_content="a"), Document(page_content="b")]) == ["#0", "#1"]


@pytest.mark.parametrize(
    "options",
    [
        {"score_kind": "cosine"},
        {"k": 0},
        {"k": True},
        {"top_k": 3},
        {"score_keys": "score"},
    ],
)
def test_bad_retriever_options_are_config_errors(
    store: InMemoryVectorStore, options: dict[str, Any]
) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))) as caught:
        sim_guard().wrap(store.as_retriever(), **options)
    assert isinstance(caught.value, ValueError)  # still the built-in a caller expects


@pytest.mark.parametrize("options", [{"score_kind": "cosine"}, {"k": 3}])
def test_bad_compressor_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        sim_guard().as_compressor(**options)


@pytest.mark.parametrize("k", [0, -1, True, 2.5, "3"])
def test_bad_k_at_invoke_is_a_config_error(store: InMemoryVectorStore, k: object) -> None:
    retriever = sim_guard().wrap(store.as_retriever(search_kwargs={"k": 6}))
    with pytest.raises(ConfigError, match="k must be a whole number"):
        retriever.invoke(QUERY, k=k)
    with pytest.raises(RagguardError):
        asyncio.run(retriever.ainvoke(QUERY, k=k))


def test_chain_composes_end_to_end(store: InMemoryVectorStore) -> None:
    retriever = sim_guard(max_k=2).wrap(store.as_retriever(search_kwargs={"k": 6}))
    prompt = ChatPromptTemplate.from_messages(
        [("human", "Context: {context}\nQuestion: {question}")]
    )
    llm = FakeListChatModel(responses=["500 lb, on 2 March."])
    chain = {"context": retriever, "question": RunnablePassthrough()} | prompt | llm
    recorder = Recorder()
    answer = chain.invoke(QUERY, config={"callbacks": [recorder]})
    assert answer.content == "500 lb, on 2 March."
    (sent,) = recorder.prompts
    assert "pulled 500 lb" in sent and "overnight oats" not in sent and "Q1 planning" not in sent


def test_compressor_in_a_contextual_compression_retriever() -> None:
    docs = [
        Document(id="a", page_content="keep me", metadata={"relevance_score": 0.95}),
        Document(id="b", page_content="drop me", metadata={"relevance_score": 0.1}),
        Document(id="c", page_content="keep me too", metadata={"relevance_score": 0.7}),
    ]
    snapshot = copy.deepcopy(docs)
    guard = sim_guard(score_kind="probability", relative_threshold=0.6)
    compressor = guard.as_compressor()
    assert isinstance(compressor, GuardCompressor)
    pipeline = ContextualCompressionRetriever(
        base_compressor=compressor, base_retriever=ListRetriever(docs=docs)
    )
    recorder = Recorder()
    out = pipeline.invoke(QUERY, config={"callbacks": [recorder]})
    assert ids(out) == ["a", "c"]
    assert out[1].metadata["ragguard"]["normalized_score"] == pytest.approx(0.7)
    assert [e["name"] for e in recorder.events] == ["ragguard_selection"]
    async_recorder = Recorder()
    assert asyncio.run(pipeline.ainvoke(QUERY, config={"callbacks": [async_recorder]})) == out
    (event,) = async_recorder.events
    assert event["name"] == "ragguard_selection" and event["data"]["kept"] == ["a", "c"]
    assert event["run_id"] == async_recorder.starts[0]["run_id"]  # on the pipeline's run
    assert docs == snapshot


def test_wrap_rejects_other_objects() -> None:
    with pytest.raises(
        TypeError, match=r"supports LangChain retrievers .* and LlamaIndex retrievers"
    ):
        sim_guard().wrap(object())


def test_rerank_stage_supplies_scores_for_a_scoreless_retriever() -> None:
    """No retrieval scores, rerank on: the reranker's probabilities decide, no warning."""
    docs = [Document(id=i, page_content=t) for i, t, _ in NOTES]  # no scores anywhere
    config = GuardConfig(max_k=2, relative_threshold=0.5, rerank={"enabled": True, "top_n": 6})
    guard = ContextGuard(config, reranker=keyword_reranker)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = guard.wrap(ListRetriever(docs=docs)).invoke(QUERY)
    expected = sorted(
        range(len(docs)), key=lambda i: -keyword_reranker(QUERY, [docs[i].page_content])[0]
    )[:2]
    assert ids(out) == [docs[i].id for i in expected] and ids(out)[0] == "pr-0302"
    meta = out[0].metadata["ragguard"]
    assert meta["rerank_score"] == pytest.approx(keyword_reranker(QUERY, [NOTES[0][1]])[0])
    assert meta["score"] is None


# --- the verdict and the conflicts --------------------------------------------------------


@pytest.fixture
def plants() -> InMemoryVectorStore:
    vs = InMemoryVectorStore(KeywordEmbeddings())
    vs.add_documents([Document(id=i, page_content=t, metadata={"date": d}) for i, t, d in PLANTS])
    return vs


def conflict_guard(**settings: Any) -> ContextGuard:
    return sim_guard(**{"relative_threshold": 0.0, **settings})


def test_the_verdict_and_the_conflicts_reach_metadata_and_the_selection_event(
    plants: InMemoryVectorStore,
) -> None:
    retriever = conflict_guard(conflicts="flag").wrap(plants.as_retriever(search_kwargs={"k": 3}))
    recorder = Recorder()
    docs = retriever.invoke(PLANT_QUERY, config={"callbacks": [recorder]})
    assert ids(docs) == ["plant-a", "plant-b", "canteen"]
    meta = {d.id: d.metadata["ragguard"] for d in docs}
    assert {m["verdict"] for m in meta.values()} == {"conflict"}
    assert meta["plant-a"]["conflicts"] == meta["plant-b"]["conflicts"] == [PLANT_CONFLICT]
    assert meta["canteen"]["conflicts"] == []
    (event,) = recorder.events
    assert event["data"]["verdict"] == "conflict"
    assert event["data"]["conflicts"] == [
        {
            "ids": ["plant-a", "plant-b"],
            "spans": [["3,559"], ["4,112"]],
            "kept": [True, True],
            "description": PLANT_CONFLICT,
        }
    ]
    asynchronous = asyncio.run(retriever.ainvoke(PLANT_QUERY))
    assert [d.metadata for d in asynchronous] == [d.metadata for d in docs]


def test_a_dropped_conflict_names_its_partner_in_the_event(plants: InMemoryVectorStore) -> None:
    guard = conflict_guard(conflicts="prefer", conflict_prefer="date")
    recorder = Recorder()
    docs = guard.wrap(plants.as_retriever(search_kwargs={"k": 3})).invoke(
        PLANT_QUERY, config={"callbacks": [recorder]}
    )
    assert ids(docs) == ["plant-b", "canteen"]  # the newer date wins
    assert {d.metadata["ragguard"]["verdict"] for d in docs} == {"answerable"}
    assert docs[0].metadata["ragguard"]["conflicts"] == [PLANT_CONFLICT]
    (event,) = recorder.events
    (dropped,) = event["data"]["dropped"]
    assert (dropped["id"], dropped["reason"], dropped["conflict_with"]) == (
        "plant-a",
        "conflict",
        ["plant-b"],
    )
    assert event["data"]["conflicts"][0]["kept"] == [False, True]


def test_an_insufficient_verdict_reaches_the_caller_when_nothing_is_kept(
    plants: InMemoryVectorStore,
) -> None:
    seen: list[Selection] = []
    guard = ContextGuard(
        GuardConfig(max_k=3, relative_threshold=0.0, min_evidence=0.99), on_selection=seen.append
    )
    recorder = Recorder()
    retriever = guard.wrap(plants.as_retriever(search_kwargs={"k": 3}))
    assert retriever.invoke("refund policy", config={"callbacks": [recorder]}) == []
    (event,) = recorder.events
    assert event["data"]["verdict"] == "insufficient" and event["data"]["kept"] == []
    assert {d["reason"] for d in event["data"]["dropped"]} == {"insufficient_evidence"}
    assert seen[0].verdict.value == "insufficient"
    # the compressor sends the same event
    compressor_recorder = Recorder()
    docs = [Document(id="x", page_content="t", metadata={"score": 0.2})]
    out = guard.as_compressor(score_kind="similarity").compress_documents(
        docs, "q", callbacks=[compressor_recorder]
    )
    assert out == [] and compressor_recorder.events[0]["data"]["verdict"] == "insufficient"


# issue 37: one guard, a domain per retriever or per call
DOMAINS = {"one": {"max_k": 1}, "two": {"max_k": 2}}


def test_a_domain_routes_the_retriever_and_run_metadata_routes_one_call(
    store: InMemoryVectorStore,
) -> None:
    g = sim_guard(domains=DOMAINS)
    base = store.as_retriever(search_kwargs={"k": 6})
    everything = ids(g.wrap(base).invoke(QUERY))
    assert len(everything) == 3
    one = g.wrap(base, domain="one")
    assert ids(one.invoke(QUERY)) == ids(asyncio.run(one.ainvoke(QUERY))) == everything[:1]
    # the run metadata key wins over the wrapper's domain, also through a chain
    routed = {"metadata": {DOMAIN_KEY: "two"}}
    assert ids(one.invoke(QUERY, config=routed)) == everything[:2]  # type: ignore[arg-type]
    chain = RunnablePassthrough() | one
    assert ids(chain.invoke(QUERY, config=routed)) == everything[:2]  # type: ignore[arg-type]
    assert ids(asyncio.run(chain.ainvoke(QUERY, config=routed))) == everything[:2]  # type: ignore[arg-type]


def test_a_compressor_reads_the_domain_of_the_run(store: InMemoryVectorStore) -> None:
    g = sim_guard(domains=DOMAINS)
    base = store.as_retriever(search_kwargs={"k": 6})  # no scores in metadata: max_k only
    pipeline = ContextualCompressionRetriever(
        base_compressor=g.as_compressor(), base_retriever=base
    )
    with pytest.warns(ScoreWarning):  # once per guard: the domains' guards share it
        assert len(pipeline.invoke(QUERY)) == 3
    routed = {"metadata": {DOMAIN_KEY: "one"}}
    assert len(pipeline.invoke(QUERY, config=routed)) == 1  # type: ignore[arg-type]
    assert len(asyncio.run(pipeline.ainvoke(QUERY, config=routed))) == 1  # type: ignore[arg-type]
    assert len(g.as_compressor(domain="two").compress_documents(base.invoke(QUERY), QUERY)) == 2


def test_a_domain_that_is_not_a_str_is_refused(store: InMemoryVectorStore) -> None:
    g = sim_guard(domains=DOMAINS)
    base = store.as_retriever(search_kwargs={"k": 6})
    with pytest.raises(ConfigError, match=r"domain"):
        g.wrap(base, domain=1)
    with pytest.raises(RagguardError, match=r"^domain must be a str"):
        g.wrap(base).invoke(QUERY, config={"metadata": {DOMAIN_KEY: 1}})
