"""The guard's own types: what goes in (Candidate) and what comes out (Selection).

Adapters translate framework objects (LangChain ``Document``, LlamaIndex
``NodeWithScore``) into Candidates and back; the policy knows no framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from itertools import islice
from numbers import Real
from typing import TYPE_CHECKING, Any

from ragguard.errors import CandidateError
from ragguard.policy import Reason

if TYPE_CHECKING:
    from ragguard.conflicts import Conflict
    from ragguard.rerank import RerankOutcome
    from ragguard.scores import ScoreKind


class Verdict(StrEnum):
    """What a selection gives the LLM (``Selection.verdict``).

    ``answerable``: some passages are kept and no two of them conflict.
    ``insufficient``: nothing is kept: the input was empty, every candidate was
    dropped, or the best one is below ``min_evidence`` (reason
    ``insufficient_evidence``). Tell the LLM there is not enough evidence, or do not ask
    it at all.
    ``conflict``: two kept passages nearly repeat each other but state different facts
    (``conflicts="flag"``); ``Selection.conflicts`` says which, and where they differ.
    """

    ANSWERABLE = "answerable"
    INSUFFICIENT = "insufficient"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One retrieved passage.

    Attributes:
        id: a stable identifier (document id, node id, chunk id).
        text: the passage text.
        score: the retriever's raw score as a float, or ``None`` when it gave none. Its
            meaning is fixed by the guard's ``score_kind``. A number beyond float range
            (``10**400``) becomes ``inf``: an invalid score, like NaN.
        metadata: a shallow copy of the passage's metadata (the caller's mapping is
            never written to).
        source: the caller's original object (a Document, a node, ...). ragguard keeps a
            reference and never writes into it.
    """

    id: str
    text: str = ""
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise CandidateError(f"Candidate.id must be a str, got {type(self.id).__name__}")
        if not isinstance(self.text, str):
            raise CandidateError(
                f"Candidate.text must be a str, got {type(self.text).__name__} (id {self.id!r})"
            )
        score = self.score
        if score is not None and (isinstance(score, bool) or not isinstance(score, Real)):
            raise CandidateError(
                f"Candidate.score must be a real number or None, got {score!r} "
                f"({type(score).__name__}) for id {self.id!r}"
            )
        if score is not None:
            try:
                value = float(score)
            except OverflowError:  # an int beyond float range: as invalid as inf, never an error
                value = math.inf if score > 0 else -math.inf
            object.__setattr__(self, "score", value)
        if not isinstance(self.metadata, Mapping):
            raise CandidateError(
                f"Candidate.metadata must be a mapping, got {type(self.metadata).__name__}"
            )
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def has_valid_score(self) -> bool:
        """True when the score is a finite number."""
        return self.score is not None and math.isfinite(self.score)


def candidate_of(
    id: str, text: str, score: float | None, metadata: Mapping[str, Any], source: Any
) -> Candidate:
    """``Candidate(id, text, score, metadata, source)``; what a framework object gives
    (a str id and text, a float or no score, a dict) skips the checks it cannot fail."""
    plain = score is None or type(score) is float
    if not plain or type(id) is not str or type(text) is not str or type(metadata) is not dict:
        return Candidate(id, text, score, metadata, source)
    made = object.__new__(Candidate)
    set_id, set_text, set_score, set_metadata, set_source = _SETTERS  # the slots' own
    set_id(made, id)
    set_text(made, text)
    set_score(made, score)
    set_metadata(made, dict(metadata))
    set_source(made, source)
    return made


_SETTERS = tuple(getattr(Candidate, name).__set__ for name in Candidate.__slots__)


@dataclass(kw_only=True, frozen=True, slots=True)
class RerankDetail:
    """The rerank stage's record of one candidate (``Decision.rerank``).

    Attributes:
        retrieval_score: its normalised retrieval score (``None`` when invalid or of
            unknown kind). The raw one is ``candidate.score``.
        score: its rerank probability (logits already mapped through a sigmoid);
            ``None`` when the reranker did not score it or returned NaN/inf.
        raw_score: what the reranker returned for it (a logit or a probability, see
            ``Selection.rerank.score_kind``); ``None`` when not scored.
        reason: why it has no rerank output: ``Reason.NOT_RERANKED`` (below
            ``rerank.top_n``, or dropped before the stage) or ``Reason.RERANK_FAILED``
            (the stage failed, ``fail_open``); ``None`` when the reranker scored it.
    """

    retrieval_score: float | None = None
    score: float | None = None
    raw_score: float | None = None
    reason: Reason | None = None


@dataclass(kw_only=True, frozen=True, slots=True)
class Decision:
    """What the guard decided about one candidate, and why.

    Attributes:
        candidate: the candidate.
        kept: whether it reaches the LLM.
        rank: its 0-based position in the guard's ranking (kept candidates come first).
        index: its 0-based position in the input.
        normalized_score: the score the guard ranked it by, on a higher-is-better scale:
            its rerank probability when the rerank stage scored it, otherwise its
            normalised retrieval score; ``None`` when that score is invalid, the score
            kind is unknown, or the rerank stage ran but did not score it.
        reason: why it was dropped (``None`` when kept).
        message: a one-line human explanation.
        rerank: the rerank stage's record of it (``None`` when the stage is off); read
            it through [`retrieval_score`][ragguard.Decision.retrieval_score],
            [`rerank_score`][ragguard.Decision.rerank_score],
            [`rerank_raw_score`][ragguard.Decision.rerank_raw_score] and
            [`rerank_reason`][ragguard.Decision.rerank_reason].
        duplicate_of: for a ``duplicate_id`` or ``near_duplicate`` drop, the id of the
            candidate it repeats (for ``duplicate_id`` that is its own id: the copy
            kept); ``None`` otherwise.
        duplicate_of_position: the input position of that candidate (``None`` when
            ``duplicate_of`` is), which tells copies with one id apart.
        conflict_with: for a ``conflict`` drop, the ids of the passages it conflicts
            with (``Selection.conflicts`` has the whole group); empty otherwise.
    """

    candidate: Candidate
    kept: bool
    rank: int
    index: int
    normalized_score: float | None
    reason: Reason | None
    message: str
    rerank: RerankDetail | None = None
    duplicate_of: str | None = None
    duplicate_of_position: int | None = None
    conflict_with: tuple[str, ...] = ()

    @property
    def retrieval_score(self) -> float | None:
        """Its normalised retrieval score (``None`` when invalid or of unknown kind),
        whether or not the rerank stage ran. The raw score is ``candidate.score``."""
        return self.normalized_score if self.rerank is None else self.rerank.retrieval_score

    @property
    def rerank_score(self) -> float | None:
        """Its rerank probability; ``None`` when the stage is off or did not score it."""
        return None if self.rerank is None else self.rerank.score

    @property
    def rerank_raw_score(self) -> float | None:
        """What the reranker returned for it (a logit or a probability); ``None`` when
        the stage is off or did not score it."""
        return None if self.rerank is None else self.rerank.raw_score

    @property
    def rerank_reason(self) -> Reason | None:
        """Why it has no rerank output although the stage is on (``not_reranked`` or
        ``rerank_failed``); ``None`` when it was reranked or the stage is off."""
        return None if self.rerank is None else self.rerank.reason


def decision_of(*fields: Any) -> Decision:
    """``Decision(...)`` of its fields in order, without the frozen ``__init__`` (2x the cost)."""
    made = object.__new__(Decision)
    for set_field, value in zip(_DECISION_SETTERS, fields, strict=True):
        set_field(made, value)
    return made


_DECISION_SETTERS = tuple(getattr(Decision, name).__set__ for name in Decision.__slots__)


class Selection:
    """The outcome of one [`ContextGuard.select`][ragguard.ContextGuard.select] call.

    ``kept`` holds the candidates that reach the LLM, best first. ``dropped`` holds a
    [`Decision`][ragguard.Decision] for every other input candidate, with a machine-readable reason
    and a message: ``len(kept) + len(dropped) == len(input)`` always.

    ``rerank`` says what the rerank stage did (``None`` when it is off or the input is
    empty); each decision then carries the candidate's retrieval score and rerank score.

    Attributes:
        query: the query.
        candidates: the input candidates, in input order.
        score_kind: the retrieval scores' kind (``None`` when unknown or not scored).
        kept: the candidates that reach the LLM, best first.
        warnings: every warning about this call's scores or stages (each is also
            emitted, once per guard).
        rerank: what the rerank stage did.
        conflicts: the groups of passages the cut kept that nearly repeat each other
            but differ in facts, each with the spans that differ per member (empty
            while ``conflicts="off"``); [`describe`][ragguard.Conflict.describe]
            gives a line for the LLM.
        verdict: ``answerable``, ``insufficient`` (nothing kept) or ``conflict`` (two
            kept passages conflict), see [`Verdict`][ragguard.Verdict].
        answers: with an answerer stage ([`AnswerStage`][ragguard.AnswerStage]), the
            short answer of each passage the cut kept, by its input position (an index
            into ``candidates``), best-ranked first; ``None`` for a passage that gives
            none. ``None`` when no answerer ran, or it failed (``warnings`` says why).
        domain: the domain whose settings selected (``select(..., domain=...)``,
            ``guard.for_domain(...)``); ``None``: the global settings, also for an
            unknown domain.
    """

    domain: str | None = None  # set by a domain's guard

    def __init__(
        self,
        *,
        query: str,
        candidates: tuple[Candidate, ...],
        score_kind: ScoreKind | None,
        kept: list[Candidate],
        warnings: tuple[str, ...],
        rerank: RerankOutcome | None,
        decisions: Callable[[], Iterable[Decision]],
        conflicts: tuple[Conflict, ...],
        verdict: Verdict,
        answers: Mapping[int, str | None] | None = None,
    ) -> None:
        self.query = query
        self.candidates = candidates
        self.score_kind = score_kind
        self.kept = kept
        self.warnings = warnings
        self.rerank = rerank
        self.conflicts = conflicts
        self.verdict = verdict
        self.answers = answers
        self._decide = decisions

    @cached_property
    def decisions(self) -> tuple[Decision, ...]:
        """A decision for every input candidate, in the guard's ranked order: the kept
        ones, those the stages after the cut dropped (near-duplicates, token budget),
        then the rest."""
        return tuple(self._decide())

    @property
    def dropped(self) -> list[Decision]:
        """A decision for every candidate that was not kept, in ranked order."""
        return [d for d in self.decisions if not d.kept]

    @property
    def kept_decisions(self) -> list[Decision]:
        """The decisions of the kept candidates, best first (the first ``decisions``;
        read before them, the dropped ones' are not built)."""
        if "decisions" in self.__dict__:
            return list(self.decisions[: len(self.kept)])
        return list(islice(self._decide(), len(self.kept)))

    def __len__(self) -> int:
        return len(self.kept)

    def __repr__(self) -> str:
        return (
            f"Selection(query={self.query!r}, kept={len(self.kept)}, "
            f"dropped={len(self.candidates) - len(self.kept)}, verdict={self.verdict.value!r})"
        )
