"""The calibration sweep: every setting of a grid scored on labelled queries, cheaply, because
every rule keeps a prefix of the ranked list (each metric tabulated once per context size, the
runtime's own ``cut_ranked`` per setting); DESIGN.md and docs/guides/calibrate.md say more."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from ragguard._fields import is_real
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics import ParsedMetric, compute, parse_metric
from ragguard.calibration.metrics.tables import prefix_table
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import ConflictDetector, ConflictMode, CutRule, PolicyParams, cut_ranked
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.calibration.fit.sweep_stages import Compacted, CutContexts, PassageStages

__all__ = [
    "COVERAGE",
    "DEFAULT_METRICS",
    "DEFAULT_MIN_COVERAGE",
    "F64",
    "LOWER_IS_BETTER",
    "PASSAGES",
    "B",
    "Constraint",
    "GroupedMeans",
    "I",
    "SweepGrid",
    "SweepKernel",
    "SweepResult",
    "check_grid_values",
    "choose",
    "cut_dtype",
    "cut_rule_points",
    "describe_point",
    "distinct_rows",
    "guard_settings",
    "is_plain_top_k",
    "meets_constraints",
    "optimal_k",
    "sweep",
]

F64 = NDArray[np.float64]
B = NDArray[np.bool_]
I = NDArray[np.intp]  # noqa: E741
"""The array types of the fitting wing (float values, masks, rows and indices), defined
here once and imported by every module above the sweep."""
Cuts = NDArray[np.unsignedinteger[Any] | np.int32]
"""(P, Q) per-query cuts of a sweep's settings (``SweepKernel.cuts``)."""

PASSAGES = "passages"
"""Pseudo-metric of the sweep: the number of passages kept (its mean: the mean context)."""

COVERAGE = "evidence_coverage"
"""The metric of ``ragguard calibrate``'s default constraint: the share of answerable
queries whose context holds the relevant passages they need."""

DEFAULT_MIN_COVERAGE = 0.9
"""``ragguard calibrate``'s default constraint is ``evidence_coverage>=DEFAULT_MIN_COVERAGE``
(docs/guides/calibrate.md says why this value)."""

DEFAULT_METRICS: tuple[str, ...] = (
    "udcg",
    "utility",
    "udcg_ndcg",
    "recall",
    "precision",
    "ndcg",
    "mrr",
    "hit_rate",
    "distractor_rate",
    "distractor_harm",
)
"""Metrics the sweep reports at every point by default (each on the kept context)."""

LOWER_IS_BETTER: frozenset[str] = frozenset(
    {"distractor_rate", "distractor_harm", "harm", PASSAGES}
)
"""Metrics an objective minimises (registry names, and ``passages``)."""

TIE_TOLERANCE = 1e-12

TABLE_BUDGET = 256 << 20
"""Bytes of metric tables a ``SweepKernel`` keeps whole; larger ones (many queries
or a wide grid) are recomputed chunk by chunk when read."""

CHUNK_CELLS = 1 << 21
"""Rows x candidates a kernel computes at once (its temporaries stay near 16 MB each)."""

ROW_CELLS = 1 << 18
"""Rows x candidates of a chunk of the policy's cuts (and of ``optimal_k``): 2 MB
temporaries, in cache, are 1.4x faster than 16 MB ones."""

PREFIX_CELLS = 1 << 16
"""Rows x context sizes of one piece of a chunk's prefix-sum tables (512 KB a
temporary: they stay in cache)."""

GATHER_CELLS = 1 << 21
"""Values ``SweepKernel.group_sums`` reads from a chunk's tables at once, for a
block of settings (16 MB)."""


def cut_dtype(bound: int) -> np.dtype[np.unsignedinteger[Any] | np.int32]:
    """The smallest integer dtype of per-query cuts in ``0..bound``: ``uint8`` up to
    255, ``uint16`` up to 65,535, else ``int32`` (a sweep at 1,000,000 queries x 480
    settings keeps 480 MB of cuts in ``uint8``, 1.9 GB in ``int32``)."""
    if bound <= np.iinfo(np.uint8).max:
        return np.dtype(np.uint8)
    if bound <= np.iinfo(np.uint16).max:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def distinct_rows(kept: Cuts, columns: I | None = None) -> tuple[I, I]:
    """The distinct rows of ``kept`` (P, Q) (on ``columns`` only, when given): the index of each
    one's first occurrence, in order, and for every row the position of its copy among them
    (hashed, then compared row by row: no copy of ``kept``)."""

    def row(i: int) -> Cuts:
        out: Cuts = kept[i] if columns is None else kept[i, columns]
        return out

    first: list[int] = []
    which = np.empty(kept.shape[0], dtype=np.intp)
    seen: dict[int, list[int]] = {}
    for i in range(kept.shape[0]):
        mine = row(i)
        same = seen.setdefault(hash(mine.tobytes()), [])
        which[i] = next((j for j in same if np.array_equal(row(first[j]), mine)), len(first))
        if which[i] == len(first):
            same.append(len(first))
            first.append(i)
    return np.asarray(first, dtype=np.intp), which


def _metric_name(metric: str) -> str:
    return PASSAGES if metric == PASSAGES else parse_metric(metric).spec.name


def lower_is_better(metric: str) -> bool:
    """Whether an objective on ``metric`` is minimised."""
    return _metric_name(metric) in LOWER_IS_BETTER


# --------------------------------------------------------------------------- the grid


def check_grid_values(name: str, values: object, kind: type[int] | type[float]) -> None:
    """Raise [`ConfigError`][ragguard.ConfigError] unless ``values`` is a sequence of
    numbers of ``kind`` (whole numbers for ``int``, never a bool), naming ``name``; the
    caller checks their range."""
    what = "whole numbers" if kind is int else "numbers"
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ConfigError(f"{name} must be a tuple of {what}, got {values!r}")
    if not all(is_real(v) and (kind is float or isinstance(v, (int, np.integer))) for v in values):
        raise ConfigError(f"{name} must be a tuple of {what}, got {tuple(values)!r}")


def check_cut_rules(cut_rules: object) -> None:
    """Raise [`ConfigError`][ragguard.ConfigError] unless ``cut_rules`` is a sequence of
    ``(rule, value)`` pairs: gap with a value >= 0, autocut with a whole number >= 1."""
    if isinstance(cut_rules, (str, bytes)) or not isinstance(cut_rules, Sequence):
        raise ConfigError(f"cut_rules must be (rule, value) pairs, got {cut_rules!r}")
    allowed = ", ".join(repr(r.value) for r in CutRule if r is not CutRule.NONE)
    for pair in cut_rules:
        if not (isinstance(pair, Sequence) and len(pair) == 2):
            raise ConfigError(f"cut_rules must be (rule, value) pairs, got {pair!r}")
        rule, value = pair
        if rule not in {r.value for r in CutRule} - {CutRule.NONE.value}:
            raise ConfigError(f"a cut rule is one of {allowed}, got {rule!r}")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or value < 0
            or (CutRule(rule) is CutRule.AUTOCUT and value < 1)
        ):
            raise ConfigError(
                f"bad cut rule setting {(rule, value)!r}: gap takes a whole number >= 0, "
                "autocut one >= 1"
            )


@dataclass(frozen=True, slots=True)
class SweepGrid:
    """The policy settings a sweep tries.

    Attributes:
        max_k: caps to try.
        thresholds: relative thresholds to try at every cap.
        cut_rules: label-free cut settings tried at every cap, with no threshold:
            ``(CutRule.GAP, gap_buffer)`` or ``(CutRule.AUTOCUT, autocut_jumps)``.
        min_k: the floor of every setting (the guard keeps at least this many).
    """

    max_k: tuple[int, ...] = tuple(range(1, 11))
    thresholds: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(20))
    cut_rules: tuple[tuple[CutRule, int], ...] = (
        (CutRule.GAP, 0),
        (CutRule.GAP, 1),
        (CutRule.AUTOCUT, 1),
        (CutRule.AUTOCUT, 2),
    )
    min_k: int = 1

    def __post_init__(self) -> None:
        check_grid_values("max_k", self.max_k, int)
        check_grid_values("thresholds", self.thresholds, float)
        if not isinstance(self.min_k, int) or isinstance(self.min_k, bool):
            raise ConfigError(f"min_k must be a whole number, got {self.min_k!r}")
        if not self.max_k or any(k < 1 for k in self.max_k):
            raise ConfigError(f"max_k values must be ints >= 1, got {self.max_k!r}")
        if len(set(self.max_k)) != len(self.max_k) or list(self.max_k) != sorted(self.max_k):
            raise ConfigError(f"max_k values must be distinct and increasing, got {self.max_k!r}")
        if not self.thresholds or any(not 0.0 <= t <= 1.0 for t in self.thresholds):
            raise ConfigError(f"thresholds must lie in [0, 1], got {self.thresholds!r}")
        if list(self.thresholds) != sorted(set(self.thresholds)):
            raise ConfigError(
                f"thresholds must be distinct and increasing, got {self.thresholds!r}"
            )
        if self.min_k < 0 or self.min_k > self.max_k[0]:
            raise ConfigError(f"min_k must be in [0, smallest max_k={self.max_k[0]}]")
        check_cut_rules(self.cut_rules)

    @classmethod
    def up_to(cls, max_k: int, **kwargs: object) -> SweepGrid:
        """The default grid with caps ``1..max_k``."""
        if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1:
            raise ConfigError(f"max_k must be an int >= 1, got {max_k!r}")
        return cls(max_k=tuple(range(1, max_k + 1)), **kwargs)  # type: ignore[arg-type]

    def points(self) -> tuple[PolicyParams, ...]:
        """Every setting: caps x thresholds, then caps x cut rules."""
        pts = [
            PolicyParams(max_k=k, min_k=self.min_k, relative_threshold=float(t))
            for k in self.max_k
            for t in self.thresholds
        ]
        for k in self.max_k:
            pts += cut_rule_points(k, self.min_k, self.cut_rules)
        return tuple(pts)


def cut_rule_points(
    max_k: int, min_k: int, cut_rules: Sequence[tuple[CutRule, int]]
) -> list[PolicyParams]:
    """The settings of ``cut_rules`` (``(rule, gap_buffer or autocut_jumps)``) at cap
    ``max_k``, with no threshold."""
    return [
        PolicyParams(max_k=max_k, min_k=min_k, cut=CutRule.GAP, gap_buffer=value)
        if CutRule(rule) is CutRule.GAP
        else PolicyParams(max_k=max_k, min_k=min_k, cut=CutRule.AUTOCUT, autocut_jumps=value)
        for rule, value in cut_rules
    ]


def is_plain_top_k(params: PolicyParams) -> bool:
    """Whether a setting is plain top-k (no score rule)."""
    return not params.uses_scores


def conflict_threshold(similarity: float, detector: ConflictDetector, answers: float) -> str:
    """``0.5``, ``answers 0.4``, ``0.5+answers 0.4``: a conflict detector and its threshold."""
    if detector is ConflictDetector.NEAR_COPY:
        return f"{similarity:g}"
    return (
        "" if detector is ConflictDetector.ANSWERS else f"{similarity:g}+"
    ) + f"answers {answers:g}"


def describe_point(params: PolicyParams) -> str:
    """A short human label: ``top-5``, ``max_k=5, t=0.70``, ``max_k=5, gap+1``; a
    conflict stage on is named last (``top-5, conflicts=drop@0.5``)."""
    conflicts = ""
    if params.conflicts is not ConflictMode.OFF:
        at = conflict_threshold(
            params.conflict_similarity, params.conflict_detector, params.conflict_answer_similarity
        )
        conflicts = f", conflicts={params.conflicts.value}@{at}"
    if is_plain_top_k(params):
        return f"top-{params.max_k}{conflicts}"
    parts = [f"max_k={params.max_k}"]
    if params.relative_threshold > 0:
        parts.append(f"t={params.relative_threshold:.2f}")
    if params.min_score is not None:
        parts.append(f"min_score={params.min_score:g}")
    if params.cut is CutRule.GAP:
        parts.append(f"gap+{params.gap_buffer}" if params.gap_buffer else "gap")
    elif params.cut is CutRule.AUTOCUT:
        parts.append(f"autocut@{params.autocut_jumps}")
    if params.expected_utility is not None:
        parts.append(f"expected utility (p>{params.expected_utility.threshold:.3g})")
    if params.near_duplicate_threshold is not None:
        parts.append(f"near-duplicates>={params.near_duplicate_threshold:g}")
    if params.max_tokens is not None:
        parts.append(f"max_tokens={params.max_tokens}")
    return ", ".join(parts) + conflicts


# --------------------------------------------------------------------------- constraints


_CONSTRAINT = re.compile(r"^\s*(?P<metric>[^<>\s]+?)\s*(?P<op>>=|<=)\s*(?P<bound>[^\s]+)\s*$")


@dataclass(frozen=True, slots=True)
class Constraint:
    """A named constraint on a sweep point's mean metric: ``recall>=0.8``."""

    metric: str
    op: Literal[">=", "<="]
    bound: float

    def __post_init__(self) -> None:
        name = _metric_name(self.metric)  # raises on an unknown metric
        if self.op not in (">=", "<="):
            raise ConfigError(f"a constraint compares with >= or <=, got {self.op!r}")
        if not (is_real(self.bound) and math.isfinite(self.bound)):
            raise ConfigError(f"constraint bound must be finite, got {self.bound!r}")
        if name in ("evidence_recall", COVERAGE) and not 0.0 <= self.bound <= 1.0:
            raise ConfigError(
                f"{name} is a share: its constraint bound must be in [0, 1], got {self.bound!r}"
            )

    @classmethod
    def parse(cls, text: str) -> Constraint:
        """``"recall>=0.8"``, ``"distractor_rate<=0.2"`` or
        ``"evidence_coverage(needs=2)>=0.9"``.

        Raises:
            ValueError: bad syntax or an unknown metric.
        """
        m = _CONSTRAINT.match(text)
        if m is None:
            raise ConfigError(
                f"cannot parse constraint {text!r}; write METRIC>=VALUE or METRIC<=VALUE, "
                "e.g. 'recall>=0.8'"
            )
        try:
            bound = float(m.group("bound"))
        except ValueError:
            raise ConfigError(
                f"constraint {text!r}: {m.group('bound')!r} is not a number"
            ) from None
        op: Literal[">=", "<="] = ">=" if m.group("op") == ">=" else "<="
        return cls(m.group("metric"), op, bound)

    def violation(self, values: F64) -> F64:
        """How far each value is from meeting the constraint (0 where it is met; inf
        where the value is NA)."""
        gap = self.bound - values if self.op == ">=" else values - self.bound
        out: F64 = np.where(np.isnan(values), np.inf, np.maximum(gap, 0.0))
        return out

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"


# --------------------------------------------------------------------------- the kernel


class SweepKernel:
    """One run's arrays, ranked once, with each metric tabulated at every context size."""

    def __init__(
        self,
        arrays: EvalArrays,
        metrics: Sequence[str],
        max_cut: int,
        *,
        stages: PassageStages | None = None,
    ) -> None:
        if max_cut < 0:
            raise ConfigError(f"max_cut must be >= 0, got {max_cut}")
        self.arrays = arrays
        self.metrics: tuple[str, ...] = tuple(dict.fromkeys(metrics))
        parsed: list[ParsedMetric | None] = [
            None if m == PASSAGES else parse_metric(m) for m in self.metrics
        ]
        q, n = arrays.shape
        self.width = min(max_cut, n)
        self.stages = stages
        self._through: I | None = None  # (Q, width + 1): table column of each cut
        self._contexts: CutContexts | None = None  # stages that are not causal
        self._compacted: Compacted | None = None
        tabled = arrays
        if stages is not None:
            self._compacted = stages.compact(arrays, self.width)
            tabled, self._through = self._compacted.arrays, self._compacted.through
            self._contexts = self._compacted.contexts
        self._tabled = tabled
        self._parsed = parsed
        self._cols = cols = self.width + 1
        self._row_base = np.arange(q, dtype=np.intp) * cols
        # query-major (Q, K + 1, M): one setting reads M contiguous values per query.
        # Kept whole when it fits TABLE_BUDGET; larger tables are computed chunk by chunk
        # whenever they are read (``lazy``), so memory stays flat with the query count.
        self.lazy = q * cols * len(self.metrics) * 8 > TABLE_BUDGET
        self._flat = np.zeros((0, len(self.metrics)))
        if not self.lazy:
            tables = np.empty((q, cols, len(self.metrics)))
            for lo, hi in self._chunks():
                tables[lo:hi] = self._chunk_tables(lo, hi)
            self._flat = tables.reshape(q * cols, len(self.metrics))

    def _chunk_tables(self, lo: int, hi: int, only: int | None = None) -> F64:
        """(hi - lo, K + 1, M) every metric (or column ``only``) of rows ``lo:hi`` at every context
        size; rows go in chunks so the metrics' (rows x candidates) temporaries stay small."""
        part = self._tabled.row_slice(lo, hi)
        js = range(len(self.metrics)) if only is None else [only]
        shape = (hi - lo, self._cols, len(self.metrics))
        out = np.empty(shape) if only is None else np.full(shape, np.nan)
        if self._contexts is not None:  # one context per cut: each column on its own
            for c in range(self._cols):
                cut = np.full(hi - lo, c, dtype=np.intp)
                out[:, c, list(js)] = self._context_values(part, lo, cut, js).T
            return out
        # every size at once, from prefix sums, in pieces of rows whose (rows x sizes)
        # temporaries stay in cache (30% faster than the whole chunk at 100 sizes)
        slow = [j for j in js if self._parsed[j] is None]
        step = max(1, PREFIX_CELLS // self._cols)
        for a in range(0, hi - lo, step):
            piece = part.row_slice(a, min(a + step, hi - lo))
            for j in js:
                p = self._parsed[j]
                if p is None or j in slow:
                    continue
                fast = prefix_table(piece, p, self._cols)
                if fast is None:
                    slow.append(j)
                else:
                    out[a : a + step, :, j] = fast
        for j in slow:
            p = self._parsed[j]
            if p is None:  # passages: every size, capped by the list's length
                sizes = np.arange(self._cols)[None, :]
                out[:, :, j] = np.minimum(sizes, part.n_present[:, None])
                continue
            for c in range(self._cols):  # no prefix form: size by size
                out[:, c, j] = compute(part, p, cut=np.full(hi - lo, c, dtype=np.intp))
        return out

    def _context_values(self, part: EvalArrays, lo: int, cuts: I, js: Sequence[int]) -> F64:
        """(len(js), rows) metrics ``js`` of rows ``lo:lo + len(cuts)`` (``part``) at
        cuts ``cuts``, from the stages' per-cut contexts."""
        assert self._contexts is not None
        arranged, sizes = self._contexts.arranged(part, lo, cuts)
        out = np.empty((len(js), cuts.size))
        for i, j in enumerate(js):
            p = self._parsed[j]
            out[i] = sizes if p is None else compute(arranged, p, cut=sizes)
        return out

    def group_sums(
        self, kept: Cuts, part: I, n_groups: int, weight: F64 | None = None
    ) -> tuple[F64, F64]:
        """(G, P, M) sums of every setting's metric values over the rows of each group, and the
        (weighted) counts of defined (non-NA) values; ``part`` gives each row's group (-1: none),
        ``weight`` an optional per-row multiplicity."""
        n_m = len(self.metrics)
        if kept.size and (kept.min() < 0 or kept.max() > self.width):
            raise EvalSetError(f"kept counts must lie in [0, {self.width}]")
        used = np.flatnonzero(part >= 0)
        reps, which = distinct_rows(kept, None if used.size == part.size else used)
        n_d = reps.size
        sums = np.zeros((n_groups, n_d, n_m))
        counts = np.zeros((n_groups, n_d, n_m))
        for lo, hi in self._chunks():
            local = np.flatnonzero(part[lo:hi] >= 0)
            if local.size == 0:
                continue
            # rows sorted by group + reduceat, not a (G x rows) indicator matrix product:
            # multi-threaded BLAS on thin shapes was erratic (32 s for 100k x 480 here)
            local = local[np.argsort(part[lo:hi][local], kind="stable")]
            present, starts = np.unique(part[lo:hi][local], return_index=True)
            rows = local + lo
            w = None if weight is None else weight[lo:hi]
            sizes = np.add.reduceat(np.ones(rows.size) if w is None else w[local], starts)
            counts[present] += sizes[:, None, None]  # every value defined ...
            table, na = self._summands(lo, hi, w)
            base = local * self._cols
            cuts = kept[np.ix_(reps, rows)]  # (D, rows)
            block = max(1, GATHER_CELLS // (rows.size * (n_m + len(na[0]))))
            for b in range(0, n_d, block):
                e = min(b + block, n_d)
                at = cuts[b:e].astype(np.intp)
                at += base  # (B, rows): each row's table entry at its cut
                vals = np.take(table, at, axis=0)  # (B, rows, M)
                sums[present, b:e] += np.add.reduceat(vals, starts, axis=1).swapaxes(0, 1)
                if len(na[0]):  # ... except the NA ones, taken out again
                    drop = np.add.reduceat(np.take(na[1], at, axis=0), starts, axis=1)
                    counts[np.ix_(present, np.arange(b, e), na[0])] -= drop.swapaxes(0, 1)
        return sums[:, which], counts[:, which]

    def _summands(self, lo: int, hi: int, w: F64 | None) -> tuple[F64, tuple[I, F64]]:
        """The tables of rows ``lo:hi`` as ``group_sums`` adds them: ((hi - lo) *
        (K + 1), M) values with NA as 0, times each row's weight ``w``; and the metrics NA
        somewhere here with, per entry, whether it is NA (times the weight)."""
        if self.lazy:
            flat = self._chunk_tables(lo, hi).reshape((hi - lo) * self._cols, len(self.metrics))
        else:  # a copy of the kernel's own tables
            flat = self._flat[lo * self._cols : hi * self._cols].copy()
        bad = np.isnan(flat)
        # NA columns: one wide reduction over rows (an axis-0 one over M columns is 25x
        # slower), then over context sizes
        wide = bad.reshape(hi - lo, self._cols * len(self.metrics)).any(axis=0)
        na = np.flatnonzero(wide.reshape(self._cols, len(self.metrics)).any(axis=0))
        missing = bad[:, na].astype(np.float64)
        flat[bad] = 0.0
        if w is not None:
            rep = np.repeat(w, self._cols)[:, None]
            flat *= rep
            missing *= rep
        return flat, (na, missing)

    @property
    def n_queries(self) -> int:
        """Number of queries (rows)."""
        return self.arrays.n_queries

    def _chunks(self, cells: int | None = None) -> list[tuple[int, int]]:
        """Row ranges of about ``CHUNK_CELLS`` cells each: rows x candidates (the policy's and the
        metrics' temporaries) or rows x context sizes x metrics / 4 (a chunk's tables), whichever is
        wider; with ``cells``, of that many rows x candidates (the policy's cuts)."""
        q, n = self.arrays.shape
        per_row = max(n, self._cols * len(self.metrics) // 4, 1)
        step = max(1, CHUNK_CELLS // per_row if cells is None else cells // max(n, 1))
        return [(lo, min(lo + step, q)) for lo in range(0, q, step)]

    def _policy_cuts(self, params: Sequence[PolicyParams]) -> list[I]:
        """(Q,) the runtime policy's ``n_kept`` under each of ``params``, chunk by chunk
        (each chunk ranked once for all of them)."""
        out = [np.empty(self.n_queries, dtype=np.intp) for _ in params]
        for lo, hi in self._chunks(ROW_CELLS):
            ranked = self.arrays.row_slice(lo, hi).ranked()
            for o, p in zip(out, params, strict=True):
                o[lo:hi] = cut_ranked(ranked, p).n_kept
        return out

    def cut(self, params: PolicyParams) -> I:
        """(Q,) number of candidates the runtime policy keeps under ``params`` (after the
        stages, when the kernel has them)."""
        return self._after_stages(self._policy_cuts([params])[0], params)

    def _after_stages(self, n: I, params: PolicyParams) -> I:
        """The context the stages after the cut leave of per-query cuts ``n``."""
        if self.stages is None:
            if params.uses_stages:
                raise ConfigError(
                    f"setting {describe_point(params)} runs stages after the cut; build the "
                    "kernel with stages= (ragguard.calibration.fit.sweep_stages)"
                )
            return n
        self.stages.check(params)
        assert self._through is not None
        rows = np.arange(n.shape[0])
        out: I = self._through[rows, np.minimum(n, self.width)]
        return out

    def cuts(self, points: Sequence[PolicyParams]) -> Cuts:
        """(P, Q) number kept under each setting, in ``cut_dtype`` (cast before arithmetic).

        Settings that differ only in ``max_k`` share one policy call: the cap is the policy's last
        step, so ``n_kept(max_k=k) = min(n_kept(max_k=K), k)`` for ``k <= K`` (not with
        ``keep_invalid``, whose invalid candidates fill the room under the cap)."""
        # a count is at most the candidates per row and the setting's cap; with stages,
        # at most the kernel's width
        n = self.arrays.shape[1]
        top = max((p.max_k for p in points), default=0)
        bound = self.width if self.stages is not None else max(self.width, min(n, top))
        kept = np.empty((len(points), self.n_queries), dtype=cut_dtype(bound))
        groups: dict[PolicyParams, list[int]] = {}
        for i, p in enumerate(points):
            if p.keep_invalid:
                kept[i] = self.cut(p)  # (raises with stages, which need keep_invalid off)
                continue
            key = replace(p, max_k=max(p.min_k, 1))  # every field but the cap
            groups.setdefault(key, []).append(i)
        widest = [max(m, key=lambda i: points[i].max_k) for m in groups.values()]
        cut = self._policy_cuts([points[i] for i in widest])
        for members, wide in zip(groups.values(), cut, strict=True):
            if self.stages is None:
                small = wide.astype(kept.dtype)  # every count <= bound
                for i in members:
                    np.minimum(small, min(points[i].max_k, bound), out=kept[i])
                continue
            for i in members:
                kept[i] = self._after_stages(np.minimum(wide, points[i].max_k), points[i])
        return kept

    def context(self, row: int, kept: int) -> list[int]:
        """The ranked positions of the passages query ``row`` keeps under a setting whose cut there
        is ``kept`` (``cuts``), in rank order: what the metrics of that cut are computed on."""
        if self._compacted is None:
            return list(range(min(int(kept), int(self.arrays.n_present[row]))))
        return self._compacted.context(row, int(kept))

    def values(self, kept: NDArray[np.integer[Any]], metrics: Sequence[str] | None = None) -> F64:
        """(M, Q) per-query value of every metric (or of ``metrics``, in that order) when
        query q keeps ``kept[q]``; for (S, Q) cuts of S settings, (S, M, Q)."""
        k = np.asarray(kept, dtype=np.intp)
        if (
            k.ndim not in (1, 2)
            or k.shape[-1] != self.n_queries
            or (k < 0).any()
            or (k > self.width).any()
        ):
            raise EvalSetError(
                f"kept must be {self.n_queries} ints in [0, {self.width}] (per setting), "
                f"got shape {k.shape}"
            )
        ks = k.reshape(-1, self.n_queries)
        js = range(len(self.metrics)) if metrics is None else [self._column(m) for m in metrics]
        values = np.empty((ks.shape[0], len(js), self.n_queries))
        if not self.lazy:
            for s, row in enumerate(ks):
                values[s] = np.take(self._flat, self._row_base + row, axis=0)[:, list(js)].T
            return values if k.ndim == 2 else values[0]
        # each metric at each query's own cut: the table's entry, computed directly (in
        # chunks of rows, so the metrics' temporaries stay small; each chunk's arrays
        # serve every setting and metric)
        for lo, hi in self._chunks():
            part = self._tabled.row_slice(lo, hi)
            for s, row in enumerate(ks[:, lo:hi]):
                if self._contexts is not None:
                    values[s, :, lo:hi] = self._context_values(part, lo, row, js)
                    continue
                for i, j in enumerate(js):
                    p = self._parsed[j]
                    if p is None:
                        values[s, i, lo:hi] = np.minimum(row, part.n_present)
                    else:
                        values[s, i, lo:hi] = compute(part, p, cut=row)
        return values if k.ndim == 2 else values[0]

    def _column(self, metric: str) -> int:
        try:
            return self.metrics.index(metric)
        except ValueError:
            raise ConfigError(
                f"the kernel was built without {metric!r}; it has: {', '.join(self.metrics)}"
            ) from None

    def table(self, metric: str) -> F64:
        """(Q, K + 1) the per-query values of ``metric`` at context sizes 0..K."""
        j = self.metrics.index(metric)
        if not self.lazy:
            out: F64 = self._flat[:, j].reshape(self.n_queries, self._cols)
            return out
        table = np.empty((self.n_queries, self._cols))
        for lo, hi in self._chunks():
            table[lo:hi] = self._chunk_tables(lo, hi, only=j)[:, :, j]
        return table


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Mean metrics of every setting over a set of queries."""

    points: tuple[PolicyParams, ...]
    metrics: tuple[str, ...]
    means: F64
    rows: I
    kept: Cuts = field(repr=False)
    grouped: GroupedMeans | None = field(default=None, repr=False)

    def column(self, metric: str) -> F64:
        """(P,) the mean of ``metric`` at every setting."""
        try:
            j = self.metrics.index(metric)
        except ValueError:
            raise KeyError(
                f"the sweep did not compute {metric!r}; it has: {', '.join(self.metrics)}"
            ) from None
        col: F64 = self.means[:, j]
        return col

    def mean(self, point: int, metric: str) -> float:
        """Mean of ``metric`` at setting ``point``."""
        return float(self.column(metric)[point])

    def point_means(self, point: int) -> dict[str, float]:
        """Every metric's mean at setting ``point``."""
        return {m: float(v) for m, v in zip(self.metrics, self.means[point].tolist(), strict=True)}

    def restricted(self, kernel: SweepKernel, rows: I) -> SweepResult:
        """The same settings, with means over other ``rows`` (e.g. held-out queries)."""
        return _aggregate(kernel, self.points, self.kept, np.asarray(rows, np.intp), self.grouped)

    def index(self, params: PolicyParams) -> int:
        """Position of ``params`` among the points."""
        return self.points.index(params)


def _aggregate(
    kernel: SweepKernel,
    points: tuple[PolicyParams, ...],
    kept: Cuts,
    rows: I,
    grouped: GroupedMeans | None = None,
) -> SweepResult:
    """Every setting's means over ``rows``: from the group sums when ``rows`` is a union
    of ``grouped``'s groups, else in one pass over them."""
    fast = None if grouped is None else grouped.means(rows)
    if fast is not None:
        return SweepResult(points, kernel.metrics, fast, rows, kept, grouped)
    if rows.size == 0:
        means = np.full((len(points), len(kernel.metrics)), np.nan)
        return SweepResult(points, kernel.metrics, means, rows, kept, grouped)
    times = np.bincount(rows, minlength=kernel.n_queries).astype(np.float64)
    part = np.where(times > 0, 0, -1).astype(np.intp)
    sums, counts = kernel.group_sums(kept, part, 1, weight=times)
    means = np.divide(sums[0], counts[0], out=np.full(sums[0].shape, np.nan), where=counts[0] > 0)
    return SweepResult(points, kernel.metrics, means, rows, kept, grouped)


class GroupedMeans:
    """Sums of every setting's metrics over fixed, disjoint row groups."""

    def __init__(self, kernel: SweepKernel, kept: Cuts, groups: Sequence[I]) -> None:
        parts = [np.asarray(g, dtype=np.intp) for g in groups if len(g)]
        self.part = np.full(kernel.n_queries, -1, dtype=np.intp)
        for i, rows in enumerate(parts):
            if (self.part[rows] >= 0).any():
                raise EvalSetError("row groups must be disjoint")
            self.part[rows] = i
        self.sizes = np.array([g.size for g in parts], dtype=np.intp)
        self.sums, self.counts = kernel.group_sums(kept, self.part, len(parts))

    def means(self, rows: I) -> F64 | None:
        """(P, M) means over ``rows``, or ``None`` when they are not a union of groups."""
        if rows.size == 0:
            return None
        used = np.unique(self.part[rows])
        if used[0] < 0 or int(self.sizes[used].sum()) != rows.size:
            return None
        if np.unique(rows).size != rows.size:
            return None
        total = self.sums[used].sum(axis=0)
        count = self.counts[used].sum(axis=0)
        out: F64 = np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)
        return out


def sweep(
    arrays: EvalArrays | SweepKernel,
    grid: SweepGrid | Sequence[PolicyParams] | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    rows: I | Sequence[int] | None = None,
    groups: Sequence[I] | None = None,
    cuts: Cuts | None = None,
) -> SweepResult:
    """Score every setting of ``grid`` on the queries of ``arrays``.

    Args:
        arrays: one run against its labels (or a prepared ``SweepKernel``).
        grid: a [`SweepGrid`][ragguard.calibration.SweepGrid] (default ``SweepGrid()``) or explicit
            settings.
        metrics: metric strings computed at every setting (``"passages"`` included
            always).
        rows: query rows the means are over (default all); the per-query cuts are
            computed for every row.
        groups: disjoint row sets whose unions the result will be restricted to
            (cross-validation folds, held-out queries): their sums are computed once
            (``GroupedMeans``), so each later ``SweepResult.restricted`` to a
            union of them is free.
        cuts: (P, Q) per-query cuts of the settings, when some rows are not cut by the
            kernel's own policy call (default ``SweepKernel.cuts``): the two-stage
            sweep passes, for a query whose rerank call fails, the cut the guard makes
            on retrieval scores then (``ragguard.calibration.fit.second_stage``).

    Returns:
        A ``SweepResult``; ``means[p, m]`` equals ``evaluate(arrays, metrics[m],
        cut=kept[p])`` restricted to ``rows``.
    """
    points = (grid or SweepGrid()).points() if not isinstance(grid, Sequence) else tuple(grid)
    if not points:
        raise ConfigError("the sweep needs at least one setting")
    wanted = (*metrics, PASSAGES)
    if isinstance(arrays, SweepKernel):
        kernel = arrays
        missing = [m for m in wanted if m not in kernel.metrics]
        if missing:
            raise ConfigError(f"the kernel was built without {', '.join(missing)}")
        if max(p.max_k for p in points) > kernel.width and kernel.width < kernel.arrays.shape[1]:
            raise ConfigError("the kernel's tables are narrower than the grid's largest max_k")
    else:
        kernel = SweepKernel(arrays, wanted, max(p.max_k for p in points))
    q = kernel.n_queries
    idx = np.arange(q, dtype=np.intp) if rows is None else np.asarray(rows, dtype=np.intp)
    kept = kernel.cuts(points) if cuts is None else cuts
    if kept.shape != (len(points), q):
        raise ConfigError(f"cuts must have shape {(len(points), q)}, got {kept.shape}")
    grouped = None if groups is None else GroupedMeans(kernel, kept, groups)
    return _aggregate(kernel, points, kept, idx, grouped)


def choose(
    result: SweepResult,
    objective: str,
    constraints: Sequence[Constraint] = (),
    *,
    among: Sequence[int] | None = None,
) -> tuple[int, bool]:
    """The index of ``result``'s best point by ``objective`` (a metric the sweep computed)
    under ``constraints``, among the point indices ``among`` (default all), and whether it meets
    them: the least violation first, then the objective (ties within 1e-12 to fewer passages, then
    to grid order)."""
    candidates = np.arange(len(result.points)) if among is None else np.asarray(among)
    if candidates.size == 0:
        raise ConfigError("no settings to choose from")
    violation = np.zeros(candidates.size)
    for c in constraints:
        violation += c.violation(result.column(c.metric)[candidates])
    feasible = violation == 0
    pool = candidates[feasible] if feasible.any() else candidates[violation == violation.min()]
    score = result.column(objective)[pool]
    if lower_is_better(objective):
        score = -score
    score = np.where(np.isnan(score), -np.inf, score)
    best = score.max()
    tied = pool[score >= best - TIE_TOLERANCE]
    passages = result.column(PASSAGES)[tied]
    fewest = tied[passages <= passages.min() + TIE_TOLERANCE]
    return int(fewest.min()), bool(feasible.any())


# --------------------------------------------------------------------------- optimal k


@dataclass(frozen=True, eq=False)
class OptimalK:
    """Per-query optimal context size: where cumulative utility peaks."""

    k: I
    utility: F64
    counts: NDArray[np.int64]

    def distribution(self) -> dict[int, int]:
        """``{k: number of queries}`` for every k that occurs."""
        return {k: int(n) for k, n in enumerate(self.counts.tolist()) if n}


def optimal_k(arrays: EvalArrays, max_k: int, rows: I | Sequence[int] | None = None) -> OptimalK:
    """Per-query optimal k (argmax of cumulative utility over ``k = 0..max_k``)."""
    if isinstance(max_k, bool) or not isinstance(max_k, (int, np.integer)) or max_k < 1:
        raise ConfigError(f"optimal_k: max_k must be a whole number >= 1, got {max_k!r}")
    q, n = arrays.shape
    width = min(max_k, n)
    best_k = np.empty(q, dtype=np.intp)
    best_u = np.empty(q)
    sizes = np.arange(width + 1)[None, :]
    step = max(1, ROW_CELLS // max(n, 1))
    for lo in range(0, q, step):  # in chunks of rows: (rows x candidates) temporaries
        part = arrays.row_slice(lo, min(lo + step, q))
        cum = np.zeros((part.n_queries, width + 1))
        np.cumsum(part.utility[:, :width], axis=1, out=cum[:, 1:])
        cum[sizes > part.n_valid[:, None]] = -np.inf  # past the scored candidates
        k = cum.argmax(axis=1)  # first maximum: the smallest k
        best_k[lo : lo + step] = k
        best_u[lo : lo + step] = cum[np.arange(part.n_queries), k]
    if rows is not None:
        idx = np.asarray(rows, dtype=np.intp)
        best_k, best_u = best_k[idx], best_u[idx]
    counts = np.bincount(best_k, minlength=max_k + 1).astype(np.int64)
    return OptimalK(best_k, best_u, counts)


def meets_constraints(result: SweepResult, point: int, constraints: Sequence[Constraint]) -> bool:
    """Whether ``point`` of ``result`` meets every one of ``constraints`` (its means on
    ``result``'s queries)."""
    return all(float(c.violation(result.column(c.metric)[[point]])[0]) == 0 for c in constraints)


def guard_settings(p: PolicyParams, score_kind: ScoreKind | None) -> dict[str, Any]:
    """The guard-level config fields of setting ``p``: cap, floor, threshold and cut
    (with the cut's own parameter), and the conflict stage when it is on."""
    settings: dict[str, Any] = {
        "score_kind": score_kind,
        "max_k": p.max_k,
        "min_k": p.min_k,
        "relative_threshold": p.relative_threshold,
        "cut": p.cut,
    }
    if p.cut is CutRule.GAP:
        settings["gap_buffer"] = p.gap_buffer
    if p.cut is CutRule.AUTOCUT:
        settings["autocut_jumps"] = p.autocut_jumps
    if p.conflicts is not ConflictMode.OFF:  # a swept conflict setting
        settings["conflicts"] = p.conflicts
        settings["conflict_similarity"] = p.conflict_similarity
        if p.conflict_detector is not ConflictDetector.NEAR_COPY:
            settings["conflict_detector"] = p.conflict_detector
            settings["conflict_answer_similarity"] = p.conflict_answer_similarity
    return settings
