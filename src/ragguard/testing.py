"""Fakes with known scores, and an assertion for selections, for your own tests.

Nothing here loads a model or reaches a network::

    from ragguard import ContextGuard
    from ragguard.testing import FakeReranker, assert_selection, fake_langchain_retriever

    seen = []
    guard = ContextGuard(max_k=2, relative_threshold=0.5, score_kind="similarity",
                         on_selection=seen.append)
    retriever = guard.wrap(fake_langchain_retriever([("a", "text a", 0.9),
                                                     ("b", "text b", 0.2)]))
    retriever.invoke("q")
    assert_selection(seen[-1], kept=["a"], dropped={"b": "below_relative_threshold"})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from ragguard._optional import require
from ragguard.candidate import Selection
from ragguard.errors import ConfigError
from ragguard.policy import Reason
from ragguard.rerank import parse_kind
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from langchain_core.retrievers import BaseRetriever as LangChainRetriever
    from llama_index.core.base.base_retriever import BaseRetriever as LlamaIndexRetriever

__all__ = [
    "FakeReranker",
    "Passage",
    "assert_selection",
    "fake_langchain_retriever",
    "fake_llamaindex_retriever",
]

Passage = tuple[str, str, float | None]
"""A passage a fake retriever returns: ``(id, text, score)``; ``None``: no score."""

DEFAULT_SCORE_KEY = "score"


def _passages(passages: Iterable[Passage]) -> tuple[Passage, ...]:
    out = tuple(passages)
    for p in out:
        if not (isinstance(p, tuple) and len(p) == 3 and isinstance(p[0], str)):
            raise ConfigError(
                f"a fake retriever's passages are (id, text, score) tuples, got {p!r}"
            )
    return out


def fake_langchain_retriever(
    passages: Iterable[Passage], *, score_key: str = DEFAULT_SCORE_KEY
) -> LangChainRetriever:
    """A LangChain retriever that returns ``passages`` as ``Document`` objects.

    Each call returns new documents (``id``, ``page_content``), the score under
    ``metadata[score_key]`` where it is not ``None`` (where ragguard's LangChain adapter
    reads it; the fake cannot tell the score's kind, so give the guard ``score_kind``).
    ``retriever.queries`` lists the queries received, sync and async alike.

    Raises:
        MissingDependencyError: langchain-core is not installed (extra ``langchain``).
    """
    cls = _langchain_class()
    return cls(passages=_passages(passages), score_key=score_key)  # type: ignore[no-any-return]


def fake_llamaindex_retriever(passages: Iterable[Passage]) -> LlamaIndexRetriever:
    """A LlamaIndex retriever that returns ``passages`` as ``NodeWithScore(TextNode)``.

    Each call returns new nodes (``id_``, ``text``) with the given ``score`` (``None``
    stays ``None``). ``retriever.queries`` lists the queries received.

    Raises:
        MissingDependencyError: llama-index-core is not installed (extra ``llamaindex``).
    """
    cls = _llamaindex_class()
    return cls(_passages(passages))  # type: ignore[no-any-return]


@cache
def _langchain_class() -> type[Any]:
    require("langchain_core", "langchain")
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import Field

    class FakeLangChainRetriever(BaseRetriever):
        """Returns the same passages, with known scores, for every query."""

        passages: tuple[Passage, ...]
        score_key: str = DEFAULT_SCORE_KEY
        queries: list[str] = Field(default_factory=list)

        def _documents(self, query: str) -> list[Document]:
            self.queries.append(query)
            return [
                Document(
                    id=pid,
                    page_content=text,
                    metadata={} if score is None else {self.score_key: score},
                )
                for pid, text, score in self.passages
            ]

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return self._documents(query)

        async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
        ) -> list[Document]:
            return self._documents(query)

    return FakeLangChainRetriever


@cache
def _llamaindex_class() -> type[Any]:
    require("llama_index.core", "llamaindex")
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    class FakeLlamaIndexRetriever(BaseRetriever):
        """Returns the same passages, with known scores, for every query."""

        def __init__(self, passages: tuple[Passage, ...]) -> None:
            super().__init__()
            self.passages = passages
            self.queries: list[str] = []

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            self.queries.append(query_bundle.query_str)
            return [
                NodeWithScore(node=TextNode(id_=pid, text=text), score=score)
                for pid, text, score in self.passages
            ]

        async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return self._retrieve(query_bundle)

    return FakeLlamaIndexRetriever


class FakeReranker:
    """A reranker with a known score for each passage text.

    Args:
        scores: passage text -> score.
        score_kind: what the scores are: ``"probability"`` (default) or ``"logit"``.
        default: the score of a text not in ``scores``; ``None`` (default) makes such a
            text an error, so a test notices a passage it did not expect.

    Attributes:
        calls: ``(query, texts)`` of every call, in order.

    Raises:
        ConfigError: ``score_kind`` is neither ``"probability"`` nor ``"logit"``.
        KeyError: (when called) a text has no score and no ``default`` is set; with the
            rerank stage's ``on_failure="fail_closed"`` that becomes a ``RerankError``.
    """

    def __init__(
        self,
        scores: Mapping[str, float],
        *,
        score_kind: ScoreKind | str = ScoreKind.PROBABILITY,
        default: float | None = None,
    ) -> None:
        kind = parse_kind(score_kind, "FakeReranker: score_kind")
        self.scores = dict(scores)
        self.score_kind = kind.value
        self.default = default
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, query: str, texts: Sequence[str], /) -> list[float]:
        self.calls.append((query, tuple(texts)))
        out = []
        for text in texts:
            score = self.scores.get(text, self.default)
            if score is None:
                raise KeyError(f"FakeReranker has no score for the text {text!r}")
            out.append(score)
        return out


def assert_selection(
    selection: Selection,
    *,
    kept: Sequence[str] | None = None,
    dropped: Mapping[str, Reason | str] | None = None,
) -> None:
    """Check what a selection kept and dropped; fail with every difference listed.

    Args:
        selection: what [`ContextGuard.select`][ragguard.ContextGuard.select] (or an adapter's
            ``on_selection``) returned.
        kept: the ids expected to be kept, best first (``None``: not checked).
        dropped: id -> expected reason (a [`Reason`][ragguard.Reason] or its value) for
            every dropped candidate (``None``: not checked). Ids that repeat in the
            input (merged lists) are matched with the reason of each dropped copy.

    Raises:
        AssertionError: a difference; the message shows expected and actual, per id.
    """
    problems: list[str] = []
    actual_kept = [c.id for c in selection.kept]
    if kept is not None and list(kept) != actual_kept:
        problems.append(f"kept:\n  expected {list(kept)}\n  actual   {actual_kept}")
    if dropped is not None:
        actual = {d.candidate.id: d.reason.value if d.reason else None for d in selection.dropped}
        expected = {cid: Reason(reason).value for cid, reason in dropped.items()}
        for cid in sorted(expected.keys() | actual.keys()):
            want, got = expected.get(cid), actual.get(cid)
            if want == got:
                continue
            where = "kept" if cid in actual_kept else "not in the input"
            problems.append(
                f"dropped {cid!r}:\n  expected {want or 'not dropped'}\n  actual   {got or where}"
            )
    if problems:
        summary = "; ".join(
            f"{d.candidate.id}: {d.reason.value if d.reason else None}" for d in selection.dropped
        )
        raise AssertionError(
            "selection differs:\n"
            + "\n".join(problems)
            + f"\nkept {actual_kept}; dropped {{{summary}}}"
        )
