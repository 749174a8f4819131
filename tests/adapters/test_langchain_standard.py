"""LangChain's own standard retriever test suite, run offline on the guarded retriever."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests

from ragguard import ContextGuard, GuardConfig
from ragguard.adapters.langchain import GuardedRetriever
from tests.adapters.conftest import NOTES, QUERY, keyword_vector


class _KeywordEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [keyword_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return keyword_vector(text)


def _store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(_KeywordEmbeddings())
    store.add_documents([Document(id=i, page_content=t) for i, t, _ in NOTES])
    return store


class TestGuardedRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[GuardedRetriever]:
        return GuardedRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        # a threshold of 0 lets k decide how many documents come back, as the suite expects
        guard = ContextGuard(GuardConfig(max_k=6, relative_threshold=0.0))
        return {"retriever": _store().as_retriever(search_kwargs={"k": 6}), "guard": guard}

    @property
    def retriever_query_example(self) -> str:
        return QUERY
