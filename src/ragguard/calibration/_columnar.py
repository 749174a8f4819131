"""The columnar data path: TREC files read column-wise into integer-coded ids and dense
arrays, with no Python object per line.

A file whose fields are separated by single spaces (the usual run) is read by pyarrow's
multi-threaded CSV reader with the space as delimiter and typed columns
(:func:`_typed`); any other file by pyarrow's streaming CSV reader, one line per row (a
delimiter that never occurs in text), split on whitespace by pyarrow's compute kernels,
so tabs and runs of blanks are handled like ``str.split()``. Query ids, and the
documents of labels, are dictionary-encoded (interned) into int32 codes; a run's
document ids stay as read, one Arrow string per row: repeats are found per query from a
64-bit key of each id (:func:`doc_keys`) and confirmed on the text, and labels are
joined to candidates by an Arrow hash join on (query, document) (:func:`label_hits`).
Each row keeps a float64 value and, only where blank, comment or dropped lines make it
differ from the row number, its line (as steps, :class:`Lines`).

The result is **exactly** what the careful line-by-line reader
(:mod:`ragguard.calibration._readers`) returns: the same queries, labels, candidates in
the same order, and the same problems with the same file, line and message. Whenever a
file holds something the fast path does not judge itself (a malformed line, a number
Python and Arrow might parse differently, contradictory labels, whitespace other than
spaces and tabs, text that is not UTF-8), it returns ``None`` and the careful reader
reads the file again: it raises the error naming file, line and field, or reads what
Python reads. Without pyarrow (the ``fast`` extra), the careful reader is used.

The data stay columnar inside the :class:`~ragguard.calibration.evalset.EvalSet`:
:class:`ColumnarCandidates`, :class:`ColumnarLabels` and :class:`ColumnarQueries` are
read-only mappings that build one query's dict or :class:`Labels` only when asked, and
:func:`arrays_from_columnar` converts them into
:class:`~ragguard.calibration.arrays.EvalArrays` with column-wise joins, never touching a
per-candidate Python object.

The column-wise readers of other formats (:mod:`ragguard.calibration._columnar_json`,
:mod:`ragguard.calibration._tables`) build on this module's helpers (:func:`arrow`,
:func:`encode_ids`, :func:`numeric_values`, :func:`repeated_rows`, :func:`same_grades`,
:func:`repeat_events`, :func:`missing_ids`, ...), listed in ``__all__``; it imports none
of them, nor :mod:`ragguard.calibration.evalset`, which sits above every reader.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration._problems import ProblemKind, Reporter
from ragguard.calibration._readers import MAX_GRADE, TREC_QRELS, TREC_RUN, first_content
from ragguard.calibration._records import Labels, Query
from ragguard.calibration.arrays import (
    EvalArrays,
    PaddedRows,
    assemble_arrays,
    ideal_label_utilities,
    label_stats,
    rank_in_chunks,
    ranked_positions,
)
from ragguard.calibration.texts import Texts
from ragguard.calibration.utility import UtilityRules, as_profile, rules_of
from ragguard.profiles import Profile
from ragguard.scores import ScoreKind

__all__ = [
    "ColumnarCandidates",
    "ColumnarLabels",
    "ColumnarQueries",
    "ColumnarRead",
    "CorpusIds",
    "LineNumbers",
    "NeedsCareful",
    "Pairs",
    "Vocab",
    "arrays_from_columnar",
    "arrow",
    "arrow_module",
    "content_blocks",
    "encode_ids",
    "fingerprint",
    "missing_ids",
    "numeric_values",
    "read_qrels",
    "read_run",
    "read_trec",
    "repeat_events",
    "repeated_rows",
    "same_grades",
    "vocab_positions",
    "vocab_take",
]

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

_BLOCK = 1 << 24  # bytes per streamed block
_LINE_DELIMITER = "\x1f"  # never inside a TREC line the fast path accepts (it is whitespace)
# whitespace str.split() splits on besides spaces, tabs, \v, \f (and line ends): such a
# line goes to the careful reader
_EXOTIC = (
    "[\\x1c-\\x1f\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}]"
)


def arrow() -> ModuleType | None:
    """pyarrow, or ``None`` when it is not installed or ``RAGGUARD_COLUMNAR=0`` is set
    (then the careful reader is used)."""
    if os.environ.get("RAGGUARD_COLUMNAR", "1") == "0":
        return None
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        return None


def arrow_module(name: str) -> ModuleType:
    """A pyarrow submodule (``compute``, ``csv``, ``json``); call only where
    :func:`arrow` returned pyarrow."""
    return importlib.import_module(f"pyarrow.{name}")


# --------------------------------------------------------------------------- vocabularies

Vocab = Any  # a pyarrow string array (from files) or a list of str


def vocab_take(vocab: Vocab, codes: NDArray[Any]) -> list[str]:
    """The ids of ``codes`` in ``vocab``."""
    if isinstance(vocab, list):
        return [vocab[i] for i in codes.tolist()]
    out: list[str] = take(vocab, codes).to_pylist()
    return out


def take(column: Any, rows: NDArray[Any]) -> Any:
    """Rows ``rows`` of a pyarrow array, chunked or not, as one array. (pyarrow's own
    ``ChunkedArray.take`` joins every chunk first: a copy of the whole column for a few
    rows.)"""
    if not hasattr(column, "chunks"):
        return column.take(rows)
    pa = arrow()
    assert pa is not None
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


def vocab_list(vocab: Vocab) -> list[str]:
    """All ids of ``vocab`` as Python strings."""
    return vocab if isinstance(vocab, list) else vocab.to_pylist()


def vocab_positions(needles: Vocab, hay: Vocab) -> I64:
    """Position of each id of ``needles`` in ``hay`` (-1 where absent)."""
    pa = arrow()
    if pa is not None and not isinstance(needles, list) and not isinstance(hay, list):
        pc = arrow_module("compute")
        found = pc.index_in(needles, value_set=hay).fill_null(-1)
        out: I64 = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
        return out
    index = {d: i for i, d in enumerate(vocab_list(hay))}
    return np.fromiter((index.get(d, -1) for d in vocab_list(needles)), np.int64)


class CorpusIds(Set[str]):
    """The document ids of a ``corpus.jsonl``, held as one pyarrow string array (no
    Python string per document); :func:`missing_ids` checks many ids at once."""

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
    """Whether each id of ``vocab`` (distinct, or one per row of a run, repeated) is
    missing from ``known``; for :class:`CorpusIds`, column-wise, hashing the smaller
    side."""
    if isinstance(known, CorpusIds) and not isinstance(vocab, list):
        pa = arrow()
        assert pa is not None
        ids = known.ids
        if len(vocab) <= len(ids):  # first the corpus ids found in vocab, then those
            at = vocab_positions(ids, vocab)  # (a position: an id's first row only)
            ids = ids.filter(pa.array(at >= 0))
        out: NDArray[np.bool_] = vocab_positions(vocab, ids) < 0
        return out
    return np.fromiter((doc not in known for doc in vocab_list(vocab)), np.bool_)


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True, eq=False)
class Pairs:
    """(query, document, value) rows with interned query ids, in file order, repeats
    removed.

    Document ids are either interned (``docs`` holds each id once, ``d`` the code of each
    row: labels, JSON-lines files, tables) or kept as read (``d`` is ``None``: ``docs`` is
    the file's document column, row ``i``'s id at ``docs[i]``). A TREC run is read the
    second way: its ids are not hashed into one dictionary (of millions of entries);
    equal ids are found per query (:func:`doc_keys`) and joined to the labels by text
    (:func:`label_hits`).

    Attributes:
        qids: query ids, in order of first appearance (a list).
        docs: document ids (a pyarrow string array, chunked or not, or a list).
        q: (n,) int32 query code of each row.
        d: (n,) int32 position of each row's id in ``docs``, or ``None`` (row ``i``:
            ``docs[i]``).
        value: (n,) float64 score or grade of each row.
        line: 1-based line of each row (see :class:`Lines`), or ``None`` when row ``i``
            is line ``i+1``.
        source: the file read.
    """

    qids: list[str]
    docs: Vocab
    q: NDArray[np.int32]
    d: NDArray[np.int32] | None
    value: F64
    line: Lines | I64 | None
    source: str

    def line_of(self, rows: NDArray[Any]) -> I64:
        """Lines of ``rows``."""
        if self.line is None:
            plus_one: I64 = np.asarray(rows, dtype=np.int64) + 1
            return plus_one
        if isinstance(self.line, Lines):
            return self.line.of(rows)
        picked: I64 = self.line[rows]
        return picked

    def codes(self, rows: NDArray[Any] | None = None) -> NDArray[Any]:
        """Positions in ``docs`` of the ids of ``rows`` (default all)."""
        if self.d is None:
            return np.arange(self.q.size, dtype=np.int64) if rows is None else np.asarray(rows)
        return self.d if rows is None else self.d[rows]

    def doc_ids(self, rows: NDArray[Any]) -> list[str]:
        """Document ids of ``rows``, as Python strings."""
        return vocab_take(self.docs, self.codes(rows))

    def doc_column(self, rows: NDArray[Any] | None = None) -> Any:
        """Document ids of ``rows`` (default all) as a pyarrow string array (chunked or
        not)."""
        pa = arrow()
        assert pa is not None
        if isinstance(self.docs, list):
            return pa.array(self.doc_ids(self.codes() if rows is None else rows), pa.string())
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
        """(rows sorted by query, stable; ``None`` when already grouped) and the start of
        each query's rows in that order (length ``len(qids) + 1``)."""
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
        """Rows per query code."""
        return np.diff(self.grouped[1])

    @cached_property
    def index(self) -> dict[str, int]:
        """Query id -> code."""
        return {q: i for i, q in enumerate(self.qids)}


class Lines:
    """The 1-based line of each row, stored as steps: row ``r`` is line ``r + 1 +
    shift``, where ``shift`` (the blank, comment and dropped lines before it) changes only
    at a few rows. A file with a few such lines keeps a few numbers, not one per row."""

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
        """Lines of ``rows``."""
        r = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.starts, r, side="right") - 1
        out: I64 = r + 1 + self.shift[np.maximum(at, 0)]
        return out

    def without(self, removed: NDArray[Any]) -> Lines:
        """The lines of the rows left when the (sorted, distinct) rows ``removed`` are
        taken out; computed at the steps only, never per row."""
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


# --------------------------------------------------------------------------- mappings


class _ByQuery(Mapping[str, Any]):
    """A read-only mapping over some query codes of :class:`Pairs`, in a given order."""

    def __init__(self, pairs: Pairs, codes: Sequence[int] | None = None) -> None:
        self.pairs = pairs
        self.codes: list[int] = list(range(len(pairs.qids))) if codes is None else list(codes)
        self._keys = [pairs.qids[c] for c in self.codes]
        self._index = dict(zip(self._keys, self.codes, strict=True))

    def code(self, qid: str) -> int | None:
        return self._index.get(qid)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, qid: object) -> bool:
        return qid in self._index

    def _docs(self, code: int) -> tuple[list[str], F64]:
        rows = self.pairs.rows_of(code)
        return self.pairs.doc_ids(rows), self.pairs.value[rows]


class ColumnarCandidates(_ByQuery):
    """``{query_id: {doc_id: score}}`` of a run read column-wise; one query's dict is
    built when asked for."""

    def __getitem__(self, qid: str) -> dict[str, float]:
        code = self._index[qid]
        docs, values = self._docs(code)
        return dict(zip(docs, values.tolist(), strict=True))

    def restrict(self, qids: Mapping[str, object]) -> tuple[ColumnarCandidates, list[str]]:
        """The queries also in ``qids`` (the same run, their order kept) and the others."""
        kept = [c for k, c in zip(self._keys, self.codes, strict=True) if k in qids]
        dropped = [k for k in self._keys if k not in qids]
        return ColumnarCandidates(self.pairs, kept), dropped

    def size(self, qid: str) -> int:
        """Number of candidates of ``qid``."""
        return int(self.pairs.counts()[self._index[qid]])

    def has_score(self) -> bool:
        """Whether any candidate of these queries has a valid (non-NaN) score."""
        p = self.pairs
        if len(self.codes) == len(p.qids):
            return bool((~np.isnan(p.value)).any())
        mask = np.zeros(len(p.qids), dtype=np.bool_)
        mask[self.codes] = True
        return bool((~np.isnan(p.value[mask[p.q]])).any())

    def first_lines(self) -> Mapping[str, int]:
        """Query id -> line of its first candidate."""
        return _FirstLines(self)


class _FirstLines(Mapping[str, int]):
    def __init__(self, cands: ColumnarCandidates) -> None:
        self.cands = cands

    def __getitem__(self, qid: str) -> int:
        code = self.cands.code(qid)
        if code is None:
            raise KeyError(qid)
        rows = self.cands.pairs.rows_of(code)
        return int(self.cands.pairs.line_of(rows[:1])[0])

    def __len__(self) -> int:
        return len(self.cands)

    def __iter__(self) -> Iterator[str]:
        return iter(self.cands)


class ColumnarLabels(_ByQuery):
    """``{query_id: Labels}`` of qrels read column-wise (grades only)."""

    def __getitem__(self, qid: str) -> Labels:
        docs, values = self._docs(self._index[qid])
        return Labels(dict(zip(docs, map(int, values.tolist()), strict=True)))

    def unanswerable(self) -> list[str]:
        """The query ids judged (at least one label) with no relevant (grade >= 1) label,
        in order (see :attr:`EvalSet.unanswerable
        <ragguard.calibration.evalset.EvalSet.unanswerable>`)."""
        p = self.pairs
        n = len(p.qids)
        judged = np.bincount(p.q, minlength=n)
        relevant = np.bincount(p.q[p.value >= 1], minlength=n)
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


class ColumnarQueries(Mapping[str, "Query"]):
    """``{query_id: Query}`` (ids only) for the queries of some labels."""

    def __init__(self, keys: Mapping[str, object]) -> None:
        self._keys = keys

    def __getitem__(self, qid: str) -> Query:
        if qid not in self._keys:
            raise KeyError(qid)
        return Query(qid)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, qid: object) -> bool:
        return qid in self._keys


# --------------------------------------------------------------------------- reading

_LAYOUT = {
    "run": (6, (0, 2, 4)),  # query_id Q0 doc_id rank score tag
    "qrels": (4, (0, 2, 3)),  # query_id iteration doc_id grade
}


def _stream(path: Path) -> Any:
    """A streaming reader of ``path``'s lines (one string column, blank lines kept)."""
    pa = arrow()
    assert pa is not None
    csv = arrow_module("csv")
    gz = path.name.lower().endswith(".gz")
    source = pa.input_stream(str(path), compression="gzip" if gz else None)
    parse, convert = _csv_options(_LINE_DELIMITER, {"line": pa.string()})
    return csv.open_csv(
        source,
        read_options=csv.ReadOptions(column_names=["line"], block_size=_BLOCK, use_threads=True),
        parse_options=parse,
        convert_options=convert,
    )


def _csv_options(delimiter: str, types: dict[str, Any]) -> tuple[Any, Any]:
    """pyarrow CSV parse and convert options that read text as it is: no quoting or
    escapes, blank lines kept (as rows), nothing read as null; only the columns of
    ``types`` kept, with those types."""
    csv = arrow_module("csv")
    parse = csv.ParseOptions(
        delimiter=delimiter,
        quote_char=False,
        double_quote=False,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=False,
    )
    convert = csv.ConvertOptions(
        column_types=types,
        include_columns=list(types),
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return parse, convert


class NeedsCareful(Exception):
    """Raised inside the column-wise readers: the careful reader must read the file."""


class LineNumbers:
    """The file line of each content row kept across streamed blocks; ``None`` while
    row ``i`` is line ``i + 1`` (no blank or comment line so far)."""

    def __init__(self) -> None:
        self.seen = 0
        self.trivial = True
        self._parts: list[I64] = []

    def add(self, mask: NDArray[np.bool_] | None, n: int) -> None:
        """A block of ``n`` lines of which ``mask`` are kept (``None``: all)."""
        if mask is None:
            if not self.trivial:
                self._parts.append(np.arange(self.seen + 1, self.seen + n + 1, dtype=np.int64))
        else:
            if self.trivial:
                self._parts.append(np.arange(1, self.seen + 1, dtype=np.int64))
                self.trivial = False
            self._parts.append(np.flatnonzero(mask).astype(np.int64) + self.seen + 1)
        self.seen += n

    def result(self) -> I64 | None:
        if self.trivial:
            return None
        return np.concatenate(self._parts) if self._parts else np.zeros(0, np.int64)


def content_blocks(
    path: Path,
    lines: LineNumbers,
    *,
    comment: Callable[[str], bool],
    is_header: Callable[[str], bool] | None = None,
) -> Iterator[Any]:
    """The content lines of each streamed block of ``path`` (trimmed; blank lines and
    comments left out, and line 1 when ``is_header(line 1)`` says so), their line
    numbers recorded in ``lines``. Lines starting with ``#`` are few: each is asked
    ``comment(line)``, the careful reader's own rule (a ``#`` line that can be a record
    is one, see :class:`~ragguard.calibration._readers.Layout`). Raises
    :class:`NeedsCareful` on whitespace ``str.split()`` knows but the fast path does
    not. Each block's memory goes back to the system once the caller is done with it
    (pyarrow's allocator would otherwise keep it)."""
    pa = arrow()
    assert pa is not None
    pc = arrow_module("compute")
    pool = pa.default_memory_pool()
    for batch in _stream(path):
        text = batch.column(0)
        n = len(text)
        if pc.any(pc.match_substring_regex(text, _EXOTIC)).as_py():
            raise NeedsCareful
        trimmed = pc.ascii_trim_whitespace(text)
        keep = pc.not_equal(trimmed, "")
        hashed = pc.starts_with(trimmed, "#")
        if pc.any(hashed).as_py():
            at = np.flatnonzero(hashed.to_numpy(zero_copy_only=False))
            dropped = at[list(map(comment, trimmed.take(at).to_pylist()))]
            mask = keep.to_numpy(zero_copy_only=False).copy()
            mask[dropped] = False
            keep = pa.array(mask)
        if is_header is not None and lines.seen == 0 and n and is_header(text[0].as_py()):
            keep = pc.and_(keep, pa.array(np.arange(n) > 0))
        if pc.all(keep).as_py():
            lines.add(None, n)
            yield trimmed
        else:
            lines.add(keep.to_numpy(zero_copy_only=False), n)
            yield pc.filter(trimmed, keep)
        del text, trimmed, keep
        pool.release_unused()


# bytes of the whitespace str.split() splits on other than the space (and line ends):
# tabs, \v, \f, \x1c-\x1f, and (UTF-8) \x85, \xa0, \u1680, \u2000-\u200a, \u2028,
# \u2029, \u202f, \u205f, \u3000
_OTHER_SPACE = re.compile(
    rb"[\t\x0b\x0c\x1c-\x1f]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]"
    rb"|\xe2\x81\x9f|\xe3\x80\x80"
)
_ASCII_SPACE = (b"\t", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f")


def _only_spaces(path: Path) -> bool:
    """Whether the only whitespace inside ``path``'s lines is the space (a plain file,
    not gzip): then each line is its fields joined by single spaces, or the CSV reader
    rejects it. ``bytes.find`` per block; the regular expression only on non-ASCII
    blocks."""
    if path.name.lower().endswith(".gz"):
        return False
    tail = b""
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            text = tail + block
            if text.isascii():
                if any(b in text for b in _ASCII_SPACE):
                    return False
            elif _OTHER_SPACE.search(text):
                return False
            tail = block[-2:]  # a UTF-8 space split across two blocks
    return True


def _typed(path: Path, kind: str) -> tuple[Any, Any, F64, None] | None:
    """The id, document and value columns of a TREC file whose fields are separated by
    single spaces, read by pyarrow's multi-threaded CSV reader with the space as
    delimiter and the value column typed; ``None`` when the file is not that plain
    (other whitespace, a blank line, a line with too few or many fields, such as most
    comments, a value that does not parse): the line-wise split reads it then."""
    pa = arrow()
    assert pa is not None
    csv = arrow_module("csv")
    pc = arrow_module("compute")
    if not _only_spaces(path):
        return None
    n_cols, (qi, di, vi) = _LAYOUT[kind]
    names = [f"f{i}" for i in range(n_cols)]
    types = {names[qi]: pa.string(), names[di]: pa.string()}
    types[names[vi]] = pa.int64() if kind == "qrels" else pa.float64()
    parse, convert = _csv_options(" ", types)
    try:
        table = csv.read_csv(
            str(path),
            read_options=csv.ReadOptions(column_names=names, block_size=_BLOCK),
            parse_options=parse,
            convert_options=convert,
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, EOFError, UnicodeDecodeError):
        return None
    q, d = table.column(names[qi]), table.column(names[di])
    # an empty first field is a blank line (a line starting with "#" that parsed into
    # typed columns can be a record, so it is one: see _readers.Layout)
    if table.num_rows and pc.any(pc.equal(q, "")).as_py():
        return None
    values = np.asarray(table.column(names[vi]).to_numpy(), dtype=np.float64)
    if kind == "qrels" and values.size and (values.max() > MAX_GRADE or values.min() < 0):
        return None  # the careful reader collects -1 (distractors) and names the line
    return q, d, values, None


def _split(path: Path, kind: str) -> tuple[Any, Any, F64, I64 | None] | None:
    """The id and document columns (pyarrow arrays), the values and the line of each
    row of a TREC file, or ``None`` when the careful reader must read it."""
    pa = arrow()
    assert pa is not None
    typed = _typed(path, kind)
    if typed is not None:
        return typed
    pc = arrow_module("compute")
    n_cols, (qi, di, vi) = _LAYOUT[kind]
    layout = TREC_RUN if kind == "run" else TREC_QRELS
    qs: list[Any] = []
    ds: list[Any] = []
    vs: list[Any] = []
    lines = LineNumbers()

    def comment(line: str) -> bool:
        return layout.comment(line, line.split())

    try:
        for content in content_blocks(path, lines, comment=comment):
            parts = pc.ascii_split_whitespace(content)
            if len(content) and not pc.all(pc.equal(pc.list_value_length(parts), n_cols)).as_py():
                return None
            qs.append(pc.list_element(parts, qi))
            ds.append(pc.list_element(parts, di))
            values = numeric_values(pc.list_element(parts, vi), kind)  # per block: 8 bytes a row
            if values is None:
                return None
            vs.append(values)
            del parts
    except NeedsCareful:
        return None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, EOFError, UnicodeDecodeError):
        return None
    string = pa.string()
    q = pa.chunked_array(qs, type=string)
    d = pa.chunked_array(ds, type=string)
    v = np.concatenate(vs) if vs else np.zeros(0)
    return q, d, v, lines.result()


def encode_ids(column: Any) -> tuple[Any, NDArray[np.int32]]:
    """(dictionary, int32 codes) of a chunked string column, ids in order of first
    appearance."""
    pa = arrow()
    assert pa is not None
    enc = column.dictionary_encode()
    if enc.num_chunks == 0:
        return pa.array([], pa.string()), np.zeros(0, np.int32)
    dictionary = enc.chunk(0).dictionary
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks]).astype(
        np.int32, copy=False
    )
    return dictionary, codes


def numeric_values(column: Any, kind: str) -> F64 | None:
    """The score (``kind="run"``, float) or grade (``kind="qrels"``, integer) column as
    float64, or ``None`` when a value needs the careful reader (not a number Arrow
    parses, a grade above the maximum, a negative grade: -1 marks a known distractor,
    which the careful reader collects)."""
    pa = arrow()
    assert pa is not None
    pc = arrow_module("compute")
    try:
        if kind == "qrels":
            grades = pc.cast(column, pa.int64()).to_numpy()
            if grades.size and (int(grades.max()) > MAX_GRADE or int(grades.min()) < 0):
                return None
            as_float: F64 = grades.astype(np.float64)
            return as_float
        # text Arrow rejects (Python's float() reads a few spellings Arrow does not,
        # such as "1_000") goes to the careful reader
        out: F64 = np.asarray(pc.cast(column, pa.float64()).to_numpy(), dtype=np.float64)
        return out
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return None


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


def read_trec(
    path: Path, kind: str, rep: Reporter, *, known_docs: Set[str] | None = None
) -> Pairs | None:
    """A TREC run (``kind="run"``) or qrels (``kind="qrels"``) file, column-wise.

    Problems go to ``rep`` exactly as the careful reader reports them (same kinds,
    messages, lines, order). Returns ``None`` when pyarrow is missing or the file needs
    the careful reader (see the module docstring). A run's document ids stay as read (one
    per line, see :class:`Pairs`); labels' are interned.
    """
    pa = arrow()
    if pa is None:
        return None
    split = _split(path, kind)
    if split is None:
        return None
    qcol, dcol, value, line_array = split
    del split
    qvocab, q = encode_ids(qcol)
    del qcol
    line = None if line_array is None else Lines(line_array)
    del line_array
    if kind == "run":
        keys = doc_keys(dcol)
        pairs = Pairs(qvocab.to_pylist(), dcol, q, None, value, line, str(path))
        repeats = _text_repeats(pairs, keys)
        del keys
    else:
        docs, d = encode_ids(dcol)
        pairs = Pairs(qvocab.to_pylist(), docs, q, d, value, line, str(path))
        repeats = repeated_rows(q, d, len(docs))
    del dcol
    pa.default_memory_pool().release_unused()
    events: list[tuple[int, int, ProblemKind, str, str | None]] = []
    if repeats.size:
        if kind == "qrels" and not same_grades(pairs, repeats):
            return None  # contradictory grades: the careful reader names the line
        events.extend(repeat_events(pairs, repeats, kind))
        keep = np.ones(q.size, dtype=np.bool_)
        keep[repeats] = False
        kept_line = Lines.of_steps(pairs.line).without(repeats)
        kept_docs, kept_codes = pairs.docs, pairs.d
        if kept_codes is None:  # ids as read: the repeated ones leave the column
            kept_docs = kept_docs.filter(pa.array(keep))
        else:
            kept_codes = kept_codes[keep]
        pairs = Pairs(
            pairs.qids, kept_docs, q[keep], kept_codes, value[keep], kept_line, str(path)
        )  # fmt: skip
    if kind == "run":
        events.extend(_run_events(pairs, known_docs))
    events.sort(key=lambda e: (e[0], e[1]))
    for line_no, _, pk, message, fld in events:
        rep(pk, message, path=str(path), line=line_no, field=fld)
    return pairs


_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser: every input bit moves every output bit (wraps mod 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX_1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX_2
    out: NDArray[np.uint64] = x ^ (x >> np.uint64(31))
    return out


def doc_keys(column: Any) -> NDArray[np.uint64]:
    """A 64-bit key of each id of a pyarrow string column (chunked or not): equal ids
    have equal keys; different ids seldom do (callers compare the text of equal keys).
    The key is an id's first 8 bytes, read as one unaligned 64-bit word, with its length
    and (for longer ids) its last 8 bytes mixed in: no per-id Python and no hash
    table."""
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    step = 1 << 20  # ids a piece: the temporaries stay near 8 MB each
    parts = [
        _chunk_keys(c.slice(lo, step)) for c in chunks for lo in range(0, max(len(c), 1), step)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _chunk_keys(arr: Any) -> NDArray[np.uint64]:
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.uint64)
    wide = str(arr.type) in ("large_string", "large_utf8")
    buffer = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)
    offsets: I64 = buffer[arr.offset : arr.offset + n + 1].astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    text = np.zeros(hi - lo + 16, np.uint8)  # 8 zero bytes on each side: reads stay inside
    if hi > lo:
        text[8 : 8 + hi - lo] = np.frombuffer(arr.buffers()[2], np.uint8)[lo:hi]
    words: NDArray[np.uint64] = np.ndarray((text.size - 7,), dtype="<u8", buffer=text, strides=(1,))
    start = offsets[:-1] - lo + 8
    length = offsets[1:] - offsets[:-1]
    key: NDArray[np.uint64] = words[start]
    key &= _LOW_BYTES[np.minimum(length, 8)]
    key ^= length.astype(np.uint64) * _MIX_2
    long = np.flatnonzero(length > 8)
    if long.size:  # the last 8 bytes too (overlapping the first up to 16 bytes)
        key[long] ^= _mix(words[start[long] + length[long] - 8])
    return key


def _text_repeats(pairs: Pairs, keys: NDArray[np.uint64]) -> NDArray[np.intp]:
    """Rows repeating an earlier row's (query, document), in row order, for ids kept as
    read: rows whose (query, key) occurs twice are candidates, and their text decides."""
    q = pairs.q
    n = q.size
    if n < 2:
        return np.zeros(0, np.intp)
    counts = np.bincount(q)
    if not bool((q[1:] < q[:-1]).any()) and bool((counts == counts[0]).all()):
        # one block per query, all of one size (the usual run): sort each query's keys
        by_row = np.sort(keys.reshape(counts.size, int(counts[0])), axis=1)
        twice = np.flatnonzero((by_row[:, 1:] == by_row[:, :-1]).any(axis=1))
        rows = (twice[:, None] * int(counts[0]) + np.arange(int(counts[0]))).ravel()
    else:
        mixed = keys ^ _mix(q.astype(np.uint64) + np.uint64(1))
        ordered = np.sort(mixed)
        again = ordered[1:][ordered[1:] == ordered[:-1]]
        if again.size == 0:
            return np.zeros(0, np.intp)
        at = np.minimum(np.searchsorted(again, mixed), again.size - 1)
        rows = np.flatnonzero(again[at] == mixed)
    seen: set[tuple[int, str]] = set()
    out: list[int] = []
    for row, code, doc in zip(rows.tolist(), q[rows].tolist(), pairs.doc_ids(rows), strict=True):
        if (code, doc) in seen:
            out.append(row)
        else:
            seen.add((code, doc))
    return np.asarray(out, dtype=np.intp)


def same_grades(pairs: Pairs, repeats: NDArray[np.intp]) -> bool:
    """Whether every repeated label has the grade of its first occurrence."""
    first: dict[tuple[int, int], float] = {}
    again = set(repeats.tolist())
    codes = pairs.codes()
    width = max(len(pairs.docs), 1)
    rows = np.flatnonzero(
        np.isin(pairs.q.astype(np.int64) * width + codes,
                pairs.q[repeats].astype(np.int64) * width + codes[repeats])
    )  # fmt: skip
    for r in rows.tolist():
        key = (int(pairs.q[r]), int(codes[r]))
        if r in again:
            if first[key] != pairs.value[r]:
                return False
        else:
            first.setdefault(key, float(pairs.value[r]))
    return True


def repeat_events(
    pairs: Pairs, repeats: NDArray[np.intp], kind: str
) -> list[tuple[int, int, ProblemKind, str, str | None]]:
    """The problems of the repeated rows ``repeats`` (:func:`repeated_rows`), as the
    careful reader reports them: ``(line, 0, kind, message, field)`` per row, a repeated
    candidate for ``kind="run"``, a repeated label otherwise."""
    docs = pairs.doc_ids(repeats)
    lines = pairs.line_of(repeats).tolist()
    out: list[tuple[int, int, ProblemKind, str, str | None]] = []
    for r, doc, ln in zip(repeats.tolist(), docs, lines, strict=True):
        qid = pairs.qids[int(pairs.q[r])]
        if kind == "run":
            msg = f"document {doc!r} appears twice in query {qid!r}"
            out.append((ln, 0, ProblemKind.DUPLICATE_CANDIDATE, msg, None))
        else:
            msg = f"query {qid!r}, document {doc!r} is labelled twice"
            out.append((ln, 0, ProblemKind.DUPLICATE_LABEL, msg, None))
    return out


def _run_events(
    pairs: Pairs, known_docs: Set[str] | None
) -> list[tuple[int, int, ProblemKind, str, str | None]]:
    out: list[tuple[int, int, ProblemKind, str, str | None]] = []
    if known_docs is not None:
        unknown = missing_ids(pairs.docs, known_docs)  # per id of docs: per row when d is None
        if pairs.d is not None and unknown.size:
            unknown = unknown[pairs.d]
        rows = np.flatnonzero(unknown)
        docs = pairs.doc_ids(rows)
        for r, doc, ln in zip(rows.tolist(), docs, pairs.line_of(rows).tolist(), strict=True):
            qid = pairs.qids[int(pairs.q[r])]
            msg = f"run document {doc!r} (query {qid!r}) is not in corpus.jsonl"
            out.append((ln, 1, ProblemKind.UNKNOWN_DOCUMENT, msg, None))
    bad = np.flatnonzero(~np.isfinite(pairs.value))
    if bad.size:
        docs = pairs.doc_ids(bad)
        for r, doc, ln in zip(bad.tolist(), docs, pairs.line_of(bad).tolist(), strict=True):
            qid = pairs.qids[int(pairs.q[r])]
            score = float(pairs.value[r])
            msg = f"document {doc!r} of query {qid!r} has score {score!r}"
            out.append((ln, 2, ProblemKind.INVALID_SCORE, msg, "score"))
    return out


@dataclass
class ColumnarRead:
    """Labels read column-wise, shaped like :class:`~ragguard.calibration._readers.ReadResult`."""

    queries: Mapping[str, Query]
    labels: ColumnarLabels
    label_lines: Mapping[str, tuple[str | None, int | None]]
    runs: dict[str, tuple[Mapping[str, Mapping[str, float]], Mapping[str, int]]]
    corpus: Set[str] | None = None
    texts: Texts = field(default_factory=Texts)


def read_qrels(path: Path, rep: Reporter) -> ColumnarRead | None:
    """A TREC qrels file column-wise; ``None`` when the careful reader must read it."""
    pairs = read_trec(path, "qrels", rep)
    if pairs is None:
        return None
    labels = ColumnarLabels(pairs)
    return ColumnarRead(ColumnarQueries(labels), labels, labels.label_lines(), {})


def read_run(
    path: Path, rep: Reporter, *, known_docs: Set[str] | None = None
) -> tuple[ColumnarCandidates, Mapping[str, int]] | None:
    """A TREC run file, column-wise (``None``: read it with the careful reader)."""
    head, _ = first_content(path)
    if head.startswith("{"):
        return None
    pairs = read_trec(path, "run", rep, known_docs=known_docs)
    if pairs is None:
        return None
    cands = ColumnarCandidates(pairs)
    return cands, cands.first_lines()


# --------------------------------------------------------------------------- arrays


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
    """:class:`EvalArrays` of a run and labels read column-wise (as
    :func:`~ragguard.calibration.arrays.build_arrays` gives for the same data)."""
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
    return arrays_from_codes(
        qids,
        crow,
        cscore,
        lrow[lm],
        lp.value[lm],
        hit_cand,
        hit_label,
        candidates=_RowCandidates(run, qids),
        score_kind=score_kind,
        profile=profile,
        rules=rules,
    )


def label_hits(
    run: Pairs, crow: NDArray[np.intp], labels: Pairs, lrow: NDArray[np.intp]
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(run row, label row) of every label naming a candidate of the same eval row
    (``crow``, ``lrow``: each row's eval row, -1 for none): a hash join on (eval row,
    document id) in Arrow, built on the labels (the smaller side) and probed by the run,
    so no dictionary of the run's ids is needed."""
    pa = arrow()
    assert pa is not None
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
    joined = left.join(right, keys=["r", "d"], join_type="inner", use_threads=True)
    cand = np.asarray(joined.column("i").to_numpy(), dtype=np.intp)
    lab = np.asarray(joined.column("j").to_numpy(), dtype=np.intp)
    del joined, left
    pa.default_memory_pool().release_unused()
    return cand, lab


def arrays_from_codes(
    qids: Sequence[str],
    crow: NDArray[np.intp],
    cscore: F64,
    lrow: NDArray[np.intp],
    lgrade: F64,
    hit_cand: NDArray[np.intp],
    hit_label: NDArray[np.intp],
    *,
    candidates: Sequence[Mapping[str, float]],
    score_kind: ScoreKind | str | None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    rrf_k: int = 60,
) -> EvalArrays:
    """:class:`EvalArrays` from integer-coded rows.

    Candidates: eval row ``crow`` and raw score ``cscore``, in the run's order within
    each row. Labels: eval row ``lrow`` and grade ``lgrade``. ``hit_cand[i]`` and
    ``hit_label[i]`` are a candidate and the label of its document. ``candidates`` gives
    each row's ``{doc_id: score}`` for :meth:`EvalArrays.doc_ids`.
    """
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
    counts = np.bincount(crow, minlength=n_q).astype(np.intp)
    width = int(counts.max()) if n_q else 0
    starts = np.zeros(n_q, dtype=np.intp)
    np.cumsum(counts[:-1], out=starts[1:])
    if crow.size == n_q * width:  # every row full: the scores as they are, no copy
        raw: F64 | PaddedRows = np.ascontiguousarray(cscore, dtype=np.float64).reshape(n_q, width)
    else:  # kept flat; each chunk of rows padded while it is ranked
        raw = PaddedRows(np.asarray(cscore, dtype=np.float64), counts, width)
    padded = raw

    def raw_rows(lo: int, hi: int) -> F64:
        return padded[lo:hi] if isinstance(padded, np.ndarray) else padded[lo:hi].dense()

    ranked = rank_in_chunks(raw_rows, counts, width, kind, rrf_k, raw)

    # ranked position of each hit: where its input column sits in its row's order
    hrow = crow[hit_cand]
    hcol = (hit_cand - starts[hrow]).astype(ranked.order.dtype)
    hpos = ranked_positions(ranked.order, hrow, hcol)
    g = np.zeros((n_q, width))
    g[hrow, hpos] = lgrade[hit_label]
    judged = np.zeros((n_q, width), dtype=np.bool_)
    judged[hrow, hpos] = True

    stats = label_stats(qids, np.asarray(lrow, dtype=np.intp), lgrade, None)
    ideal_u = ideal_label_utilities(
        qids, (), stats.ideal_grades, None, None, stats.extra_rows, rules
    )
    return assemble_arrays(
        qids, kind, prof, rules, counts, ranked, g, judged, stats, ideal_u, candidates,
    )  # fmt: skip


# --------------------------------------------------------------------------- fingerprint


_PIECE = 1 << 20  # values fed to the hash at a time (the same bytes, fed in pieces)


def _hash_ids(h: Any, ids: Vocab) -> None:
    """Feed ids to ``h`` as their UTF-8 byte lengths then their bytes (the same for a
    list and a pyarrow array of the same ids)."""
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
    labels: Mapping[str, Labels],
    runs: Sequence[tuple[str, str | None, Mapping[str, Mapping[str, float]]]],
) -> str:
    """sha256 of labels and runs, the same whether they were read column-wise or not:
    labels sorted by document within each query, candidates in the run's order."""
    import hashlib

    h = hashlib.sha256()
    _hash_ids(h, list(qids))
    if isinstance(labels, ColumnarLabels):
        p = labels.pairs
        rows = _rows(qids, labels)[p.q]
        keep = np.flatnonzero(rows >= 0)
        pa = arrow()
        assert pa is not None
        table = pa.table({"r": rows[keep], "d": p.doc_column(keep), "v": p.value[keep]})
        table = table.sort_by([("r", "ascending"), ("d", "ascending")])
        h.update(b"grades")
        h.update(np.asarray(table.column("r").to_numpy(), np.int64).tobytes())
        _hash_ids(h, table.column("d").combine_chunks())
        _hash_floats(h, np.asarray(table.column("v").to_numpy(), np.float64))
        for part in (b"distractors", b"utilities", b"no_response"):
            h.update(part)
        h.update(np.full(len(qids), -1, np.int64).tobytes())
    else:
        labs = [labels[q] for q in qids]
        parts: list[tuple[bytes, list[Mapping[str, float]]]] = [
            (b"grades", [lab.grades for lab in labs]),
            (b"distractors", [dict.fromkeys(lab.distractors, 1.0) for lab in labs]),
            (b"utilities", [lab.utilities for lab in labs]),
            (b"no_response", [lab.no_response for lab in labs]),
        ]
        for i, (part, maps) in enumerate(parts):
            h.update(part)
            items = [sorted(m.items()) for m in maps]
            if i and not any(items):
                continue
            rows = np.repeat(np.arange(len(qids), dtype=np.int64), list(map(len, items)))
            h.update(rows.tobytes())
            flat = [kv for row in items for kv in row]
            _hash_ids(h, [k for k, _ in flat])
            _hash_floats(h, np.array([float(v) for _, v in flat], dtype=np.float64))
        stated = [-1 if lab.n_relevant is None else lab.n_relevant for lab in labs]
        h.update(np.asarray(stated, np.int64).tobytes())
    for name, kind, cands in runs:
        h.update(f"run\x00{name}\x00{kind}".encode())
        if isinstance(cands, ColumnarCandidates):
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
        else:
            empty: Mapping[str, float] = {}
            per = [cands.get(q, empty) for q in qids]
            rows = np.repeat(np.arange(len(qids), dtype=np.int64), list(map(len, per)))
            h.update(rows.tobytes())
            _hash_ids(h, [d for m in per for d in m])
            _hash_floats(h, np.array([float(s) for m in per for s in m.values()], np.float64))
    return h.hexdigest()
