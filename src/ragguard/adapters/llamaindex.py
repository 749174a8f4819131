"""LlamaIndex adapter: a guarded ``BaseRetriever`` and a ``BaseNodePostprocessor``.

``guard.wrap(index.as_retriever(similarity_top_k=20))`` returns a
:class:`GuardedRetriever`, a real ``llama_index.core`` retriever, so it fits query
engines and everything else that takes one. ``guard.as_postprocessor()`` returns a
:class:`GuardPostprocessor` for ``node_postprocessors=[...]``.

Scores come from ``NodeWithScore.score``. Their kind is the adapter's ``score_kind``, else
the guard's ``config.score_kind``, else ``similarity``: LlamaIndex's convention is that a
node score is a similarity, higher is better (its vector stores report similarities and
its own ``SimilarityPostprocessor`` cuts below a cutoff). A ``None`` score follows the
guard's ``invalid_scores`` policy (dropped *with a reason* by default, never silently);
when no node has a score at all, only ``max_k`` / ``min_k`` apply, with one warning.

Kept nodes are copies (``model_copy`` with deep-copied metadata, same node id, the same
``NodeWithScore.score``) carrying the guard's decision under ``metadata["ragguard"]``;
that key is added to the node's excluded LLM and embedding metadata keys, so it never
reaches a prompt. Every selection is dispatched as a :class:`RagguardSelectionEvent` on
LlamaIndex's instrumentation bus, logged at DEBUG and passed to the guard's
``on_selection``. The async paths await the inner retriever's ``aretrieve`` and the
guard's ``aselect``; nothing blocks the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragguard._optional import require

require("llama_index.core", "llamaindex")

from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle  # noqa: E402
from pydantic import ConfigDict, Field, PrivateAttr  # noqa: E402

from ragguard.adapters._common import METADATA_KEY, copy_metadata, event_payload  # noqa: E402
from ragguard.candidate import Candidate, Selection  # noqa: E402
from ragguard.guard import ContextGuard  # noqa: E402
from ragguard.scores import ScoreKind  # noqa: E402

__all__ = ["GuardPostprocessor", "GuardedRetriever", "RagguardSelectionEvent"]

dispatcher = get_dispatcher(__name__)


class RagguardSelectionEvent(BaseEvent):
    """Dispatched for every selection: what was kept and why the rest was dropped."""

    query: str = Field(description="The query.")
    kept: list[str] = Field(description="Node ids kept, best first.")
    dropped: list[dict[str, Any]] = Field(description="id, reason and message per drop.")
    warnings: list[str] = Field(default_factory=list, description="Score warnings.")

    @classmethod
    def class_name(cls) -> str:
        return "RagguardSelectionEvent"


class _Translator:
    """Nodes -> Candidates -> guarded copies."""

    def __init__(self, guard: ContextGuard, score_kind: ScoreKind | None, key: str) -> None:
        self.guard = guard
        self.kind = score_kind or guard.config.score_kind or ScoreKind.SIMILARITY
        self.key = key

    def candidates(self, nodes: Sequence[NodeWithScore]) -> tuple[list[Candidate], bool]:
        out = [
            Candidate(
                id=n.node.node_id,
                text=n.node.get_content(),
                score=n.score,
                metadata=n.node.metadata,
                source=n,
            )
            for n in nodes
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
        dispatcher.event(RagguardSelectionEvent(**event_payload(selection)))
        return out

    def select(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        candidates, any_score = self.candidates(nodes)
        return self.nodes(
            self.guard.select(query, candidates, score_kind=self.kind, scored=any_score)
        )

    async def aselect(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        candidates, any_score = self.candidates(nodes)
        selection = await self.guard.aselect(
            query, candidates, score_kind=self.kind, scored=any_score
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
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        guard: ContextGuard,
        *,
        score_kind: ScoreKind | str | None = None,
        metadata_key: str = METADATA_KEY,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(
                f"expected a llama_index.core BaseRetriever, got {type(retriever).__name__}"
            )
        super().__init__(callback_manager=retriever.callback_manager)
        self.retriever = retriever
        self.guard = guard
        kind = None if score_kind is None else ScoreKind(score_kind)
        self._translator = _Translator(guard, kind, metadata_key)

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
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    score_kind: ScoreKind | None = Field(
        default=None, description="What NodeWithScore.score is (default: see the module)."
    )
    metadata_key: str = Field(
        default=METADATA_KEY, description="Metadata key for the guard's decision."
    )
    _translator: _Translator = PrivateAttr()

    def __init__(self, guard: ContextGuard, **data: Any) -> None:
        super().__init__(**data)
        self._translator = _Translator(guard, self.score_kind, self.metadata_key)

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
        query = "" if query_bundle is None else query_bundle.query_str
        return self._translator.select(query, nodes)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return []
        query = "" if query_bundle is None else query_bundle.query_str
        return await self._translator.aselect(query, nodes)
