"""Retriever factories for the ``--retriever module:function`` tests: real in-memory
LangChain and LlamaIndex retrievers over examples/notes, embedding with a keyword hash
(cosine similarity measures word overlap; no model), plus factories that go wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import TextNode

from tests.adapters.conftest import keyword_vector

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "notes"


def corpus() -> list[dict[str, str]]:
    lines = (NOTES / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class KeywordEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [keyword_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return keyword_vector(text)


class KeywordEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return keyword_vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return keyword_vector(text)


def make_langchain_retriever() -> BaseRetriever:
    """A plain vector-store retriever: ragguard asks its store for the scores."""
    store = InMemoryVectorStore(KeywordEmbeddings())
    store.add_documents(
        [Document(page_content=f"{p['title']}. {p['text']}", id=p["id"]) for p in corpus()]
    )
    return store.as_retriever(search_kwargs={"k": 10})


def make_llamaindex_retriever() -> Any:
    nodes = [TextNode(id_=p["id"], text=f"{p['title']}. {p['text']}") for p in corpus()]
    index = VectorStoreIndex(nodes, embed_model=KeywordEmbedding())
    return index.as_retriever(similarity_top_k=10)


class _NoIds(BaseRetriever):
    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
        return [Document(page_content="a passage without an id", metadata={"score": 0.5})]


def make_retriever_without_ids() -> BaseRetriever:
    return _NoIds()


class _Broken(BaseRetriever):
    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
        raise ConnectionError("down")


def make_broken_retriever() -> BaseRetriever:
    return _Broken()


def make_list() -> list[str]:
    return ["not", "a", "retriever"]


def make_failing() -> BaseRetriever:
    raise RuntimeError("the vector index is not built yet")


NOT_CALLABLE = 42


class MiniLMEmbeddings(Embeddings):
    """The packaged all-MiniLM-L6-v2, normalised: the store's cosine is the model's."""

    def __init__(self) -> None:
        from ragguard.trained import PACKAGED_ENCODER, load_encoder

        self.model = load_encoder(PACKAGED_ENCODER)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vecs = self.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
        return [list(map(float, v)) for v in vecs]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def make_minilm_retriever() -> BaseRetriever:
    """A vector-store retriever embedding with the packaged MiniLM (``--noise-scorer``'s
    model), over examples/notes."""
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_documents(
        [Document(page_content=f"{p['title']}. {p['text']}", id=p["id"]) for p in corpus()]
    )
    return store.as_retriever(search_kwargs={"k": 10})
