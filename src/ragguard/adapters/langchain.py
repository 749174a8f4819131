"""LangChain adapter: a guarded ``BaseRetriever`` and a ``BaseDocumentCompressor``.

``guard.wrap(retriever)`` returns a :class:`GuardedRetriever`, a real
``langchain_core.retrievers.BaseRetriever``: it invokes, batches, streams events and
composes in chains like the retriever it wraps.

Where the scores come from (LangChain's ``Document`` has no score field), in order:

1. **A plain ``VectorStoreRetriever``** (``vectorstore.as_retriever(...)``, search type
   ``similarity`` or ``similarity_score_threshold``): ragguard asks its vector store for
   the same search *with scores*: ``similarity_search_with_score`` (or, for
   ``similarity_score_threshold``, ``similarity_search_with_relevance_scores``) with the
   retriever's own ``search_kwargs`` (so it fetches the configured ``k``) plus any
   invoke kwargs. The call runs as a child retriever run named after the original, so
   callbacks and tags see it as before. The score kind is, in order: the adapter's
   ``score_kind`` argument; what the store tells (see :func:`store_score_kind`: relevance
   scores are probabilities, ``InMemoryVectorStore`` returns cosine similarity, a
   ``distance_strategy`` names distances or inner products); the guard's
   ``config.score_kind``. Subclasses that override ``_get_relevant_documents``, and the
   ``mmr`` search type, take path 2 or 3, so their behaviour never changes.
2. **Scores in document metadata**: other retrievers are invoked as they are; a document
   whose metadata holds a number under one of ``score_keys`` (default
   ``relevance_score``, then ``score``, as rerankers and hybrid retrievers write them)
   uses it. The kind is the adapter's ``score_kind`` or the guard's
   ``config.score_kind``; with neither, only ``max_k`` applies (one warning).
3. **No scores at all**: only ``max_k`` / ``min_k`` apply, with one
   :class:`~ragguard.errors.ScoreWarning` saying so.

Returned documents are copies (deep-copied metadata, same ``id``) with the guard's
decision under ``metadata["ragguard"]`` (``metadata_key``). Every selection is also sent
as a custom callback event ``ragguard_selection`` on the retriever's run, logged at DEBUG
on the ``ragguard`` logger and passed to the guard's ``on_selection``.

The number of documents: the constructor's ``k`` or ``invoke(query, k=3)`` caps this
call (at most ``k`` documents); otherwise the guard's ``max_k``. Other invoke kwargs
pass through to the wrapped retriever.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real
from typing import Any

from ragguard._optional import require

require("langchain_core", "langchain")

from langchain_core.callbacks import (  # noqa: E402
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
    Callbacks,
)
from langchain_core.documents import BaseDocumentCompressor, Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.vectorstores import (  # noqa: E402
    InMemoryVectorStore,
    VectorStore,
    VectorStoreRetriever,
)
from pydantic import ConfigDict, Field, PrivateAttr  # noqa: E402

from ragguard.adapters._common import (  # noqa: E402
    METADATA_KEY,
    SELECTION_EVENT,
    copy_metadata,
    event_payload,
)
from ragguard.candidate import Candidate, Selection  # noqa: E402
from ragguard.guard import ContextGuard  # noqa: E402
from ragguard.scores import ScoreKind  # noqa: E402

__all__ = ["GuardCompressor", "GuardedRetriever", "store_score_kind"]

DEFAULT_SCORE_KEYS = ("relevance_score", "score")
_SCORE = "__ragguard_retrieval_score__"  # carries a store score through the child run

# distance_strategy names used by LangChain vector stores (langchain_community's
# DistanceStrategy and its copies in partner packages)
_STRATEGY_KINDS = {
    "EUCLIDEAN_DISTANCE": ScoreKind.DISTANCE,
    "JACCARD": ScoreKind.DISTANCE,
    "MAX_INNER_PRODUCT": ScoreKind.SIMILARITY,
    "DOT_PRODUCT": ScoreKind.SIMILARITY,
}


def store_score_kind(store: VectorStore, *, relevance: bool = False) -> ScoreKind | None:
    """What ``similarity_search_with_score`` of ``store`` returns, where it can be known.

    Args:
        store: a LangChain vector store.
        relevance: the scores come from ``similarity_search_with_relevance_scores``,
            which LangChain defines as 0 (dissimilar) to 1 (most similar).

    Returns:
        ``probability`` for relevance scores; ``similarity`` for ``InMemoryVectorStore``
        (cosine similarity) and for stores whose ``distance_strategy`` is an inner
        product; ``distance`` for Euclidean or Jaccard distance strategies; ``None`` when
        it cannot be known (e.g. a ``COSINE`` strategy, which stores report as distance
        or similarity differently).
    """
    if relevance:
        return ScoreKind.PROBABILITY
    if isinstance(store, InMemoryVectorStore):
        return ScoreKind.SIMILARITY
    strategy = getattr(store, "distance_strategy", None)
    if strategy is None:
        return None
    name = str(getattr(strategy, "name", strategy)).rsplit(".", 1)[-1].upper()
    return _STRATEGY_KINDS.get(name)


class _ScoredVectorStoreRetriever(VectorStoreRetriever):
    """The user's vector-store search, asked for scores. Returns copies that carry the
    score under a private metadata key, removed again before anything leaves ragguard."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        search = self.search_kwargs | kwargs
        if self.search_type == "similarity_score_threshold":
            pairs = self.vectorstore.similarity_search_with_relevance_scores(query, **search)
        else:
            pairs = self.vectorstore.similarity_search_with_score(query, **search)
        return [_carry(doc, score) for doc, score in pairs]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        search = self.search_kwargs | kwargs
        if self.search_type == "similarity_score_threshold":
            store = self.vectorstore
            pairs = await store.asimilarity_search_with_relevance_scores(query, **search)
        else:
            pairs = await self.vectorstore.asimilarity_search_with_score(query, **search)
        return [_carry(doc, score) for doc, score in pairs]


def _carry(doc: Document, score: float) -> Document:
    return doc.model_copy(update={"metadata": {**doc.metadata, _SCORE: score}})


def _metadata_score(metadata: dict[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, Real) and not isinstance(value, bool):
            return float(value)
    return None


class _Translator:
    """Documents -> Candidates -> guarded copies, for one call."""

    def __init__(self, score_keys: Sequence[str], metadata_key: str) -> None:
        self.score_keys = score_keys
        self.metadata_key = metadata_key

    def candidates(self, docs: Sequence[Document]) -> tuple[list[Candidate], bool]:
        """Candidates for ``docs`` and whether any document carried a score."""
        out: list[Candidate] = []
        any_score = False
        for i, doc in enumerate(docs):
            if _SCORE in doc.metadata:
                metadata = {k: v for k, v in doc.metadata.items() if k != _SCORE}
                raw = doc.metadata[_SCORE]
                score = float(raw) if isinstance(raw, Real) else None
                doc = doc.model_copy(update={"metadata": metadata})
            else:
                score = _metadata_score(doc.metadata, self.score_keys)
            any_score = any_score or score is not None
            out.append(
                Candidate(
                    id=doc.id if doc.id else f"#{i}",
                    text=doc.page_content,
                    score=score,
                    metadata=doc.metadata,
                    source=doc,
                )
            )
        return out, any_score

    def documents(self, selection: Selection) -> list[Document]:
        """Copies of the kept documents, best first, carrying the decision."""
        out: list[Document] = []
        for decision in selection.kept_decisions:
            doc: Document = decision.candidate.source
            metadata = copy_metadata(doc.metadata, self.metadata_key, selection, decision)
            out.append(doc.model_copy(update={"metadata": metadata}))
        return out


def _scored_twin(retriever: BaseRetriever) -> _ScoredVectorStoreRetriever | None:
    if not isinstance(retriever, VectorStoreRetriever):
        return None
    overridden = (
        type(retriever)._get_relevant_documents is not VectorStoreRetriever._get_relevant_documents
        or type(retriever)._aget_relevant_documents
        is not VectorStoreRetriever._aget_relevant_documents
    )
    if overridden or retriever.search_type not in ("similarity", "similarity_score_threshold"):
        return None
    return _ScoredVectorStoreRetriever(
        vectorstore=retriever.vectorstore,
        search_type=retriever.search_type,
        search_kwargs=dict(retriever.search_kwargs),
        tags=retriever.tags,
        metadata=retriever.metadata,
        name=retriever.get_name(),
    )


class GuardedRetriever(BaseRetriever):
    """A LangChain retriever that passes only what the guard keeps.

    Build it with ``guard.wrap(retriever)`` or directly::

        GuardedRetriever(retriever=vectorstore.as_retriever(search_kwargs={"k": 20}),
                         guard=ContextGuard.from_file("ragguard.toml"))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: BaseRetriever = Field(description="The retriever being guarded.")
    guard: ContextGuard = Field(description="The guard that selects what reaches the LLM.")
    k: int | None = Field(
        default=None, ge=1, description="Most documents returned; default the guard's max_k."
    )
    score_kind: ScoreKind | None = Field(
        default=None, description="What the scores are, overriding what ragguard infers."
    )
    score_keys: tuple[str, ...] = Field(
        default=DEFAULT_SCORE_KEYS, description="Metadata keys that may hold a score."
    )
    metadata_key: str = Field(
        default=METADATA_KEY, description="Metadata key for the guard's decision."
    )

    _translator: _Translator = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._translator = _Translator(self.score_keys, self.metadata_key)

    def _source(self) -> tuple[BaseRetriever, ScoreKind | None]:
        """The retriever to invoke and the score kind it implies (None: the guard's)."""
        twin = _scored_twin(self.retriever)
        if twin is None:
            return self.retriever, self.score_kind
        relevance = twin.search_type == "similarity_score_threshold"
        kind = self.score_kind or store_score_kind(twin.vectorstore, relevance=relevance)
        return twin, kind

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        source, kind = self._source()
        docs = source.invoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        candidates, any_score = self._translator.candidates(docs)
        selection = self.guard.select(
            query, candidates, score_kind=kind, scored=any_score, max_k=k or self.k
        )
        run_manager.get_child().on_custom_event(
            SELECTION_EVENT, event_payload(selection), run_id=run_manager.run_id
        )
        return self._translator.documents(selection)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        source, kind = self._source()
        docs = await source.ainvoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        candidates, any_score = self._translator.candidates(docs)
        selection = await self.guard.aselect(
            query, candidates, score_kind=kind, scored=any_score, max_k=k or self.k
        )
        await run_manager.get_child().on_custom_event(
            SELECTION_EVENT, event_payload(selection), run_id=run_manager.run_id
        )
        return self._translator.documents(selection)


class GuardCompressor(BaseDocumentCompressor):
    """A document compressor that passes only what the guard keeps, for pipelines such
    as ``ContextualCompressionRetriever``. Scores come from document metadata
    (``score_keys``); without any, only ``max_k`` applies."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    guard: ContextGuard = Field(description="The guard that selects what reaches the LLM.")
    score_kind: ScoreKind | None = Field(
        default=None, description="What the metadata scores are; default the guard's config."
    )
    score_keys: tuple[str, ...] = Field(
        default=DEFAULT_SCORE_KEYS, description="Metadata keys that may hold a score."
    )
    metadata_key: str = Field(
        default=METADATA_KEY, description="Metadata key for the guard's decision."
    )

    _translator: _Translator = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._translator = _Translator(self.score_keys, self.metadata_key)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        candidates, any_score = self._translator.candidates(list(documents))
        selection = self.guard.select(
            query, candidates, score_kind=self.score_kind, scored=any_score
        )
        manager = CallbackManager.configure(inheritable_callbacks=callbacks)
        manager.on_custom_event(
            SELECTION_EVENT, event_payload(selection), run_id=manager.parent_run_id
        )
        return self._translator.documents(selection)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        candidates, any_score = self._translator.candidates(list(documents))
        selection = await self.guard.aselect(
            query, candidates, score_kind=self.score_kind, scored=any_score
        )
        manager = CallbackManager.configure(inheritable_callbacks=callbacks)
        manager.on_custom_event(
            SELECTION_EVENT, event_payload(selection), run_id=manager.parent_run_id
        )
        return self._translator.documents(selection)
