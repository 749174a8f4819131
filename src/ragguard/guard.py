"""ContextGuard: decide which retrieved candidates reach the LLM.

Steps of :meth:`ContextGuard.select`: validate the candidates -> normalise their scores
(:mod:`ragguard.scores`) -> resolve duplicate ids -> apply the selection policy
(:mod:`ragguard.policy`, the same vectorised code the calibration sweep runs) ->
a :class:`~ragguard.candidate.Selection` with every dropped candidate's reason.

With ``rerank.enabled`` the policy runs on rerank probabilities instead: the top
``rerank.top_n`` candidates by retrieval score are rescored by the reranker, its outputs
are mapped to probabilities (logits through a sigmoid) and the same policy cuts them
(:mod:`ragguard.rerank`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard import _tracing
from ragguard.candidate import Candidate, Selection
from ragguard.config import BeyondTopN, DuplicatePolicy, GuardConfig, InvalidScorePolicy
from ragguard.errors import (
    ArgumentTypeError,
    CandidateError,
    ConfigError,
    DuplicateIdError,
    InvalidScoreError,
    RerankWarning,
    ScoreWarning,
)
from ragguard.policy import PolicyParams, apply_policy, rank
from ragguard.probability import rerank_probabilities
from ragguard.profiles import Profile
from ragguard.rerank import (
    Reranker,
    RerankOutcome,
    RerankStage,
    Scored,
    parse_kind,
    rerank_issue_message,
)
from ragguard.scores import Normalized, ScoreIssue, ScoreKind, issue_message, normalize
from ragguard.stages import StageState, run_stages, shingles, start_state
from ragguard.tokens import TokenCounter, token_counter

__all__ = ["ContextGuard"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Pending:
    """A select() call up to the rerank stage: its checked inputs, their normalised
    scores and duplicates, and what to rerank (input positions in retrieval order)."""

    query: str
    cands: tuple[Candidate, ...]
    kind: ScoreKind | None
    norm: Normalized
    duplicate_of: dict[int, int]
    present: NDArray[np.bool_] | None
    call: tuple[bool, int | None]  # the call's ``scored`` and ``max_k``
    top: list[int]
    below: list[int]

    @property
    def texts(self) -> list[str]:
        """The texts to rerank."""
        return [self.cands[i].text for i in self.top]


class ContextGuard:
    """Keeps the passages worth an LLM's attention and records why it dropped the rest.

    Args:
        config: the guard's configuration; omit it to build one from ``settings``
            (which then follow the usual layers: arguments > environment > defaults).
        on_selection: optional callable invoked with every :class:`Selection`.
        reranker: the scorer of the rerank stage (any :class:`~ragguard.rerank.Reranker`
            callable); default: a :class:`~ragguard.rerank.CrossEncoderReranker` built
            from ``config.rerank``. Used only when ``config.rerank.enabled``.
        **settings: :class:`GuardConfig` fields, when no ``config`` is given.

    With the rerank stage on, the built-in cross-encoder is loaded here (and scores one
    warm-up pair), so ``rerank.timeout_ms`` bounds the calls from the first one on.

    Raises:
        ConfigError: ``config`` is not a :class:`GuardConfig` or comes with ``settings``;
            a ``reranker`` was passed but no layer of the config enables the rerank
            stage, or the rerank stage cannot tell whether the reranker returns logits or
            probabilities.
        RerankModelError: the cross-encoder model cannot be loaded (either
            ``rerank.on_failure`` policy).
        MissingDependencyError: the built-in reranker needs the ``rerank`` extra.

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
        reranker: Reranker | None = None,
        **settings: Any,
    ) -> None:
        if config is not None and settings:
            raise ConfigError(
                "pass either a GuardConfig or keyword settings, not both "
                f"(got config and {sorted(settings)})"
            )
        if config is not None and not isinstance(config, GuardConfig):
            raise ConfigError(
                f"config must be a GuardConfig, got {type(config).__name__}; pass settings "
                "as keywords (ContextGuard(max_k=3)) or build one (GuardConfig(max_k=3))"
            )
        if on_selection is not None and not callable(on_selection):
            raise ConfigError(
                f"on_selection must be callable with a Selection, got {type(on_selection).__name__}"
            )
        self.config: GuardConfig = config if config is not None else GuardConfig(**settings)
        self.on_selection = on_selection
        self._scored: PolicyParams = self.config.policy_params()
        self._unscored: PolicyParams = self.config.policy_params(score_rules=False)
        self._warned: set[object] = set()
        self._lock = threading.Lock()
        self._stage: RerankStage | None = None
        self._reranked_params: PolicyParams = self.config.rerank_policy_params()
        self._counter: TokenCounter | None = None
        if self.config.max_tokens is not None:  # load the tokenizer now, not on a query
            self._counter = token_counter(self.config.token_counter)
        if self.config.rerank.enabled:
            self._stage = RerankStage(self.config.rerank, reranker)
        elif reranker is not None and self.config.source_of("rerank") == "default":
            raise ConfigError(
                "a reranker was passed but the rerank stage is off; enable it with "
                "rerank={'enabled': True}, RAGGUARD_RERANK__ENABLED=1 or enabled = true under "
                "[rerank] in the TOML file (set it to false explicitly to switch a passed "
                "reranker off)"
            )

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

    @property
    def reranker(self) -> Reranker | None:
        """The rerank stage's scorer (``None`` when the stage is off). The built-in
        cross-encoder was loaded when the guard was built."""
        return None if self._stage is None else self._stage.reranker

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
            scored: ``False`` when the source returned no scores at all: retrieval score
                rules are skipped, candidates keep their order, only ``max_k`` / ``min_k``
                apply (and the rerank stage, when on, supplies scores); one
                :class:`~ragguard.errors.ScoreWarning` says so.
            max_k: a tighter or looser cap for this call only (``min_k`` is lowered to
                it if needed), e.g. a LangChain ``invoke(query, k=3)``.

        Returns:
            The kept candidates (best first) and a decision for every dropped one. With
            the rerank stage on, the top ``rerank.top_n`` candidates by retrieval score
            are ranked and cut by rerank probability (reranker logits are mapped
            through a sigmoid first); ``Selection.rerank`` says what the stage did.

        Raises:
            CandidateError: ``query`` is not a str, ``candidates`` is not an iterable of
                candidates (``None``, a single :class:`Candidate`, a dict, a str), or an
                element is not a :class:`Candidate`.
            ConfigError: ``score_kind`` is not a score kind, ``max_k`` is not an
                int >= 1, or the reranker's ``score_kind`` property gives neither
                ``"logit"`` nor ``"probability"``.
            InvalidScoreError: a score is missing/NaN/inf and ``invalid_scores="raise"``.
            DuplicateIdError: ids repeat and ``duplicates="raise"``.
            RerankError: the rerank call failed (it raised, ran past
                ``rerank.timeout_ms``, or returned a wrong number of scores or a score that
                is NaN or infinite) and ``rerank.on_failure="fail_closed"``; with
                ``"fail_open"`` the selection is made on retrieval scores instead, with a
                :class:`~ragguard.errors.RerankWarning`.
        """
        with _tracing.selecting(self.config, max_k) as traced:  # a no-op without otel
            step = self._begin(query, candidates, score_kind, scored, max_k)
            if isinstance(step, Selection):
                return traced(step)
            assert self._stage is not None  # _begin finishes the call when the stage is off
            return traced(self._reranked(step, self._stage.score(query, step.texts), 3))

    async def aselect(
        self,
        query: str,
        candidates: Iterable[Candidate],
        *,
        score_kind: ScoreKind | str | None = None,
        scored: bool = True,
        max_k: int | None = None,
    ) -> Selection:
        """Async form of :meth:`select`.

        The policy itself takes microseconds and runs on the event loop; the rerank
        stage's model call runs in a worker thread (``asyncio.to_thread``, or the
        stage's own threads under ``rerank.timeout_ms``), so other tasks keep running
        while the reranker works. Raises what :meth:`select` raises.
        """
        with _tracing.selecting(self.config, max_k) as traced:  # a no-op without otel
            step = self._begin(query, candidates, score_kind, scored, max_k)
            if isinstance(step, Selection):
                return traced(step)
            assert self._stage is not None  # _begin finishes the call when the stage is off
            return traced(self._reranked(step, await self._stage.ascore(query, step.texts), 3))

    def _begin(
        self,
        query: str,
        candidates: Iterable[Candidate],
        score_kind: ScoreKind | str | None,
        scored: bool,
        max_k: int | None,
    ) -> Selection | _Pending:
        """Everything of a select() call before the rerank stage: the finished selection
        when there is nothing to rerank (stage off, no candidates), else what to rerank.
        Called directly by select() and aselect(): warnings point two frames up."""
        cands = self._inputs(query, candidates, max_k)
        kind = None if not scored else self._kind(score_kind)
        if not cands:
            return self._finish(
                Selection(query, cands, result=None, normalized=np.empty(0), score_kind=kind)
            )
        norm, duplicate_of, present = self._normalise(cands, kind)
        top: list[int] = []
        below: list[int] = []
        if self._stage is not None:
            top, below = self._rerank_plan(norm, present)
        step = _Pending(
            query, cands, kind, norm, duplicate_of, present, (scored, max_k), top, below
        )
        if self._stage is None:
            return self._on_retrieval(step, 4)
        return step

    def _inputs(
        self, query: str, candidates: Iterable[Candidate], max_k: int | None
    ) -> tuple[Candidate, ...]:
        """The candidates as a checked tuple, after checking the call's other arguments."""
        if not isinstance(query, str):
            raise CandidateError(f"query must be a str, got {type(query).__name__}")
        cands = candidates if isinstance(candidates, tuple) else self._as_tuple(candidates)
        if set(map(type, cands)) - {Candidate}:  # fast path: no subclass, nothing foreign
            self._check(cands)
        if max_k is not None and (
            isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1
        ):
            raise ConfigError(f"max_k must be an int >= 1, got {max_k!r}")
        return cands

    def _kind(self, score_kind: ScoreKind | str | None) -> ScoreKind | None:
        """The score kind of a call: its ``score_kind``, else the config's."""
        if score_kind is None:
            return self.config.score_kind
        return parse_kind(score_kind, "score_kind", tuple(ScoreKind))

    @staticmethod
    def _as_tuple(candidates: object) -> tuple[Candidate, ...]:
        items = None
        if not (candidates is None or isinstance(candidates, str | bytes | Mapping | Candidate)):
            with contextlib.suppress(TypeError):  # not iterable
                items = iter(candidates)  # type: ignore[call-overload]
        if items is None:
            hint = {
                "NoneType": "; pass [] when the retriever found nothing",
                "Candidate": "; pass a list, [candidate]",
            }.get(type(candidates).__name__, "")
            raise CandidateError(
                "candidates must be an iterable of Candidate objects (a list or tuple), got "
                f"{type(candidates).__name__}{hint}"
            )
        return tuple(items)

    @staticmethod
    def _capped(params: PolicyParams, max_k: int | None) -> PolicyParams:
        if max_k is None:
            return params
        return replace(params, max_k=max_k, min_k=min(params.min_k, max_k))

    @staticmethod
    def _check(cands: tuple[Candidate, ...]) -> None:
        for c in cands:
            if not isinstance(c, Candidate):
                raise CandidateError(
                    "ContextGuard.select expects Candidate objects, got "
                    f"{type(c).__name__}; wrap framework objects with ragguard.adapters "
                    "or build Candidate(id, text, score)"
                )

    def _normalise(
        self, cands: tuple[Candidate, ...], kind: ScoreKind | None
    ) -> tuple[Normalized, dict[int, int], NDArray[np.bool_] | None]:
        raw = np.array([c.score for c in cands], dtype=np.float64)
        # candidates come in the retriever's order (best first), which lets normalize()
        # catch a wrong score direction on short lists; repeated ids mean several lists
        # were merged, whose order is no single ranking
        distinct = len({c.id for c in cands}) == len(cands)
        norm = normalize(raw, kind, rrf_k=self.config.rrf_k, ranked=distinct)
        if kind is not None and self.config.invalid_scores is InvalidScorePolicy.RAISE:
            bad = [c.id for c, ok in zip(cands, norm.valid[0].tolist(), strict=True) if not ok]
            if bad:
                raise InvalidScoreError(
                    f"{len(bad)} candidate(s) have a missing, NaN or infinite score "
                    f"(ids {bad[:5]}{'...' if len(bad) > 5 else ''}); set invalid_scores to "
                    "'drop' or 'keep_last' to handle them"
                )
        duplicate_of = {} if distinct else self._duplicates(cands, norm)
        present = None
        if duplicate_of:
            present = np.ones((1, len(cands)), dtype=np.bool_)
            present[0, list(duplicate_of)] = False
        return norm, duplicate_of, present

    def _on_retrieval(
        self, step: _Pending, stacklevel: int, rerank: RerankOutcome | None = None
    ) -> Selection:
        """The selection on retrieval scores (rerank off, or failed open)."""
        scored, max_k = step.call
        norm = step.norm
        params = self._capped(self._scored if step.kind is not None else self._unscored, max_k)
        result = apply_policy(norm.values, norm.valid, params, step.present)

        issues = list(norm.issues)
        if ScoreIssue.UNKNOWN_KIND in issues:
            issues.remove(ScoreIssue.UNKNOWN_KIND)
            if self._scored.uses_scores:  # silent when no score rule was asked for
                issues.append(ScoreIssue.UNKNOWN_KIND if scored else ScoreIssue.NO_SCORES)
        if result.threshold_skipped[0]:
            issues.append(ScoreIssue.NONPOSITIVE_TOP)
        if self._all_invalid(step):
            issues.append(ScoreIssue.ALL_INVALID)
        messages = []
        for issue in issues:  # usually none
            messages.append(issue_message(issue))
            self._warn_once(issue, messages[-1], ScoreWarning, stacklevel + 1)
        if rerank is not None and rerank.error is not None:
            message = (
                f"rerank stage failed, selected on retrieval scores (rerank.on_failure="
                f"'fail_open'): {rerank.error}"
            )
            messages.append(message)
            warnings.warn(message, RerankWarning, stacklevel=stacklevel)

        selection = Selection(
            step.query,
            step.cands,
            result=result,
            normalized=norm.values[0],
            score_kind=step.kind,
            duplicate_of=step.duplicate_of,
            warnings=tuple(messages),
            rerank=rerank,
            stages=self._stages(step.cands, result.kept_positions(0), params),
        )
        return self._finish(selection)

    def _all_invalid(self, step: _Pending) -> bool:
        """Whether ``invalid_scores="drop"`` dropped every candidate of a scored call."""
        return (
            step.kind is not None
            and not self._scored.keep_invalid
            and not bool(step.norm.valid[0].any())
        )

    def _stages(
        self, cands: tuple[Candidate, ...], kept: list[int], params: PolicyParams
    ) -> StageState | None:
        """The stages after the cut (near-duplicates, token budget; :mod:`ragguard.stages`)
        on the kept candidates; ``None`` when both are off."""
        if not params.uses_stages or not kept:
            return None
        texts = [cands[i].text for i in kept]
        sets = None
        if params.near_duplicate_threshold is not None:
            sets = [[shingles(t) for t in texts]]
        tokens = None
        if self._counter is not None:
            tokens = np.array([self._counter.count(texts)], dtype=np.int64)
        counter = self._counter.spec if self._counter is not None else ""
        return run_stages(
            start_state(np.array([kept])), params, shingles=sets, tokens=tokens, counter=counter
        )

    def _rerank_plan(
        self, norm: Normalized, present: NDArray[np.bool_] | None
    ) -> tuple[list[int], list[int]]:
        """The input positions reranked and below ``top_n``, both in retrieval order.
        Candidates with an invalid retrieval score take part only with
        ``invalid_scores="keep_last"`` (after every valid one); removed duplicates never."""
        ranked = rank(norm.values, norm.valid, present)
        end = ranked.n_present[0] if self._scored.keep_invalid else ranked.n_valid[0]
        eligible: list[int] = ranked.order[0, : int(end)].tolist()
        top_n = self.config.rerank.top_n
        return eligible[:top_n], eligible[top_n:]

    def _reranked(self, step: _Pending, scored: Scored, stacklevel: int) -> Selection:
        """The selection on rerank probabilities (or on retrieval scores, failed open)."""
        rparams = self._capped(self._reranked_params, step.call[1])
        stage = self._stage
        assert stage is not None
        rconf = stage.config
        top, below = step.top, step.below
        keep_below = rconf.beyond_top_n is BeyondTopN.KEEP_BELOW
        if scored.raw is None:  # failed open
            outcome = RerankOutcome(
                stage.name, None, tuple(top), (), (), tuple(below), 0, rconf.top_n,
                keep_below, scored.error, scored.elapsed_ms, 0,
            )  # fmt: skip
            return self._on_retrieval(step, stacklevel + 1, outcome)

        # retrieval scores only chose what to rerank: no retrieval rule ran on them
        issues: list[tuple[object, str, type[Warning]]] = [
            (i, issue_message(i), ScoreWarning)
            for i in step.norm.issues
            if i is not ScoreIssue.UNKNOWN_KIND
        ]
        if self._all_invalid(step):  # nothing was left to rerank
            issues.append((ScoreIssue.ALL_INVALID, issue_message(ScoreIssue.ALL_INVALID),
                           ScoreWarning))  # fmt: skip
        result = None
        probs: list[float] = []
        n_kept = 0
        if top:
            assert scored.kind is not None
            rnorm = rerank_probabilities(scored.raw, scored.kind, rconf.probability_map)
            result = apply_policy(rnorm.values, rnorm.valid, rparams)
            probs = rnorm.values[0].tolist()
            n_kept = int(result.n_kept[0])
            rerank_issues = list(rnorm.issues)
            if result.threshold_skipped[0]:
                rerank_issues.append(ScoreIssue.NONPOSITIVE_TOP)
            issues += [
                (("rerank", i), rerank_issue_message(i), ScoreWarning) for i in rerank_issues
            ]
        n_below = 0
        if keep_below:
            n_below = max(0, min(len(below), rparams.max_k - n_kept))
        for key, message, category in issues:
            self._warn_once(key, message, category, stacklevel + 1)
        outcome = RerankOutcome(
            stage.name,
            scored.kind,
            tuple(top),
            tuple(scored.raw.tolist()),
            tuple(probs),
            tuple(below),
            n_below,
            rconf.top_n,
            keep_below,
            None,
            scored.elapsed_ms,
            scored.cache_hits,
            result,
        )
        selection = Selection(
            step.query,
            step.cands,
            result=None,
            normalized=step.norm.values[0],
            score_kind=step.kind,
            duplicate_of=step.duplicate_of,
            warnings=tuple(message for _, message, _ in issues),
            rerank=outcome,
            stages=self._stages(step.cands, outcome.kept_positions(), rparams),
        )
        return self._finish(selection)

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
            ArgumentTypeError: ``retriever`` is neither (a ``TypeError``).
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
        raise ArgumentTypeError(
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

    def as_haystack(self, **options: Any) -> Any:
        """This guard as a Haystack ``@component`` (``GuardRanker``) for a pipeline,
        between a retriever and the prompt builder; needs the ``haystack`` extra."""
        from ragguard.adapters.haystack import GuardRanker

        return GuardRanker(self, **options)

    def _duplicates(self, cands: tuple[Candidate, ...], norm: Normalized) -> dict[int, int]:
        """Map each duplicate's input position to the position of the occurrence kept
        (``cands`` holds repeated ids)."""
        rule = self.config.duplicates
        if rule is DuplicatePolicy.KEEP_ALL:
            return {}
        ids = [c.id for c in cands]
        if rule is DuplicatePolicy.RAISE:
            repeated = sorted(cid for cid, count in Counter(ids).items() if count > 1)
            raise DuplicateIdError(
                f"candidate ids repeat: {repeated[:5]}; set duplicates to 'keep_best', "
                "'keep_first' or 'keep_all' to handle them"
            )
        # an invalid score is below every valid one: keep_best never keeps it over a valid
        # copy, and keep_first keeps the first copy with a valid score (the first copy
        # when none has one)
        score = np.where(norm.valid[0], norm.values[0], -np.inf).tolist()
        best = rule is DuplicatePolicy.KEEP_BEST
        winner: dict[str, int] = {}
        for i, cid in enumerate(ids):
            j = winner.get(cid)
            if j is None or (score[i] > score[j] and (best or score[j] == -np.inf)):
                winner[cid] = i
        return {i: winner[cid] for i, cid in enumerate(ids) if winner[cid] != i}

    def _warn_once(
        self, key: object, message: str, category: type[Warning], stacklevel: int
    ) -> None:
        """Warn once per guard and ``key``; ``stacklevel`` points at the caller of select()."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(message, category, stacklevel=stacklevel)

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
        rerank = "" if self._stage is None else f", rerank={self._stage.name!r}"
        return (
            f"ContextGuard(profile={c.profile!r}, score_kind={c.score_kind}, max_k={c.max_k}, "
            f"min_k={c.min_k}, relative_threshold={c.relative_threshold}, cut={c.cut.value}"
            f"{rerank})"
        )
