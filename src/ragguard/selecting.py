"""One [`ContextGuard.select`][ragguard.ContextGuard.select] call: a list of stages
over one state, and the builder of its [`Selection`][ragguard.Selection].

::

    start (validate) -> normalise -> duplicate ids -> rerank plan -> [the rerank call]
      -> rerank map -> cut (min_evidence) -> conflicts -> near-duplicates -> token budget
      -> Selection

Every stage is a small class: its settings come from the guard's config, keyword-only,
when the guard is built; calling it with the ``State`` of one call does its work on
that state. A stage that a config turns off is not in the guard's list at all, so it
costs nothing. The rerank call itself is the one step that is not a stage:
[`select`][ragguard.ContextGuard.select] makes it blocking and
[`aselect`][ragguard.ContextGuard.aselect] awaits it, between the same two lists.

The state holds one row of (rows x candidates) arrays, the shape the selection policy
(``ragguard.policy``) and the stages after the cut (``ragguard.stages``) take,
so the runtime runs the very kernels the calibration sweep runs on every query: the
normalised scores and their validity, which positions still hold a candidate after
duplicate ids are resolved, the scores the cut reads (retrieval scores, or the rerank
probabilities of the reranked candidates), the cut's result and the state of the stages
after it. Warnings are collected as data (``Warn``) and emitted once by the guard,
after the last stage.

A failed rerank call (``fail_open``) is not a second path: the rerank map stage records
the failure and leaves the cut reading retrieval scores, as if the stage were off.

Decisions are built lazily: ``select()`` computes which candidates are kept, and
``State.decisions`` explains every candidate only when ``Selection.decisions`` (or
``dropped``) is read.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.candidate import Candidate, Decision, RerankDetail, Selection, Verdict
from ragguard.config import BeyondTopN, DuplicatePolicy, RerankConfig
from ragguard.conflicts import (
    MAX_PAIRS,
    MISSING,
    Conflict,
    ConflictMember,
    Pair,
    compared_passages,
    conflict_groups,
    conflict_stage,
)
from ragguard.errors import (
    CandidateError,
    ConfigError,
    ConfigWarning,
    DuplicateIdError,
    InvalidScoreError,
    RerankWarning,
    ScoreWarning,
)
from ragguard.policy import (
    KEPT,
    REASON_OF_CODE,
    ConflictMode,
    Explainer,
    PolicyParams,
    PolicyResult,
    Reason,
    apply_policy,
    rank,
)
from ragguard.probability import rerank_probabilities
from ragguard.rerank import RerankOutcome, Scored, parse_kind, rerank_issue_message
from ragguard.scores import ScoreIssue, ScoreKind, issue_message, normalize
from ragguard.stages import (
    SHINGLE_WORDS,
    Shingles,
    StageState,
    near_duplicate_stage,
    shingles,
    start_state,
    token_budget_stage,
)
from ragguard.tokens import TokenCounter

__all__ = [
    "Conflicts",
    "Cut",
    "Duplicates",
    "NearDuplicates",
    "Normalise",
    "RerankMap",
    "RerankPlan",
    "Stage",
    "State",
    "TokenBudget",
    "Warn",
    "start",
]

_any = np.logical_or.reduce  # without the Python wrapper of ndarray.any
_ID = attrgetter("id")
_SCORE = attrgetter("score")
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
        values: (1, N) normalised retrieval scores (higher is better).
        valid: (1, N) True where the retrieval score is valid.
        issues: contradictions ``normalize`` found in the retrieval scores.
        distinct: whether no id repeats.
        duplicate_of: input position of each removed duplicate -> the copy kept.
        present: (1, N) False at removed duplicates; ``None`` when there are none.
        params: the policy parameters of the cut, capped by ``max_k``.
        cut_values, cut_valid, cut_present: what the cut reads: the retrieval scores, or
            (rerank stage) the rerank probabilities of the reranked candidates.
        cut_positions: input positions of the cut's columns; ``None`` when the cut reads
            every input position (retrieval scores).
        top, below: input positions reranked, and those ranked by retrieval below
            ``rerank.top_n`` (retrieval order); empty without the rerank stage.
        scores: the rerank call's outcome (``None``: the stage is off or had nothing to
            call).
        probabilities: the rerank probabilities along ``top``.
        n_below: how many of ``below`` are kept (``beyond_top_n="keep_below"``).
        cut: the policy's result.
        kept: input positions kept, best first.
        after: the state of the stages after the cut (``None`` when none ran).
        pairs: the conflicting pairs among the kept passages (columns of ``after``).
        conflict_mode: what the conflict stage did with them (``None``: the stage is off).
        conflict_similarity: its comparability level.
        sets: word shingle sets by input position, built once for the stages that read
            them (conflicts, near-duplicates).
        warnings: what the stages found, in order.
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
    distinct: bool = True
    duplicate_of: Mapping[int, int] = field(default_factory=lambda: _NOTHING)
    present: NDArray[np.bool_] | None = None
    cut_values: NDArray[np.float64] | None = None
    cut_valid: NDArray[np.bool_] | None = None
    cut_present: NDArray[np.bool_] | None = None
    cut_positions: Sequence[int] | None = None
    top: Sequence[int] = ()
    below: Sequence[int] = ()
    rerank_config: RerankConfig | None = None
    reranker: str = ""
    scores: Scored | None = None
    probabilities: Sequence[float] = ()
    n_below: int = 0
    cut: PolicyResult | None = None
    kept: Sequence[int] = ()
    after: StageState | None = None
    pairs: Sequence[Pair] = ()
    conflict_mode: ConflictMode | None = None
    conflict_similarity: float = 0.0
    sets: dict[int, Shingles] | None = None
    warnings: list[Warn] = field(default_factory=list)

    def shingles(self, position: int) -> Shingles:
        """The word shingle set of the candidate at input ``position`` (built once)."""
        if self.sets is None:
            self.sets = {}
        got = self.sets.get(position)
        if got is None:
            got = self.sets[position] = shingles(self.candidates[position].text)
        return got

    @property
    def texts(self) -> list[str] | None:
        """The texts the rerank call scores, or ``None`` when there is no call to make."""
        if self.rerank_config is None or not self.candidates:
            return None
        return [self.candidates[i].text for i in self.top]

    @property
    def reranked(self) -> bool:
        """Whether the cut read rerank probabilities (the stage ran and did not fail)."""
        return self.cut_positions is not None

    @property
    def rerank_failed(self) -> bool:
        return self.scores is not None and self.scores.raw is None

    def outcome(self) -> RerankOutcome | None:
        """What the rerank stage did (``Selection.rerank``); ``None`` when it is off or
        the input is empty."""
        conf, sc = self.rerank_config, self.scores
        if conf is None or sc is None:
            return None
        failed = sc.raw is None
        return RerankOutcome(
            reranker=self.reranker,
            score_kind=sc.kind,
            positions=tuple(self.top),
            raw_scores=() if failed else tuple(sc.raw.tolist()),  # type: ignore[union-attr]
            probabilities=tuple(self.probabilities),
            not_reranked=tuple(self.below),
            n_kept_below=self.n_below,
            top_n=conf.top_n,
            keep_below=conf.beyond_top_n is BeyondTopN.KEEP_BELOW,
            error=sc.error,
            elapsed_ms=sc.elapsed_ms,
            cache_hits=sc.cache_hits,
            result=self.cut if self.reranked and self.top else None,
        )

    # -- the builder ------------------------------------------------------------------

    def selection(self) -> Selection:
        """The call's [`Selection`][ragguard.Selection]; its decisions are built
        when first read (``decisions``)."""
        cands = self.candidates
        conflicts = self.conflicts() if self.pairs else ()
        return Selection(
            query=self.query,
            candidates=cands,
            score_kind=self.kind,
            kept=[cands[i] for i in self.kept],
            warnings=tuple([w.message for w in self.warnings]) if self.warnings else (),
            rerank=self.outcome(),
            decisions=self.decisions,
            conflicts=conflicts,
            verdict=self.verdict(),
        )

    def verdict(self) -> Verdict:
        """``insufficient`` when nothing is kept, ``conflict`` when two kept passages
        conflict, else ``answerable``."""
        if not self.kept:
            return Verdict.INSUFFICIENT
        if self.pairs:
            assert self.after is not None
            kept = self.after.reasons[0] == KEPT
            if any(kept[p.a] and kept[p.b] for p in self.pairs):
                return Verdict.CONFLICT
        return Verdict.ANSWERABLE

    def conflicts(self) -> tuple[Conflict, ...]:
        """The conflict groups among the passages the cut kept (``Selection.conflicts``)."""
        st = self.after
        assert st is not None
        cols, kept = st.positions[0].tolist(), (st.reasons[0] == KEPT).tolist()
        spans: dict[int, list[str]] = {}
        for p in self.pairs:
            for c, mine in ((p.a, p.spans_a), (p.b, p.spans_b)):
                got = spans.setdefault(c, [])
                got.extend(x for x in mine if x not in got)
        out = []
        for group in conflict_groups(len(cols), self.pairs):
            members = tuple(
                ConflictMember(
                    id=self.candidates[cols[c]].id,
                    position=cols[c],
                    spans=tuple(spans.get(c, ())),
                    kept=kept[c],
                )
                for c in group
            )
            members_set = set(group)
            best = max(p.similarity for p in self.pairs if p.a in members_set)
            out.append(Conflict(members, best))
        return tuple(out)

    def decisions(self) -> tuple[Decision, ...]:
        """A decision for every input candidate, in the guard's ranked order: the kept
        ones, those the stages after the cut dropped (near-duplicates, token budget),
        then the rest."""
        cut = self._reranked_decisions() if self.reranked else self._cut_decisions()
        after = self.after
        if after is None:
            return tuple(cut)
        cols = {int(p): j for j, p in enumerate(after.positions[0].tolist()) if p >= 0}
        codes = after.reasons[0].tolist()
        kept: list[Decision] = []
        moved: list[Decision] = []
        rest: list[Decision] = []
        for d in cut:
            j = cols.get(d.index) if d.kept else None
            if j is None or codes[j] == KEPT:
                (kept if d.kept else rest).append(d)
                continue
            reason = REASON_OF_CODE[codes[j]]
            if reason is Reason.CONFLICT:
                moved.append(self._conflict_decision(d, after, j))
                continue
            message, partner = self._after_message(after, j, reason)
            moved.append(
                replace(
                    d,
                    kept=False,
                    reason=reason,
                    message=message,
                    duplicate_of=None if partner is None else self.candidates[partner].id,
                    duplicate_of_position=partner,
                )
            )
        return tuple(replace(d, rank=n) for n, d in enumerate(kept + moved + rest))

    def _conflict_decision(self, d: Decision, st: StageState, j: int) -> Decision:
        """The decision of column ``j``, dropped by the conflict stage."""
        cols = st.positions[0].tolist()
        others: list[int] = []
        for p in self.pairs:
            if j in (p.a, p.b):
                other = p.b if p.a == j else p.a
                if other not in others:
                    others.append(other)
        col = int(st.partner[0, j])
        pair = next(p for p in self.pairs if {p.a, p.b} == {j, col})
        mine, theirs = (pair.spans_a, pair.spans_b) if pair.a == j else (pair.spans_b, pair.spans_a)
        first = cols[col]
        rule = {
            ConflictMode.DROP: "conflicts='drop' drops every member of a conflict group",
            ConflictMode.KEEP_FIRST: "conflicts='keep_first' keeps the better-ranked one",
            ConflictMode.PREFER: "conflicts='prefer' keeps the member with the preferred "
            "metadata value",
        }.get(self.conflict_mode or ConflictMode.DROP, "")
        message = (
            f"conflicts with id {self.candidates[first].id!r} at input position {first}: "
            f"{'; '.join(mine) or '(nothing)'} vs {'; '.join(theirs) or '(nothing)'} (word "
            f"{SHINGLE_WORDS}-shingle similarity {pair.similarity:.3g} >= conflict_similarity "
            f"{self.conflict_similarity:g}); {rule}"
        )
        return replace(
            d,
            kept=False,
            reason=Reason.CONFLICT,
            message=message,
            conflict_with=tuple(self.candidates[cols[o]].id for o in others),
        )

    def _after_message(self, st: StageState, j: int, reason: Reason) -> tuple[str, int | None]:
        """Why a stage after the cut dropped column ``j``, and the input position of the
        passage a near-duplicate repeats."""
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

    def _retrieval(self) -> list[float | None]:
        """Each candidate's normalised retrieval score for its decision (``None`` when
        invalid or of unknown kind)."""
        if self.kind is None:
            return [None] * len(self.candidates)
        return [None if math.isnan(x) else x for x in self.values[0].tolist()]

    def _cut_decisions(self) -> list[Decision]:
        """Decisions of a cut on retrieval scores (the rerank stage off, or failed)."""
        result = self.cut
        if result is None:
            return []
        note = Reason.RERANK_FAILED if self.rerank_failed else None
        kept = "kept" if note is None else "kept on retrieval score (rerank failed)"
        norms, cands = self._retrieval(), self.candidates
        explain = Explainer(result.params, float(result.top[0]))
        out: list[Decision] = []
        for i, code in zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True):
            if code < 0:  # a removed duplicate: reported after the ranked candidates
                continue
            norm, reason = norms[i], REASON_OF_CODE.get(code)
            detail = None if note is None else RerankDetail(retrieval_score=norm, reason=note)
            if reason is None:
                message = kept
            elif reason is Reason.INVALID_SCORE:
                message = f"score is {_shown(cands[i])}; dropped by invalid_scores='drop'"
            else:
                message = explain(reason, norm)
            out.append(
                Decision(
                    candidate=cands[i],
                    kept=reason is None,
                    rank=len(out),
                    index=i,
                    normalized_score=norm,
                    reason=reason,
                    message=message,
                    rerank=detail,
                )
            )
        return self._with_duplicates(out, note)

    def _reranked_decisions(self) -> list[Decision]:
        """Decisions when the cut read rerank probabilities: reranked candidates kept (by
        rerank probability), candidates kept below them, then the dropped ones in the
        same groups, then those dropped before the stage (invalid scores)."""
        assert self.cut is not None and self.scores is not None and self.scores.raw is not None
        cands, retrieval = self.candidates, self._retrieval()
        raw, probs, result = self.scores.raw.tolist(), self.probabilities, self.cut
        # (input position, score shown, reason, message, rerank detail)
        Row = tuple[int, float | None, Reason | None, str, RerankDetail]
        kept: list[Row] = []
        dropped: list[Row] = []
        params = result.params
        explain = Explainer(params, float(result.top[0]), "rerank probability")
        for j, code in zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True):
            i, prob = self.top[j], probs[j]
            p = None if math.isnan(prob) else prob
            detail = RerankDetail(
                retrieval_score=retrieval[i], score=p, raw_score=raw[j], reason=None
            )
            if code == KEPT:
                message = (
                    "kept"
                    if p is not None
                    else (
                        f"kept after the scored candidates: rerank score is {raw[j]!r} "
                        "(invalid_scores='keep_last')"
                    )
                )
                kept.append((i, p, None, message, detail))
                continue
            reason = REASON_OF_CODE[code]
            if reason is Reason.INVALID_SCORE:
                message = f"rerank score is {raw[j]!r}; dropped by invalid_scores='drop'"
            elif p is None:
                message = f"rerank score is {raw[j]!r}; ranked below the max_k cap"
            else:
                message = explain(reason, p)
            dropped.append((i, p, reason, message, detail))
        assert self.rerank_config is not None
        top_n, n_reranked = self.rerank_config.top_n, len(self.top)
        keep_below = self.rerank_config.beyond_top_n is BeyondTopN.KEEP_BELOW
        abstained = result.abstained is not None and bool(result.abstained[0])
        for k, i in enumerate(self.below):
            detail = RerankDetail(retrieval_score=retrieval[i], reason=Reason.NOT_RERANKED)
            where = f"retrieval rank {n_reranked + k + 1} is below rerank.top_n={top_n}"
            if k < self.n_below:
                message = f"kept below the reranked candidates, not reranked ({where})"
                kept.append((i, None, None, message, detail))
            elif keep_below and abstained:  # min_evidence: nothing is kept
                message = f"not reranked ({where}); {explain(Reason.INSUFFICIENT_EVIDENCE, None)}"
                dropped.append((i, None, Reason.INSUFFICIENT_EVIDENCE, message, detail))
            elif keep_below:  # there was no room left under max_k
                message = f"not reranked ({where}) and ranked below the max_k={params.max_k} cap"
                dropped.append((i, None, Reason.OVER_MAX_K, message, detail))
            else:
                message = (
                    f"not reranked: {where} (rerank.beyond_top_n='keep_below' would keep it "
                    "if room is left)"
                )
                dropped.append((i, None, Reason.NOT_RERANKED, message, detail))
        seen = {*self.top, *self.below, *self.duplicate_of}
        before = RerankDetail(reason=Reason.NOT_RERANKED)
        for i in range(len(cands)):
            if i not in seen:  # an invalid retrieval score, dropped before the stage
                message = (
                    f"score is {_shown(cands[i])}; dropped by invalid_scores='drop' before "
                    "reranking"
                )
                dropped.append((i, None, Reason.INVALID_SCORE, message, before))
        out = [
            _decision(cands[i], n, i, score, reason, message, detail)
            for n, (i, score, reason, message, detail) in enumerate(kept + dropped)
        ]
        return self._with_duplicates(out, Reason.NOT_RERANKED)

    def _with_duplicates(self, out: list[Decision], note: Reason | None) -> list[Decision]:
        """``out`` and, after it, the removed duplicate ids."""
        detail = None if note is None else RerankDetail(reason=note)
        for i, first in sorted(self.duplicate_of.items()):
            kept_id = self.candidates[first].id
            out.append(
                Decision(
                    candidate=self.candidates[i],
                    kept=False,
                    rank=len(out),
                    index=i,
                    normalized_score=None,
                    reason=Reason.DUPLICATE_ID,
                    message=f"duplicate of id {kept_id!r} at input position {first}",
                    rerank=detail,
                    duplicate_of=kept_id,
                    duplicate_of_position=first,
                )
            )
        return out


def _shown(cand: Candidate) -> str:
    return "missing (None)" if cand.score is None else repr(cand.score)


def _decision(
    cand: Candidate,
    rank: int,
    index: int,
    score: float | None,
    reason: Reason | None,
    message: str,
    detail: RerankDetail | None,
) -> Decision:
    return Decision(
        candidate=cand,
        kept=reason is None,
        rank=rank,
        index=index,
        normalized_score=score,
        reason=reason,
        message=message,
        rerank=detail,
    )


# --------------------------------------------------------------------------- stages


class Stage:
    """A step of select(): it reads and fills in the ``State`` of one call."""

    __slots__ = ()

    def __call__(self, s: State, /) -> None:  # pragma: no cover - the protocol
        raise NotImplementedError


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


class Normalise(Stage):
    """Retrieval scores to the higher-is-better scale of their kind
    (``ragguard.scores.normalize``), with the contradictions it finds.

    Raises:
        InvalidScoreError: a score is missing/NaN/inf and ``invalid_scores="raise"``.
    """

    __slots__ = ("raise_invalid", "rrf_k")

    def __init__(self, *, rrf_k: int, raise_invalid: bool) -> None:
        self.rrf_k = rrf_k
        self.raise_invalid = raise_invalid

    def __call__(self, s: State, /) -> None:
        cands = s.candidates
        # candidates come in the retriever's order (best first), which lets normalize()
        # catch a wrong score direction on short lists; repeated ids mean several lists
        # were merged, whose order is no single ranking
        s.distinct = len(set(map(_ID, cands))) == len(cands)
        raw = list(map(_SCORE, cands))  # normalize() reads None as NaN
        norm = normalize(raw, s.kind, rrf_k=self.rrf_k, ranked=s.distinct)
        s.values, s.valid, s.issues = norm.values, norm.valid, norm.issues
        if self.raise_invalid and s.kind is not None and not norm.valid.all():
            bad = [c.id for c, ok in zip(cands, norm.valid[0].tolist(), strict=True) if not ok]
            raise InvalidScoreError(
                f"{len(bad)} candidate(s) have a missing, NaN or infinite score "
                f"(ids {bad[:5]}{'...' if len(bad) > 5 else ''}); set invalid_scores to "
                "'drop' or 'keep_last' to handle them"
            )


class Duplicates(Stage):
    """Repeated ids: keep one copy (``keep_best``, ``keep_first``), keep all, or raise.

    Raises:
        DuplicateIdError: ids repeat and ``duplicates="raise"``.
    """

    __slots__ = ("rule",)

    def __init__(self, *, rule: DuplicatePolicy) -> None:
        self.rule = rule

    def __call__(self, s: State, /) -> None:
        if s.distinct or self.rule is DuplicatePolicy.KEEP_ALL:
            return
        ids = [c.id for c in s.candidates]
        if self.rule is DuplicatePolicy.RAISE:
            repeated = sorted(cid for cid, count in Counter(ids).items() if count > 1)
            raise DuplicateIdError(
                f"candidate ids repeat: {repeated[:5]}; set duplicates to 'keep_best', "
                "'keep_first' or 'keep_all' to handle them"
            )
        # an invalid score is below every valid one: keep_best never keeps it over a valid
        # copy, and keep_first keeps the first copy with a valid score (the first copy
        # when none has one)
        score = np.where(s.valid[0], s.values[0], -np.inf).tolist()
        best = self.rule is DuplicatePolicy.KEEP_BEST
        winner: dict[str, int] = {}
        for i, cid in enumerate(ids):
            j = winner.get(cid)
            if j is None or (score[i] > score[j] and (best or score[j] == -np.inf)):
                winner[cid] = i
        s.duplicate_of = {i: winner[cid] for i, cid in enumerate(ids) if winner[cid] != i}
        if s.duplicate_of:
            s.present = np.ones(s.valid.shape, dtype=np.bool_)
            s.present[0, list(s.duplicate_of)] = False


class RerankPlan(Stage):
    """What the reranker scores: the top ``rerank.top_n`` candidates by retrieval score.
    Candidates with an invalid retrieval score take part only with
    ``invalid_scores="keep_last"`` (after every valid one); removed duplicates never."""

    __slots__ = ("config", "keep_invalid", "name")

    def __init__(self, *, config: RerankConfig, name: str, keep_invalid: bool) -> None:
        self.config = config
        self.name = name
        self.keep_invalid = keep_invalid

    def __call__(self, s: State, /) -> None:
        s.rerank_config, s.reranker = self.config, self.name
        if not s.candidates:
            return
        ranked = rank(s.values, s.valid, s.present)
        end = ranked.n_present[0] if self.keep_invalid else ranked.n_valid[0]
        eligible: list[int] = ranked.order[0, : int(end)].tolist()
        top_n = self.config.top_n
        s.top, s.below = eligible[:top_n], eligible[top_n:]


class RerankMap(Stage):
    """The rerank call's outputs as probabilities (logits through a sigmoid, or the
    config's fitted map): from here on the cut reads them for the reranked candidates,
    with the rerank stage's policy. A failed call (``fail_open``) leaves the cut on
    retrieval scores."""

    __slots__ = ("params",)

    def __init__(self, *, params: PolicyParams) -> None:
        self.params = params

    def __call__(self, s: State, /) -> None:
        sc = s.scores
        if sc is None or sc.raw is None:
            return
        assert s.rerank_config is not None
        params = self.params
        if s.max_k is not None:
            params = replace(params, max_k=s.max_k, min_k=min(params.min_k, s.max_k))
        s.params = params
        s.cut_positions = s.top
        if not s.top:
            return
        assert sc.kind is not None
        mapped = rerank_probabilities(sc.raw, sc.kind, s.rerank_config.probability_map)
        s.cut_values, s.cut_valid = mapped.values, mapped.valid
        s.probabilities = mapped.values[0].tolist()
        s.warnings.extend(
            Warn(("rerank", issue), rerank_issue_message(issue), ScoreWarning)
            for issue in mapped.issues
        )


class Cut(Stage):
    """The selection policy (``ragguard.policy.apply_policy``) on the scores the cut
    reads; with the rerank stage, the candidates below ``top_n`` then fill the room left
    under ``max_k`` (``beyond_top_n="keep_below"``). Reports what the scores it read
    contradict, once per guard."""

    __slots__ = ("floor", "keep_below", "rules")

    def __init__(self, *, uses_scores: bool, keep_below: bool, floor: float | None = None) -> None:
        self.rules = uses_scores
        self.keep_below = keep_below
        self.floor = floor

    def __call__(self, s: State, /) -> None:
        if not s.candidates:
            return
        if s.reranked:
            self._reranked(s)
        else:
            if s.rerank_failed and s.params.min_evidence is not None:
                # the floor is on the rerank probability scale: never read it on
                # retrieval scores (the failure warning says it was not applied)
                s.params = replace(s.params, min_evidence=None)
            result = apply_policy(s.values, s.valid, s.params, s.present)
            s.cut, s.kept = result, result.kept_positions(0)
            self._retrieval_warnings(s, result)

    def _reranked(self, s: State) -> None:
        warnings = self._common_warnings(s)
        n_kept = 0
        if s.top:
            assert s.cut_values is not None and s.cut_valid is not None
            result = apply_policy(s.cut_values, s.cut_valid, s.params)
            top = s.top
            s.cut, s.kept = result, [top[j] for j in result.kept_positions(0)]
            n_kept = len(s.kept)
            if result.threshold_skipped[0]:
                s.warnings.append(
                    Warn(
                        ("rerank", ScoreIssue.NONPOSITIVE_TOP),
                        rerank_issue_message(ScoreIssue.NONPOSITIVE_TOP),
                        ScoreWarning,
                    )
                )
        else:
            s.cut = apply_policy(np.empty((1, 0)), np.empty((1, 0), np.bool_), s.params)
        abstained = s.cut is not None and s.cut.abstained is not None and s.cut.abstained[0]
        if self.keep_below and not abstained:
            s.n_below = max(0, min(len(s.below), s.params.max_k - n_kept))
            s.kept = [*s.kept, *s.below[: s.n_below]]
        s.warnings[:0] = warnings  # the retrieval scores' issues come first

    def _common_warnings(self, s: State) -> list[Warn]:
        """Issues of the retrieval scores whichever scores the cut read."""
        out = [
            Warn(i, issue_message(i), ScoreWarning)
            for i in s.issues
            if i is not ScoreIssue.UNKNOWN_KIND
        ]
        if s.kind is not None and not s.params.keep_invalid and not _any(s.valid, axis=None):
            out.append(
                Warn(ScoreIssue.ALL_INVALID, issue_message(ScoreIssue.ALL_INVALID), ScoreWarning)
            )
        return out

    def _retrieval_warnings(self, s: State, result: PolicyResult) -> None:
        issues = list(s.issues)
        if ScoreIssue.UNKNOWN_KIND in issues:
            issues.remove(ScoreIssue.UNKNOWN_KIND)
            if self.rules:  # silent when no score rule was asked for
                issues.append(ScoreIssue.UNKNOWN_KIND if s.scored else ScoreIssue.NO_SCORES)
        if result.threshold_skipped[0]:
            issues.append(ScoreIssue.NONPOSITIVE_TOP)
        if s.kind is not None and not s.params.keep_invalid and not _any(s.valid, axis=None):
            issues.append(ScoreIssue.ALL_INVALID)
        found = [Warn(i, issue_message(i), ScoreWarning) for i in issues]
        if s.rerank_failed:
            assert s.scores is not None
            message = (
                f"rerank stage failed, selected on retrieval scores (rerank.on_failure="
                f"'fail_open'): {s.scores.error}"
            )
            if self.floor is not None:
                message += (
                    f"; min_evidence={self.floor:g} is on the rerank probability scale and "
                    "was not applied"
                )
            found.append(Warn(None, message, RerankWarning))
        s.warnings[:0] = found


class Conflicts(Stage):
    """Kept passages that nearly repeat each other but differ in facts
    (``ragguard.conflicts``): flag them, drop them all, keep the best-ranked one or
    the one with the preferred metadata value."""

    __slots__ = ("descending", "key", "mode", "similarity")

    def __init__(self, *, mode: ConflictMode, similarity: float, prefer: str | None) -> None:
        self.mode = mode
        self.similarity = similarity
        self.descending = not (prefer or "").startswith("-")
        self.key = None if prefer is None else prefer.removeprefix("-")

    def __call__(self, s: State, /) -> None:
        s.conflict_mode, s.conflict_similarity = self.mode, self.similarity
        if len(s.kept) < 2:
            return
        st = start_state(np.array([s.kept]))
        cols = s.kept
        prefer = None
        if self.key is not None:
            key = self.key
            prefer = [[s.candidates[i].metadata.get(key, MISSING) for i in cols]]
        compared = compared_passages(len(cols))
        if compared < len(cols):
            s.warnings.append(
                Warn(
                    "conflict_pairs",
                    f"conflicts: compared the {compared} best-ranked of the {len(cols)} kept "
                    f"passages with each other (at most {MAX_PAIRS:,} pairs per call); the "
                    f"{len(cols) - compared} ranked below them were not checked for conflicts; "
                    f"a max_k of at most {compared} has every kept passage compared",
                    ConfigWarning,
                )
            )
        new, pairs, incomparable = conflict_stage(
            st,
            texts=[[s.candidates[i].text for i in cols]],
            # the passages ranked below the compared ones are not read (find_conflicts)
            shingles=[[s.shingles(i) for i in cols[:compared]]],
            similarity=self.similarity,
            mode=self.mode,
            prefer=prefer,
            descending=self.descending,
        )
        if not pairs[0]:
            return
        s.after, s.pairs = new, pairs[0]
        s.kept = new.kept_positions(0)
        if incomparable:
            s.warnings.append(
                Warn(
                    ("conflict_prefer", self.key),
                    f"conflict_prefer={self.key!r}: the values of conflicting passages cannot "
                    "be compared with each other (e.g. a number and a str); kept the "
                    "best-ranked member instead",
                    ConfigWarning,
                )
            )


class NearDuplicates(Stage):
    """Drop a kept passage whose text nearly repeats a kept, higher-ranked one
    (``ragguard.stages.near_duplicate_stage``)."""

    __slots__ = ("threshold",)

    def __init__(self, *, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, s: State, /) -> None:
        if not s.kept:
            return
        st = s.after or start_state(np.array([s.kept]))
        sets = [[s.shingles(i) for i in st.positions[0].tolist()]]
        s.after = near_duplicate_stage(st, shingles=sets, threshold=self.threshold)
        s.kept = s.after.kept_positions(0)


class TokenBudget(Stage):
    """Fill ``max_tokens`` greedily in kept order
    (``ragguard.stages.token_budget_stage``)."""

    __slots__ = ("counter", "max_tokens")

    def __init__(self, *, counter: TokenCounter, max_tokens: int) -> None:
        self.counter = counter
        self.max_tokens = max_tokens

    def __call__(self, s: State, /) -> None:
        st = s.after
        if st is None:
            if not s.kept:
                return
            st = start_state(np.array([s.kept]))
        columns = st.positions[0].tolist()
        tokens = np.array([self.counter.count([s.candidates[i].text for i in columns])])
        s.after = token_budget_stage(
            st,
            tokens=tokens.astype(np.int64),
            max_tokens=self.max_tokens,
            counter=self.counter.spec,
        )
        s.kept = s.after.kept_positions(0)
