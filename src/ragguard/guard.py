"""ContextGuard: builds the stage list from its config and runs it over one state per
``select()`` / ``aselect()`` call (DESIGN.md, "The runtime")."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, cast, overload

from ragguard import _tracing, adapters
from ragguard.candidate import Candidate, Selection
from ragguard.config import BeyondTopN, GuardConfig, InvalidScorePolicy
from ragguard.drift import DriftMonitor, DriftReport
from ragguard.errors import ArgumentTypeError, ConfigError, ConfigWarning
from ragguard.policy import ConflictMode
from ragguard.profiles import Profile
from ragguard.rerank import Reranker, RerankStage
from ragguard.scores import ScoreKind
from ragguard.select_stages import (
    Conflicts,
    Cut,
    DriftWatch,
    Duplicates,
    NearDuplicates,
    Normalise,
    Rerank,
    TokenBudget,
)
from ragguard.selecting import Stage, State, arun, run, start
from ragguard.tokens import token_counter

if TYPE_CHECKING:  # wrap()'s types; at run time the adapters come through ragguard.adapters
    from ragguard.adapters import haystack as haystack_adapter
    from ragguard.adapters import langchain as langchain_adapter
    from ragguard.adapters import llamaindex as llamaindex_adapter

logger = logging.getLogger(__name__)

_MAX_ROUTED = 1024  # domain names a guard remembers (and warns about once each)


class ContextGuard:
    """Keeps the passages worth an LLM's attention and records why it dropped the rest.

    Args:
        config: the guard's configuration; omit it to build one from ``settings``
            (which then follow the usual layers: arguments > environment > defaults).
        on_selection: optional callable invoked with every [`Selection`][ragguard.Selection].
        reranker: the scorer of the rerank stage (any [`Reranker`][ragguard.Reranker]
            callable); default: a [`CrossEncoderReranker`][ragguard.CrossEncoderReranker] built
            from ``config.rerank``. Used only when ``config.rerank.enabled``.
        **settings: [`GuardConfig`][ragguard.GuardConfig] fields, when no ``config`` is given.

    With the rerank stage on, the built-in cross-encoder is loaded here (and scores one
    warm-up pair), so ``rerank.timeout_ms`` bounds the calls from the first one on.

    Attributes:
        stages: the stages every call runs, in order (``ragguard.select_stages``); a
            stage of your own (a ``ragguard.selecting.Stage``, or a ``CallStage`` for a
            model call) joins with one line, e.g. ``guard.stages.append(stage)``.

    Raises:
        ConfigError: ``config`` is not a [`GuardConfig`][ragguard.GuardConfig] (or one built
            without validation, by ``GuardConfig.model_construct``) or comes with
            ``settings``; a ``reranker`` was passed but no layer of the config enables the rerank
            stage, or the rerank stage cannot tell whether the reranker returns logits or
            probabilities; ``monitor=True`` on a config without the ``reference`` that
            ``ragguard calibrate`` writes.
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
        # a ConfigError for a config never validated (GuardConfig.model_construct)
        self.config.resolved_profile  # noqa: B018
        self.on_selection = on_selection
        self.domain: str | None = None  # set on the guard of one domain (for_domain)
        self._warned: set[object] = set()
        self._lock = threading.Lock()
        self._reranker = reranker
        self._routed: dict[str, ContextGuard] = {}
        self._params = self.config.policy_params()
        unscored = self.config.policy_params(score_rules=False)
        kind = self.config.score_kind
        self._start = partial(start, default_kind=kind, params=self._params, unscored=unscored)
        self._stage: RerankStage | None = None
        if self.config.rerank.enabled:
            self._stage = RerankStage(self.config.rerank, reranker)
        elif reranker is not None and self.config.source_of("rerank") == "default":
            raise ConfigError(
                "a reranker was passed but the rerank stage is off; enable it with "
                "rerank={'enabled': True}, RAGGUARD_RERANK__ENABLED=1 or enabled = true under "
                "[rerank] in the TOML file (set it to false explicitly to switch a passed "
                "reranker off)"
            )
        self._monitor: DriftMonitor | None = None
        if self.config.monitor:
            if self.config.reference is None:
                raise ConfigError(
                    "monitor=True needs the score reference ragguard calibrate writes under "
                    "[reference], and this config has none; load a config written by "
                    "ragguard calibrate, or set monitor=False"
                )
            self._monitor = DriftMonitor(self.config.reference)
        self.stages: list[Stage] = self._stages()

    def _stages(self) -> list[Stage]:
        """The stages of every call, in order, those the config turns off left out."""
        c = self.config
        scored = self._params
        stages: list[Stage] = [
            Normalise(rrf_k=c.rrf_k, raise_invalid=c.invalid_scores is InvalidScorePolicy.RAISE),
            Duplicates(rule=c.duplicates),
        ]
        if self._stage is not None:
            params, keep = c.rerank_policy_params(), scored.keep_invalid
            stages.append(
                Rerank(config=c.rerank, scorer=self._stage, params=params, keep_invalid=keep)
            )
        keep_below = c.rerank.beyond_top_n is BeyondTopN.KEEP_BELOW
        floor = c.min_evidence if self._stage is not None else None  # not read on fail-open
        stages.append(Cut(uses_scores=scored.uses_scores, keep_below=keep_below, floor=floor))
        if c.conflicts is not ConflictMode.OFF:
            prefer = c.conflict_prefer
            stages.append(
                Conflicts(
                    mode=c.conflicts,
                    similarity=c.conflict_similarity,
                    prefer=prefer,
                    detector=scored.conflict_detector,
                    answer_similarity=scored.conflict_answer_similarity,
                )
            )
        if c.near_duplicate_threshold is not None:
            stages.append(NearDuplicates(threshold=c.near_duplicate_threshold))
        if c.max_tokens is not None:  # load the tokenizer now, not on a query
            counter = token_counter(c.token_counter)
            stages.append(TokenBudget(counter=counter, max_tokens=c.max_tokens))
        if self._monitor is not None:
            stages.append(DriftWatch(monitor=self._monitor))
        return stages

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> ContextGuard:
        """A guard configured from a TOML file (environment and ``overrides`` win)."""
        return cls(GuardConfig.from_file(path, **overrides))

    @classmethod
    def from_profile(cls, name: str, **overrides: Any) -> ContextGuard:
        """A guard with the runtime defaults of tolerance profile ``name``."""
        return cls(GuardConfig(profile=name, **overrides))

    def for_domain(self, name: str) -> ContextGuard:
        """The guard of domain ``name``: the settings of ``config.for_domain(name)``, built
        on the first call and kept (later calls, and ``select(..., domain=name)``, reuse
        it). It shares ``on_selection`` and the reranker: the one passed to this guard, or
        the loaded cross-encoder of a guard whose rerank model settings are equal.

        An unknown ``name`` gives this guard (the global settings) and a
        [`ConfigWarning`][ragguard.ConfigWarning], once per guard and name (for the first
        1,024 names a guard sees; later unknown names are not warned about). Stages added
        to ``stages`` by hand are not copied to a domain's guard.

        Raises:
            ArgumentTypeError: ``name`` is not a str.
        """
        return self._route(name)

    def _route(self, name: str) -> ContextGuard:
        """The guard of domain ``name`` (``for_domain``); warns for the caller's caller."""
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"domain must be a str naming a [domains.NAME] table of the config, got "
                f"{type(name).__name__}"
            )
        routed = self._routed.get(name)
        if routed is not None:
            return routed
        if name not in self.config.domains:
            if len(self._routed) >= _MAX_ROUTED:  # ever-new names (tenant ids) stay bounded
                return self
            known = ", ".join(self.config.domains) or "none"
            warnings.warn(
                f"unknown domain {name!r}: the global settings are used (known domains: "
                f"{known}); add a [domains.{name}] table to the config to route it",
                ConfigWarning,
                stacklevel=3,
            )
            routed = self
        else:
            config = self.config.for_domain(name)
            routed = ContextGuard(
                config, on_selection=self.on_selection, reranker=self._shared_reranker(config)
            )
            routed.domain, routed._warned, routed._lock = name, self._warned, self._lock
        with self._lock:
            return self._routed.setdefault(name, routed)

    def _shared_reranker(self, config: GuardConfig) -> Reranker | None:
        """The reranker a domain's guard uses: the one passed, or the loaded one of a
        guard whose model settings equal ``config``'s (``None``: none, it loads its own)."""
        if not config.rerank.enabled:
            return None
        if self._reranker is not None:
            return self._reranker
        model = _model_settings(config)
        for guard in (self, *self._routed.values()):
            if guard._stage is not None and _model_settings(guard.config) == model:
                return guard._stage.reranker
        return None

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
        domain: str | None = None,
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
                [`ScoreWarning`][ragguard.ScoreWarning] says so.
            max_k: a tighter or looser cap for this call only (``min_k`` is lowered to
                it if needed), e.g. a LangChain ``invoke(query, k=3)``.
            domain: select with the settings of this domain (the config's
                ``[domains.NAME]`` table, see [`for_domain`][ragguard.ContextGuard.for_domain]);
                an unknown one uses the global settings and warns once.

        Returns:
            The kept candidates (best first) and a decision for every dropped one. With
            the rerank stage on, the top ``rerank.top_n`` candidates by retrieval score
            are ranked and cut by rerank probability (reranker logits are mapped
            through a sigmoid first); ``Selection.rerank`` says what the stage did.

        Raises:
            ArgumentTypeError: ``domain`` is not a str.
            CandidateError: ``query`` is not a str, ``candidates`` is not an iterable of
                candidates (``None``, a single [`Candidate`][ragguard.Candidate], a dict, a str), or
                an element is not a [`Candidate`][ragguard.Candidate].
            ConfigError: ``score_kind`` is not a score kind, ``max_k`` is not an
                int >= 1, or the reranker's ``score_kind`` property gives neither
                ``"logit"`` nor ``"probability"``.
            InvalidScoreError: a score is missing/NaN/inf and ``invalid_scores="raise"``.
            DuplicateIdError: ids repeat and ``duplicates="raise"``.
            RerankError: the rerank call failed (it raised, ran past
                ``rerank.timeout_ms``, or returned a wrong number of scores or a score that
                is NaN or infinite) and ``rerank.on_failure="fail_closed"``; with
                ``"fail_open"`` the selection is made on retrieval scores instead, with a
                [`RerankWarning`][ragguard.RerankWarning].
        """
        if domain is not None and (routed := self._route(domain)) is not self:
            return routed.select(
                query, candidates, score_kind=score_kind, scored=scored, max_k=max_k
            )
        with _tracing.selecting(self.config, max_k) as traced:  # a no-op without otel
            state = self._start(
                query, candidates, score_kind=score_kind, scored=scored, max_k=max_k
            )
            return traced(self._deliver(state, run(self.stages, state)), state)

    async def aselect(
        self,
        query: str,
        candidates: Iterable[Candidate],
        *,
        score_kind: ScoreKind | str | None = None,
        scored: bool = True,
        max_k: int | None = None,
        domain: str | None = None,
    ) -> Selection:
        """Async form of [`select`][ragguard.ContextGuard.select]: the rerank model call runs
        in a worker thread, off the event loop. Raises what ``select`` raises."""
        if domain is not None and (routed := self._route(domain)) is not self:
            return await routed.aselect(
                query, candidates, score_kind=score_kind, scored=scored, max_k=max_k
            )
        with _tracing.selecting(self.config, max_k) as traced:  # a no-op without otel
            state = self._start(
                query, candidates, score_kind=score_kind, scored=scored, max_k=max_k
            )
            return traced(self._deliver(state, await arun(self.stages, state)), state)

    def drift(self) -> DriftReport:
        """What the drift watch (``GuardConfig.monitor``) found so far: whether the
        recent scores stopped looking like the calibration queries' (``alarm``), over how
        many selections, the Kolmogorov-Smirnov distance and its threshold, and which
        quantity moved (the test and its false-alarm rate: ``ragguard.drift``).

        Raises:
            ConfigError: the monitor is off (``monitor=False``).
        """
        if self._monitor is None:
            raise ConfigError(
                "the drift watch is off; build the guard with monitor=True (RAGGUARD_MONITOR=1 "
                "or monitor = true in the TOML file) on a config ragguard calibrate wrote"
            )
        return self._monitor.report()

    @overload
    def wrap(
        self, retriever: langchain_adapter.Retriever, **options: Any
    ) -> langchain_adapter.GuardedRetriever: ...
    @overload
    def wrap(
        self, retriever: llamaindex_adapter.Retriever, **options: Any
    ) -> llamaindex_adapter.GuardedRetriever: ...
    @overload
    def wrap(self, retriever: object, **options: Any) -> Any: ...
    def wrap(self, retriever: object, **options: Any) -> Any:
        """Guard ``retriever`` in one line; the result has the retriever's own framework
        type, so it fits wherever the original did.

        The adapter is found through ``ragguard.adapters.RETRIEVERS``, without
        importing any framework.

        Args:
            retriever: a retriever of a framework ragguard has an adapter for (a
                LangChain or a LlamaIndex ``BaseRetriever``).
            **options: adapter options (``score_kind``, ``metadata_key``; LangChain also
                ``k`` and ``score_keys``), see ``ragguard.adapters``.

        Returns:
            the LangChain [`GuardedRetriever`][ragguard.adapters.langchain.GuardedRetriever]
            or the LlamaIndex
            [`GuardedRetriever`][ragguard.adapters.llamaindex.GuardedRetriever].

        Raises:
            ArgumentTypeError: ``retriever`` is neither (a ``TypeError``).
        """
        return adapters.guarded(self, retriever, **options)

    def as_compressor(self, **options: Any) -> langchain_adapter.GuardCompressor:
        """This guard as a LangChain ``BaseDocumentCompressor`` (e.g. for a
        ``ContextualCompressionRetriever``); needs the ``langchain`` extra."""
        return cast(
            "langchain_adapter.GuardCompressor",
            adapters.component("as_compressor", self, **options),
        )

    def as_postprocessor(self, **options: Any) -> llamaindex_adapter.GuardPostprocessor:
        """This guard as a LlamaIndex ``BaseNodePostprocessor`` (e.g. in
        ``node_postprocessors=[...]``); needs the ``llamaindex`` extra."""
        return cast(
            "llamaindex_adapter.GuardPostprocessor",
            adapters.component("as_postprocessor", self, **options),
        )

    def as_haystack(self, **options: Any) -> haystack_adapter.GuardRanker:
        """This guard as a Haystack ``@component`` (``GuardRanker``) for a pipeline,
        between a retriever and the prompt builder; needs the ``haystack`` extra."""
        return cast(
            "haystack_adapter.GuardRanker", adapters.component("as_haystack", self, **options)
        )

    def _deliver(self, state: State, selection: Selection) -> Selection:
        """Emit the stages' warnings, each once per guard (``stacklevel``: the caller of
        select() / aselect()), log the selection and hand it to ``on_selection``."""
        if self.domain is not None:
            selection.domain = self.domain
        for w in state.warnings:  # usually none
            if w.key is not None:
                with self._lock:
                    if w.key in self._warned:
                        continue
                    self._warned.add(w.key)
            warnings.warn(w.message, w.category, stacklevel=3)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "ragguard kept %d of %d candidates for query %r",
                len(selection.kept),
                len(selection.candidates),
                selection.query,
            )
            for d in selection.dropped:
                logger.debug("dropped %r: %s (%s)", d.candidate.id, d.reason, d.message)
        if self.on_selection is not None:
            self.on_selection(selection)
        return selection

    def __repr__(self) -> str:
        c = self.config
        rerank = "" if self._stage is None else f", rerank={self._stage.name!r}"
        domain = "" if self.domain is None else f", domain={self.domain!r}"
        return (
            f"ContextGuard(profile={c.profile!r}, score_kind={c.score_kind}, max_k={c.max_k}, "
            f"min_k={c.min_k}, relative_threshold={c.relative_threshold}, cut={c.cut.value}"
            f"{rerank}{domain})"
        )


def _model_settings(config: GuardConfig) -> tuple[object, ...]:
    """What the built-in cross-encoder is loaded from (``CrossEncoderReranker.from_config``)."""
    r = config.rerank
    return r.model, r.external, r.device, r.batch_size, r.max_length, r.score_kind
