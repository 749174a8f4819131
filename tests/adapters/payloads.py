"""What every adapter hands a listener and the caller, on a fixed set of selections: the
kept documents / nodes with their metadata, the LangChain callback event, the LlamaIndex
instrumentation event and the Haystack outputs, with callbacks and handlers on.

``payloads_golden.json`` holds what the code before issue 39 returned (captured once with
``python -m tests.adapters.payloads``); test_payloads.py checks the code still returns
exactly that. Never regenerate it to make a test pass.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from uuid import UUID

import haystack
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field

from ragguard import ContextGuard, GuardConfig
from ragguard.adapters.llamaindex import RagguardSelectionEvent
from tests.adapters.conftest import NOTES, PLANT_QUERY, PLANTS, keyword_vector
from tests.adapters.helpers import keyword_reranker

GOLDEN = Path(__file__).with_name("payloads_golden.json")

# (id, text, score, metadata): a conflict pair, notes, a repeated id, a near-copy, a
# missing score, nested metadata
ROWS: list[tuple[str, str, float | None, dict[str, Any]]] = [
    *((i, t, 0.9 - 0.01 * n, {"date": d, "tags": ["plant"]}) for n, (i, t, d) in enumerate(PLANTS)),
    *(
        (i, t, 0.8 - 0.07 * n, {"topic": tp, "nested": {"v": [n]}})
        for n, (i, t, tp) in enumerate(NOTES)
    ),
    ("pr-0302", NOTES[0][1], 0.5, {"topic": "copy"}),
    ("near", NOTES[1][1] + " again", 0.55, {}),
    ("unscored", "a passage without a score", None, {"topic": None}),
]

GUARDS: dict[str, tuple[dict[str, Any], bool]] = {  # settings, with the keyword reranker
    "plain": ({"max_k": 3, "relative_threshold": 0.5}, False),
    "stages": (
        {
            "max_k": 6,
            "relative_threshold": 0.3,
            "conflicts": "flag",
            "near_duplicate_threshold": 0.8,
            "max_tokens": 60,
        },
        False,
    ),
    "drop_conflicts": ({"max_k": 6, "relative_threshold": 0.3, "conflicts": "drop"}, False),
    "rerank": ({"max_k": 3, "rerank": {"enabled": True, "top_n": 5}}, True),
    "insufficient": ({"max_k": 3, "min_evidence": 0.99}, False),
}


def guard(name: str) -> ContextGuard:
    settings, rerank = GUARDS[name]
    config = GuardConfig(**{"score_kind": "similarity", **settings})
    return ContextGuard(config, reranker=keyword_reranker if rerank else None)


class Fixed(BaseRetriever):
    """Returns the caller's documents."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return self.docs


class _Embeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [keyword_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return keyword_vector(text)


class _Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kw: Any) -> None:
        self.events.append({"name": name, "data": data})


class _EventLog(BaseEventHandler):
    events: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "PayloadEventLog"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, RagguardSelectionEvent):
            keep = ("query", "kept", "dropped", "warnings", "verdict", "conflicts")
            self.events.append({k: getattr(event, k) for k in keep})


def _lc_docs(with_ids: bool = True) -> list[Document]:
    return [
        Document(
            id=i if with_ids else None,
            page_content=t,
            metadata={**m, **({} if s is None else {"relevance_score": s})},
        )
        for i, t, s, m in ROWS
    ]


def _lc(docs: list[Document]) -> list[dict[str, Any]]:
    return [{"id": d.id, "text": d.page_content, "metadata": d.metadata} for d in docs]


def langchain(name: str, run_async: bool = False) -> dict[str, Any]:
    """The wrapped retriever (metadata scores, then documents without ids), the
    compressor and a wrapped InMemoryVectorStore retriever, with a callback handler."""
    g, out = guard(name), {}
    store = InMemoryVectorStore(_Embeddings())
    store.add_documents(_lc_docs())
    cases = {
        "retriever": (g.wrap(Fixed(docs=_lc_docs())), None),
        "no_ids": (g.wrap(Fixed(docs=_lc_docs(with_ids=False))), None),
        "store": (g.wrap(store.as_retriever(search_kwargs={"k": len(ROWS)})), None),
        "compressor": (None, g.as_compressor()),
    }
    for case, (retriever, compressor) in cases.items():
        handler = _Events()
        if retriever is not None:
            config: Any = {"callbacks": [handler]}
            call = retriever.ainvoke if run_async else retriever.invoke
            docs = call(PLANT_QUERY, config=config)
        else:
            assert compressor is not None
            call = compressor.acompress_documents if run_async else compressor.compress_documents
            docs = call(_lc_docs(), PLANT_QUERY, callbacks=[handler])
        docs = asyncio.run(docs) if run_async else docs
        out[case] = {"documents": _lc(list(docs)), "events": handler.events}
    return out


def llamaindex(name: str, run_async: bool = False) -> dict[str, Any]:
    """The postprocessor on nodes, with an instrumentation event handler."""
    nodes = [
        NodeWithScore(node=TextNode(id_=i, text=t, metadata=m), score=s) for i, t, s, m in ROWS
    ]
    post = guard(name).as_postprocessor()
    log = _EventLog(events=[])
    root = get_dispatcher()
    root.add_event_handler(log)
    try:
        bundle = QueryBundle(PLANT_QUERY)
        if run_async:
            kept = asyncio.run(post.apostprocess_nodes(nodes, query_bundle=bundle))
        else:
            kept = post.postprocess_nodes(nodes, query_bundle=bundle)
    finally:
        root.event_handlers.remove(log)
    return {
        "nodes": [
            {
                "id": n.node.node_id,
                "score": n.score,
                "text": n.node.get_content(),
                "metadata": n.node.metadata,
                "excluded_llm": n.node.excluded_llm_metadata_keys,
                "excluded_embed": n.node.excluded_embed_metadata_keys,
            }
            for n in kept
        ],
        "events": log.events,
    }


def haystack_outputs(name: str, run_async: bool = False) -> dict[str, Any]:
    """The component's outputs."""
    docs = [
        haystack.Document(id=i, content=t, score=s, meta=m, embedding=[0.5, 0.25])
        for i, t, s, m in ROWS
    ]
    ranker = guard(name).as_haystack()
    if run_async:
        result = asyncio.run(ranker.run_async(query=PLANT_QUERY, documents=docs))
    else:
        result = ranker.run(query=PLANT_QUERY, documents=docs)
    return {
        "documents": [
            {
                "id": d.id,
                "content": d.content,
                "score": d.score,
                "meta": d.meta,
                "embedding": d.embedding,
            }
            for d in result["documents"]
        ],
        "verdict": result["verdict"],
        "conflicts": result["conflicts"],
    }


def capture(run_async: bool = False) -> dict[str, Any]:
    """Everything the adapters return and send, per guard (JSON values)."""
    return {
        name: {
            "langchain": langchain(name, run_async),
            "llamaindex": llamaindex(name, run_async),
            "haystack": haystack_outputs(name, run_async),
        }
        for name in GUARDS
    }


def as_json(value: Any) -> Any:
    """``value`` as the golden file holds it (tuples as lists)."""
    return json.loads(json.dumps(value))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    GOLDEN.write_text(json.dumps(capture(), indent=1, sort_keys=True) + "\n")
