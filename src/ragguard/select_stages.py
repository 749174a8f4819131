"""The stages of one ``ContextGuard.select`` call, each a small class over the call's
``State`` (DESIGN.md, "The runtime"); those after the cut run the kernels the calibration
sweep runs."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import chain, islice, repeat
from operator import attrgetter

import numpy as np

from ragguard.answer_spans import ANSWER_OVERLAP, agree, passage_answers, question_type
from ragguard.candidate import Candidate, RerankDetail
from ragguard.config import BeyondTopN, DuplicatePolicy, RerankConfig
from ragguard.conflicts import (
    MAX_PAIRS,
    MISSING,
    Conflict,
    ConflictMember,
    Pair,
    answer_conflicts,
    compared_passages,
    conflict_groups,
    conflict_message,
    conflict_stage,
    find_conflicts,
    merge_pairs,
    normalise_answer,
)
from ragguard.drift import DriftMonitor
from ragguard.errors import (
    ConfigWarning,
    DriftWarning,
    DuplicateIdError,
    InvalidScoreError,
    RerankWarning,
    ScoreWarning,
)
from ragguard.policy import (
    CODES,
    KEPT,
    REASON_OF_CODE,
    ConflictDetector,
    ConflictMode,
    Explainer,
    PolicyParams,
    PolicyResult,
    Reason,
    apply_policy,
    rank,
)
from ragguard.probability import rerank_probabilities
from ragguard.rerank import RerankStage, Scored, rerank_issue_message
from ragguard.scores import ScoreIssue, issue_message, normalize
from ragguard.selecting import CallStage, Drop, Reranked, Stage, State, Warn
from ragguard.stages import (
    StageState,
    near_duplicate_message,
    near_duplicate_stage,
    over_budget_message,
    token_budget_stage,
)
from ragguard.tokens import TokenCounter

_any = np.logical_or.reduce  # without the Python wrapper of ndarray.any
_ID = attrgetter("id")
_SCORE = attrgetter("score")


def _shown(cand: Candidate) -> str:
    return "missing (None)" if cand.score is None else repr(cand.score)


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
        distinct = len(set(map(_ID, cands))) == len(cands)
        raw = list(map(_SCORE, cands))  # normalize() reads None as NaN
        norm = normalize(raw, s.kind, rrf_k=self.rrf_k, ranked=distinct)
        s.values, s.valid, s.issues = norm.values, norm.valid, norm.issues
        if not distinct:  # the duplicate ids stage resolves them
            s.present = np.ones(norm.valid.shape, dtype=np.bool_)
        if self.raise_invalid and s.kind is not None and not norm.valid.all():
            bad = [c.id for c, ok in zip(cands, norm.valid[0].tolist(), strict=True) if not ok]
            raise InvalidScoreError(
                f"{len(bad)} candidate(s) have a missing, NaN or infinite score "
                f"(ids {bad[:5]}{'...' if len(bad) > 5 else ''}); set invalid_scores to "
                "'drop' or 'keep_last' to handle them"
            )


class Duplicates(Stage):
    """Repeated ids: keep one copy (``keep_best``, ``keep_first``), keep all, or raise.
    Records which copy each removed one repeats.

    Raises:
        DuplicateIdError: ids repeat and ``duplicates="raise"``.
    """

    __slots__ = ("rule",)

    def __init__(self, *, rule: DuplicatePolicy) -> None:
        self.rule = rule

    def __call__(self, s: State, /) -> None:
        if s.present is None or self.rule is DuplicatePolicy.KEEP_ALL:
            s.present = None  # distinct ids, or all kept
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
        removed = {i: winner[cid] for i, cid in enumerate(ids) if winner[cid] != i}
        s.present[0, list(removed)] = False
        s.records.append((self, removed))

    def drops(self, s: State, facts: dict[int, int], /) -> Iterator[Drop]:
        for i, first in sorted(facts.items()):
            yield Drop(i, Reason.DUPLICATE_ID, (first,))

    def explain(self, drop: Drop, s: State, /) -> str:
        first = drop.partners[0]
        return f"duplicate of id {s.candidates[first].id!r} at input position {first}"


class Rerank(CallStage):
    """The rerank call. ``request``: the top ``rerank.top_n`` candidates by retrieval
    score (one with an invalid retrieval score only with ``invalid_scores="keep_last"``,
    after every valid one; removed duplicates never). ``apply``: the reranker's outputs
    as probabilities (logits through a sigmoid, or the config's fitted map), which the
    cut then reads with the rerank stage's policy. A failed call (``fail_open``) leaves
    the cut on retrieval scores."""

    __slots__ = ("config", "keep_invalid", "params", "scorer")

    def __init__(
        self, *, config: RerankConfig, scorer: RerankStage, params: PolicyParams, keep_invalid: bool
    ) -> None:
        self.config = config
        self.scorer = scorer
        self.params = params
        self.keep_invalid = keep_invalid

    def request(self, s: State, /) -> tuple[str, list[str]]:
        ranked = rank(s.values, s.valid, s.present)
        end = ranked.n_present[0] if self.keep_invalid else ranked.n_valid[0]
        eligible: list[int] = ranked.order[0, : int(end)].tolist()
        top_n = self.config.top_n
        s.rerank = Reranked(self.config, self.scorer.name, eligible[:top_n], eligible[top_n:])
        return s.query, [s.candidates[i].text for i in s.rerank.top]

    def call(self, request: tuple[str, list[str]], /) -> Scored:
        return self.scorer.score(*request)

    async def acall(self, request: tuple[str, list[str]], /) -> Scored:
        return await self.scorer.ascore(*request)

    def apply(self, s: State, response: Scored, /) -> None:
        r = s.rerank
        assert r is not None
        r.scored = response
        if response.raw is None:
            return
        params = self.params
        if s.max_k is not None:
            params = replace(params, max_k=s.max_k, min_k=min(params.min_k, s.max_k))
        s.params = params
        if not r.top:
            return
        assert response.kind is not None
        mapped = rerank_probabilities(response.raw, response.kind, self.config.probability_map)
        r.values, r.valid = mapped.values, mapped.valid
        r.probabilities = mapped.values[0].tolist()
        s.warnings.extend(
            Warn(("rerank", issue), rerank_issue_message(issue), ScoreWarning)
            for issue in mapped.issues
        )


class Cut(Stage):
    """The selection policy (``ragguard.policy.apply_policy``) on the scores the cut
    reads; with the rerank stage, the candidates below ``top_n`` then fill the room left
    under ``max_k`` (``beyond_top_n="keep_below"``). Reports what the scores it read
    contradict, once per guard. It ranks every candidate, so its record comes first."""

    __slots__ = ("floor", "keep_below", "rules")

    def __init__(self, *, uses_scores: bool, keep_below: bool, floor: float | None = None) -> None:
        self.rules = uses_scores
        self.keep_below = keep_below
        self.floor = floor

    def __call__(self, s: State, /) -> None:
        r = s.rerank
        if r is not None and r.ok:
            result = self._reranked(s, r)
        else:
            if r is not None and s.params.min_evidence is not None:
                # the rerank call failed; the floor is on the rerank probability scale:
                # never read it on retrieval scores (the failure warning says so)
                s.params = replace(s.params, min_evidence=None)
            result = apply_policy(s.values, s.valid, s.params, s.present)
            s.kept = result.kept_positions(0)
            self._retrieval_warnings(s, result)
        s.records.insert(0, (self, result))

    def _reranked(self, s: State, r: Reranked) -> PolicyResult:
        warnings = self._common_warnings(s)
        n_kept = 0
        if r.top:
            result = apply_policy(r.values, r.valid, s.params)
            s.kept = [r.top[j] for j in result.kept_positions(0)]
            n_kept = len(s.kept)
            if result.threshold_skipped[0]:
                issue = ScoreIssue.NONPOSITIVE_TOP
                s.warnings.append(
                    Warn(("rerank", issue), rerank_issue_message(issue), ScoreWarning)
                )
        else:
            result = apply_policy(np.empty((1, 0)), np.empty((1, 0), np.bool_), s.params)
        r.result = result
        abstained = result.abstained is not None and result.abstained[0]
        if self.keep_below and not abstained:
            r.n_below = max(0, min(len(r.below), s.params.max_k - n_kept))
            s.kept = [*s.kept, *r.below[: r.n_below]]
        s.warnings[:0] = warnings  # the retrieval scores' issues come first
        return result

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
        if s.rerank is not None and s.rerank.scored is not None:  # the call failed
            message = (
                f"rerank stage failed, selected on retrieval scores (rerank.on_failure="
                f"'fail_open'): {s.rerank.scored.error}"
            )
            if self.floor is not None:
                message += (
                    f"; min_evidence={self.floor:g} is on the rerank probability scale and "
                    "was not applied"
                )
            found.append(Warn(None, message, RerankWarning))
        s.warnings[:0] = found

    def drops(self, s: State, facts: PolicyResult, /) -> Iterable[Drop]:
        r = s.rerank
        if r is not None and r.ok:
            assert r.scored is not None and r.scored.raw is not None
            retrieval, raw = s.retrieval(), r.scored.raw.tolist()
            probs = [None if math.isnan(p) else p for p in r.probabilities]
            details = [
                RerankDetail(retrieval_score=retrieval[i], score=p, raw_score=x)
                for i, p, x in zip(r.top, probs, raw, strict=True)
            ]
            scored = _in_cut_order(
                facts, r.top, probs, details, lambda j: f"rerank score is {raw[j]!r}", "kept", True
            )
            return chain(scored, self._unscored(s, r, facts))
        norms, cands = s.retrieval(), s.candidates
        notes = None
        if r is not None:  # the rerank call failed
            notes = [RerankDetail(retrieval_score=x, reason=Reason.RERANK_FAILED) for x in norms]
        kept = "kept" if r is None else "kept on retrieval score (rerank failed)"
        return _in_cut_order(
            facts, range(len(cands)), norms, notes, lambda i: f"score is {_shown(cands[i])}", kept
        )

    def _unscored(self, s: State, r: Reranked, result: PolicyResult) -> list[Drop]:
        """Those below ``top_n``, then those dropped before the call."""
        retrieval = s.retrieval()
        explain = Explainer(result.params, float(result.top[0]), "rerank probability")
        top_n, n_reranked = r.config.top_n, len(r.top)
        keep_below = r.config.beyond_top_n is BeyondTopN.KEEP_BELOW
        abstained = result.abstained is not None and bool(result.abstained[0])
        out: list[Drop] = []
        for k, i in enumerate(r.below):
            detail = RerankDetail(retrieval_score=retrieval[i], reason=Reason.NOT_RERANKED)
            where = f"retrieval rank {n_reranked + k + 1} is below rerank.top_n={top_n}"
            if k < r.n_below:
                message = f"kept below the reranked candidates, not reranked ({where})"
                out.append(Drop(i, None, (), message, None, detail))
                continue
            if keep_below and abstained:  # min_evidence: nothing is kept
                reason = Reason.INSUFFICIENT_EVIDENCE
                message = f"not reranked ({where}); {explain(reason, None)}"
            elif keep_below:  # there was no room left under max_k
                reason = Reason.OVER_MAX_K
                message = (
                    f"not reranked ({where}) and ranked below the max_k={result.params.max_k} cap"
                )
            else:
                reason = Reason.NOT_RERANKED
                message = (
                    f"not reranked: {where} (rerank.beyond_top_n='keep_below' would keep it "
                    "if room is left)"
                )
            out.append(Drop(i, reason, (), message, None, detail))
        seen = {*r.top, *r.below}
        before = RerankDetail(reason=Reason.NOT_RERANKED)
        for i, c in enumerate(s.candidates):
            if i not in seen and (s.present is None or s.present[0, i]):
                message = f"score is {_shown(c)}; dropped by invalid_scores='drop' before reranking"
                out.append(Drop(i, Reason.INVALID_SCORE, (), message, None, before))
        return out


def _in_cut_order(
    result: PolicyResult,
    at: Sequence[int],
    scores: Sequence[float | None],
    details: Sequence[RerankDetail] | None,
    shown: Callable[[int], str],
    kept: str,
    reranked: bool = False,
) -> Iterator[Drop]:
    """The drops of the candidates the cut ranked, in its order: its column ``j`` is
    input position ``at[j]``, with score ``scores[j]`` (``None``: invalid), rerank
    record ``details[j]`` and raw score shown as ``shown(j)``. ``reranked``: the cut
    read rerank probabilities, where an invalid one is said as such."""
    params, top = result.params, float(result.top[0])
    explain = Explainer(params, top, "rerank probability") if reranked else Explainer(params, top)
    cols = result.kept_positions(0)  # ``order`` starts with them: no reason codes yet

    def dropped() -> Iterator[tuple[int, int]]:
        codes = zip(result.order[0].tolist(), result.reasons[0].tolist(), strict=True)
        yield from islice(codes, len(cols), None)

    for j, code in chain(zip(cols, repeat(KEPT)), dropped()):
        if code < 0:  # a removed duplicate
            continue
        score, reason = scores[j], REASON_OF_CODE.get(code)
        if reason is Reason.INVALID_SCORE:
            message = f"{shown(j)}; dropped by invalid_scores='drop'"
        elif score is None and reranked and reason is None:
            message = f"kept after the scored candidates: {shown(j)} (invalid_scores='keep_last')"
        elif score is None and reranked:
            message = f"{shown(j)}; ranked below the max_k cap"
        else:
            message = kept if reason is None else explain(reason, score)
        yield Drop(at[j], reason, (), message, score, None if details is None else details[j])


def _kept_state(s: State) -> tuple[list[int], StageState]:
    """The kept positions, as the state the stages after the cut take."""
    cols = list(s.kept)
    shape = (1, len(cols))  # start_state() of one row, without its checks
    pos = np.array([cols], dtype=np.intp)
    return cols, StageState(
        pos, np.zeros(shape, np.int8), np.full(shape, -1), np.full(shape, np.nan)
    )


_KINDS = {  # the detectors that found a pair (near-copy first)
    ConflictDetector.NEAR_COPY: ("near-copy",),
    ConflictDetector.ANSWERS: ("answers",),
    ConflictDetector.BOTH: ("near-copy", "answers"),
}
_ConflictFacts = tuple[list[int], list[Pair], StageState, list[str | None] | None]
"""The conflict stage's record: the kept positions, the pairs, the state and the answers."""


def _normalised(answer: object) -> str | None:
    """A model's answer, normalised (``None``: none, or not a str)."""
    return (normalise_answer(answer) or None) if isinstance(answer, str) else None


class Conflicts(Stage):
    """Kept passages that nearly repeat each other but differ in facts, or whose answers
    to the query differ (``detector``, ``ragguard.conflicts``): flag them, drop them all,
    keep the best-ranked one or the one with the preferred metadata value. Its record:
    the kept positions it compared, the pairs it found, its state and each compared
    passage's normalised answer (``None`` without the answers detector)."""

    __slots__ = ("answer_similarity", "descending", "detector", "key", "mode", "similarity")

    def __init__(
        self,
        *,
        mode: ConflictMode,
        similarity: float,
        prefer: str | None,
        detector: ConflictDetector,
        answer_similarity: float,
    ) -> None:
        self.mode = mode
        self.similarity = similarity
        self.detector = detector
        self.answer_similarity = answer_similarity
        self.descending = not (prefer or "").startswith("-")
        self.key = None if prefer is None else prefer.removeprefix("-")

    def __call__(self, s: State, /) -> None:
        if len(s.kept) < 2:
            return
        cols, st = _kept_state(s)
        prefer = None
        if self.key is not None:
            key = self.key
            prefer = [[s.candidates[i].metadata.get(key, MISSING) for i in cols]]
        compared, n = compared_passages(len(cols)), len(cols)
        if compared < n:
            s.warnings.append(
                Warn(
                    "conflict_pairs",
                    f"conflicts: compared the {compared} best-ranked of the {n} kept passages "
                    f"with each other (at most {MAX_PAIRS:,} pairs per call); the "
                    f"{n - compared} ranked below them were not checked for conflicts; a "
                    f"max_k of at most {compared} has every kept passage compared",
                    ConfigWarning,
                )
            )
        texts = [s.candidates[i].text for i in cols]
        # the passages ranked below the compared ones are not read (find_conflicts)
        sets = [[s.shingles(i) for i in cols[:compared]]]
        found, answers = None, None
        if self.detector is not ConflictDetector.NEAR_COPY:
            if s.answers is None and question_type(s.query) is None:
                s.warnings.append(
                    Warn(
                        "conflict_answer_type",
                        f"conflicts: the query {s.query[:80]!r} asks for no answer type "
                        "(when, who, how many, which party...), so no answer conflicts were "
                        "looked for; near-copies still are with conflict_detector='both'",
                        ConfigWarning,
                    )
                )
            answers = self._answers(s, cols[:compared])
            found = answer_conflicts(texts, answers, similarity=self.answer_similarity)
            if self.detector is ConflictDetector.BOTH:
                near = find_conflicts(texts, sets[0], similarity=self.similarity)
                found = merge_pairs(near, found)
        new, pairs, incomparable = conflict_stage(
            st,
            texts=[texts],
            shingles=sets,
            similarity=self.similarity,
            mode=self.mode,
            prefer=prefer,
            descending=self.descending,
            pairs=None if found is None else [found],
        )
        if not pairs[0]:
            return
        s.records.append((self, (cols, pairs[0], new, answers)))
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

    @staticmethod
    def _answers(s: State, positions: Sequence[int]) -> list[str | None]:
        """Each passage's normalised answer: the model's (``State.answers``) where an
        answerer stage gave one, else its answer span."""
        given = s.answers or {}
        missing = [i for i in positions if i not in given]
        texts = [s.candidates[i].text for i in missing]
        found = passage_answers(s.query, texts, overlap=ANSWER_OVERLAP)
        spans = dict(zip(missing, found, strict=True))
        return [spans[i] if i in spans else _normalised(given[i]) for i in positions]

    def drops(self, s: State, facts: _ConflictFacts, /) -> Iterator[Drop]:
        cols, pairs, st, _ = facts
        for j in np.flatnonzero(st.reasons[0] == CODES[Reason.CONFLICT]).tolist():
            others: list[int] = []
            for p in pairs:
                other = p.b if p.a == j else p.a if p.b == j else None
                if other is not None and cols[other] not in others:
                    others.append(cols[other])
            col = int(st.partner[0, j])
            pair = next(p for p in pairs if {p.a, p.b} == {j, col})
            yield Drop(cols[j], Reason.CONFLICT, tuple(others), (cols[col], pair, pair.a == j))

    def explain(self, drop: Drop, s: State, /) -> str:
        first, pair, mine_first = drop.detail
        other = s.candidates[first].id
        answered = pair.kind is ConflictDetector.ANSWERS
        threshold = self.answer_similarity if answered else self.similarity
        return conflict_message(other, first, pair, mine_first, threshold, self.mode)

    def conflicts(self, s: State, facts: _ConflictFacts, /) -> tuple[tuple[Conflict, ...], bool]:
        """The conflict groups among the passages the cut kept, and whether two still
        kept conflict."""
        cols, pairs, _, answers = facts
        kept = set(s.kept)
        conflicting = any(cols[p.a] in kept and cols[p.b] in kept for p in pairs)
        spans: dict[int, list[str]] = {}
        for p in pairs:
            for c, mine in ((p.a, p.spans_a), (p.b, p.spans_b)):
                got = spans.setdefault(c, [])
                got.extend(x for x in mine if x not in got)
        out = []
        for group in conflict_groups(len(cols), pairs):
            members = tuple(
                ConflictMember(
                    id=s.candidates[cols[c]].id,
                    position=cols[c],
                    spans=tuple(spans.get(c, ())),
                    kept=cols[c] in kept,
                )
                for c in group
            )
            members_set = set(group)
            inside = [p for p in pairs if p.a in members_set]
            best = max(p.similarity for p in inside)
            kinds = sorted({k for p in inside for k in _KINDS[p.kind]}, reverse=True)
            if kinds == [ConflictDetector.NEAR_COPY.value]:
                out.append(Conflict(members, best))
                continue
            assert answers is not None
            backing: dict[str, list[str]] = {}
            for c in group:
                if a := answers[c]:  # under the first answer it agrees with (1990, 1990-01)
                    key = next((k for k in backing if agree(k, a)), a)
                    backing.setdefault(key, []).append(s.candidates[cols[c]].id)
            ranked = sorted(backing.items(), key=lambda a: -len(a[1]))  # stable: rank order
            backed = {a: tuple(ids) for a, ids in ranked}
            out.append(Conflict(members, best, backed, "+".join(kinds)))
        return tuple(out), conflicting


class NearDuplicates(Stage):
    """Drop a kept passage whose text nearly repeats a kept, higher-ranked one
    (``ragguard.stages.near_duplicate_stage``)."""

    __slots__ = ("threshold",)

    def __init__(self, *, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, s: State, /) -> None:
        if not s.kept:
            return
        cols, st = _kept_state(s)
        sets = [[s.shingles(i) for i in cols]]
        st = near_duplicate_stage(st, shingles=sets, threshold=self.threshold)
        s.kept = st.kept_positions(0)
        if len(s.kept) < len(cols):
            s.records.append((self, (cols, st)))

    def drops(self, s: State, facts: tuple[list[int], StageState], /) -> Iterator[Drop]:
        cols, st = facts
        for j in np.flatnonzero(st.reasons[0] == CODES[Reason.NEAR_DUPLICATE]).tolist():
            partner = cols[int(st.partner[0, j])]
            yield Drop(cols[j], Reason.NEAR_DUPLICATE, (partner,), float(st.similarity[0, j]))

    def explain(self, drop: Drop, s: State, /) -> str:
        first = drop.partners[0]
        other, kept = s.candidates[first].id, first in s.kept
        return near_duplicate_message(other, first, drop.detail, self.threshold, kept)


class TokenBudget(Stage):
    """Fill ``max_tokens`` greedily in kept order
    (``ragguard.stages.token_budget_stage``)."""

    __slots__ = ("counter", "max_tokens")

    def __init__(self, *, counter: TokenCounter, max_tokens: int) -> None:
        self.counter = counter
        self.max_tokens = max_tokens

    def __call__(self, s: State, /) -> None:
        if not s.kept:
            return
        cols, st = _kept_state(s)
        tokens = np.array([self.counter.count([s.candidates[i].text for i in cols])])
        st = token_budget_stage(st, tokens=tokens.astype(np.int64), max_tokens=self.max_tokens)
        s.kept = st.kept_positions(0)
        if len(s.kept) < len(cols):
            s.records.append((self, (cols, st)))

    def drops(self, s: State, facts: tuple[list[int], StageState], /) -> Iterator[Drop]:
        cols, st = facts
        assert st.tokens is not None
        for j in np.flatnonzero(st.reasons[0] == CODES[Reason.OVER_TOKEN_BUDGET]).tolist():
            yield Drop(
                cols[j], Reason.OVER_TOKEN_BUDGET, (), (int(st.tokens[0, j]), st.used_before(0, j))
            )

    def explain(self, drop: Drop, s: State, /) -> str:
        tokens, used = drop.detail
        return over_budget_message(tokens, used, self.max_tokens, self.counter.spec)


def scores_read(s: State) -> tuple[float, float]:
    """The best score the cut read in call ``s`` and the lowest score it kept (NaN when
    none), on the scale it read: rerank probabilities with the rerank stage on; NaN and
    NaN when the call had no valid score to read (no scores, a failed rerank call)."""
    r = s.rerank
    if (r is not None and not r.ok) or (r is None and s.kind is None):
        return math.nan, math.nan
    for stage, result in s.records:  # the cut's record comes first
        if isinstance(stage, Cut):
            m = result.n_kept_valid.item(0)
            return result.top.item(0), result.ranked.scores.item(0, m - 1) if m else math.nan
    return math.nan, math.nan


class DriftWatch(Stage):
    """Hand each call's top score, score at the cut and kept count to the drift monitor
    (``ragguard.drift``); at its alarm, one ``DriftWarning`` (last stage: it reads the
    final kept count)."""

    __slots__ = ("monitor",)

    def __init__(self, *, monitor: DriftMonitor) -> None:
        self.monitor = monitor

    def __call__(self, s: State, /) -> None:
        top, cut = scores_read(s)
        alarm = self.monitor.add(top, cut, len(s.kept))
        if alarm is not None:
            s.warnings.append(Warn(alarm, str(alarm), DriftWarning))
