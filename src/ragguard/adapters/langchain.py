"""LangChain adapter: ``guard.wrap(retriever)`` returns a
[`GuardedRetriever`][ragguard.adapters.langchain.GuardedRetriever], a real
``langchain_core.retrievers.BaseRetriever``, and ``guard.as_compressor()`` a
``BaseDocumentCompressor``. Where the scores come from (a vector store searched with
scores, ``score_keys`` in metadata, or none), the copies returned, the
``ragguard_selection`` event and the options: docs/guides/adapters.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from numbers import Real
from typing import Any, TypeAlias, cast

from ragguard._optional import require

require("langchain_core", "langchain")

from langchain_core.callbacks import (  # noqa: E402
    AsyncCallbackManager,
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
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr  # noqa: E402

from ragguard import ContextGuard  # noqa: E402
from ragguard.adapters._common import (  # noqa: E402
    METADATA_KEY,
    SELECTION_EVENT,
    adapter_options,
    call_k,
    copy_metadata,
    event_payload,
)
from ragguard.candidate import Candidate, Selection, candidate_of  # noqa: E402
from ragguard.errors import ScoreWarning  # noqa: E402
from ragguard.scores import ScoreKind  # noqa: E402

__all__ = [
    "DOMAIN_KEY",
    "GuardCompressor",
    "GuardedRetriever",
    "Retriever",
    "candidate_ids",
    "store_score_kind",
]

Retriever: TypeAlias = BaseRetriever
"""LangChain's retriever base class, ``langchain_core.retrievers.BaseRetriever``:
what [`GuardedRetriever`][ragguard.adapters.langchain.GuardedRetriever] wraps
(``ContextGuard.wrap()`` is typed with it)."""

DEFAULT_SCORE_KEYS = ("relevance_score", "score")
DOMAIN_KEY = "ragguard_domain"
"""The run metadata key that routes one call to a domain of the guard's config:
``invoke(query, config={"metadata": {DOMAIN_KEY: "legal"}})``, also through a chain."""
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


def _metadata_score(
    metadata: dict[str, Any], keys: Sequence[str]
) -> tuple[float | None, tuple[str, Any] | None]:
    """The first number under ``keys``; without one, the first of ``keys`` whose value is
    there but is no number (``'0.9'``, ``True``)."""
    unread = None
    for key in keys:
        value = metadata.get(key)
        if value is None:
            continue
        if type(value) is float or (isinstance(value, Real) and not isinstance(value, bool)):
            return float(value), None
        if unread is None:
            unread = key, value
    return None, unread


def candidate_ids(docs: Sequence[Document]) -> list[str]:
    """The guard's id for each document: its own ``id``, or for one without an id its
    position (``#<i>``), prefixed with as many ``#`` as it takes to differ from every real
    id in ``docs``; so no two documents share an id unless their real ids are equal."""
    ids = [doc.id for doc in docs]
    if all(ids):  # the common case: every document has its own id
        return cast("list[str]", ids)
    real = set(filter(None, ids))
    positions = [i for i, cid in enumerate(ids) if not cid]
    prefix = "#"
    while any(f"{prefix}{i}" in real for i in positions):
        prefix += "#"
    return [cid or f"{prefix}{i}" for i, cid in enumerate(ids)]


class Translator:
    """Documents -> the guard's arguments; its selection -> guarded copies.

    [`GuardedRetriever`][ragguard.adapters.langchain.GuardedRetriever] and
    [`GuardCompressor`][ragguard.adapters.langchain.GuardCompressor] translate with it, and
    calibration (``ragguard.calibration.data.inputs.retrieve_run``) reads a LangChain retriever's
    documents with it, so both read ids and scores alike. A score under a key of ``score_keys`` that
    is no number warns once per translator and key.
    """

    def __init__(self, score_keys: Sequence[str], metadata_key: str) -> None:
        self.score_keys = score_keys
        self.metadata_key = metadata_key
        self._warned: set[str] = set()

    def candidates(self, docs: Sequence[Document]) -> tuple[list[Candidate], bool]:
        """Candidates for ``docs`` and whether any document carried a score."""
        out: list[Candidate] = []
        any_score = False
        unread: tuple[str, str, Any] | None = None  # (document id, key, value)
        for doc, cid in zip(docs, candidate_ids(docs), strict=True):
            metadata = doc.metadata
            if _SCORE in metadata:
                raw = metadata[_SCORE]
                score = float(raw) if isinstance(raw, Real) else None
                metadata = {k: v for k, v in metadata.items() if k != _SCORE}
                doc = doc.model_copy(update={"metadata": metadata})
            else:
                score, found = _metadata_score(metadata, self.score_keys)
                if found is not None and unread is None:
                    unread = (cid, *found)
            any_score = any_score or score is not None
            out.append(candidate_of(cid, doc.page_content, score, metadata, doc))
        if unread is not None:
            self._warn_unread(*unread, any_score=any_score)
        return out, any_score

    def _warn_unread(self, cid: str, key: str, value: Any, *, any_score: bool) -> None:
        """Say once per adapter and key that scores under ``key`` are no numbers."""
        if key in self._warned:
            return
        self._warned.add(key)
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        then = (
            "those documents count as having no score (invalid_scores decides about them)"
            if any_score
            else "no document has a numeric score, so only max_k / min_k apply"
        )
        warnings.warn(
            f"documents carry scores under metadata key {key!r} that are not numbers (e.g. "
            f"{shown}, a {type(value).__name__}, on document {cid!r}); ragguard reads int "
            f"and float scores only and never parses text, so {then}. Convert the scores "
            "to float where the documents are made, or set score_keys to keys that hold "
            "numbers.",
            ScoreWarning,
            stacklevel=4,
        )

    def arguments(
        self,
        query: str,
        docs: Sequence[Document],
        score_kind: ScoreKind | None,
        max_k: int | None = None,
        domain: str | None = None,
    ) -> dict[str, Any]:
        """The keyword arguments of ``guard.select`` / ``guard.aselect`` for ``docs``."""
        candidates, scored = self.candidates(docs)
        return {
            "query": query,
            "candidates": candidates,
            "score_kind": score_kind,
            "scored": scored,
            "max_k": max_k,
            "domain": domain,
        }

    def documents(self, selection: Selection) -> list[Document]:
        """Copies of the kept documents, best first, carrying the decision."""
        out: list[Document] = []
        for decision in selection.kept_decisions:
            doc: Document = decision.candidate.source
            metadata = copy_metadata(doc.metadata, self.metadata_key, selection, decision)
            out.append(doc.model_copy(update={"metadata": metadata}))
        return out


def scored_twin(retriever: BaseRetriever) -> VectorStoreRetriever | None:
    """A copy of a plain ``VectorStoreRetriever`` (``similarity`` or
    ``similarity_score_threshold`` search, its methods not overridden) that asks the
    store for scores and carries each on its document
    ([`Translator.candidates`][ragguard.adapters.langchain.Translator.candidates] reads it);
    ``None`` for any other retriever, which is called as it is."""
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


class _Options(BaseModel):
    """The options the retriever and the compressor share; bad ones raise
    [`ConfigError`][ragguard.ConfigError]."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    guard: ContextGuard = Field(description="The guard that selects what reaches the LLM.")
    score_kind: ScoreKind | None = Field(
        default=None, description="What the scores are, overriding what ragguard infers."
    )
    score_keys: tuple[str, ...] = Field(
        default=DEFAULT_SCORE_KEYS, description="Metadata keys that may hold a score."
    )
    metadata_key: str = Field(
        default=METADATA_KEY, description="Metadata key for the guard's decision."
    )
    domain: str | None = Field(
        default=None,
        strict=True,
        description="Select with this domain's settings (the config's [domains.NAME]); a "
        "call's run metadata key ragguard_domain wins over it.",
    )

    _translator: Translator = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        with adapter_options(type(self)):
            super().__init__(**data)

    def model_post_init(self, context: Any, /) -> None:
        self._translator = Translator(self.score_keys, self.metadata_key)

    def _domain(self, metadata: dict[str, Any]) -> str | None:
        """The call's domain: its run metadata's ``ragguard_domain``, else ``domain``."""
        return metadata.get(DOMAIN_KEY, self.domain) if metadata else self.domain


class GuardedRetriever(_Options, BaseRetriever):
    """A LangChain retriever that passes only what the guard keeps.

    Build it with ``guard.wrap(retriever)`` or directly::

        GuardedRetriever(retriever=vectorstore.as_retriever(search_kwargs={"k": 20}),
                         guard=ContextGuard.from_file("ragguard.toml"))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    retriever: BaseRetriever = Field(description="The retriever being guarded.")
    k: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Most documents returned; default the guard's max_k.",
    )

    def _plan(self, k: object) -> tuple[BaseRetriever, ScoreKind | None, int | None]:
        """What one call invokes, the score kind it implies (None: the guard's) and the
        cap (shared by both paths)."""
        max_k = call_k(k) or self.k
        twin = scored_twin(self.retriever)
        if twin is None:
            return self.retriever, self.score_kind, max_k
        relevance = twin.search_type == "similarity_score_threshold"
        kind = self.score_kind or store_score_kind(twin.vectorstore, relevance=relevance)
        return twin, kind, max_k

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: object = None,
        **kwargs: Any,
    ) -> list[Document]:
        source, kind, max_k = self._plan(k)
        child = run_manager.get_child()
        docs = source.invoke(query, config={"callbacks": child}, **kwargs)
        domain = self._domain(run_manager.metadata)
        selection = self.guard.select(
            **self._translator.arguments(query, docs, kind, max_k, domain)
        )
        if child.handlers:  # the payload is built for a listener only
            child.on_custom_event(
                SELECTION_EVENT, event_payload(selection), run_id=run_manager.run_id
            )
        return self._translator.documents(selection)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: object = None,
        **kwargs: Any,
    ) -> list[Document]:
        source, kind, max_k = self._plan(k)
        child = run_manager.get_child()
        docs = await source.ainvoke(query, config={"callbacks": child}, **kwargs)
        domain = self._domain(run_manager.metadata)
        arguments = self._translator.arguments(query, docs, kind, max_k, domain)
        selection = await self.guard.aselect(**arguments)
        if child.handlers:  # the payload is built for a listener only
            await child.on_custom_event(
                SELECTION_EVENT, event_payload(selection), run_id=run_manager.run_id
            )
        return self._translator.documents(selection)


class GuardCompressor(_Options, BaseDocumentCompressor):
    """A document compressor that passes only what the guard keeps, for pipelines such
    as ``ContextualCompressionRetriever``. Scores come from document metadata
    (``score_keys``) and their kind is ``score_kind``, else the guard's
    ``config.score_kind``; without any score, only ``max_k`` applies."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        manager = CallbackManager.configure(inheritable_callbacks=callbacks)
        domain = self._domain(manager.metadata)
        arguments = self._translator.arguments(query, documents, self.score_kind, None, domain)
        selection = self.guard.select(**arguments)
        if manager.handlers:  # the payload is built for a listener only
            manager.on_custom_event(
                SELECTION_EVENT, event_payload(selection), run_id=manager.parent_run_id
            )
        return self._translator.documents(selection)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        manager = AsyncCallbackManager.configure(inheritable_callbacks=callbacks)
        domain = self._domain(manager.metadata)
        arguments = self._translator.arguments(query, documents, self.score_kind, None, domain)
        selection = await self.guard.aselect(**arguments)
        if manager.handlers:  # the payload is built for a listener only
            await manager.on_custom_event(
                SELECTION_EVENT, event_payload(selection), run_id=manager.parent_run_id
            )
        return self._translator.documents(selection)
