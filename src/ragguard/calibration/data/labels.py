"""Labels as rows: relevant counts, the ideal rankings, per-grade counts (see
``EvalArrays``) and the checks of label values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from numbers import Integral
from operator import methodcaller
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.utility import UtilityRules, abstention_utility, label_utility
from ragguard.errors import EvalSetError

F64 = NDArray[np.float64]  # the array aliases of the data wing
I64 = NDArray[np.int64]
B = NDArray[np.bool_]
I = NDArray[np.intp]  # noqa: E741


def flat_floats(
    maps: Sequence[Mapping[str, float]], what: str, qids: Sequence[str], sizes: I | None = None
) -> F64:
    """All values of ``maps`` as one float64 array (``sizes``: their lengths, when known);
    a clear error naming a value that is not a number."""
    total = sum(map(len, maps)) if sizes is None else int(sizes.sum())
    try:
        values = chain.from_iterable(map(methodcaller("values"), maps))  # dict.values: C speed
        return np.fromiter(values, np.float64, count=total)
    except (TypeError, ValueError):
        for qid, m in zip(qids, maps, strict=True):
            for doc, value in m.items():
                try:
                    float(value)
                except (TypeError, ValueError):
                    raise EvalSetError(
                        f"{what} of document {doc!r} in query {qid!r} is not a number: {value!r}"
                    ) from None
        raise


def rank_within(q: I, values: F64, n_rows: int) -> tuple[F64, I]:
    if q.size == 0:
        return np.zeros((n_rows, 0)), np.zeros(n_rows, dtype=np.intp)
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1 << 20 and bool((values == np.round(values)).all()):
        # whole numbers (grades): one integer sort key, highest value first in each row
        top = np.int64(hi)
        key = q.astype(np.int64) * (top - np.int64(lo) + 1) + (top - values.astype(np.int64))
        order = np.argsort(key, kind="stable")
    else:
        order = np.lexsort((-values, q))
    q_sorted = q[order]
    counts = np.bincount(q_sorted, minlength=n_rows)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    within = np.arange(q_sorted.size) - starts[q_sorted]
    out = np.zeros((n_rows, int(counts.max())))
    out[q_sorted, within] = values[order]
    return out, counts


def repeat_levels(per_level: NDArray[np.integer[Any]], values: F64) -> tuple[F64, I]:
    """Rows of ``values`` (highest first), each repeated as often as its row of
    ``per_level`` says, zero-padded; with each row's count."""
    n_rows = per_level.shape[0]
    counts: I = per_level.sum(axis=1).astype(np.intp)
    width = int(counts.max()) if n_rows else 0
    out = np.zeros((n_rows, width))
    out[np.arange(width)[None, :] < counts[:, None]] = np.repeat(
        np.tile(values, n_rows), per_level.ravel()
    )
    return out, counts


@dataclass(frozen=True, eq=False)
class LabelStats:
    """What every labelled grade gives (see ``EvalArrays``); ``extra_rows`` repeats each
    row once per stated relevant document beyond the labelled ones."""

    n_relevant: I
    n_relevant_labelled: I
    extra_rows: I
    ideal_grades: F64
    max_grade: F64
    grade_counts: NDArray[np.int64]
    integer_grades: bool


def finite_grades(qids: Sequence[str], lq: I, lgrade: F64) -> None:
    """Raise ``EvalSetError`` at the first grade (of row ``lq``) that is not finite."""
    if not np.isfinite(lgrade).all():
        bad = int(np.flatnonzero(~np.isfinite(lgrade))[0])
        raise EvalSetError(f"grade of a document in query {qids[int(lq[bad])]!r} is not finite")


def label_stats(
    qids: Sequence[str], lq: I, lgrade: F64, n_relevant: Sequence[int | None] | None
) -> LabelStats:
    """``LabelStats`` of labels given as rows ``lq`` with grades ``lgrade``.

    Raises:
        EvalSetError: a grade not finite, a stated relevant count not an integer or below
            the labelled one."""
    n_q = len(qids)
    finite_grades(qids, lq, lgrade)
    # labelled documents per row and grade: column g for grade g in 1..5 (grades above 5
    # in column 5, below 1 in column 0: a grade >= 1 is in columns 1..5)
    col = np.clip(lgrade, 0, 5).astype(np.intp)
    col[(lgrade > 0) & (lgrade < 1)] = 0
    grade_counts = np.bincount(lq * 6 + col, minlength=n_q * 6).reshape(n_q, 6)
    n_rel_labelled = grade_counts[:, 1:].sum(axis=1).astype(np.intp)
    n_rel = n_rel_labelled.copy()
    extra = np.zeros(n_q, dtype=np.intp)
    if n_relevant is not None:
        for row, stated in enumerate(n_relevant):
            if stated is None:
                continue
            if isinstance(stated, bool) or not isinstance(stated, Integral):
                raise EvalSetError(
                    f"query {qids[row]!r}: the stated number of relevant documents must be "
                    f"an integer, got {stated!r}"
                )
            if stated < n_rel_labelled[row]:
                raise EvalSetError(
                    f"query {qids[row]!r} states {stated} relevant documents but "
                    f"{int(n_rel_labelled[row])} are labelled relevant"
                )
            n_rel[row] = stated
            extra[row] = stated - n_rel_labelled[row]
    ex_q = np.repeat(np.arange(n_q, dtype=np.intp), extra)
    max_grade = np.zeros(n_q)
    np.maximum.at(max_grade, lq, lgrade)
    integer_grades = bool((lgrade == np.round(lgrade)).all())
    if integer_grades and n_q and max_grade.max() <= 5:
        # whole grades up to 5: the ideal ranking is each row's count per grade, grade 5
        # first, the stated unlabelled relevant documents as grade 1
        per_grade = grade_counts[:, :0:-1].copy()
        per_grade[:, -1] += extra
        ideal_grades, _ = repeat_levels(per_grade, np.arange(5.0, 0.0, -1.0))
    else:
        gain = lgrade > 0  # every positive gain
        pos_q = np.concatenate((lq[gain], ex_q))
        pos_g = np.concatenate((lgrade[gain], np.ones(ex_q.size)))
        ideal_grades, _ = rank_within(pos_q, pos_g, n_q)

    return LabelStats(
        n_relevant=n_rel,
        n_relevant_labelled=n_rel_labelled,
        extra_rows=ex_q,
        ideal_grades=ideal_grades,
        max_grade=max_grade,
        grade_counts=grade_counts,
        integer_grades=integer_grades,
    )


def ideal_label_utilities(
    n_q: int,
    lq: I,
    lgrade: F64,
    given: F64 | None,
    p_no: F64 | None,
    stats: LabelStats,
    rules: UtilityRules,
) -> F64:
    """Positive label utilities of every label (rows ``lq``; grade, given utility and
    abstention probability NaN where none), per query, highest first."""
    if all(v is None or bool(np.isnan(v).all()) for v in (given, p_no)):
        # utilities come from grades alone and rise with the grade, so the ideal grade
        # ranking (grades >= 1, stated ones as 1) is also the ideal utility ranking; only
        # grades >= 1 can have a positive label utility
        u = label_utility(stats.ideal_grades, rules)
        keep = (u > 0).any(axis=0)
        return u[:, : int(keep.sum())] if keep.size else u
    u = base = label_utility(np.where(np.isnan(lgrade), 0.0, lgrade), rules)
    if p_no is not None:
        measured = abstention_utility(base > 0, p_no)
        u = np.where(np.isnan(measured), base, measured)
    if given is not None:
        u = np.where(np.isnan(given), u, given)
    keep = u > 0
    rows, values = lq[keep], u[keep]
    grade_one = float(label_utility([1.0], rules)[0])
    if grade_one > 0:
        rows = np.concatenate((rows, stats.extra_rows))
        values = np.concatenate((values, np.full(stats.extra_rows.size, grade_one)))
    return rank_within(rows, values, n_q)[0]


def check_range(
    qids: Sequence[str], maps: Sequence[Mapping[str, float]], what: str, lo: float, hi: float
) -> F64:
    """All values of ``maps``, flat, each checked to lie in [lo, hi]."""
    values = flat_floats(maps, what, qids)
    bad = ~((values >= lo) & (values <= hi))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        lq = np.repeat(np.arange(len(qids)), np.fromiter(map(len, maps), np.intp, len(qids)))
        q = int(lq[i])
        doc = list(maps[q])[i - int(np.searchsorted(lq, q))]
        raise EvalSetError(
            f"{what} of document {doc!r} in query {qids[q]!r} must lie in [{lo:g}, {hi:g}], "
            f"got {values[i]!r}"
        )
    return values
