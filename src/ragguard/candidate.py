"""The guard's own types: what goes in (Candidate) and what comes out (Selection).

Adapters translate framework objects (LangChain ``Document``, LlamaIndex
``NodeWithScore``) into Candidates and back; the policy knows no framework.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.errors import CandidateError
from ragguard.policy import KEPT, REASON_OF_CODE, PolicyParams, PolicyResult, Reason, describe
from ragguard.scores import ScoreKind

__all__ = ["Candidate", "Decision", "Selection"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One retrieved passage.

    Attributes:
        id: a stable identifier (document id, node id, chunk id).
        text: the passage text.
        score: the retriever's raw score, or ``None`` when it gave none. Its meaning is
            fixed by the guard's ``score_kind``.
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
        if not isinstance(self.metadata, Mapping):
            raise CandidateError(
                f"Candidate.metadata must be a mapping, got {type(self.metadata).__name__}"
            )
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def has_valid_score(self) -> bool:
        """True when the score is a finite number."""
        return self.score is not None and math.isfinite(self.score)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard decided about one candidate, and why.

    Attributes:
        candidate: the candidate.
        kept: whether it reaches the LLM.
        rank: its 0-based position in the guard's ranking (kept candidates come first).
        index: its 0-based position in the input.
        normalized_score: its score on the guard's higher-is-better scale, or ``None``
            when the score is invalid or the score kind is unknown.
        reason: why it was dropped (``None`` when kept).
        message: a one-line human explanation.
    """

    candidate: Candidate
    kept: bool
    rank: int
    index: int
    normalized_score: float | None
    reason: Reason | None
    message: str


class Selection:
    """The outcome of one :meth:`ContextGuard.select` call.

    ``kept`` holds the candidates that reach the LLM, best first. ``dropped`` holds a
    :class:`Decision` for every other input candidate, with a machine-readable reason and
    a message: ``len(kept) + len(dropped) == len(input)`` always.
    """

    def __init__(
        self,
        query: str,
        candidates: tuple[Candidate, ...],
        *,
        result: PolicyResult | None,
        normalized: NDArray[np.float64],
        score_kind: ScoreKind | None,
        duplicate_of: Mapping[int, int] | None = None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.query = query
        self.candidates = candidates
        self.score_kind = score_kind
        self.warnings = warnings
        self.kept: list[Candidate] = (
            [] if result is None else [candidates[i] for i in result.kept_positions(0)]
        )
        self._result = result
        self._normalized = normalized
        self._dup_of = dict(duplicate_of or {})

    @cached_property
    def decisions(self) -> tuple[Decision, ...]:
        """A decision for every input candidate, in the guard's ranked order."""
        out: list[Decision] = []
        result = self._result
        if result is None:
            return ()
        scored = self.score_kind is not None
        normalized = self._normalized.tolist()
        params, top = result.params, float(result.top[0])
        rank = 0
        for i, code in zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True):
            if code < 0:  # a removed duplicate: reported after the ranked candidates
                continue
            norm = normalized[i] if scored else None
            out.append(self._decision(i, code, rank, norm, params, top))
            rank += 1
        for i, first in sorted(self._dup_of.items()):
            kept_id = self.candidates[first].id
            out.append(
                Decision(
                    self.candidates[i], False, rank, i, None, Reason.DUPLICATE_ID,
                    f"duplicate of id {kept_id!r} at input position {first}",
                )
            )  # fmt: skip
            rank += 1
        return tuple(out)

    def _decision(
        self, i: int, code: int, rank: int, norm: float | None, params: PolicyParams, top: float
    ) -> Decision:
        cand = self.candidates[i]
        if norm is not None and math.isnan(norm):
            norm = None
        if code == KEPT:
            return Decision(cand, True, rank, i, norm, None, "kept")
        reason = REASON_OF_CODE[code]
        if reason is Reason.INVALID_SCORE:
            shown = "missing (None)" if cand.score is None else repr(cand.score)
            message = f"score is {shown}; dropped by invalid_scores='drop'"
        elif norm is None and reason is Reason.OVER_MAX_K:
            message = f"ranked below the max_k={params.max_k} cap"
        else:
            message = describe(reason, norm, params, top)
        return Decision(cand, False, rank, i, norm, reason, message)

    @property
    def dropped(self) -> list[Decision]:
        """A decision for every candidate that was not kept, in ranked order."""
        return [d for d in self.decisions if not d.kept]

    @property
    def kept_decisions(self) -> list[Decision]:
        """The decisions of the kept candidates, best first."""
        return [d for d in self.decisions if d.kept]

    def __len__(self) -> int:
        return len(self.kept)

    def __repr__(self) -> str:
        return (
            f"Selection(query={self.query!r}, kept={len(self.kept)}, "
            f"dropped={len(self.candidates) - len(self.kept)})"
        )
