"""One ``ContextGuard.select`` call: the state its stages share, the stage protocol, and
the builder of its ``Selection`` (DESIGN.md, "The runtime"); decisions are built from the
stages' records only when read."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ragguard.candidate import Candidate, Decision, RerankDetail, Selection, Verdict, decision_of
from ragguard.config import BeyondTopN, RerankConfig
from ragguard.conflicts import Conflict
from ragguard.errors import ArgumentTypeError, CandidateError, ConfigError
from ragguard.policy import PolicyParams, PolicyResult, Reason
from ragguard.rerank import RerankOutcome, Scored, parse_kind
from ragguard.scores import ScoreIssue, ScoreKind
from ragguard.stages import Shingles, shingles

# a new call's state shares these until its stages assign its own
_NO_VALUES: NDArray[np.float64] = np.empty((1, 0))
_NO_VALUES.flags.writeable = False
_NO_VALID: NDArray[np.bool_] = np.empty((1, 0), np.bool_)
_NO_VALID.flags.writeable = False
_NOTHING: Mapping[Any, int] = {}  # read-only by its type (a mappingproxy cannot be pickled)


@dataclass(frozen=True, slots=True)
class Warn:
    """A warning a stage found: ``key`` identifies it for "once per guard" (``None``:
    emitted on every call), ``message`` also goes into ``Selection.warnings``."""

    key: object
    message: str
    category: type[Warning]


class Drop(NamedTuple):
    """What one stage decided about one candidate, as data (``Stage.drops``).

    Attributes:
        position: the candidate's input position.
        reason: why the stage dropped it; ``None``: the stage kept it (``explain`` says
            how).
        partners: input positions of the passages it repeats (the first is named by
            ``Decision.duplicate_of``) or, for a ``conflict``, conflicts with
            (``Decision.conflict_with``).
        detail: what the stage's ``explain`` reads.
        score: its ``Decision.normalized_score`` (read from the first stage that names
            the candidate).
        rerank: its ``Decision.rerank`` (idem).
    """

    position: int
    reason: Reason | None
    partners: tuple[int, ...] = ()
    detail: Any = None
    score: float | None = None
    rerank: RerankDetail | None = None


class Stage:
    """A step of select(): it reads and fills in the ``State`` of one call.

    A stage that drops candidates removes them from ``State.kept``, appends one record
    ``(self, facts)`` to ``State.records`` (a stage that ranks inserts it first: the
    decisions follow its order), and, when decisions are read, turns its facts into
    ``Drop``s (``drops``) and each ``Drop`` into a line (``explain``).
    """

    __slots__ = ()

    def __call__(self, s: State, /) -> None:  # pragma: no cover - the protocol
        raise NotImplementedError

    def drops(self, s: State, facts: Any, /) -> Iterable[Drop]:
        """The decisions recorded in ``facts``, one ``Drop`` per candidate."""
        return ()

    def explain(self, drop: Drop, s: State, /) -> str:
        """A one-line human explanation of ``drop`` (default: its detail)."""
        return str(drop.detail)

    def conflicts(self, s: State, facts: Any, /) -> tuple[tuple[Conflict, ...], bool]:
        """The conflict groups recorded in ``facts`` (``Selection.conflicts``), and
        whether two passages still kept conflict (the ``conflict`` verdict)."""
        return (), False


class CallStage(Stage):
    """A stage that calls a model: ``request`` says what to send (``None``: no call),
    ``call`` / ``acall`` make the call, ``apply`` takes the response in.
    [`select`][ragguard.ContextGuard.select] runs it blocking (``__call__``),
    [`aselect`][ragguard.ContextGuard.aselect] awaits it (``arun``); ``acall`` runs
    ``call`` in a worker thread unless a subclass does better."""

    __slots__ = ()

    def request(self, s: State, /) -> Any:  # pragma: no cover - the protocol
        raise NotImplementedError

    def call(self, request: Any, /) -> Any:  # pragma: no cover - the protocol
        raise NotImplementedError

    async def acall(self, request: Any, /) -> Any:
        return await asyncio.to_thread(self.call, request)

    def apply(self, s: State, response: Any, /) -> None:  # pragma: no cover - the protocol
        raise NotImplementedError

    def __call__(self, s: State, /) -> None:
        request = self.request(s)
        if request is not None:
            self.apply(s, self.call(request))

    async def arun(self, s: State, /) -> None:
        request = self.request(s)
        if request is not None:
            self.apply(s, await self.acall(request))


def _stage(stage: object) -> Stage:
    """``stage``, refused when it is not a ``Stage`` (``ContextGuard.stages`` is a list a
    caller may add to)."""
    if not isinstance(stage, Stage):
        raise ArgumentTypeError(
            f"ContextGuard.stages holds {stage!r}, not a stage: add an instance of "
            "ragguard.selecting.Stage or CallStage"
        )
    return stage


def run(stages: Sequence[Stage], s: State) -> Selection:
    """The stages over ``s`` (call stages blocking), as a Selection."""
    if s.candidates:
        for stage in stages:
            _stage(stage)(s)
    return s.selection()


async def arun(stages: Sequence[Stage], s: State) -> Selection:
    """The stages over ``s``, call stages awaited, as a Selection."""
    if s.candidates:
        for stage in map(_stage, stages):
            if isinstance(stage, CallStage):
                await stage.arun(s)
            else:
                stage(s)
    return s.selection()


@dataclass(slots=True, eq=False)
class State:
    """Everything one select() call knows, as the stages fill it in.

    Attributes:
        query: the query.
        candidates: the input candidates.
        kind: the retrieval scores' kind; ``None`` when unknown or when the source gave
            no scores.
        scored: ``False`` when the source gave no scores at all.
        max_k: the call's own cap (``None``: the config's).
        params: the policy parameters of the cut, capped by ``max_k``.
        values: (1, N) normalised retrieval scores (higher is better).
        valid: (1, N) True where the retrieval score is valid.
        issues: contradictions ``normalize`` found in the retrieval scores.
        present: (1, N) False at removed duplicate ids; ``None`` when ids are distinct
            (all True while ids repeat and are not yet resolved).
        kept: input positions kept, best first.
        rerank: the rerank stage's facts (``None`` when it is off or did not run).
        records: ``(stage, facts)`` for each stage that decided something.
        warnings: what the stages found, in order.
        sets: word shingle sets by input position, built once for the stages that read
            them (conflicts, near-duplicates).
        answers: input position -> the passage's short answer from a model (``None``:
            the model gave none); ``None`` when no answerer stage ran
            (``ragguard.answers.AnswerStage``). The conflict stage's answers detector
            reads these instead of the passages' answer spans.
    """

    query: str
    candidates: tuple[Candidate, ...]
    kind: ScoreKind | None
    scored: bool
    max_k: int | None
    params: PolicyParams
    values: NDArray[np.float64] = field(default_factory=lambda: _NO_VALUES)
    valid: NDArray[np.bool_] = field(default_factory=lambda: _NO_VALID)
    issues: Mapping[ScoreIssue, int] = field(default_factory=lambda: _NOTHING)
    present: NDArray[np.bool_] | None = None
    kept: Sequence[int] = ()
    rerank: Reranked | None = None
    records: list[tuple[Stage, Any]] = field(default_factory=list)
    warnings: list[Warn] = field(default_factory=list)
    sets: dict[int, Shingles] | None = None
    answers: dict[int, str | None] | None = None

    def shingles(self, position: int) -> Shingles:
        """The word shingle set of the candidate at input ``position`` (built once)."""
        if self.sets is None:
            self.sets = {}
        got = self.sets.get(position)
        if got is None:
            got = self.sets[position] = shingles(self.candidates[position].text)
        return got

    def retrieval(self) -> list[float | None]:
        """Each candidate's normalised retrieval score (``None`` when invalid or of
        unknown kind)."""
        if self.kind is None:
            return [None] * len(self.candidates)
        return [None if math.isnan(x) else x for x in self.values[0].tolist()]

    def selection(self) -> Selection:
        """The call's [`Selection`][ragguard.Selection]; its decisions are built
        when first read (``decisions``)."""
        cands = self.candidates
        conflicts: tuple[Conflict, ...] = ()
        verdict = Verdict.INSUFFICIENT if not self.kept else Verdict.ANSWERABLE
        for stage, facts in self.records:
            found, conflicting = stage.conflicts(self, facts)
            conflicts += found
            if conflicting and self.kept:
                verdict = Verdict.CONFLICT
        return Selection(
            query=self.query,
            candidates=cands,
            score_kind=self.kind,
            kept=[cands[i] for i in self.kept],
            warnings=tuple([w.message for w in self.warnings]) if self.warnings else (),
            rerank=None if self.rerank is None else self.rerank.outcome(),
            decisions=self.decisions,
            conflicts=conflicts,
            verdict=verdict,
            answers=self.answers,
        )

    def decisions(self) -> Iterator[Decision]:
        """A decision for every input candidate: the kept ones (best first), then the
        dropped ones in the order the records first name them. The first stage to name
        a candidate gives its score; the last one its reason and message."""
        if not self.records:
            return
        # the first record (the cut's, which names every candidate) is read only as far
        # as the kept ones need until a dropped one is read; later stages' merge over it
        stage0, facts0 = self.records[0]
        cut = iter(stage0.drops(self, facts0))
        first: dict[int, Drop] = {}
        later = [(stage, d) for stage, facts in self.records[1:] for d in stage.drops(self, facts)]
        last = {d.position: (stage, d) for stage, d in later}

        def dropped() -> Iterator[int]:
            first.update((d.position, d) for d in cut)
            for _, d in later:
                first.setdefault(d.position, d)
            yield from (i for i in first if i not in kept)

        kept, n_kept = set(self.kept), len(self.kept)
        for n, i in enumerate(chain(self.kept, dropped())):
            while i not in first:
                d = next(cut)
                first[d.position] = d
            stage, d = last.get(i) or (stage0, first[i])
            yield self._decision(n, n < n_kept, first[i], stage, d)

    def _decision(self, rank: int, kept: bool, base: Drop, stage: Stage, d: Drop) -> Decision:
        """``base``: the first stage's drop of the candidate; ``d``: the last one's (``stage``)."""
        plain = type(stage).explain is Stage.explain  # the default: its detail, without a call
        message = str(d.detail) if plain else stage.explain(d, self)
        ids = tuple([self.candidates[p].id for p in d.partners]) if d.partners else ()
        conflict = d.reason is Reason.CONFLICT
        return decision_of(
            self.candidates[base.position],
            kept,
            rank,
            base.position,
            base.score,
            d.reason,
            message,
            base.rerank or (None if self.rerank is None else self.rerank.unscored()),
            ids[0] if ids and not conflict else None,
            d.partners[0] if ids and not conflict else None,
            ids if conflict else (),
        )


@dataclass(slots=True, eq=False)
class Reranked:
    """The rerank stage's facts in one call: what it scored and what came back.

    Attributes:
        config: the rerank config; ``name``: the reranker's name.
        top, below: input positions reranked, and those ranked by retrieval below
            ``rerank.top_n`` (retrieval order).
        scored: the call's outcome; ``probabilities``, ``values``, ``valid``: its
            outputs mapped to probabilities, along ``top`` (what the cut reads).
        n_below: how many of ``below`` are kept (``beyond_top_n="keep_below"``).
        result: the cut on the probabilities.
    """

    config: RerankConfig
    name: str
    top: list[int]
    below: list[int]
    scored: Scored | None = None
    probabilities: Sequence[float] = ()
    values: NDArray[np.float64] = field(default_factory=lambda: _NO_VALUES)
    valid: NDArray[np.bool_] = field(default_factory=lambda: _NO_VALID)
    n_below: int = 0
    result: PolicyResult | None = None

    @property
    def ok(self) -> bool:
        """Whether the call returned scores (the cut reads them)."""
        return self.scored is not None and self.scored.raw is not None

    def unscored(self) -> RerankDetail:
        """The rerank record of a candidate the stage did not score."""
        return RerankDetail(reason=Reason.NOT_RERANKED if self.ok else Reason.RERANK_FAILED)

    def outcome(self) -> RerankOutcome | None:
        """What the rerank stage did (``Selection.rerank``)."""
        sc = self.scored
        if sc is None:
            return None
        return RerankOutcome(
            reranker=self.name,
            score_kind=sc.kind,
            positions=tuple(self.top),
            raw_scores=() if sc.raw is None else tuple(sc.raw.tolist()),
            probabilities=tuple(self.probabilities),
            not_reranked=tuple(self.below),
            n_kept_below=self.n_below,
            top_n=self.config.top_n,
            keep_below=self.config.beyond_top_n is BeyondTopN.KEEP_BELOW,
            error=sc.error,
            elapsed_ms=sc.elapsed_ms,
            cache_hits=sc.cache_hits,
            result=self.result if self.ok and self.top else None,
        )


def start(
    query: str,
    candidates: Iterable[Candidate],
    *,
    score_kind: ScoreKind | str | None,
    scored: bool,
    max_k: int | None,
    default_kind: ScoreKind | None,
    params: PolicyParams,
    unscored: PolicyParams,
) -> State:
    """The first stage, validate: the call's arguments checked, as a new state.

    Raises:
        CandidateError: ``query`` is not a str, or ``candidates`` is not an iterable of
            [`Candidate`][ragguard.Candidate].
        ConfigError: ``score_kind`` is not a score kind, or ``max_k`` is not an int >= 1.
    """
    if not isinstance(query, str):
        raise CandidateError(f"query must be a str, got {type(query).__name__}")
    cands = candidates if isinstance(candidates, tuple) else _as_tuple(candidates)
    if set(map(type, cands)) - {Candidate}:  # fast path: no subclass, nothing foreign
        _check(cands)
    if max_k is not None and (isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1):
        raise ConfigError(f"max_k must be an int >= 1, got {max_k!r}")
    kind: ScoreKind | None = None
    if scored:
        kind = default_kind
        if score_kind is not None:
            kind = parse_kind(score_kind, "score_kind", tuple(ScoreKind))
    chosen = params if kind is not None else unscored
    if max_k is not None:
        chosen = replace(chosen, max_k=max_k, min_k=min(chosen.min_k, max_k))
    return State(query, cands, kind, scored, max_k, chosen)


def _as_tuple(candidates: object) -> tuple[Candidate, ...]:
    items = None
    if not (candidates is None or isinstance(candidates, str | bytes | Mapping | Candidate)):
        try:
            items = iter(candidates)  # type: ignore[call-overload]
        except TypeError:  # not iterable
            items = None
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


def _check(cands: tuple[Candidate, ...]) -> None:
    for c in cands:
        if not isinstance(c, Candidate):
            raise CandidateError(
                "ContextGuard.select expects Candidate objects, got "
                f"{type(c).__name__}; wrap framework objects with ragguard.adapters "
                "or build Candidate(id, text, score)"
            )
