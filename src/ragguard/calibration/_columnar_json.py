"""BEIR folders and ragguard JSONL eval sets read column-wise.

A BEIR folder's ``corpus.jsonl`` and ``queries.jsonl`` are read by pyarrow's JSON reader
with an explicit schema (every other field skipped; a corpus's ids, texts and titles stay
Arrow string arrays, :mod:`ragguard.calibration.texts` builds Python strings of the
texts only when asked), ``qrels/<split>.tsv`` by pyarrow's streaming CSV
reader into integer-coded ids, like TREC files (:mod:`ragguard.calibration._columnar`).
A JSONL eval set is read by the JSON reader block by block into the same integer-coded
labels and candidates, when its shape allows (see :func:`read_jsonl`).

The result is **exactly** what the careful reader (``_read_beir`` / ``_read_jsonl`` in
:mod:`ragguard.calibration._readers`) returns: the same queries, texts, labels,
candidates and problems (file, line, field, message, order). A JSON-lines file is read
column-wise only when every non-blank line is one JSON object on its own (it starts with
``{`` and ends with ``}``, and pyarrow finds as many objects as there are such lines),
it is UTF-8, and no literal Python's ``json`` rejects (``Inf``, ``-NaN``) may hide in
it. Anything else (a malformed line, an id that is a number, a negative grade, a
``distractors.tsv``, an unusual header or whitespace, a shape pyarrow cannot read
column-wise) returns ``None``, and the careful reader reads the data again to name
file, line and field, or to read what Python reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration import _columnar
from ragguard.calibration._columnar import (
    ColumnarCandidates,
    ColumnarLabels,
    ColumnarQueries,
    ColumnarRead,
    CorpusIds,
    Pairs,
    arrow_module,
    check_grades,
    encode_ids,
    missing_ids,
    repeat_events,
    repeated_rows,
    vocab_positions,
    vocab_take,
)
from ragguard.calibration._problems import ProblemKind, Reporter
from ragguard.calibration._readers import (
    BEIR_DISTRACTORS,
    BEIR_HEADERS,
    BEIR_QRELS,
    CANDIDATE_FIELDS,
    beir_split,
)
from ragguard.calibration._records import Query
from ragguard.calibration.delimited import read_fields, split_tsv
from ragguard.calibration.texts import ArrowCorpus, ArrowPairTexts, Texts, TextSource
from ragguard.errors import EvalSetError

__all__ = ["read_beir", "read_jsonl"]

I64 = NDArray[np.int64]
Event = tuple[int, int, ProblemKind, str, str | None]

_BLOCK = 1 << 24  # bytes of whole lines parsed at a time


class NeedsCareful(Exception):
    """Raised inside the column-wise JSON readers: the careful reader must read the file."""


_BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------- JSON lines


def _line_blocks(path: Path) -> Iterator[memoryview]:
    """``path``'s bytes (gunzipped when its name ends in ``.gz``, a leading byte order
    mark dropped) in blocks of whole lines, each ending with a newline: views of a new
    buffer per block, from its start, read into without copies."""
    pa = _columnar.arrow()
    assert pa is not None
    gz = path.name.lower().endswith(".gz")
    rest = b""
    first = True
    with pa.input_stream(str(path), compression="gzip" if gz else None) as stream:
        while True:
            buf = bytearray(len(rest) + _BLOCK)
            buf[: len(rest)] = rest
            view = memoryview(buf)
            n = len(rest)
            while n < len(buf) and (got := stream.readinto(view[n:])):
                n += got
            if first and buf.startswith(_BOM):
                del view
                del buf[: len(_BOM)]
                n -= len(_BOM)
            first = False
            if n < len(buf):  # the end of the file
                if n and buf[n - 1] != 0x0A:
                    buf[n] = 0x0A
                    n += 1
                if n:
                    yield memoryview(buf)[:n]
                return
            cut = buf.rfind(b"\n", 0, n) + 1
            if cut:
                yield memoryview(buf)[:cut]
            rest = bytes(buf[cut:n])


def _object_lines(block: memoryview) -> tuple[NDArray[np.intp], NDArray[np.intp], int] | None:
    """0-based indices of the non-blank lines of ``block``, the byte offset where each
    starts and its number of lines, or
    ``None`` unless each such line looks like one JSON object the careful reader reads
    alike: it starts with ``{`` and ends with ``}`` (before a ``\\r\\n``), no ``\\r``
    ends a line on its own, and no bare ``Inf`` / ``-Inf`` / ``-NaN`` (which pyarrow
    reads and Python's json rejects) may be in it. Lines of spaces and tabs are blank; a
    line with other leading or trailing whitespace goes to the careful reader."""
    a = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(a == 10)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    if np.count_nonzero(a == 13):
        cr = np.flatnonzero(a == 13)
        if not bool((a[cr + 1] == 10).all()):
            return None  # a lone \r: Python's universal newlines end a line there
        ends = ends - ((ends > starts) & (a[ends - 1] == 13))
    full = np.flatnonzero(ends > starts)
    odd = full[(a[starts[full]] != 0x7B) | (a[ends[full] - 1] != 0x7D)]
    if odd.size:
        if any(bytes(block[starts[i] : ends[i]]).strip(b" \t") for i in odd.tolist()):
            return None
        full = np.setdiff1d(full, odd)
    return None if _bare_literals(a) else (full, starts[full], ends.size)


def _has(block: memoryview, needle: bytes) -> bool:
    """Whether ``needle`` occurs in ``block`` (a view of bytes from their start)."""
    raw: bytes = block.obj  # type: ignore[assignment]
    return raw.find(needle, 0, len(block)) >= 0


_DELIMITERS = np.frombuffer(b" \t\r\n,]}", dtype=np.uint8)


def _bare_literals(a: NDArray[np.uint8]) -> bool:
    """Whether ``Inf`` or ``-NaN`` followed by a JSON delimiter occurs (maybe inside a
    string: then the careful reader reads the file, which it would read alike)."""
    at = np.flatnonzero(a[:-3] == ord("I"))
    at = at[(a[at + 1] == ord("n")) & (a[at + 2] == ord("f"))]
    if at.size and bool(np.isin(a[at + 3], _DELIMITERS).any()):
        return True
    at = np.flatnonzero(a[1:-3] == ord("N")) + 1
    at = at[(a[at - 1] == ord("-")) & (a[at + 1] == ord("a")) & (a[at + 2] == ord("N"))]
    return bool(at.size)


class _Rows:
    """The bytes of each row's line in a block of JSON lines."""

    def __init__(self, block: memoryview, starts: NDArray[np.intp]) -> None:
        self._block = block
        self._starts = starts

    def line(self, row: int) -> bytes:
        """The line of row ``row`` (its JSON object and what follows it on the line)."""
        start = int(self._starts[row])
        raw: bytes = self._block.obj  # type: ignore[assignment]
        return raw[start : raw.find(b"\n", start, len(self._block))]


def json_blocks(
    path: Path,
    fields: Mapping[str, Any],
    *,
    infer: bool = False,
    check: Callable[[memoryview, Any], bool] | None = None,
) -> Iterator[tuple[Any, I64, _Rows]]:
    """For each block of whole lines of a JSON-lines file: a pyarrow table of its
    objects, ``fields`` (name -> pyarrow type) typed as given and other fields skipped
    (never held) or, with ``infer``, added with inferred types; the line of each row;
    and the bytes of each row's line (valid while the block is the current one). Raises
    :class:`NeedsCareful` when the careful reader must read the file (see the module
    docstring, and ``check``, which may refuse a block, given as bytes and as a
    one-string pyarrow array)."""
    pa = _columnar.arrow()
    assert pa is not None
    pj = arrow_module("json")
    parse = pj.ParseOptions(
        explicit_schema=pa.schema(list(fields.items())),
        unexpected_field_behavior="infer" if infer else "ignore",
    )
    seen = 0
    try:
        for block in _line_blocks(path):
            found = _object_lines(block)
            if found is None:
                raise NeedsCareful
            full, starts, n_lines = found
            buf = pa.py_buffer(block)
            offsets = pa.py_buffer(np.array([0, len(block)], dtype=np.int32))
            text = pa.Array.from_buffers(pa.string(), 1, [None, offsets, buf])
            text.validate(full=True)  # UTF-8
            if check is not None and not check(block, text):
                raise NeedsCareful
            if full.size:
                table = pj.read_json(
                    pa.BufferReader(buf),
                    read_options=pj.ReadOptions(block_size=1 << 20),
                    parse_options=parse,
                )
                if table.num_rows != full.size:
                    raise NeedsCareful  # an object over several lines, or several on one line
                yield table, full.astype(np.int64) + seen + 1, _Rows(block, starts)
            seen += n_lines
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, EOFError):
        raise NeedsCareful from None


def _json_ids(path: Path, fields: Mapping[str, Any]) -> tuple[Any, Any]:
    """The ``_id`` column (one array, every id a non-empty string) and the table of a
    JSON-lines file's ``fields``; raises :class:`NeedsCareful`."""
    pa = _columnar.arrow()
    assert pa is not None
    tables = [t for t, _, _ in json_blocks(path, fields)]
    table = pa.concat_tables(tables) if tables else pa.schema(list(fields.items())).empty_table()
    return _ids(table.column("_id")), table


def _ids(column: Any) -> Any:
    """A string column of ids as one array; raises :class:`NeedsCareful` when one is missing
    or empty (the careful reader names the line)."""
    pc = arrow_module("compute")
    if column.null_count or (len(column) and pc.min(pc.binary_length(column)).as_py() == 0):
        raise NeedsCareful
    return column.combine_chunks()


class TextQueries(ColumnarQueries):
    """``{query_id: Query}`` of labelled queries with their text (``None`` when the data
    have none) and reference answers."""

    def __init__(
        self,
        keys: Mapping[str, object],
        texts: Mapping[str, str | None],
        answers: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(keys)
        self._texts = texts
        self._answers = answers or {}

    def __getitem__(self, qid: str) -> Query:
        if qid not in self._keys:
            raise KeyError(qid)
        return Query(qid, self._texts.get(qid), self._answers.get(qid, ()))


# --------------------------------------------------------------------------- BEIR


def read_beir(path: Path, rep: Reporter, split: str | None) -> ColumnarRead | None:
    """A BEIR folder column-wise, or ``None`` when the careful reader must read it."""
    pa = _columnar.arrow()
    if pa is None or (path / BEIR_DISTRACTORS).exists():
        return None  # known distractors: the careful reader collects them
    try:
        qrels_path = beir_split(path, split)
        split_qrels = _split_qrels(qrels_path)
        corpus = None
        passages = Texts()
        if (path / "corpus.jsonl").exists():
            string = pa.string()
            fields = {"_id": string, "text": string, "title": string}
            ids, table = _json_ids(path / "corpus.jsonl", fields)
            corpus = CorpusIds(ids)
            passages = _corpus_texts(ids, table)
            del table
        texts: dict[str, str | None] = {}
        query_ids = None
        if (path / "queries.jsonl").exists():
            fields = {"_id": pa.string(), "text": pa.string()}
            query_ids, table = _json_ids(path / "queries.jsonl", fields)
            texts = dict(zip(query_ids.to_pylist(), table.column("text").to_pylist(), strict=True))
        pairs, events = _qrels(split_qrels, qrels_path, corpus, query_ids, rep)
    except (NeedsCareful, EvalSetError):
        return None
    for line_no, _, kind, message, fld in sorted(events, key=lambda e: (e[0], e[1])):
        rep(kind, message, path=str(qrels_path), line=line_no, field=fld)
    labels = ColumnarLabels.of_grades(pairs)
    queries = TextQueries(labels, texts)
    return ColumnarRead(queries, labels, labels.label_lines(), {}, corpus, passages)


def _corpus_texts(ids: Any, table: Any) -> Texts:
    """The texts and titles of a ``corpus.jsonl`` read column-wise, held as Arrow arrays
    (none when no line has a text; no titles when none is a non-empty string)."""
    pc = arrow_module("compute")
    text = table.column("text")
    if text.null_count == len(text):
        return Texts()
    title = table.column("title")
    if title.null_count == len(title) or not pc.max(pc.binary_length(title)).as_py():
        title = None
    return Texts(docs=[TextSource(ArrowCorpus(ids, text, title))])


def _qrels(
    split: tuple[Any, Any, NDArray[np.float64], I64 | None],
    path: Path,
    corpus: CorpusIds | None,
    query_ids: Any | None,
    rep: Reporter,
) -> tuple[Pairs, list[Event]]:
    """The labels of a BEIR qrels file (``_split_qrels``'s columns; repeats removed) and
    its problems as (line, order within the line, kind, message, field); raises
    :class:`NeedsCareful`."""
    qcol, dcol, value, line = split
    qvocab, q = encode_ids(qcol)
    docs, d = encode_ids(dcol)
    del qcol, dcol
    pairs = Pairs(qvocab.to_pylist(), docs, q, d, value, line, str(path))
    events: list[Event] = []
    if corpus is not None:
        rows = np.flatnonzero(missing_ids(docs, corpus)[d])
        names = vocab_take(docs, d[rows])
        for r, doc, ln in zip(rows.tolist(), names, pairs.line_of(rows).tolist(), strict=True):
            qid = pairs.qids[int(q[r])]
            msg = f"labelled document {doc!r} (query {qid!r}) is not in corpus.jsonl"
            events.append((ln, 0, ProblemKind.UNKNOWN_DOCUMENT, msg, None))
    if query_ids is not None:
        unknown = np.flatnonzero(vocab_positions(qvocab, query_ids) < 0)
        if unknown.size:
            order, starts = pairs.grouped
            first = starts[unknown] if order is None else order[starts[unknown]]
            for code, ln in zip(unknown.tolist(), pairs.line_of(first).tolist(), strict=True):
                msg = f"labelled query {pairs.qids[code]!r} is not in queries.jsonl"
                events.append((ln, 1, ProblemKind.UNKNOWN_QUERY, msg, None))
    repeats = repeated_rows(q, d, len(docs))
    if repeats.size:
        events.extend((e[0], 2, *e[2:]) for e in repeat_events(pairs, repeats, "qrels"))
        check_grades(pairs, repeats, events, rep)
        keep = np.ones(q.size, dtype=np.bool_)
        keep[repeats] = False
        pairs = Pairs(
            pairs.qids, docs, q[keep], d[keep], value[keep], pairs.line_of(np.flatnonzero(keep)),
            str(path),
        )  # fmt: skip
    return pairs, events


def _split_qrels(path: Path) -> tuple[Any, Any, NDArray[np.float64], I64 | None]:
    """Query and document columns (pyarrow), grades and lines (``None``: row ``i`` is
    line ``i+1``) of a BEIR qrels file: each line split on tabs when it has one, else on
    whitespace, a header on line 1 skipped."""
    fields = read_fields(path, BEIR_QRELS, split=split_tsv, is_header=_is_header)
    return fields.q, fields.d, fields.value, fields.line


def _is_header(parts: list[str]) -> bool:
    return parts[0].lower() in BEIR_HEADERS


# --------------------------------------------------------------------------- ragguard JSONL

_NULL_LIST = r'"(?:answers|relevant|not_relevant|candidates)"[ \t\r]*:[ \t\r]*null'
_DROPPED = frozenset({"metadata"})  # read per block (types inferred), then dropped


def _no_null_list(block: memoryview, text: Any) -> bool:
    """Whether no field the careful reader requires to be a list is ``null`` in
    ``block`` (``text``: the same as a one-string pyarrow array): pyarrow reads ``null``
    like a missing field, the careful reader rejects it."""
    if not _has(block, b"null"):
        return True
    pc = arrow_module("compute")
    return not pc.any(pc.match_substring_regex(text, _NULL_LIST)).as_py()


def read_jsonl(path: Path, rep: Reporter) -> ColumnarRead | None:
    """A ragguard JSONL eval set column-wise, or ``None`` when the careful reader must
    read it: only the fields ``query_id``, ``query``, ``answers``, ``relevant`` (a list
    of ids), ``not_relevant``, ``candidates`` (a list of ``{id, score}`` objects, maybe
    with ``text`` / ``metadata``) and ``metadata`` are read column-wise; graded
    ``relevant`` objects, ``distractors``, ``utilities``, ``no_response``,
    ``num_relevant``, ``runs``, candidates given as bare ids, ids that are numbers and
    every error go to the careful reader."""
    pa = _columnar.arrow()
    if pa is None:
        return None
    try:
        columns = _jsonl_columns(path)
        qids = pa.chunked_array(columns["query_id"], type=pa.string()).to_pylist()
        if len(set(qids)) != len(qids):
            raise NeedsCareful  # a query id used twice: the careful reader names the line
        line = np.concatenate(columns["line"]) if qids else np.zeros(0, np.int64)
        labels = _jsonl_labels(path, qids, line, columns)
        runs, events = _jsonl_run(path, qids, line, columns)
    except NeedsCareful:
        return None
    for line_no, _, kind, message, fld in events:
        rep(kind, message, path=str(path), line=line_no, field=fld)
    texts = pa.chunked_array(columns["query"], type=pa.string()).to_pylist()
    answers = pa.chunked_array(columns["answers"], type=pa.list_(pa.string())).to_pylist()
    queries = TextQueries(
        labels,
        dict(zip(qids, texts, strict=True)),
        {q: tuple(a) for q, a in zip(qids, answers, strict=True) if a},
    )
    where = str(path)
    label_lines = {q: (where, ln) for q, ln in zip(qids, line.tolist(), strict=True)}
    passages = ArrowPairTexts(qids)
    for part in columns["texts"]:
        passages.add(*part)
    metadata = {qids[row]: meta for row, meta in columns["metadata"]}
    sources = [TextSource(passages)] if passages.parts else []
    return ColumnarRead(
        queries, labels, label_lines, runs, texts=Texts(pairs=sources, metadata=metadata)
    )


def _jsonl_columns(path: Path) -> dict[str, list[Any]]:
    """Per block of a JSONL eval set: the query ids, texts, answers and lines, and for
    ``relevant``, ``not_relevant`` and ``candidates`` the ids listed, the candidates'
    scores, the length of each line's list and (candidates) whether it has one; the
    candidates that have a ``text`` (``texts``: query row, ids, texts) and each line's
    ``metadata`` object (``metadata``: query row, object). Raises
    :class:`NeedsCareful`."""
    pa = _columnar.arrow()
    assert pa is not None
    pc = arrow_module("compute")
    string = pa.string()
    candidate = pa.struct([("id", string), ("score", pa.float64()), ("text", string)])
    fields = {
        "query_id": string,
        "query": string,
        "answers": pa.list_(string),
        "relevant": pa.list_(string),
        "not_relevant": pa.list_(string),
        "candidates": pa.list_(candidate),
    }
    out: dict[str, list[Any]] = {}

    def add(name: str, value: Any) -> None:
        out.setdefault(name, []).append(value)

    for name in ("query_id", "query", "answers", "line", "texts", "metadata"):
        out[name] = []
    rows = 0  # query rows of the blocks before this one
    for table, lines, raw in json_blocks(path, fields, infer=True, check=_no_null_list):
        if set(table.schema.names) - fields.keys() - _DROPPED:
            raise NeedsCareful  # a field the fast path does not read, or an unknown one
        cands = table.column("candidates")
        if {f.name for f in cands.type.value_type} - CANDIDATE_FIELDS:
            raise NeedsCareful  # an unknown field in a candidate
        add("query_id", _ids(table.column("query_id")))
        out["query"].extend(table.column("query").chunks)
        answers = table.column("answers")
        if pc.list_flatten(answers).null_count:
            raise NeedsCareful
        out["answers"].extend(answers.chunks)
        add("line", lines)
        for name in ("relevant", "not_relevant", "candidates"):
            col = table.column(name)
            counts = np.asarray(pc.list_value_length(col).fill_null(0), np.int64)
            add(f"{name}.n", counts)
            flat = pc.list_flatten(col)
            if name == "candidates":
                if flat.null_count:
                    raise NeedsCareful  # a candidate that is null
                add("candidates.has", np.asarray(col.is_valid(), np.bool_))
                scores = pc.struct_field(flat, "score").to_numpy()
                add("candidates.score", np.asarray(scores, np.float64))
                text = pc.struct_field(flat, "text")
                flat = pc.struct_field(flat, "id")
                if text.null_count < len(text):
                    has = np.flatnonzero(np.asarray(text.is_valid(), np.bool_))
                    row = np.arange(rows, rows + table.num_rows, dtype=np.int32)
                    query = np.repeat(row, counts)[has]
                    add("texts", (query, flat.take(has), text.take(has)))
            add(f"{name}.ids", _ids(flat) if len(flat) else pa.array([], string))
        if "metadata" in table.schema.names:
            _metadata(table.column("metadata"), raw, rows, out["metadata"])
        rows += table.num_rows
    return out


def _metadata(column: Any, raw: Any, rows: int, into: list[tuple[int, Any]]) -> None:
    """The ``metadata`` objects of a block's lines (``column``: the field as pyarrow
    inferred it), parsed from their lines as Python's json reads them: (query row,
    object) for each line whose ``metadata`` is an object."""
    pa = _columnar.arrow()
    assert pa is not None
    if not pa.types.is_struct(column.type):
        return  # not an object on any line of the block: nothing kept, as the careful reader
    for row in np.flatnonzero(np.asarray(column.is_valid(), np.bool_)).tolist():
        meta = json.loads(raw.line(row)).get("metadata")
        if isinstance(meta, dict):
            into.append((rows + row, meta))


def _jsonl_labels(
    path: Path, qids: list[str], line: I64, columns: dict[str, list[Any]]
) -> ColumnarLabels:
    """Grades of a JSONL eval set: 1 for ``relevant``, 0 for ``not_relevant``, each
    query's relevant ones first. Raises :class:`NeedsCareful` when a document is listed
    twice for a query (the careful reader names the field)."""
    pa = _columnar.arrow()
    assert pa is not None
    n = len(qids)
    codes = np.arange(n, dtype=np.int32)
    q_parts, v_parts, id_parts = [], [], []
    for name, grade in (("relevant", 1.0), ("not_relevant", 0.0)):
        counts = np.concatenate(columns[f"{name}.n"]) if n else np.zeros(0, np.int64)
        q_parts.append(np.repeat(codes, counts))
        v_parts.append(np.full(int(counts.sum()), grade))
        id_parts.extend(columns.get(f"{name}.ids", []))
    q = np.concatenate(q_parts)
    docs, d = encode_ids(pa.chunked_array(id_parts, type=pa.string()))
    if repeated_rows(q, d, len(docs)).size:
        raise NeedsCareful
    return ColumnarLabels(Pairs(qids, docs, q, d, np.concatenate(v_parts), line[q], str(path)))


def _jsonl_run(
    path: Path, qids: list[str], line: I64, columns: dict[str, list[Any]]
) -> tuple[dict[str, tuple[Mapping[str, Mapping[str, float]], Mapping[str, int]]], list[Event]]:
    """The run ``default`` of a JSONL eval set's ``candidates`` (none when no line has
    any) and its problems in the careful reader's order: repeated candidates, then
    candidates without a valid score (when some candidate has one)."""
    pa = _columnar.arrow()
    assert pa is not None
    n = len(qids)
    has = np.concatenate(columns["candidates.has"]) if n else np.zeros(0, np.bool_)
    if not has.any():
        return {}, []
    counts = np.concatenate(columns["candidates.n"])
    q = np.repeat(np.arange(n, dtype=np.int32), counts)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    kept: NDArray[np.intp] | None = None  # rows left after repeats (None: all)
    docs, d = encode_ids(pa.chunked_array(columns["candidates.ids"], type=pa.string()))
    value = np.concatenate(columns["candidates.score"])
    pairs = Pairs(qids, docs, q, d, value, line[q], str(path))
    events: list[Event] = []
    name = "default"
    repeats = repeated_rows(q, d, len(docs))
    if repeats.size:
        names = vocab_take(docs, d[repeats])
        for r, doc in zip(repeats.tolist(), names, strict=True):
            msg = (
                f"document {doc!r} appears twice among the candidates of query "
                f"{qids[int(q[r])]!r} in run {name!r}"
            )
            fld = f"candidates[{r - starts[q[r]]}]"
            events.append((int(line[q[r]]), 0, ProblemKind.DUPLICATE_CANDIDATE, msg, fld))
        keep = np.ones(q.size, dtype=np.bool_)
        keep[repeats] = False
        kept = np.flatnonzero(keep)
        q, d, value = q[keep], d[keep], value[keep]
        pairs = Pairs(qids, docs, q, d, value, line[q], str(path))
    finite = np.isfinite(value)
    bad = np.flatnonzero(~finite)
    if bad.size and finite.any():
        names = vocab_take(docs, d[bad])
        for r, doc in zip(bad.tolist(), names, strict=True):
            msg = f"candidate {doc!r} of run {name!r} has no valid score"
            fld = f"candidates[{(r if kept is None else kept[r]) - starts[q[r]]}]"
            events.append((int(line[q[r]]), 1, ProblemKind.INVALID_SCORE, msg, fld))
    listed = np.flatnonzero(has)
    cands = ColumnarCandidates(pairs, listed.tolist())
    lines = dict(zip(cands, line[listed].tolist(), strict=True))
    return {name: (cands, lines)}, events
