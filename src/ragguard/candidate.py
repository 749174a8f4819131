"""The guard's own types: what goes in (Candidate) and what comes out (Selection).

Adapters translate framework objects (LangChain ``Document``, LlamaIndex
``NodeWithScore``) into Candidates and back; the policy knows no framework.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragguard.errors import CandidateError
from ragguard.policy import KEPT, REASON_OF_CODE, PolicyParams, PolicyResult, Reason, describe
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.rerank import RerankOutcome
    from ragguard.stages import StageState

__all__ = ["Candidate", "Decision", "RerankDetail", "Selection"]


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


@dataclass(frozen=True, slots=True)
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

    retrieval_score: float | None
    score: float | None
    raw_score: float | None
    reason: Reason | None


@dataclass(frozen=True, slots=True)
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
            it through :attr:`retrieval_score`, :attr:`rerank_score`,
            :attr:`rerank_raw_score` and :attr:`rerank_reason`.
        duplicate_of: for a ``duplicate_id`` or ``near_duplicate`` drop, the id of the
            candidate it repeats (for ``duplicate_id`` that is its own id: the copy
            kept); ``None`` otherwise.
        duplicate_of_position: the input position of that candidate (``None`` when
            ``duplicate_of`` is), which tells copies with one id apart.
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


class Selection:
    """The outcome of one :meth:`ContextGuard.select` call.

    ``kept`` holds the candidates that reach the LLM, best first. ``dropped`` holds a
    :class:`Decision` for every other input candidate, with a machine-readable reason and
    a message: ``len(kept) + len(dropped) == len(input)`` always.

    ``rerank`` says what the rerank stage did (``None`` when it is off or the input is
    empty); each decision then carries the candidate's retrieval score and rerank score.
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
        rerank: RerankOutcome | None = None,
        stages: StageState | None = None,
    ) -> None:
        self.query = query
        self.candidates = candidates
        self.score_kind = score_kind
        self.warnings = warnings
        self.rerank = rerank
        if rerank is not None and not rerank.failed:
            self.kept = [candidates[i] for i in rerank.kept_positions()]
        else:
            self.kept = [] if result is None else [candidates[i] for i in result.kept_positions(0)]
        self._result = result
        self._normalized = normalized
        self._dup_of = dict(duplicate_of or {})
        self._stages = stages
        if stages is not None:  # near-duplicates and the token budget, after the cut
            self.kept = [candidates[i] for i in stages.kept_positions(0)]

    @cached_property
    def decisions(self) -> tuple[Decision, ...]:
        """A decision for every input candidate, in the guard's ranked order: the kept
        ones, those the stages after the cut dropped (near-duplicates, token budget),
        then the rest."""
        cut = self._cut_decisions()
        stages = self._stages
        if stages is None:
            return cut
        cols = {int(p): j for j, p in enumerate(stages.positions[0].tolist()) if p >= 0}
        codes = stages.reasons[0].tolist()
        kept: list[Decision] = []
        moved: list[Decision] = []
        rest: list[Decision] = []
        for d in cut:
            j = cols.get(d.index) if d.kept else None
            if j is None or codes[j] == KEPT:
                (kept if d.kept else rest).append(d)
                continue
            reason = REASON_OF_CODE[codes[j]]
            message, partner = self._stage_message(stages, j, reason)
            moved.append(
                replace(
                    d, kept=False, reason=reason, message=message,
                    duplicate_of=None if partner is None else self.candidates[partner].id,
                    duplicate_of_position=partner,
                )
            )  # fmt: skip
        return tuple(replace(d, rank=n) for n, d in enumerate(kept + moved + rest))

    def _stage_message(self, st: StageState, j: int, reason: Reason) -> tuple[str, int | None]:
        """Why a stage after the cut dropped column ``j``, and the input position of the
        passage a near-duplicate repeats."""
        from ragguard.stages import SHINGLE_WORDS

        if reason is Reason.NEAR_DUPLICATE:
            col = int(st.partner[0, j])
            first = int(st.positions[0, col])
            kept = int(st.reasons[0, col]) == KEPT
            return (
                f"near-duplicate of {'kept ' if kept else ''}id {self.candidates[first].id!r} "
                f"at input position {first}: word {SHINGLE_WORDS}-shingle Jaccard similarity "
                f"{float(st.similarity[0, j]):.3g} >= near_duplicate_threshold {st.threshold:g}"
                + ("" if kept else " (that passage then did not fit in max_tokens either)")
            ), first
        assert st.tokens is not None
        return (
            f"its {int(st.tokens[0, j])} tokens do not fit in max_tokens={st.max_tokens}: "
            f"the passages kept before it use {st.used_before(0, j)} (token_counter "
            f"{st.counter!r})"
        ), None

    def _cut_decisions(self) -> tuple[Decision, ...]:
        """The decisions of the cut (before the stages after it)."""
        if self.rerank is not None and not self.rerank.failed:
            return self._reranked_decisions(self.rerank)
        out: list[Decision] = []
        result = self._result
        if result is None:
            return ()
        note = None if self.rerank is None else Reason.RERANK_FAILED
        scored = self.score_kind is not None
        normalized = self._normalized.tolist()
        params, top = result.params, float(result.top[0])
        rank = 0
        for i, code in zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True):
            if code < 0:  # a removed duplicate: reported after the ranked candidates
                continue
            norm = normalized[i] if scored else None
            out.append(self._decision(i, code, rank, norm, params, top, note))
            rank += 1
        out.extend(self._duplicate_decisions(rank, note))
        return tuple(out)

    def _duplicate_decisions(self, rank: int, note: Reason | None) -> list[Decision]:
        out = []
        detail = None if note is None else RerankDetail(None, None, None, note)
        for i, first in sorted(self._dup_of.items()):
            kept_id = self.candidates[first].id
            out.append(
                Decision(
                    self.candidates[i], False, rank, i, None, Reason.DUPLICATE_ID,
                    f"duplicate of id {kept_id!r} at input position {first}", detail,
                    kept_id, first,
                )
            )  # fmt: skip
            rank += 1
        return out

    def _decision(
        self,
        i: int,
        code: int,
        rank: int,
        norm: float | None,
        params: PolicyParams,
        top: float,
        note: Reason | None = None,
    ) -> Decision:
        cand = self.candidates[i]
        if norm is not None and math.isnan(norm):
            norm = None
        detail = None if note is None else RerankDetail(norm, None, None, note)
        if code == KEPT:
            message = "kept" if note is None else "kept on retrieval score (rerank failed)"
            return Decision(cand, True, rank, i, norm, None, message, detail)
        reason = REASON_OF_CODE[code]
        if reason is Reason.INVALID_SCORE:
            shown = "missing (None)" if cand.score is None else repr(cand.score)
            message = f"score is {shown}; dropped by invalid_scores='drop'"
        elif norm is None and reason is Reason.OVER_MAX_K:
            message = f"ranked below the max_k={params.max_k} cap"
        else:
            message = describe(reason, norm, params, top)
        return Decision(cand, False, rank, i, norm, reason, message, detail)

    def _reranked_decisions(self, outcome: RerankOutcome) -> tuple[Decision, ...]:
        """Decisions when the rerank stage ran: reranked candidates kept (by rerank
        probability), candidates kept below them, then the dropped ones in the same
        groups, then those dropped before the stage (invalid scores, duplicates)."""
        cands = self.candidates
        retrieval: list[float | None] = (
            [None if math.isnan(x) else x for x in self._normalized.tolist()]
            if self.score_kind is not None
            else [None] * len(cands)
        )
        # (input position, normalised score, reason, message, rerank detail)
        Row = tuple[int, float | None, Reason | None, str, RerankDetail]
        kept: list[Row] = []
        dropped: list[Row] = []
        positions, raw, probs = outcome.positions, outcome.raw_scores, outcome.probabilities
        result = outcome.result
        if result is not None:
            params, top = result.params, float(result.top[0])
            for j, code in zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True):
                i, prob = positions[j], probs[j]
                p = None if math.isnan(prob) else prob
                detail = RerankDetail(retrieval[i], p, raw[j], None)
                if code == KEPT:
                    message = "kept" if p is not None else (
                        f"kept after the scored candidates: rerank score is {raw[j]!r} "
                        "(invalid_scores='keep_last')"
                    )  # fmt: skip
                    kept.append((i, p, None, message, detail))
                    continue
                reason = REASON_OF_CODE[code]
                if reason is Reason.INVALID_SCORE:
                    message = f"rerank score is {raw[j]!r}; dropped by invalid_scores='drop'"
                elif p is None:
                    message = f"rerank score is {raw[j]!r}; ranked below the max_k cap"
                else:
                    message = describe(reason, p, params, top, "rerank probability")
                dropped.append((i, p, reason, message, detail))
        top_n, n_below = outcome.top_n, outcome.n_kept_below
        n_reranked = len(positions)
        for k, i in enumerate(outcome.not_reranked):
            detail = RerankDetail(retrieval[i], None, None, Reason.NOT_RERANKED)
            where = f"retrieval rank {n_reranked + k + 1} is below rerank.top_n={top_n}"
            if k < n_below:
                message = f"kept below the reranked candidates, not reranked ({where})"
                kept.append((i, None, None, message, detail))
            elif outcome.keep_below:  # there was no room left under max_k
                cap = result.params.max_k if result is not None else "max_k"
                message = f"not reranked ({where}) and ranked below the max_k={cap} cap"
                dropped.append((i, None, Reason.OVER_MAX_K, message, detail))
            else:
                message = (
                    f"not reranked: {where} (rerank.beyond_top_n='keep_below' would keep it "
                    "if room is left)"
                )
                dropped.append((i, None, Reason.NOT_RERANKED, message, detail))
        seen = set(positions) | set(outcome.not_reranked) | set(self._dup_of)
        before = RerankDetail(None, None, None, Reason.NOT_RERANKED)
        for i in range(len(cands)):
            if i not in seen:  # invalid retrieval score, dropped before the stage
                shown = "missing (None)" if cands[i].score is None else repr(cands[i].score)
                message = f"score is {shown}; dropped by invalid_scores='drop' before reranking"
                dropped.append((i, None, Reason.INVALID_SCORE, message, before))
        out = [
            Decision(cands[i], n < len(kept), n, i, norm, reason, message, detail)
            for n, (i, norm, reason, message, detail) in enumerate(kept + dropped)
        ]
        out.extend(self._duplicate_decisions(len(out), Reason.NOT_RERANKED))
        return tuple(out)

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
