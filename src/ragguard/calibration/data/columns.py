"""The one storage of an eval set: labels and runs as columns (``Pairs``), read-only
mappings over them, their conversion to ``EvalArrays`` and their fingerprint (DESIGN.md,
the data wing). This module imports no reader."""

from __future__ import annotations

import importlib
import math
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import compress
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import require
from ragguard.calibration.data.arrays import CodedRows, EvalArrays, LabelRows, arrays_from_codes
from ragguard.calibration.data.labels import F64, I64, check_range
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import DISTRACTOR_GRADE, Labels, Query
from ragguard.calibration.data.texts import Texts
from ragguard.calibration.data.utility import UtilityRules
from ragguard.errors import EvalSetError
from ragguard.profiles import Profile
from ragguard.scores import ScoreKind

V = TypeVar("V")


def pyarrow() -> Any:
    """pyarrow, or ``MissingDependencyError`` naming the ``calibrate`` extra."""
    return require("pyarrow", "calibrate")


def arrow_module(name: str) -> ModuleType:
    """A pyarrow submodule; call only where ``pyarrow`` returned pyarrow."""
    return importlib.import_module(f"pyarrow.{name}")


Vocab = Any  # a pyarrow string array, chunked or not


def vocab_take(vocab: Vocab, codes: NDArray[Any]) -> list[str]:
    out: list[str] = take(vocab, codes).to_pylist()
    return out


def take(column: Any, rows: NDArray[Any]) -> Any:
    """Rows ``rows`` of a pyarrow array, chunked or not, as one array (pyarrow's
    ``ChunkedArray.take`` copies the whole column for a few rows)."""
    if not hasattr(column, "chunks"):
        return column.take(rows)
    pa = pyarrow()
    lengths = [len(c) for c in column.chunks]
    if not lengths:
        return pa.array([], column.type)
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    rows = np.asarray(rows, dtype=np.int64)
    which = np.searchsorted(bounds, rows, side="right") - 1
    if rows.size == 0 or bool((which == which[0]).all()):
        c = int(which[0]) if rows.size else 0
        return column.chunk(c).take(rows - bounds[c])
    order = np.argsort(which, kind="stable")
    present, starts = np.unique(which[order], return_index=True)
    pieces = [
        column.chunk(int(c)).take(rows[order[lo:hi]] - bounds[c])
        for c, lo, hi in zip(present, starts, [*starts[1:], rows.size], strict=True)
    ]
    back = np.empty(rows.size, dtype=np.int64)
    back[order] = np.arange(rows.size)
    return pa.concat_arrays(pieces).take(back)


def string_array(ids: Sequence[str]) -> Any:
    """A pyarrow string array of ``ids`` from their UTF-8 bytes, in Arrow's pool: no
    pandas import (``pyarrow.array`` asks for it), no long-lived blocks left in the heap."""
    pa = pyarrow()
    encoded = [i.encode() for i in ids]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    wide = pa.Array.from_buffers(pa.large_string(), len(encoded), buffers)
    return pa.concat_arrays([wide.cast(pa.string())])


def vocab_positions(needles: Vocab, hay: Vocab) -> I64:
    """Position of each id of ``needles`` in ``hay`` (-1 where absent)."""
    found = arrow_module("compute").index_in(needles, value_set=hay).fill_null(-1)
    out: I64 = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
    return out


class CorpusIds(Set[str]):
    """A corpus's document ids as one pyarrow string array (no Python string each)."""

    def __init__(self, ids: Any) -> None:
        self.ids = ids
        self._set: frozenset[str] | None = None

    def _python(self) -> frozenset[str]:
        if self._set is None:
            self._set = frozenset(self.ids.to_pylist())
        return self._set

    def __contains__(self, doc: object) -> bool:
        return doc in self._python()

    def __iter__(self) -> Iterator[str]:
        return iter(self._python())

    def __len__(self) -> int:
        return len(self._python())


def missing_ids(vocab: Vocab, known: Set[str]) -> NDArray[np.bool_]:
    """Whether each id of ``vocab`` is missing from ``known`` (for ``CorpusIds``,
    column-wise, hashing the smaller side)."""
    if isinstance(known, CorpusIds):
        pa = pyarrow()
        ids = known.ids
        if len(vocab) <= len(ids):  # first the corpus ids found in vocab, then those
            at = vocab_positions(ids, vocab)  # (a position: an id's first row only)
            ids = ids.filter(pa.array(at >= 0))
        out: NDArray[np.bool_] = vocab_positions(vocab, ids) < 0
        return out
    return np.fromiter((doc not in known for doc in vocab.to_pylist()), np.bool_)


@dataclass(frozen=True, eq=False)
class Pairs:
    """(query, document, value) rows with interned query ids, in file order, repeats
    removed; document ids interned (``d``: codes into ``docs``) or, for a TREC run, kept as
    read (``d`` ``None``: row ``i``'s id is ``docs[i]``), so no dictionary of millions of ids."""

    qids: list[str]  # in order of first appearance
    docs: Vocab
    q: NDArray[np.int32]  # (n,) query code of each row
    d: NDArray[np.int32] | None  # (n,) position of each row's id in ``docs``, or None
    value: F64  # (n,) score or grade
    line: Lines | I64 | None  # 1-based line of each row (None: row i is line i + 1)
    source: str

    def line_of(self, rows: NDArray[Any]) -> I64:
        if isinstance(self.line, np.ndarray):
            picked: I64 = self.line[rows]
            return picked
        return Lines.of_steps(self.line).of(rows)

    def codes(self, rows: NDArray[Any] | None = None) -> NDArray[Any]:
        """Positions in ``docs`` of the ids of ``rows`` (default all)."""
        if self.d is None:
            return np.arange(self.q.size, dtype=np.int64) if rows is None else np.asarray(rows)
        return self.d if rows is None else self.d[rows]

    def doc_ids(self, rows: NDArray[Any]) -> list[str]:
        return vocab_take(self.docs, self.codes(rows))

    def doc_column(self, rows: NDArray[Any] | None = None) -> Any:
        """Document ids of ``rows`` (default all) as a pyarrow string array."""
        pa = pyarrow()
        if rows is None and self.d is None:
            return self.docs
        codes = self.codes(rows)
        step = 1 << 22  # ids a piece: one array's 32-bit offsets address 2 GB of text
        if codes.size <= step:
            return take(self.docs, codes)
        pieces = [take(self.docs, codes[lo : lo + step]) for lo in range(0, codes.size, step)]
        return pa.chunked_array(pieces, type=pieces[0].type)

    @cached_property
    def grouped(self) -> tuple[NDArray[np.intp] | None, NDArray[np.intp]]:
        """(rows sorted by query, stable, or ``None`` when already grouped; the start of
        each query's rows in that order)."""
        q = self.q
        order = None
        if q.size > 1 and bool((q[1:] < q[:-1]).any()):
            order = np.argsort(q, kind="stable").astype(np.intp)
        counts = np.bincount(q, minlength=len(self.qids))
        starts = np.zeros(len(self.qids) + 1, dtype=np.intp)
        np.cumsum(counts, out=starts[1:])
        return order, starts

    def rows_of(self, code: int) -> NDArray[np.intp]:
        """Row indices of query ``code``, in file order."""
        order, starts = self.grouped
        lo, hi = int(starts[code]), int(starts[code + 1])
        if order is None:
            return np.arange(lo, hi, dtype=np.intp)
        return order[lo:hi]

    def counts(self) -> NDArray[np.intp]:
        return np.diff(self.grouped[1])


class Lines:
    """The 1-based line of each row as steps: row ``r`` is line ``r + 1 + shift``, and
    ``shift`` changes only at a few rows (a few numbers, not one a row)."""

    def __init__(self, line: I64) -> None:
        n = line.size
        extra = line - np.arange(1, n + 1, dtype=np.int64)  # non-decreasing
        self.starts = np.flatnonzero(np.diff(extra, prepend=-1) != 0)
        self.shift = extra[self.starts]

    @classmethod
    def of_steps(cls, line: Lines | I64 | None) -> Lines:
        """``line`` as steps (``None``: row ``i`` is line ``i + 1``)."""
        if isinstance(line, Lines):
            return line
        if line is None:
            out = cls(np.zeros(0, np.int64))
            out.starts, out.shift = np.zeros(1, np.intp), np.zeros(1, np.int64)
            return out
        return cls(line)

    def of(self, rows: NDArray[Any]) -> I64:
        r = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.starts, r, side="right") - 1
        out: I64 = r + 1 + self.shift[np.maximum(at, 0)]
        return out

    def without(self, removed: NDArray[Any]) -> Lines:
        """The lines of the rows left when the sorted, distinct rows ``removed`` go;
        computed at the steps only."""
        gone = np.asarray(removed, dtype=np.int64)
        # in the new numbering a step starts at each old step and after each removed row
        after = gone - np.arange(gone.size)  # new index of the row after each removed one
        moved = self.starts - np.searchsorted(gone, self.starts)
        new_starts = np.unique(np.concatenate(([0], moved, after)))
        old_rows = new_starts + np.searchsorted(after, new_starts, side="right")
        shift = self.of(old_rows) - new_starts - 1
        first = np.concatenate(([True], shift[1:] != shift[:-1]))
        out = Lines(np.zeros(0, np.int64))
        out.starts, out.shift = new_starts[first], shift[first]
        return out


class KeyView(Mapping[str, V]):
    """A read-only mapping over the keys of ``keys``, each value built by ``value`` when
    asked for."""

    def __init__(self, keys: Mapping[str, object], value: Callable[[str], V]) -> None:
        self._keys = keys
        self._value = value

    def __getitem__(self, key: str) -> V:
        if key not in self._keys:
            raise KeyError(key)
        return self._value(key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class _ByQuery(KeyView[Any]):
    """A read-only mapping over some query codes of ``Pairs``, in a given order."""

    def __init__(self, pairs: Pairs, codes: Sequence[int] | None = None) -> None:
        self.pairs = pairs
        self.codes: list[int] = list(range(len(pairs.qids))) if codes is None else list(codes)
        self._keys: dict[str, int] = {pairs.qids[c]: c for c in self.codes}

    def code(self, qid: str) -> int | None:
        return self._keys.get(qid)


class ColumnarCandidates(_ByQuery):
    """``{query_id: {doc_id: score}}`` of a run held as columns."""

    def __getitem__(self, qid: str) -> dict[str, float]:
        rows = self.pairs.rows_of(self._keys[qid])
        return dict(zip(self.pairs.doc_ids(rows), self.pairs.value[rows].tolist(), strict=True))

    @classmethod
    def of_dicts(cls, run: Mapping[str, Mapping[str, float]], source: str) -> ColumnarCandidates:
        """Columns of ``{query_id: {doc_id: score}}``, in their order."""
        out = RunColumns()
        for qid, cands in run.items():
            out.add(qid, list(cands), list(cands.values()))
        return out.build(source)

    def restrict(self, qids: Mapping[str, object]) -> tuple[ColumnarCandidates, list[str]]:
        """The queries also in ``qids`` (their order kept) and the others."""
        kept = [c for k, c in zip(self._keys, self.codes, strict=True) if k in qids]
        dropped = [k for k in self._keys if k not in qids]
        return ColumnarCandidates(self.pairs, kept), dropped

    def size(self, qid: str) -> int:
        return int(self.pairs.counts()[self._keys[qid]])

    def has_score(self) -> bool:
        """Whether any candidate of these queries has a non-NaN score."""
        p = self.pairs
        if len(self.codes) == len(p.qids):
            return bool((~np.isnan(p.value)).any())
        mask = np.zeros(len(p.qids), dtype=np.bool_)
        mask[self.codes] = True
        return bool((~np.isnan(p.value[mask[p.q]])).any())

    def first_lines(self) -> Mapping[str, int]:
        """Query id -> line of its first candidate."""
        p = self.pairs
        return KeyView(self, lambda q: int(p.line_of(p.rows_of(self._keys[q])[:1])[0]))


class ColumnarLabels(_ByQuery):
    """``{query_id: Labels}`` held as columns: a row per labelled document (grade NaN for
    one given only a utility or probability), optional per-row ``distractor``, ``utility``
    and ``no_response`` (NaN: none), and per query code ``stated`` (-1: none)."""

    def __init__(
        self,
        pairs: Pairs,
        codes: Sequence[int] | None = None,
        *,
        distractor: NDArray[np.bool_] | None = None,
        utility: F64 | None = None,
        no_response: F64 | None = None,
        stated: I64 | None = None,
    ) -> None:
        super().__init__(pairs, codes)
        self.distractor = distractor if distractor is not None and distractor.any() else None
        self.utility = utility if utility is not None and (~np.isnan(utility)).any() else None
        self.no_response = (
            no_response if no_response is not None and (~np.isnan(no_response)).any() else None
        )
        self.stated = stated if stated is not None and (stated >= 0).any() else None

    @classmethod
    def of_grades(cls, pairs: Pairs) -> ColumnarLabels:
        """Labels of qrels grades as files write them: -1 a known distractor, below 0 judged
        not relevant."""
        value = pairs.value
        if value.size == 0 or value.min() >= 0:
            return cls(pairs)
        clipped = replace(pairs, value=np.maximum(value, 0.0))
        return cls(clipped, distractor=value == DISTRACTOR_GRADE)

    @classmethod
    def of_labels(cls, labels: Mapping[str, Labels], source: str) -> ColumnarLabels:
        """Columns of per-query ``Labels``, in their order (columns stay as they are)."""
        if isinstance(labels, ColumnarLabels):
            return labels
        out = LabelColumns()
        for qid, lab in labels.items():
            out.add(qid, lab)
        return out.build(source)

    def __getitem__(self, qid: str) -> Labels:
        code = self._keys[qid]
        rows = self.pairs.rows_of(code)
        docs, values = self.pairs.doc_ids(rows), self.pairs.value[rows].tolist()
        grades = {d: int(v) for d, v in zip(docs, values, strict=True) if v == v}
        if self.distractor is None and not self.rich and self.stated is None:
            return Labels(grades)
        return Labels(
            grades,
            frozenset(
                () if self.distractor is None else compress(docs, self.distractor[rows].tolist())
            ),
            self._numbers(self.utility, rows, docs),
            self._numbers(self.no_response, rows, docs),
            None if self.stated is None or self.stated[code] < 0 else int(self.stated[code]),
        )

    @staticmethod
    def _numbers(values: F64 | None, rows: NDArray[np.intp], docs: list[str]) -> dict[str, float]:
        if values is None:
            return {}
        return {d: v for d, v in zip(docs, values[rows].tolist(), strict=True) if v == v}

    @property
    def rich(self) -> bool:
        """Whether any query has a given utility or abstention probability."""
        return self.utility is not None or self.no_response is not None

    def unanswerable(self) -> list[str]:
        """The query ids judged with no relevant label, in order."""
        p = self.pairs
        n = len(p.qids)
        judged = np.bincount(p.q[~np.isnan(p.value)], minlength=n)
        relevant = np.bincount(p.q[p.value >= 1], minlength=n)
        if self.stated is not None:
            relevant = relevant + np.maximum(self.stated, 0)
        codes = np.asarray(self.codes, dtype=np.intp)
        hit = (judged[codes] > 0) & (relevant[codes] == 0)
        return [k for k, h in zip(self._keys, hit.tolist(), strict=True) if h]

    def label_lines(self) -> dict[str, tuple[str | None, int | None]]:
        """Query id -> (file, line of its first label)."""
        p = self.pairs
        order, starts = p.grouped
        first = starts[:-1] if order is None else order[starts[:-1]]
        lines = p.line_of(first).tolist()
        return {k: (p.source, lines[c]) for k, c in zip(self._keys, self.codes, strict=True)}


def query_view(
    keys: Mapping[str, object],
    texts: Mapping[str, str | None] | None = None,
    domains: Mapping[str, str] | None = None,
) -> KeyView[Query]:
    """``{query_id: Query}`` for the keys of ``keys``, with their ``texts`` and ``domains``."""
    found, of = texts or {}, domains or {}
    return KeyView(keys, lambda q: Query(q, found.get(q), domain=of.get(q)))


_FLUSH = 1 << 16  # rows gathered as Python objects before they become columns


class RunColumns:
    """A run's candidates added query by query, gathered into ``ColumnarCandidates``:
    ids as read (no dictionary), to Arrow every ``_FLUSH`` rows; scores one growing block."""

    def __init__(self) -> None:
        self.qids: list[str] = []
        self.sizes: list[int] = []
        self._ids: list[Any] = []
        self._docs: list[str] = []
        self._scores = array("d")  # one growing block, not a chunk per flush

    def add(self, qid: str, docs: Sequence[str], scores: Sequence[float]) -> None:
        """One query's candidates (distinct ids, in the run's order) and scores."""
        self.qids.append(qid)
        self.sizes.append(len(docs))
        self._docs.extend(docs)
        try:
            block = array("d", scores)
        except TypeError:  # None (NaN) and the other values numpy reads as numbers
            block = array("d", np.asarray(scores, dtype=np.float64).tolist())
        self._scores.extend(block)
        if len(self._docs) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if self._docs:
            self._ids.append(string_array(self._docs))
            self._docs = []

    def pairs(self, source: str) -> Pairs:
        pa = pyarrow()
        self.flush()
        q = np.repeat(np.arange(len(self.sizes), dtype=np.int32), self.sizes)
        ids = pa.chunked_array(self._ids, type=pa.string())
        value = np.frombuffer(self._scores, dtype=np.float64)
        return Pairs(self.qids, ids, q, None, value, None, source)

    def build(self, source: str) -> ColumnarCandidates:
        return ColumnarCandidates(self.pairs(source))


class LabelColumns:
    """Labels added query by query, gathered into ``ColumnarLabels``: graded documents,
    then those with only a utility, then only a probability (grade NaN)."""

    def __init__(self) -> None:
        self._rows = RunColumns()  # ids and grades
        self._stated: list[int] = []
        self._flags: list[bool] = []
        self._util: list[float] = []
        self._p_no: list[float] = []

    def add(self, qid: str, lab: Labels) -> None:
        """One query's labels.

        Raises:
            EvalSetError: a utility outside [-1, 1] or a probability outside [0, 1] (NaN
                included: NaN is how the columns say "none")."""
        if lab.utilities:
            check_range([qid], [lab.utilities], "utility", -1.0, 1.0)
        if lab.no_response:
            check_range([qid], [lab.no_response], "no-response probability", 0.0, 1.0)
        nan = math.nan
        extra = [d for d in lab.utilities if d not in lab.grades]
        extra += [d for d in lab.no_response if d not in lab.grades and d not in extra]
        docs = [*lab.grades, *extra]
        self._rows.add(qid, docs, [*map(float, lab.grades.values()), *[nan] * len(extra)])
        self._stated.append(-1 if lab.n_relevant is None else lab.n_relevant)
        # Python lists, one array at the end (a small array per query would leave
        # long-lived blocks scattered over the heap while a file is read)
        n, dis, util, p_no = len(docs), lab.distractors, lab.utilities, lab.no_response
        self._flags.extend([d in dis for d in docs] if dis else [False] * n)
        self._util.extend([util.get(d, nan) for d in docs] if util else [nan] * n)
        self._p_no.extend([p_no.get(d, nan) for d in docs] if p_no else [nan] * n)

    def build(self, source: str) -> ColumnarLabels:
        return ColumnarLabels(
            self._rows.pairs(source),
            distractor=np.array(self._flags, dtype=np.bool_),
            utility=np.array(self._util, dtype=np.float64),
            no_response=np.array(self._p_no, dtype=np.float64),
            stated=np.asarray(self._stated, dtype=np.int64),
        )


def encode_ids(column: Any) -> tuple[Any, NDArray[np.int32]]:
    """(dictionary, int32 codes) of a chunked string column, in order of first appearance."""
    pa = pyarrow()
    enc = column.dictionary_encode()
    if enc.num_chunks == 0:
        return pa.array([], pa.string()), np.zeros(0, np.int32)
    dictionary = enc.chunk(0).dictionary
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks]).astype(
        np.int32, copy=False
    )
    return dictionary, codes


def repeated_rows(q: NDArray[np.int32], d: NDArray[np.int32], n_docs: int) -> NDArray[np.intp]:
    """Rows repeating an earlier row's (query, document), in row order."""
    key = q.astype(np.int64) * max(n_docs, 1) + d
    if key.size < 2:
        return np.zeros(0, np.intp)
    s = np.sort(key)
    if not bool((s[1:] == s[:-1]).any()):
        return np.zeros(0, np.intp)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    again = np.zeros(key.size, dtype=np.bool_)
    again[1:] = sk[1:] == sk[:-1]
    return np.sort(order[again]).astype(np.intp)


Event = tuple[int, int, ProblemKind, str, str | None]
"""A problem found column-wise: (line, order within the line, kind, message, field)."""


def report_events(events: list[Event], rep: Reporter, path: str) -> None:
    for line_no, _, pk, message, fld in sorted(events, key=lambda e: (e[0], e[1])):
        rep(pk, message, path=path, line=line_no, field=fld)


def without_repeats(
    pairs: Pairs,
    kind: str,
    events: list[Event],
    rep: Reporter,
    repeats: NDArray[np.intp] | None = None,
) -> Pairs:
    """``pairs`` without the rows repeating an earlier (query, document) (default
    ``repeated_rows``), each added to ``events`` at order 2 of its line.

    Raises:
        EvalSetError: a repeated label whose grade contradicts the first, after the
            problems of earlier lines went to ``rep``."""
    if repeats is None:
        assert pairs.d is not None
        repeats = repeated_rows(pairs.q, pairs.d, len(pairs.docs))
    if not repeats.size:
        return pairs
    lines = pairs.line_of(repeats).tolist()
    for r, doc, ln in zip(repeats.tolist(), pairs.doc_ids(repeats), lines, strict=True):
        qid = pairs.qids[int(pairs.q[r])]
        if kind == "run":
            msg = f"document {doc!r} appears twice in query {qid!r}"
            events.append((ln, 2, ProblemKind.DUPLICATE_CANDIDATE, msg, None))
        else:
            msg = f"query {qid!r}, document {doc!r} is labelled twice"
            events.append((ln, 2, ProblemKind.DUPLICATE_LABEL, msg, None))
    codes = pairs.codes()
    key = pairs.q.astype(np.int64) * max(len(pairs.docs), 1) + codes
    first: dict[int, float] = {}
    again = set(repeats.tolist())
    for r in np.flatnonzero(np.isin(key, key[repeats])).tolist() if kind != "run" else ():
        k, value = int(key[r]), float(pairs.value[r])
        if r not in again:
            first.setdefault(k, value)
        elif first[k] != value:
            line = int(pairs.line_of(np.array([r]))[0])
            report_events([e for e in events if e[0] < line], rep, pairs.source)
            qid, doc = pairs.qids[int(pairs.q[r])], pairs.doc_ids(np.array([r]))[0]
            raise EvalSetError(
                f"query {qid!r}, document {doc!r}: grade {int(value)} contradicts {int(first[k])}",
                path=pairs.source,
                line=line,
            )
    keep = np.ones(pairs.q.size, dtype=np.bool_)
    keep[repeats] = False
    docs, d = pairs.docs, pairs.d
    if d is None:  # ids as read: the rows leave the column
        docs = docs.filter(pyarrow().array(keep))
    else:
        d = d[keep]
    kept = Lines.of_steps(pairs.line).without(repeats)
    return Pairs(pairs.qids, docs, pairs.q[keep], d, pairs.value[keep], kept, pairs.source)


@dataclass
class ColumnarRead:
    """What a reader found: queries, labels (with where each query's labels start), runs
    (with each query's first line), corpus ids, passage texts, whether labels are silver."""

    queries: Mapping[str, Query]
    labels: ColumnarLabels
    label_lines: Mapping[str, tuple[str | None, int | None]]
    runs: dict[str, tuple[Mapping[str, Mapping[str, float]], Mapping[str, int]]]
    corpus: Set[str] | None = None
    texts: Texts = field(default_factory=Texts)
    silver: bool = False


class _RowCandidates(Sequence[Mapping[str, float]]):
    """Per eval row, the run's ``{doc_id: score}`` (built when asked for)."""

    def __init__(self, run: Mapping[str, Mapping[str, float]], qids: Sequence[str]) -> None:
        self.run = run
        self.qids = qids

    def __len__(self) -> int:
        return len(self.qids)

    def __getitem__(self, row: int) -> Mapping[str, float]:  # type: ignore[override]
        return self.run.get(self.qids[row], {})


def _rows(qids: Sequence[str], by: _ByQuery) -> NDArray[np.intp]:
    """Eval row of each query code of ``by`` (-1: not evaluated)."""
    out = np.full(len(by.pairs.qids), -1, dtype=np.intp)
    for row, qid in enumerate(qids):
        code = by.code(qid)
        if code is not None:
            out[code] = row
    return out


def arrays_from_columnar(
    qids: Sequence[str],
    run: ColumnarCandidates,
    labels: ColumnarLabels,
    *,
    score_kind: ScoreKind | str | None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
) -> EvalArrays:
    """``EvalArrays`` of a run and labels held as columns."""
    rp, lp = run.pairs, labels.pairs
    crow = _rows(qids, run)[rp.q]
    lrow = _rows(qids, labels)[lp.q]
    lm = lrow >= 0
    hit_cand, hit_label = label_hits(rp, crow, lp, lrow)
    cscore = rp.value
    if not bool((crow >= 0).all()):  # queries of the run without labels: left out
        cm = crow >= 0
        new_index = np.cumsum(cm) - 1
        keep = cm[hit_cand]
        hit_cand, hit_label = new_index[hit_cand[keep]], hit_label[keep]
        crow, cscore = crow[cm], cscore[cm]
    if not bool(lm.all()):
        new_label = np.cumsum(lm) - 1
        hit_label = new_label[hit_label]  # hits are only in evaluated rows
    per_row: tuple[Any, ...] = (labels.distractor, labels.utility, labels.no_response)
    flags, util, p_no = (None if v is None else v[lm] for v in per_row)
    stated = None
    if labels.stated is not None:
        at = [labels.code(q) for q in qids]
        stated = [None if c is None or labels.stated[c] < 0 else int(labels.stated[c]) for c in at]
    label_rows = LabelRows(lrow[lm], lp.value[lm], flags, util, p_no, stated)
    coded = CodedRows(
        qids, crow, cscore, label_rows, hit_cand, hit_label, _RowCandidates(run, qids)
    )
    return arrays_from_codes(coded, score_kind=score_kind, profile=profile, rules=rules)


def label_hits(
    run: Pairs, crow: NDArray[np.intp], labels: Pairs, lrow: NDArray[np.intp]
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(run row, label row) of each label naming a candidate of its eval row: an Arrow
    hash join on (eval row, id) built on the labels. One thread: as fast on two cores, and
    the worker threads' freed memory would stay resident (about 40 MB at 10 M rows)."""
    pa = pyarrow()
    lsel = np.flatnonzero(lrow >= 0)
    if lsel.size == 0 or crow.size == 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    docs = run.doc_column()
    ldocs = labels.doc_column(labels.codes(lsel) if labels.d is None else lsel)
    if ldocs.type != docs.type:
        ldocs = ldocs.cast(docs.type)
    index = np.int32 if crow.size < 1 << 31 else np.int64
    left = pa.table({"r": crow.astype(np.int32), "d": docs, "i": np.arange(crow.size, dtype=index)})
    right = pa.table({"r": lrow[lsel].astype(np.int32), "d": ldocs, "j": lsel.astype(np.int64)})
    joined = left.join(right, keys=["r", "d"], join_type="inner", use_threads=False)
    cand = np.asarray(joined.column("i").to_numpy(), dtype=np.intp)
    lab = np.asarray(joined.column("j").to_numpy(), dtype=np.intp)
    del joined, left
    pa.default_memory_pool().release_unused()
    return cand, lab


_PIECE = 1 << 20  # values fed to the hash at a time (the same bytes, fed in pieces)


def _hash_ids(h: Any, ids: Vocab) -> None:
    """Feed ids as their UTF-8 byte lengths then their bytes (alike for a list and an
    array of the same ids)."""
    if isinstance(ids, list):
        encoded = list(map(str.encode, ids))
        h.update(np.fromiter(map(len, encoded), np.int64, len(encoded)).tobytes())
        h.update(b"".join(encoded))
        return
    chunks = ids.chunks if hasattr(ids, "chunks") else [ids]
    spans = []
    for chunk in chunks:  # every length first, then every byte
        wide = str(chunk.type) in ("large_string", "large_utf8")
        start, n = chunk.offset, len(chunk)
        offsets = np.frombuffer(chunk.buffers()[1], np.int64 if wide else np.int32)
        offsets = offsets[start : start + n + 1]
        for lo in range(0, n, _PIECE):
            h.update(np.diff(offsets[lo : lo + _PIECE + 1]).astype(np.int64))
        if n:
            spans.append((chunk, int(offsets[0]), int(offsets[-1])))
    for chunk, lo, hi in spans:
        h.update(memoryview(chunk.buffers()[2])[lo:hi])


def _hash_floats(h: Any, values: F64) -> None:
    for lo in range(0, values.size, _PIECE):
        piece = np.ascontiguousarray(values[lo : lo + _PIECE], dtype=np.float64)
        nan = np.isnan(piece)
        if nan.any():  # one NaN pattern for every NaN
            piece = np.where(nan, np.nan, piece)
        h.update(piece)


def _hash_rows(h: Any, rows: NDArray[Any]) -> None:
    for lo in range(0, rows.size, _PIECE):
        h.update(np.ascontiguousarray(rows[lo : lo + _PIECE], dtype=np.int64))


def fingerprint(
    qids: Sequence[str],
    labels: ColumnarLabels,
    runs: Sequence[tuple[str, str | None, ColumnarCandidates]],
) -> str:
    """sha256 of labels and runs, whatever file they came from: labels sorted by
    document within each query, candidates in the run's order."""
    import hashlib

    h = hashlib.sha256()
    _hash_ids(h, list(qids))
    p = labels.pairs
    rows = _rows(qids, labels)[p.q]
    keep = np.flatnonzero(rows >= 0)
    table = pyarrow().table({"r": rows[keep], "d": p.doc_column(keep), "i": keep})
    table = table.sort_by([("r", "ascending"), ("d", "ascending")])
    row = np.asarray(table.column("r").to_numpy(), np.int64)
    docs = table.column("d").combine_chunks()
    at = np.asarray(table.column("i").to_numpy(), np.intp)  # label rows, sorted
    flags = None if labels.distractor is None else np.where(labels.distractor, 1.0, np.nan)
    parts = [
        (b"grades", p.value),
        (b"distractors", flags),
        (b"utilities", labels.utility),
        (b"no_response", labels.no_response),
    ]
    for part, values in parts:  # per part: rows, ids and values of the labels it has
        h.update(part)
        if values is None:
            continue
        sel = ~np.isnan(values[at])
        h.update(row[sel].tobytes())
        _hash_ids(h, docs.filter(sel))
        _hash_floats(h, values[at][sel])
    codes = [labels.code(q) for q in qids]
    stated = [-1 if c is None or labels.stated is None else int(labels.stated[c]) for c in codes]
    h.update(np.asarray(stated, np.int64).tobytes())
    for name, kind, cands in runs:
        h.update(f"run\x00{name}\x00{kind}".encode())
        p = cands.pairs
        in_eval = _rows(qids, cands).astype(np.int32)[p.q]
        if bool((in_eval >= 0).all()) and not bool((in_eval[1:] < in_eval[:-1]).any()):
            _hash_rows(h, in_eval)  # every row, in order (the usual run): no copies
            _hash_ids(h, p.doc_column())
            _hash_floats(h, p.value)
        else:
            keep = np.flatnonzero(in_eval >= 0)
            keep = keep[np.argsort(in_eval[keep], kind="stable")]
            _hash_rows(h, in_eval[keep])
            _hash_ids(h, p.doc_column(keep))
            _hash_floats(h, p.value[keep])
    return h.hexdigest()
