"""ContextGuard: decide which retrieved candidates reach the LLM.

Steps of :meth:`ContextGuard.select`: validate the candidates -> normalise their scores
(:mod:`ragguard.scores`) -> resolve duplicate ids -> apply the selection policy
(:mod:`ragguard.policy`, the same vectorised code the calibration sweep runs) ->
a :class:`~ragguard.candidate.Selection` with every dropped candidate's reason.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from ragguard.candidate import Candidate, Selection
from ragguard.config import DuplicatePolicy, GuardConfig, InvalidScorePolicy
from ragguard.errors import CandidateError, DuplicateIdError, InvalidScoreError, ScoreWarning
from ragguard.policy import PolicyParams, apply_policy
from ragguard.profiles import Profile
from ragguard.scores import Normalized, ScoreIssue, ScoreKind, issue_message, normalize

__all__ = ["ContextGuard"]

logger = logging.getLogger(__name__)


class ContextGuard:
    """Keeps the passages worth an LLM's attention and records why it dropped the rest.

    Args:
        config: the guard's configuration; omit it to build one from ``settings``
            (which then follow the usual layers: arguments > environment > defaults).
        on_selection: optional callable invoked with every :class:`Selection`.
        **settings: :class:`GuardConfig` fields, when no ``config`` is given.

    Example:
        >>> guard = ContextGuard(GuardConfig(max_k=2, relative_threshold=0.7,
        ...                                  score_kind="similarity"))
        >>> sel = guard.select("q", [Candidate("a", score=0.9), Candidate("b", score=0.3)])
        >>> [c.id for c in sel.kept], [d.reason.value for d in sel.dropped]
        (['a'], ['below_relative_threshold'])
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        on_selection: Callable[[Selection], None] | None = None,
        **settings: Any,
    ) -> None:
        if config is not None and settings:
            raise TypeError(
                "pass either a GuardConfig or keyword settings, not both "
                f"(got config and {sorted(settings)})"
            )
        self.config: GuardConfig = config if config is not None else GuardConfig(**settings)
        self.on_selection = on_selection
        self._scored: PolicyParams = self.config.policy_params()
        self._unscored: PolicyParams = self.config.policy_params(score_rules=False)
        self._warned: set[ScoreIssue] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> ContextGuard:
        """A guard configured from a TOML file (environment and ``overrides`` win)."""
        return cls(GuardConfig.from_file(path, **overrides))

    @classmethod
    def from_profile(cls, name: str, **overrides: Any) -> ContextGuard:
        """A guard with the runtime defaults of tolerance profile ``name``."""
        return cls(GuardConfig(profile=name, **overrides))

    @property
    def profile(self) -> Profile:
        """The resolved tolerance profile."""
        return self.config.resolved_profile

    def select(
        self,
        query: str,
        candidates: Iterable[Candidate],
        *,
        score_kind: ScoreKind | str | None = None,
        scored: bool = True,
        max_k: int | None = None,
    ) -> Selection:
        """Choose which candidates reach the LLM.

        Args:
            query: the user's question (recorded in the selection; used by rerankers).
            candidates: the retrieved candidates, in the retriever's order.
            score_kind: what the scores are, when it differs from ``config.score_kind``
                (adapters pass what they learn from the vector store).
            scored: ``False`` when the source returned no scores at all: score rules are
                skipped, candidates keep their order, only ``max_k`` / ``min_k`` apply
                and one :class:`~ragguard.errors.ScoreWarning` says so.
            max_k: a tighter or looser cap for this call only (``min_k`` is lowered to
                it if needed), e.g. a LangChain ``invoke(query, k=3)``.

        Returns:
            The kept candidates (best first) and a decision for every dropped one.

        Raises:
            CandidateError: an element is not a :class:`Candidate`.
            InvalidScoreError: a score is missing/NaN/inf and ``invalid_scores="raise"``.
            DuplicateIdError: ids repeat and ``duplicates="raise"``.
        """
        cands = candidates if isinstance(candidates, tuple) else tuple(candidates)
        if set(map(type, cands)) - {Candidate}:  # fast path: no subclass, nothing foreign
            for c in cands:
                if not isinstance(c, Candidate):
                    raise CandidateError(
                        "ContextGuard.select expects Candidate objects, got "
                        f"{type(c).__name__}; wrap framework objects with ragguard.adapters "
                        "or build Candidate(id, text, score)"
                    )
        if not scored:
            kind = None
        elif score_kind is not None:
            kind = ScoreKind(score_kind)
        else:
            kind = self.config.score_kind
        if not cands:
            return self._finish(
                Selection(query, cands, result=None, normalized=np.empty(0), score_kind=kind)
            )

        raw = np.array([c.score for c in cands], dtype=np.float64)
        norm = normalize(raw, kind, rrf_k=self.config.rrf_k)
        if kind is not None and self.config.invalid_scores is InvalidScorePolicy.RAISE:
            bad = [c.id for c, ok in zip(cands, norm.valid[0].tolist(), strict=True) if not ok]
            if bad:
                raise InvalidScoreError(
                    f"{len(bad)} candidate(s) have a missing, NaN or infinite score "
                    f"(ids {bad[:5]}{'...' if len(bad) > 5 else ''}); set invalid_scores to "
                    "'drop' or 'keep_last' to handle them"
                )
        duplicate_of = self._duplicates(cands, norm)
        present = None
        if duplicate_of:
            present = np.ones((1, len(cands)), dtype=np.bool_)
            present[0, list(duplicate_of)] = False
        params = self._scored if kind is not None else self._unscored
        if max_k is not None:
            if max_k < 1:
                raise ValueError(f"max_k must be >= 1, got {max_k}")
            params = replace(params, max_k=max_k, min_k=min(params.min_k, max_k))
        result = apply_policy(norm.values, norm.valid, params, present)

        issues = list(norm.issues)
        if ScoreIssue.UNKNOWN_KIND in issues:
            issues.remove(ScoreIssue.UNKNOWN_KIND)
            if self._scored.uses_scores:  # silent when no score rule was asked for
                issues.append(ScoreIssue.UNKNOWN_KIND if scored else ScoreIssue.NO_SCORES)
        if result.threshold_skipped[0]:
            issues.append(ScoreIssue.NONPOSITIVE_TOP)
        for issue in issues:
            self._warn_once(issue)

        selection = Selection(
            query,
            cands,
            result=result,
            normalized=norm.values[0],
            score_kind=kind,
            duplicate_of=duplicate_of,
            warnings=tuple(issue_message(i) for i in issues),
        )
        return self._finish(selection)

    async def aselect(
        self,
        query: str,
        candidates: Iterable[Candidate],
        *,
        score_kind: ScoreKind | str | None = None,
        scored: bool = True,
        max_k: int | None = None,
    ) -> Selection:
        """Async form of :meth:`select` (the policy itself takes microseconds)."""
        return self.select(query, candidates, score_kind=score_kind, scored=scored, max_k=max_k)

    def wrap(self, retriever: Any, **options: Any) -> Any:
        """Guard ``retriever`` in one line; the result has the retriever's own framework
        type, so it fits wherever the original did.

        Args:
            retriever: a LangChain ``BaseRetriever`` or a LlamaIndex ``BaseRetriever``.
            **options: adapter options (``score_kind``, ``metadata_key``; LangChain also
                ``k`` and ``score_keys``), see :mod:`ragguard.adapters`.

        Returns:
            :class:`ragguard.adapters.langchain.GuardedRetriever` or
            :class:`ragguard.adapters.llamaindex.GuardedRetriever`.

        Raises:
            TypeError: ``retriever`` is neither.
        """
        # A retriever of a framework means its module is loaded: look, don't import.
        lc = sys.modules.get("langchain_core.retrievers")
        if lc is not None and isinstance(retriever, lc.BaseRetriever):
            from ragguard.adapters.langchain import GuardedRetriever as LangChainRetriever

            return LangChainRetriever(retriever=retriever, guard=self, **options)
        li = sys.modules.get("llama_index.core.base.base_retriever")
        if li is not None and isinstance(retriever, li.BaseRetriever):
            from ragguard.adapters.llamaindex import GuardedRetriever as LlamaIndexRetriever

            return LlamaIndexRetriever(retriever, self, **options)
        raise TypeError(
            f"ContextGuard.wrap() cannot guard a {type(retriever).__module__}."
            f"{type(retriever).__qualname__}; it supports LangChain retrievers "
            "(langchain_core.retrievers.BaseRetriever, extra 'langchain') and LlamaIndex "
            "retrievers (llama_index.core.retrievers.BaseRetriever, extra 'llamaindex')"
        )

    def as_compressor(self, **options: Any) -> Any:
        """This guard as a LangChain ``BaseDocumentCompressor`` (e.g. for a
        ``ContextualCompressionRetriever``); needs the ``langchain`` extra."""
        from ragguard.adapters.langchain import GuardCompressor

        return GuardCompressor(guard=self, **options)

    def as_postprocessor(self, **options: Any) -> Any:
        """This guard as a LlamaIndex ``BaseNodePostprocessor`` (e.g. in
        ``node_postprocessors=[...]``); needs the ``llamaindex`` extra."""
        from ragguard.adapters.llamaindex import GuardPostprocessor

        return GuardPostprocessor(guard=self, **options)

    def _duplicates(self, cands: tuple[Candidate, ...], norm: Normalized) -> dict[int, int]:
        """Map each duplicate's input position to the position of the occurrence kept."""
        rule = self.config.duplicates
        if rule is DuplicatePolicy.KEEP_ALL or len({c.id for c in cands}) == len(cands):
            return {}
        ids = [c.id for c in cands]
        if rule is DuplicatePolicy.RAISE:
            repeated = sorted(cid for cid, count in Counter(ids).items() if count > 1)
            raise DuplicateIdError(
                f"candidate ids repeat: {repeated[:5]}; set duplicates to 'keep_best', "
                "'keep_first' or 'keep_all' to handle them"
            )
        score = np.where(norm.valid[0], norm.values[0], -np.inf).tolist()
        winner: dict[str, int] = {}
        for i, cid in enumerate(ids):
            j = winner.get(cid)
            if j is None or (rule is DuplicatePolicy.KEEP_BEST and score[i] > score[j]):
                winner[cid] = i
        return {i: winner[cid] for i, cid in enumerate(ids) if winner[cid] != i}

    def _warn_once(self, issue: ScoreIssue) -> None:
        with self._lock:
            if issue in self._warned:
                return
            self._warned.add(issue)
        warnings.warn(issue_message(issue), ScoreWarning, stacklevel=3)  # the caller of select()

    def _finish(self, selection: Selection) -> Selection:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "ragguard kept %d of %d candidates for query %r",
                len(selection.kept), len(selection.candidates), selection.query,
            )  # fmt: skip
            for d in selection.dropped:
                logger.debug("dropped %r: %s (%s)", d.candidate.id, d.reason, d.message)
        if self.on_selection is not None:
            self.on_selection(selection)
        return selection

    def __repr__(self) -> str:
        c = self.config
        return (
            f"ContextGuard(profile={c.profile!r}, score_kind={c.score_kind}, max_k={c.max_k}, "
            f"min_k={c.min_k}, relative_threshold={c.relative_threshold}, cut={c.cut.value})"
        )
