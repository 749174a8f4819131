"""Haystack adapter: ``guard.as_haystack()`` returns a
[`GuardRanker`][ragguard.adapters.haystack.GuardRanker], a pipeline component (Haystack 2.x
and 3.x) between a retriever and the prompt builder::

    pipe.add_component("guard", guard.as_haystack())
    pipe.connect("retriever.documents", "guard.documents")

Scores are ``Document.score`` (a similarity unless ``score_kind`` says otherwise); the
copies returned, the ``verdict`` and ``conflicts`` sockets, saving (``allowed_modules``,
registered rerankers) and the options: docs/guides/adapters.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragguard._optional import require

require("haystack", "haystack")

from haystack import Document, component, default_from_dict, default_to_dict  # noqa: E402

from ragguard import ContextGuard  # noqa: E402
from ragguard.adapters._common import (  # noqa: E402
    METADATA_KEY,
    call_domain,
    call_k,
    check_guard,
    code_reranker,
    conflict_lines,
    copy_metadata,
    parse_score_kind,
    saved_guard,
)
from ragguard.candidate import Selection, Verdict, candidate_of  # noqa: E402
from ragguard.errors import ConfigError  # noqa: E402
from ragguard.rerank import registered_name  # noqa: E402
from ragguard.scores import ScoreKind  # noqa: E402

__all__ = ["GuardRanker"]


@component
class GuardRanker:
    """A Haystack component that passes on only the documents the guard keeps.

    Args:
        guard: the guard that selects what reaches the LLM. Omit it only to rebuild a
            saved component from ``guard_config`` (what ``from_dict`` does).
        score_kind: what ``Document.score`` is, overriding the default (see the module
            docstring).
        metadata_key: ``meta`` key for the guard's decision.
        top_k: most documents passed on per call (default: the guard's ``max_k``).
        domain: select with this domain's settings (the config's ``[domains.NAME]``);
            the ``domain`` input of one run wins over it.
        guard_config: the guard's config as ``to_dict()`` wrote it.
        reranker: the registered name of a reranker passed in code, as ``to_dict()``
            wrote it; looked up among the registered rerankers, never imported.
        code_reranker: the name of a reranker passed in code that was not registered
            when it was saved; looked up the same way.

    Raises:
        ConfigError: an option is invalid or unknown, neither ``guard`` nor ``guard_config`` is
            given, or the saved reranker cannot be restored.
    """

    def __init__(
        self,
        guard: ContextGuard | None = None,
        *,
        score_kind: ScoreKind | str | None = None,
        metadata_key: str = METADATA_KEY,
        top_k: int | None = None,
        domain: str | None = None,
        guard_config: dict[str, Any] | None = None,
        reranker: str | None = None,
        code_reranker: str | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ConfigError(
                f"GuardRanker: unknown option(s) {sorted(unknown)}; allowed: score_kind, "
                "metadata_key, top_k, domain"
            )
        if guard is None:
            guard = saved_guard(
                guard_config,
                reranker if reranker is not None else code_reranker,
                "GuardRanker",
                "as_haystack",
                "hand the component back when loading: Pipeline.from_dict(data, "
                "allowed_modules=[...], components={'<name>': GuardRanker(guard)})",
            )
        else:
            check_guard(guard, "GuardRanker")
            if guard_config is not None or reranker is not None or code_reranker is not None:
                raise ConfigError(
                    "GuardRanker: pass either a guard or what to_dict() saved "
                    "(guard_config, reranker), not both"
                )
        if not isinstance(metadata_key, str):
            raise ConfigError(f"GuardRanker: metadata_key must be a string, got {metadata_key!r}")
        self.guard = guard
        self.score_kind = parse_score_kind(score_kind, "GuardRanker")
        self.metadata_key = metadata_key
        self.top_k = call_k(top_k, "top_k")
        self.domain = call_domain(domain)

    def to_dict(self) -> dict[str, Any]:
        """The component as Haystack saves it: the guard's whole config, and a reranker
        passed in code by its registered name (``reranker``), or by its human name when
        it is not registered (``code_reranker``)."""
        name = code_reranker(self.guard)
        registered = name is not None and registered_name(self.guard.reranker) == name
        return default_to_dict(
            self,
            score_kind=None if self.score_kind is None else self.score_kind.value,
            metadata_key=self.metadata_key,
            top_k=self.top_k,
            domain=self.domain,
            guard_config=self.guard.config.model_dump(mode="json"),
            reranker=name if registered else None,
            code_reranker=None if registered else name,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GuardRanker:
        """The component ``to_dict()`` saved, with its guard rebuilt from the config."""
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], verdict=str, conflicts=list[str])
    def run(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        domain: str | None = None,
    ) -> dict[str, Any]:
        """Pass on the documents the guard keeps.

        Args:
            query: the query the documents were retrieved for.
            documents: the retrieved documents, best first, with ``score``.
            top_k: most documents passed on by this call.
            domain: the domain whose settings select for this call (default: the
                component's ``domain``, else the global settings).

        Returns:
            ``{"documents": [...], "verdict": ..., "conflicts": [...]}``: copies of the
            kept documents, best first, with the guard's decision under
            ``meta[metadata_key]``; the selection's verdict (``answerable``,
            ``insufficient`` or ``conflict``); a line per conflict group.
        """
        if not documents:
            return _outputs([], Verdict.INSUFFICIENT, [])
        selection = self.guard.select(**self._arguments(query, documents, top_k, domain))
        return _outputs(self._documents(selection), selection.verdict, conflict_lines(selection))

    @component.output_types(documents=list[Document], verdict=str, conflicts=list[str])
    async def run_async(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        domain: str | None = None,
    ) -> dict[str, Any]:
        """Async form of [`run`][ragguard.adapters.haystack.GuardRanker.run], for
        ``AsyncPipeline``."""
        if not documents:
            return _outputs([], Verdict.INSUFFICIENT, [])
        selection = await self.guard.aselect(**self._arguments(query, documents, top_k, domain))
        return _outputs(self._documents(selection), selection.verdict, conflict_lines(selection))

    def _arguments(
        self, query: str, documents: Sequence[Document], top_k: int | None, domain: str | None
    ) -> dict[str, Any]:
        """The keyword arguments of ``guard.select`` / ``guard.aselect``."""
        candidates = [
            candidate_of(doc.id, doc.content or "", doc.score, doc.meta, doc) for doc in documents
        ]
        return {
            "query": query,
            "candidates": candidates,
            "score_kind": self.score_kind or self.guard.config.score_kind or ScoreKind.SIMILARITY,
            "scored": any(doc.score is not None for doc in documents),
            "max_k": call_k(top_k, "top_k") or self.top_k,
            "domain": self.domain if domain is None else call_domain(domain),
        }

    def _documents(self, selection: Selection) -> list[Document]:
        """Copies of the kept documents, best first, carrying the decision."""
        out: list[Document] = []
        for decision in selection.kept_decisions:
            doc: Document = decision.candidate.source
            meta = copy_metadata(doc.meta, self.metadata_key, selection, decision)
            embedding = None if doc.embedding is None else list(doc.embedding)
            # what dataclasses.replace gives, without its __init__ (five times the cost)
            copy = object.__new__(type(doc))
            copy.__dict__.update(vars(doc), meta=meta, embedding=embedding)
            out.append(copy)
        return out


def _outputs(documents: list[Document], verdict: Verdict, conflicts: list[str]) -> dict[str, Any]:
    """The component's outputs, one per socket."""
    return {"documents": documents, "verdict": verdict.value, "conflicts": conflicts}
