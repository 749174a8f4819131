"""Dense, padded (queries x candidates) arrays in ranked order: the one form every metric
and the sweep read (DESIGN.md, the data wing; the tie rule and grades:
docs/reference/data-formats.md)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.labels import (
    F64,
    B,
    I,
    check_range,
    finite_grades,
    flat_floats,
    ideal_label_utilities,
    label_stats,
)
from ragguard.calibration.data.utility import (
    UtilityRules,
    as_profile,
    candidate_utilities,
    rules_of,
)
from ragguard.errors import EvalSetError
from ragguard.policy import Ranked
from ragguard.profiles import Profile
from ragguard.scores import ScoreIssue, ScoreKind, normalize

_CHUNK_CELLS = 1 << 22  # rows x candidates ranked or searched at once


@dataclass(frozen=True, eq=False)
class EvalArrays:
    """One run against its labels as dense (queries x candidates) arrays in ranked order.

    Built by ``arrays_from_codes`` only (``EvalSet.arrays``, ``build_arrays``); read-only.
    Metrics read prefixes (``[:, :k]``); shapes: Q queries, N candidates per row."""

    qids: tuple[str, ...]
    score_kind: ScoreKind | None  # how raw scores were normalised (None: run order)
    profile: Profile  # whose rules give ``utility``
    rules: UtilityRules
    n_present: I  # (Q,) candidates per query
    n_valid: I  # (Q,) of them with a valid score (they come first)
    grades: F64  # (Q, N) label grade (0: unjudged or padding)
    judged: B  # (Q, N) the candidate has a label grade
    distractor: B  # (Q, N) a known (labelled) distractor
    given_utility: F64  # (Q, N) utility given in the data, NaN where none
    no_response: F64  # (Q, N) abstention probability, NaN where none
    n_relevant: I  # (Q,) relevant documents (grade >= 1), labelled or stated
    n_relevant_labelled: I  # (Q,) of them labelled
    ideal_grades: F64  # (Q, M) positive grades of all labels, highest first (IDCG)
    ideal_utilities: F64  # (Q, M') positive label utilities, highest first
    grade_counts: NDArray[np.int64]  # (Q, 6) labels per grade 1..5; column 0: <= 0
    max_grade: F64  # (Q,) highest labelled grade (0 when none is positive)
    integer_grades: bool = True
    score_issues: Mapping[ScoreIssue, int] = field(default_factory=dict)  # queries each
    # (Q,) relevant candidates (>= rules.relevant_grade) among the query's own: evidence
    # recall's denominator (a reranked sub-list keeps its full list's count)
    n_evidence: I = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    # (Q,) relevant passages each query needs (JSONL ``needs``), or empty when none states one
    n_needed: I = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    # (Q, N) run positions in ranked order (``small_index`` type; meaningless on padding)
    order: NDArray[np.integer[Any]] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.intp), repr=False
    )
    # (Q, N) normalised scores in ranked order, NaN where invalid or padding
    scores: F64 = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    _raw: F64 | PaddedRows = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    _candidates: Sequence[Mapping[str, float]] = field(default=(), repr=False)
    _utility: F64 | None = field(default=None, repr=False)  # kept through a reorder

    @property
    def shape(self) -> tuple[int, int]:
        """(queries, candidates per row including padding)."""
        q, n = self.grades.shape
        return int(q), int(n)

    @property
    def n_queries(self) -> int:
        return int(self.grades.shape[0])

    @cached_property
    def present(self) -> B:
        """(Q, N) True where the position holds a candidate."""
        return np.arange(self.shape[1])[None, :] < self.n_present[:, None]

    @cached_property
    def valid(self) -> B:
        """(Q, N) True where the candidate has a valid score (a prefix of each row)."""
        return np.arange(self.shape[1])[None, :] < self.n_valid[:, None]

    @cached_property
    def raw(self) -> F64:
        """(Q, N) raw scores as the run gave them, in ranked order (NaN on padding)."""
        raw = self._raw.dense() if isinstance(self._raw, PaddedRows) else self._raw
        return np.where(self.present, np.take_along_axis(raw, self.order, axis=1), np.nan)

    @cached_property
    def unanswerable(self) -> B:
        """(Q,) judged and nothing relevant: ``EvalSet.unanswerable``'s queries."""
        out: B = (self.grade_counts.sum(axis=1) > 0) & (self.n_relevant == 0)
        return out

    @property
    def n_unanswerable(self) -> int:
        return int(np.count_nonzero(self.unanswerable))

    @cached_property
    def retrieved_grade_counts(self) -> NDArray[np.int64]:
        """(Q, 6) retrieved, judged candidates per grade (as ``grade_counts``)."""
        q = self.n_queries
        cols = np.clip(self.grades, 0, 5).astype(np.intp)
        cols = np.where(self.present & self.judged, cols, 6)  # 6: not counted
        rows = np.repeat(np.arange(q, dtype=np.intp), cols.shape[1])
        counts = np.bincount(rows * 7 + cols.ravel(), minlength=q * 7).reshape(q, 7)
        out: NDArray[np.int64] = counts[:, :6].astype(np.int64)
        return out

    @cached_property
    def utility(self) -> F64:
        """(Q, N) utility of each candidate in [-1, 1] (0.0 on padding); ``reordered``
        rows keep their candidates' utilities from before."""
        if self._utility is not None:
            return self._utility
        return candidate_utilities(
            self.grades,
            self.scores,
            self.valid,
            self.present,
            distractor=self.distractor,
            given=self.given_utility,
            no_response=self.no_response,
            profile=self.profile,
            rules=self.rules,
        )

    def doc_ids(self, row: int) -> list[str]:
        """Document ids of row ``row``'s candidates, in ranked order."""
        ids = list(self._candidates[row])
        return [ids[i] for i in self.order[row, : self.n_present[row]].tolist()]

    def ranked(self) -> Ranked:
        """The rows as a ``ragguard.policy.Ranked`` (already in the policy's order)."""
        q, n = self.shape
        s = np.where(self.valid, self.scores, -np.inf)
        s = np.where(self.present, s, np.nan)
        order = np.broadcast_to(np.arange(n), (q, n))
        return Ranked(order, s, self.n_valid, self.n_present)

    def row_slice(self, start: int, stop: int) -> EvalArrays:
        """Rows ``start:stop`` as numpy views (views already computed are sliced):
        every metric is per query, so a metric of the slice is the slice of the metric."""
        sl = slice(start, stop)
        per_row = (np.ndarray, PaddedRows, tuple)  # every array here has a row per query
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        changes: dict[str, Any] = {k: v[sl] for k, v in values.items() if isinstance(v, per_row)}
        changes["_candidates"] = _RowRange(self._candidates, start, stop)
        out = replace(self, **changes)
        for name in ("present", "valid", "raw", "utility"):
            if name in self.__dict__:
                out.__dict__[name] = self.__dict__[name][sl]
        return out

    def reordered(
        self,
        perm: NDArray[np.integer[Any]],
        *,
        scores: F64 | None = None,
        score_kind: ScoreKind | str | None = None,
        rrf_k: int = 60,
    ) -> EvalArrays:
        """Each row's candidates in a new order, some possibly left out: the arrays of a
        run listing them so, against the same labels.

        Row ``r``'s ``j``-th candidate becomes its current ``perm[r, j]``-th (``-1``: padding,
        after the candidates). Per-candidate arrays follow; per-query label figures stay (a
        reranked top ``n`` divides evidence recall by its full list's count), and each
        candidate keeps its ``utility`` (a reranked list is scored on the retrieval run's).

        Args:
            perm: (Q, M) positions in each row, M at most the current width.
            scores: (Q, M) new raw scores of kind ``score_kind`` in the new order, valid ones
                first (default: each candidate keeps its scores, scored before unscored).
            score_kind: what ``scores`` are (default: ``score_kind``).
            rrf_k: the RRF constant, for ``score_kind="rrf"``.

        Raises:
            EvalSetError: ``perm`` or ``scores`` has the wrong shape, ``perm`` names a position
                twice or outside its row, puts padding before a candidate, or an unscored
                candidate before a scored one."""
        q, n = self.shape
        perm = np.asarray(perm)
        if perm.ndim != 2 or perm.shape[0] != q or perm.shape[1] > n:
            raise EvalSetError(f"perm must have shape ({q}, at most {n}), got {perm.shape}")
        if not np.issubdtype(perm.dtype, np.integer):
            raise EvalSetError(f"perm must hold integer positions, got dtype {perm.dtype}")
        m = perm.shape[1]
        present = perm >= 0
        n_present = np.count_nonzero(present, axis=1).astype(np.intp)
        cols = np.arange(m)[None, :]
        if (
            not np.array_equal(present, cols < n_present[:, None])
            or (perm >= self.n_present[:, None]).any()
            or (perm < -1).any()
        ):
            raise EvalSetError(
                "perm must list positions of each row's candidates first and -1 after them"
            )
        rows = np.arange(q, dtype=np.intp)[:, None]
        seen = np.zeros(q * (n + 1), dtype=np.bool_)  # a spare column for padding
        seen[(rows * (n + 1) + np.where(present, perm, n)).ravel()] = True
        if not np.array_equal(np.count_nonzero(seen.reshape(q, n + 1)[:, :n], axis=1), n_present):
            raise EvalSetError("perm names a position twice in a row")
        at = np.where(present, perm, 0)
        flat = (rows * n + at).ravel()  # flat gathers: several times take_along_axis's speed
        padding = ~present if m * q > int(n_present.sum()) else None

        def moved(a: NDArray[Any], fill: Any) -> NDArray[Any]:
            if a.ndim == 2 and a.strides == (0, 0):  # one value broadcast: stays so
                return np.broadcast_to(a.flat[0] if a.size else fill, (q, m))
            out = np.take(a, flat).reshape(q, m)
            if padding is not None:
                out[padding] = fill
            return out

        order = moved(self.order, 0)
        raw_store = self._raw
        issues = self.score_issues
        kind = self.score_kind if score_kind is None else ScoreKind(score_kind)
        if scores is None:
            new_scores = moved(self.scores, np.nan)
            valid = present & (at < self.n_valid[:, None])  # valid ones are a prefix
            n_valid = np.count_nonzero(valid, axis=1).astype(np.intp)
        else:
            given = np.asarray(scores, dtype=np.float64)
            if given.shape != perm.shape:
                raise EvalSetError(f"scores must have perm's shape {perm.shape}, got {given.shape}")
            raw = np.where(present, given, np.nan)
            ranking = Ranking.of(raw, present, kind, rrf_k)
            new_scores = np.negative(ranking.key)  # as _scores_in_order: +inf -> NaN
            new_scores[np.isinf(new_scores)] = np.nan
            valid = ranking.key < np.inf  # NaN (padding) compares False
            n_valid, issues = ranking.n_valid, ranking.issues
            # the raw scores at the run positions ``order`` points to (read by ``raw``)
            old = self._raw  # (a column per run position)
            width = old.width if isinstance(old, PaddedRows) else old.shape[1]
            raw_store = np.full((q, width), np.nan)
            raw_store[np.nonzero(present)[0], order[present]] = raw[present]
        if not np.array_equal(valid, cols < n_valid[:, None]):
            raise EvalSetError(
                "perm must put each row's scored candidates before its unscored ones"
            )
        return replace(
            self,
            score_kind=kind,
            n_present=n_present,
            n_valid=n_valid,
            grades=moved(self.grades, 0.0),
            judged=moved(self.judged, False),
            distractor=moved(self.distractor, False),
            given_utility=moved(self.given_utility, np.nan),
            no_response=moved(self.no_response, np.nan),
            score_issues=issues,
            order=order,
            scores=new_scores,
            _raw=raw_store,
            _utility=moved(self.utility, 0.0),
        )

    def with_profile(self, profile: Profile | str) -> EvalArrays:
        """The same arrays with ``utility`` recomputed under another profile."""
        return replace(self, profile=as_profile(profile))


@dataclass(frozen=True, eq=False)
class PaddedRows:
    """Rows of different lengths kept flat, NaN-padded to ``width`` only when read."""

    flat: F64
    counts: I
    width: int

    def dense(self) -> F64:
        out = np.full((self.counts.size, self.width), np.nan)
        out[np.arange(self.width)[None, :] < self.counts[:, None]] = self.flat
        return out

    def __getitem__(self, rows: slice) -> PaddedRows:
        start, stop, _ = rows.indices(self.counts.size)
        lo = int(self.counts[:start].sum())
        counts = self.counts[start:stop]
        return PaddedRows(self.flat[lo : lo + int(counts.sum())], counts, self.width)


class _RowRange(Sequence[Mapping[str, float]]):
    """Rows ``start:stop`` of a per-row sequence, read through."""

    def __init__(self, rows: Sequence[Mapping[str, float]], start: int, stop: int) -> None:
        self.rows, self.start, self.stop = rows, start, stop

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __getitem__(self, row: int) -> Mapping[str, float]:  # type: ignore[override]
        if not 0 <= row < len(self):
            raise IndexError(row)
        return self.rows[self.start + row]


@dataclass(frozen=True, eq=False)
class Ranking:
    """Raw scores, normalised scores and the policy's sort key of each cell (minus the
    score; +inf where not valid; NaN on padding). A run without scores (kind ``None``)
    keeps its order on purpose: not an issue."""

    scores: F64
    key: F64
    n_present: I
    n_valid: I
    issues: dict[ScoreIssue, int]

    @classmethod
    def of(cls, raw: F64, present: B, kind: ScoreKind | None, rrf_k: int) -> Ranking:
        norm = normalize(raw, kind, present=present, rrf_k=rrf_k)
        scores = norm.values
        if kind is None:  # no scores: 0.0 for every candidate, so the input order holds
            scores = np.where(present, scores, np.nan)
        key = np.negative(scores)  # NaN where not valid, padding included
        invalid = present ^ norm.valid  # present, no valid score (valid implies present)
        if invalid.any():
            np.copyto(key, np.inf, where=invalid)
        issues: dict[ScoreIssue, int] = {
            i: n for i, n in norm.issues.items() if i is not ScoreIssue.UNKNOWN_KIND
        }
        n_present = present.sum(axis=1).astype(np.intp)
        n_valid = norm.valid.sum(axis=1).astype(np.intp)
        return cls(scores, key, n_present, n_valid, issues)

    @cached_property
    def unsorted_rows(self) -> I:
        """The rows whose keys do not already rise (ties allowed): the only ones ``order``
        sorts; a run listed best first has none."""
        key = self.key
        q, n = key.shape
        if n < 2:
            return np.zeros(0, dtype=np.intp)
        later, earlier = key[:, 1:], key[:, :-1]
        # each row's first pair first: most rows of an unsorted run show it there
        if np.count_nonzero(later[:, 0] < earlier[:, 0]) > q // 2:
            return np.arange(q, dtype=np.intp)
        in_order = np.count_nonzero(later >= earlier, axis=1)  # padding (NaN) compares False
        return np.flatnonzero(in_order < self.n_present - 1)

    @cached_property
    def order(self) -> NDArray[np.integer[Any]]:
        """(Q, N) each row's input positions in the policy's order (stable; ``small_index``
        type); rows already in order share one read-only row."""
        q, n = self.key.shape
        rows = self.unsorted_rows
        if rows.size == q:
            return small_index(np.argsort(self.key, axis=1, kind="stable"), n)
        identity = small_index(np.arange(n), n)
        if rows.size == 0:
            return np.broadcast_to(identity, (q, n))
        out = np.tile(identity, (q, 1))
        out[rows] = np.argsort(self.key[rows], axis=1, kind="stable")
        return out

    def ranked_scores(self) -> F64:
        """(Q, N) normalised scores in ranked order, NaN where invalid, infinite or padding."""
        rows = self.unsorted_rows
        if rows.size == 0:
            out = self.scores
        elif rows.size == self.key.shape[0]:  # the keys in order, negated: +inf -> -inf
            out = np.negative(np.take_along_axis(self.key, self.order, axis=1))
        else:
            out = np.negative(self.key)
            out[rows] = np.negative(np.take_along_axis(self.key[rows], self.order[rows], axis=1))
        infinite = np.isinf(out)
        if infinite.any():
            out = np.where(infinite, np.nan, out)
        return out


@dataclass(frozen=True, eq=False)
class RankedRows:
    """What ``EvalArrays`` keeps of a ranking (``unsorted``: rows whose order moved)."""

    order: NDArray[np.integer[Any]]
    scores: F64
    n_valid: I
    issues: dict[ScoreIssue, int]
    raw: F64 | PaddedRows
    unsorted: I

    def positions(self, rows: I, cols: NDArray[np.integer[Any]]) -> I:
        """Where input column ``cols[i]`` of row ``rows[i]`` sits in ``order``."""
        pos = cols.astype(np.intp)
        if self.unsorted.size == 0:
            return pos
        moved = np.zeros(self.order.shape[0], dtype=np.bool_)
        moved[self.unsorted] = True
        at = np.flatnonzero(moved[rows])
        step = max(1, _CHUNK_CELLS // max(self.order.shape[1], 1))
        for lo in range(0, at.size, step):
            sel = at[lo : lo + step]
            pos[sel] = np.argmax(self.order[rows[sel]] == cols[sel, None], axis=1)
        return pos


def rank_in_chunks(
    raw: F64 | PaddedRows, counts: I, width: int, kind: ScoreKind | None, rrf_k: int
) -> RankedRows:
    """The ranking of ``raw``, ``_CHUNK_CELLS`` cells at a time (normalisation is per row,
    so chunks add up; the temporaries never exist for every row at once)."""
    n_q = counts.size
    order = np.empty((n_q, width), dtype=small_index(np.zeros(0, np.intp), width).dtype)
    scores = np.empty((n_q, width))
    n_valid = np.empty(n_q, dtype=np.intp)
    issues: dict[ScoreIssue, int] = {}
    unsorted = []
    step = max(1, _CHUNK_CELLS // max(width, 1))
    for lo in range(0, n_q, step):
        hi = min(lo + step, n_q)
        present = np.arange(width)[None, :] < counts[lo:hi, None]
        rows = raw[lo:hi]
        part = Ranking.of(
            rows if isinstance(rows, np.ndarray) else rows.dense(), present, kind, rrf_k
        )
        order[lo:hi] = part.order
        scores[lo:hi] = part.ranked_scores()
        n_valid[lo:hi] = part.n_valid
        unsorted.append(part.unsorted_rows + lo)
        for issue, n in part.issues.items():
            issues[issue] = issues.get(issue, 0) + n
    moved = np.concatenate(unsorted) if unsorted else np.zeros(0, np.intp)
    return RankedRows(order, scores, n_valid, issues, raw, moved)


def small_index(index: NDArray[np.integer[Any]], size: int) -> NDArray[np.integer[Any]]:
    """``index`` in the smallest signed integer type holding ``0..size - 1`` (1 byte a
    cell for 100 candidates)."""
    for dtype in (np.int8, np.int16, np.int32):
        if size <= np.iinfo(dtype).max:
            return index.astype(dtype, copy=False)
    return index


@dataclass(frozen=True, slots=True)
class LabelRows:
    """The labels of the evaluated queries as rows."""

    row: I  # (n,) eval row of each label
    grade: F64  # NaN: a document given only a flag, a utility or a probability
    distractor: B | None = None
    utility: F64 | None = None
    no_response: F64 | None = None
    stated: Sequence[int | None] | None = None


@dataclass(frozen=True, slots=True)
class CodedRows:
    """A run and its labels as integer-coded rows: what ``arrays_from_codes`` reads."""

    qids: Sequence[str]
    crow: I  # (n,) eval row of each candidate, in the run's order within a row
    cscore: F64
    labels: LabelRows
    hit_cand: I  # (candidate, label) of each label naming a candidate of its row
    hit_label: I
    candidates: Sequence[Mapping[str, float]]


def arrays_from_codes(
    coded: CodedRows,
    *,
    score_kind: ScoreKind | str | None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    rrf_k: int = 60,
    n_evidence: Sequence[int] | I | None = None,
) -> EvalArrays:
    """``EvalArrays`` of coded rows: the one builder. ``n_evidence``: per row, what
    evidence recall divides by (default: the row's relevant candidates).

    Raises:
        EvalSetError: a grade not finite, a stated relevant count not an integer or below
            the labelled one, ``n_evidence`` not one per row."""
    qids, crow, cscore, labels = coded.qids, coded.crow, coded.cscore, coded.labels
    hit_cand, hit_label = coded.hit_cand, coded.hit_label
    n_q = len(qids)
    prof = as_profile(profile)
    rules = rules_of(prof, rules)
    kind = None if score_kind is None else ScoreKind(score_kind)
    if crow.size > 1 and bool((crow[1:] < crow[:-1]).any()):
        o = np.argsort(crow, kind="stable")
        crow, cscore = crow[o], cscore[o]
        moved = np.empty(o.size, dtype=np.intp)
        moved[o] = np.arange(o.size, dtype=np.intp)
        hit_cand = moved[hit_cand]
    counts = np.diff(np.searchsorted(crow, np.arange(n_q + 1))).astype(np.intp)
    width = int(counts.max()) if n_q else 0
    starts = np.cumsum(counts) - counts
    if crow.size == n_q * width:  # every row full: the scores as they are, no copy
        raw: F64 | PaddedRows = np.ascontiguousarray(cscore, dtype=np.float64).reshape(n_q, width)
    else:  # kept flat; each chunk of rows padded while it is ranked
        raw = PaddedRows(np.asarray(cscore, dtype=np.float64), counts, width)
    ranked = rank_in_chunks(raw, counts, width, kind, rrf_k)

    hrow = crow.take(hit_cand)
    hpos = ranked.positions(hrow, hit_cand - starts.take(hrow))
    lgrade = labels.grade
    graded = ~np.isnan(lgrade)
    all_graded = bool(graded.all())
    cell = hrow * width + hpos
    on = slice(None) if all_graded else graded[hit_label]
    grades = np.zeros((n_q, width))
    grades.ravel()[cell[on]] = lgrade.take(hit_label[on])
    judged = np.zeros((n_q, width), dtype=np.bool_)
    judged.ravel()[cell[on]] = True

    def at_hits(values: NDArray[Any] | None, empty: Any) -> NDArray[Any]:
        if values is None:  # read-only, no memory
            return np.broadcast_to(np.asarray(empty), (n_q, width))
        out = np.full((n_q, width), empty, dtype=values.dtype)
        v = values[hit_label]
        sel = v if v.dtype == np.bool_ else ~np.isnan(v)
        out.ravel()[cell[sel]] = v[sel]
        return out

    distractor = np.zeros((n_q, width), dtype=np.bool_)
    if labels.distractor is not None:
        distractor = at_hits(labels.distractor, False)
    lrow = labels.row if all_graded else labels.row[graded]
    stats = label_stats(qids, lrow, lgrade if all_graded else lgrade[graded], labels.stated)
    evidence = (grades >= rules.relevant_grade).sum(axis=1).astype(np.intp)
    if n_evidence is not None:
        evidence = np.asarray(n_evidence, dtype=np.intp)
        if evidence.shape != (n_q,):
            raise EvalSetError(f"n_evidence has {evidence.size} entries for {n_q} queries")
    return EvalArrays(
        qids=tuple(qids),
        score_kind=kind,
        profile=prof,
        rules=rules,
        n_present=counts,
        n_valid=ranked.n_valid,
        grades=grades,
        judged=judged,
        distractor=distractor,
        given_utility=at_hits(labels.utility, np.nan),
        no_response=at_hits(labels.no_response, np.nan),
        n_relevant=stats.n_relevant,
        n_relevant_labelled=stats.n_relevant_labelled,
        ideal_grades=stats.ideal_grades,
        ideal_utilities=ideal_label_utilities(
            n_q, labels.row, lgrade, labels.utility, labels.no_response, stats, rules
        ),
        grade_counts=stats.grade_counts,
        max_grade=stats.max_grade,
        integer_grades=stats.integer_grades,
        score_issues=ranked.issues,
        n_evidence=evidence,
        order=ranked.order,
        scores=ranked.scores,
        _raw=ranked.raw,
        _candidates=coded.candidates,
    )


def _hits(
    candidates: Sequence[Mapping[str, float]],
    docs: Sequence[Collection[str]],
    lrow: I,
    score: F64 | None,
    cscore: F64,
    counts: I,
) -> tuple[I, I]:
    """(label, candidate) of each label naming a candidate of its row, found by its score
    ``score``: a binary search in a row whose scores fall (as runs list them), comparison
    in another, the row's ids where a score is tied or NaN."""
    if score is None:
        return lrow[:0], lrow[:0]
    width = int(counts.max()) if counts.size else 0
    starts = np.cumsum(counts) - counts
    hits = np.flatnonzero(~np.isnan(score))
    hrow, hscore = lrow.take(hits), score.take(hits)  # (take: faster than [] on 1-d)
    at = starts.take(hrow)
    pos, last = at.copy(), at + counts.take(hrow) - 1  # a probe past a row's end reads its last
    probe, value, above = np.empty_like(pos), np.empty(hits.size), np.empty(hits.size, np.bool_)
    up = np.empty_like(pos)
    step = 1 << max(width.bit_length() - 1, 0)
    while step and width:  # in a falling row, the column of a score: how many are above it
        np.minimum(np.add(pos, step - 1, out=probe), last, out=probe)
        np.greater(np.take(cscore, probe, out=value, mode="clip"), hscore, out=above)
        pos += np.multiply(above, step, out=up)
        step >>= 1
    col = pos - at
    # per row: how many steps fall (NaN compares False) and how many scores are NaN
    falls = np.concatenate(([0], np.cumsum(cscore[1:] < cscore[:-1])))
    last = np.maximum(starts + counts - 1, 0)
    falling = falls[last] - falls[np.minimum(starts, last)] == np.maximum(counts - 1, 0)
    nan_rows = np.zeros(counts.size, dtype=np.bool_)
    if np.isnan(cscore).any():
        at_row = np.repeat(np.arange(counts.size), counts)
        nan_rows = np.bincount(at_row, np.isnan(cscore), minlength=counts.size) > 0
    check = np.flatnonzero(~falling.take(hrow))
    tied = np.zeros(hits.size, dtype=np.bool_)
    if check.size:  # rows not falling: compare with each score of the row
        raw = np.full((counts.size, width), np.nan)
        raw[np.arange(width)[None, :] < counts[:, None]] = cscore
        step = max(1, _CHUNK_CELLS // max(width, 1))
        for lo in range(0, check.size, step):
            sel = check[lo : lo + step]
            same = raw[hrow[sel]] == hscore[sel, None]
            col[sel] = np.argmax(same, axis=1)
            tied[sel] = np.count_nonzero(same, axis=1) > 1
    unsure = np.concatenate((hits[tied], np.flatnonzero(np.isnan(score) & nan_rows[lrow])))
    if unsure.size:  # tied or NaN scores: the row's ids decide
        n_labels = np.bincount(lrow, minlength=counts.size)
        first = np.cumsum(n_labels) - n_labels
        where: dict[int, tuple[list[str], dict[str, int]]] = {}
        pos = np.full(unsure.size, -1, dtype=np.intp)
        for i, (row, label) in enumerate(zip(lrow[unsure].tolist(), unsure.tolist(), strict=True)):
            if row not in where:
                where[row] = list(docs[row]), {d: j for j, d in enumerate(candidates[row])}
            ids, index = where[row]
            pos[i] = index.get(ids[label - first[row]], -1)
        keep = pos >= 0
        both = np.concatenate((hits[~tied], unsure[keep]))
        order = np.argsort(both, kind="stable")
        hits, col = both[order], np.concatenate((col[~tied], pos[keep]))[order]
        hrow = lrow[hits]
    return hits, starts.take(hrow) + col


def build_arrays(
    qids: Sequence[str],
    candidates: Sequence[Mapping[str, float]],
    grades: Sequence[Mapping[str, float]],
    *,
    score_kind: ScoreKind | str | None = ScoreKind.SIMILARITY,
    distractors: Sequence[Collection[str]] | None = None,
    utilities: Sequence[Mapping[str, float]] | None = None,
    no_response: Sequence[Mapping[str, float]] | None = None,
    n_relevant: Sequence[int | None] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    rrf_k: int = 60,
    n_evidence: Sequence[int] | I | None = None,
) -> EvalArrays:
    """``EvalArrays`` of one run and its labels given per query as mappings parallel to
    ``qids`` (none modified; no pyarrow needed): ``candidates`` document id -> raw score in
    the run's order (NaN: none), ``grades`` document id -> grade (retrieved or not), the
    others as ``Labels`` holds them; ``n_evidence`` as ``arrays_from_codes`` takes it.

    Raises:
        EvalSetError: a value not a number or out of range, a stated relevant count below
            the labelled one."""
    n_q = len(qids)
    given = {"distractors": distractors, "utilities": utilities, "no_response": no_response}
    every = {"candidates": candidates, "grades": grades, **given, "n_relevant": n_relevant}
    for name, seq in every.items():
        if seq is not None and len(seq) != n_q:
            raise EvalSetError(f"{name} has {len(seq)} entries for {n_q} queries")
    counts = np.fromiter(map(len, candidates), np.intp, count=n_q)
    cscore = flat_floats(candidates, "score", qids, counts)
    n_graded = np.fromiter(map(len, grades), np.intp, count=n_q)
    lgrade = flat_floats(grades, "grade", qids, n_graded)
    lrow = np.repeat(np.arange(n_q, dtype=np.intp), n_graded)
    finite_grades(qids, lrow, lgrade)
    if utilities is not None:
        check_range(qids, utilities, "utility", -1.0, 1.0)
    if no_response is not None:
        check_range(qids, no_response, "no-response probability", 0.0, 1.0)
    extra = [m for m in given.values() if m is not None and any(m)]
    docs: Sequence[Collection[str]] = grades  # per row: graded ids, then the others
    if extra:
        docs = [list(dict.fromkeys(chain(*row))) for row in zip(grades, *extra, strict=True)]
        n_labels = np.fromiter(map(len, docs), np.intp, count=n_q)
        lrow = np.repeat(np.arange(n_q, dtype=np.intp), n_labels)
        graded = np.arange(lrow.size) - (np.cumsum(n_labels) - n_labels)[lrow] < n_graded[lrow]
        lgrade, flat = np.where(graded, 0.0, np.nan), lgrade
        lgrade[graded] = flat

    def per_label(maps: Sequence[Any] | None, value: Callable[[Any], Any]) -> Any:
        if maps is None or not any(maps):
            return None
        values = chain.from_iterable(map(map, map(value, maps), docs))  # None -> NaN
        return np.fromiter(values, np.float64, count=lrow.size)

    score = per_label(candidates, attrgetter("get"))
    hit_label, hit_cand = _hits(candidates, docs, lrow, score, cscore, counts)
    flags = per_label(distractors, attrgetter("__contains__"))
    util = per_label(utilities, attrgetter("get"))
    p_no = per_label(no_response, attrgetter("get"))
    flagged = None if flags is None else flags.astype(np.bool_)
    labels = LabelRows(lrow, lgrade, flagged, util, p_no, n_relevant)
    crow = np.repeat(np.arange(n_q, dtype=np.intp), counts)
    coded = CodedRows(qids, crow, cscore, labels, hit_cand, hit_label, candidates)
    return arrays_from_codes(
        coded,
        score_kind=score_kind,
        profile=profile,
        rules=rules,
        rrf_k=rrf_k,
        n_evidence=n_evidence,
    )
