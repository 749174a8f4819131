"""LlamaIndex adapter: ``guard.wrap(retriever)`` returns a
[`GuardedRetriever`][ragguard.adapters.llamaindex.GuardedRetriever] and
``guard.as_postprocessor()`` a
[`GuardPostprocessor`][ragguard.adapters.llamaindex.GuardPostprocessor]. Scores are
``NodeWithScore.score`` (a similarity unless ``score_kind`` says otherwise); the copies
returned, the [`RagguardSelectionEvent`][ragguard.adapters.llamaindex.RagguardSelectionEvent],
saving and the options: docs/guides/adapters.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from ragguard._optional import require

require("llama_index.core", "llamaindex")

from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # noqa: E402
from llama_index.core.instrumentation.event_handlers import NullEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode  # noqa: E402
from pydantic import ConfigDict, Field, PrivateAttr  # noqa: E402

from ragguard import ContextGuard  # noqa: E402
from ragguard.adapters._common import (  # noqa: E402
    METADATA_KEY,
    adapter_options,
    call_domain,
    check_guard,
    code_reranker,
    copy_metadata,
    event_payload,
    parse_score_kind,
    saved_guard,
)
from ragguard.candidate import Candidate, Selection, candidate_of  # noqa: E402
from ragguard.errors import ArgumentTypeError, ConfigError  # noqa: E402
from ragguard.rerank import Reranker  # noqa: E402
from ragguard.scores import ScoreKind  # noqa: E402

__all__ = ["GuardPostprocessor", "GuardedRetriever", "RagguardSelectionEvent", "Retriever"]

Retriever: TypeAlias = BaseRetriever
"""LlamaIndex's retriever base class, ``llama_index.core.retrievers.BaseRetriever``:
what [`GuardedRetriever`][ragguard.adapters.llamaindex.GuardedRetriever] wraps
(``ContextGuard.wrap()`` is typed with it)."""

dispatcher = get_dispatcher(__name__)


class RagguardSelectionEvent(BaseEvent):
    """Dispatched for every selection: what was kept and why the rest was dropped."""

    query: str = Field(description="The query.")
    kept: list[str] = Field(description="Node ids kept, best first.")
    dropped: list[dict[str, Any]] = Field(
        description="id, reason, message, duplicate_of (the id it repeats) and "
        "conflict_with (the ids it conflicts with) per drop."
    )
    warnings: list[str] = Field(default_factory=list, description="Score warnings.")
    verdict: str = Field(
        default="answerable",
        description="answerable, insufficient (nothing kept) or conflict (two kept nodes "
        "state different facts).",
    )
    conflicts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per conflict group: ids, spans (per member), kept (per member) and a "
        "one-line description.",
    )

    @classmethod
    def class_name(cls) -> str:
        return "RagguardSelectionEvent"


class _Translator:
    """Nodes -> Candidates -> guarded copies."""

    def __init__(
        self, guard: ContextGuard, score_kind: ScoreKind | None, key: str, domain: str | None
    ) -> None:
        self.guard = guard
        self.kind = score_kind or guard.config.score_kind or ScoreKind.SIMILARITY
        self.key = key
        self.domain = domain

    def candidates(self, nodes: Sequence[NodeWithScore]) -> tuple[list[Candidate], bool]:
        out = [
            candidate_of(n.node.node_id, _text(n.node), n.score, n.node.metadata, n) for n in nodes
        ]
        return out, any(n.score is not None for n in nodes)

    def nodes(self, selection: Selection) -> list[NodeWithScore]:
        out: list[NodeWithScore] = []
        for decision in selection.kept_decisions:
            original: NodeWithScore = decision.candidate.source
            node = original.node
            metadata = copy_metadata(node.metadata, self.key, selection, decision)
            copy = node.model_copy(
                update={
                    "metadata": metadata,
                    "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, self.key],
                    "excluded_embed_metadata_keys": [
                        *node.excluded_embed_metadata_keys,
                        self.key,
                    ],
                }
            )
            out.append(NodeWithScore(node=copy, score=original.score))
        if _listened():  # the payload is built for a listener only
            dispatcher.event(RagguardSelectionEvent(**event_payload(selection)))
        return out

    def select(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        candidates, any_score = self.candidates(nodes)
        return self.nodes(
            self.guard.select(
                query, candidates, score_kind=self.kind, scored=any_score, domain=self.domain
            )
        )

    async def aselect(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        candidates, any_score = self.candidates(nodes)
        selection = await self.guard.aselect(
            query, candidates, score_kind=self.kind, scored=any_score, domain=self.domain
        )
        return self.nodes(selection)


class GuardedRetriever(BaseRetriever):
    """A LlamaIndex retriever that passes only what the guard keeps.

    Args:
        retriever: the retriever being guarded.
        guard: the guard that selects what reaches the LLM.
        score_kind: what ``NodeWithScore.score`` is, overriding the default (see the
            module docstring).
        metadata_key: metadata key for the guard's decision.
        domain: select with this domain's settings (the config's ``[domains.NAME]``);
            one retriever per domain, e.g. one per route of a ``RouterQueryEngine``.

    Raises:
        ArgumentTypeError: ``retriever`` is not a ``llama_index.core`` retriever.
        ConfigError: ``guard`` is not a [`ContextGuard`][ragguard.ContextGuard], ``score_kind``,
            ``metadata_key`` or ``domain`` is invalid, or an option is unknown (``k`` is
            LangChain's).
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        guard: ContextGuard,
        *,
        score_kind: ScoreKind | str | None = None,
        metadata_key: str = METADATA_KEY,
        domain: str | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ConfigError(
                f"GuardedRetriever (LlamaIndex): unknown option(s) {sorted(unknown)}; "
                "allowed: score_kind, metadata_key, domain"
            )
        if not isinstance(retriever, BaseRetriever):
            raise ArgumentTypeError(
                f"expected a llama_index.core BaseRetriever, got {type(retriever).__name__}"
            )
        check_guard(guard, "GuardedRetriever")
        if not isinstance(metadata_key, str):
            raise ConfigError(
                f"GuardedRetriever: metadata_key must be a string, got {metadata_key!r}"
            )
        super().__init__(callback_manager=retriever.callback_manager)
        self.retriever = retriever
        self.guard = guard
        kind = parse_score_kind(score_kind, "GuardedRetriever")
        self._translator = _Translator(guard, kind, metadata_key, call_domain(domain))

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = self.retriever.retrieve(query_bundle)
        return self._translator.select(query_bundle.query_str, nodes)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = await self.retriever.aretrieve(query_bundle)
        return await self._translator.aselect(query_bundle.query_str, nodes)


class GuardPostprocessor(BaseNodePostprocessor):
    """A node postprocessor that passes only what the guard keeps.

    Use it where a pipeline already exists::

        index.as_query_engine(similarity_top_k=20,
                              node_postprocessors=[guard.as_postprocessor()])

    Args:
        guard: the guard that selects what reaches the LLM. Omit it only to rebuild a
            saved postprocessor from ``guard_config`` (what ``from_dict`` does).
        reranker: with ``guard_config``, the reranker passed in code to the saved guard.
        **data: ``score_kind``, ``metadata_key``, ``domain``; ``guard_config`` and
            ``code_reranker`` as ``to_dict()`` wrote them.

    Raises:
        ConfigError: an option is invalid, neither ``guard`` nor ``guard_config`` is
            given, or the saved guard used a reranker passed in code that is
            not registered ([`ragguard.register_reranker`][ragguard.register_reranker]) and no
            ``reranker`` is given.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    score_kind: ScoreKind | None = Field(
        default=None, description="What NodeWithScore.score is (default: see the module)."
    )
    metadata_key: str = Field(
        default=METADATA_KEY, description="Metadata key for the guard's decision."
    )
    domain: str | None = Field(
        default=None,
        strict=True,
        description="Select with this domain's settings (the config's [domains.NAME]).",
    )
    guard_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The guard's GuardConfig as JSON values; from_dict() rebuilds the guard "
        "from it.",
    )
    code_reranker: str | None = Field(
        default=None,
        description="Name of a reranker passed in code, which cannot be saved; from_dict() "
        "looks it up among the registered rerankers (ragguard.register_reranker) or needs "
        "reranker=...",
    )
    _translator: _Translator = PrivateAttr()

    def __init__(
        self, guard: ContextGuard | None = None, *, reranker: Reranker | None = None, **data: Any
    ) -> None:
        if guard is None:
            guard = saved_guard(
                data.get("guard_config"),
                data.get("code_reranker"),
                "GuardPostprocessor",
                "as_postprocessor",
                "hand it back: GuardPostprocessor.from_dict(data, reranker=...) or "
                "from_dict(data, guard=...)",
                reranker,
            )
        else:
            check_guard(guard, "GuardPostprocessor")
            if reranker is not None:
                raise ConfigError(
                    "GuardPostprocessor: pass the reranker to the ContextGuard, not next to it"
                )
        data["guard_config"] = guard.config.model_dump(mode="json")
        data["code_reranker"] = code_reranker(guard)
        with adapter_options(type(self)):
            super().__init__(**data)
        self._translator = _Translator(guard, self.score_kind, self.metadata_key, self.domain)

    @classmethod
    def class_name(cls) -> str:
        return "RagguardGuardPostprocessor"

    @property
    def guard(self) -> ContextGuard:
        """The guard that selects what reaches the LLM."""
        return self._translator.guard

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        return self._translator.select(_query(query_bundle), nodes)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        return await self._translator.aselect(_query(query_bundle), nodes)


def _listened() -> bool:
    """Whether an event handler other than the null one gets this module's events."""
    d: Any = dispatcher
    while d is not None:
        if any(type(h) is not NullEventHandler for h in d.event_handlers):
            return True
        d = d.parent if d.propagate else None
    return False


def _text(node: BaseNode) -> str:
    """``node.get_content()``: a ``TextNode``'s text without formatting its metadata first."""
    return node.text if type(node) is TextNode else node.get_content()


def _query(query_bundle: QueryBundle | None) -> str:
    return "" if query_bundle is None else query_bundle.query_str
