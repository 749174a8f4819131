"""BEIR folders, column-wise (``read_beir``): JSON-lines files by pyarrow's JSON reader,
a block it may read otherwise than Python's json walked line by line to name the bad line
(docs/benchmarks/calibrate_scale.md, "BEIR folders")."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.columns import (
    ColumnarLabels,
    ColumnarRead,
    CorpusIds,
    Event,
    Pairs,
    arrow_module,
    encode_ids,
    pyarrow,
    query_view,
    report_events,
    vocab_positions,
    vocab_take,
    without_repeats,
)
from ragguard.calibration.data.formats.common import (
    BEIR_DISTRACTOR,
    BEIR_QRELS,
    Format,
    Where,
    json_line,
    unknown_documents,
)
from ragguard.calibration.data.formats.delimited import Fields, read_fields
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import DISTRACTOR_GRADE
from ragguard.calibration.data.texts import (
    ArrowCorpus,
    PathLike,
    Texts,
    TextSource,
    corpus_text,
    utf8_lines,
)
from ragguard.errors import EvalSetError

_BLOCK = 1 << 24  # bytes of whole lines parsed at a time
_BOM = b"\xef\xbb\xbf"


def _line_blocks(path: Path) -> Iterator[memoryview]:
    """``path``'s bytes (gunzipped, no BOM) in blocks of whole lines, each ending with ``\n``."""
    gz = path.name.lower().endswith(".gz")
    with pyarrow().input_stream(str(path), compression="gzip" if gz else None) as stream:
        rest = stream.read(len(_BOM))
        rest = b"" if rest == _BOM else rest
        while chunk := stream.read(_BLOCK):
            buf = rest + chunk
            cut = buf.rfind(b"\n") + 1
            if cut:
                yield memoryview(buf)[:cut]
            rest = buf[cut:]
    if rest:
        yield memoryview(rest if rest.endswith(b"\n") else rest + b"\n")


def _object_lines(block: memoryview) -> tuple[int, int] | None:
    """(non-blank lines, lines) of ``block``, or ``None`` unless Python's json reads each
    line alike (one ``{...}``; no lone ``\r``, bare ``Inf`` or ``-NaN``)."""
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
    return None if _bare_literals(a) else (full.size, ends.size)


_DELIMITERS = np.frombuffer(b" \t\r\n,]}", dtype=np.uint8)


def _bare_literals(a: NDArray[np.uint8]) -> bool:
    """Whether ``Inf`` before a JSON delimiter, or ``-NaN``, occurs (maybe in a string)."""
    at = np.flatnonzero(a[:-3] == ord("I"))
    at = at[(a[at + 1] == ord("n")) & (a[at + 2] == ord("f"))]
    if at.size and bool(np.isin(a[at + 3], _DELIMITERS).any()):
        return True
    at = np.flatnonzero(a[1:-3] == ord("N")) + 1
    at = at[(a[at - 1] == ord("-")) & (a[at + 1] == ord("a")) & (a[at + 2] == ord("N"))]
    return bool(at.size)


def _read_block(block: memoryview, fields: tuple[str, ...]) -> tuple[Any, int] | None:
    """A block's string ``fields`` read by pyarrow, and its lines; ``None`` if Python's json
    may read it otherwise."""
    pa = pyarrow()
    found = _object_lines(block)
    if found is None:
        return None
    n_objects, n_lines = found
    schema = pa.schema([(name, pa.string()) for name in fields])
    buf = pa.py_buffer(block)
    offsets = pa.py_buffer(np.array([0, len(block)], dtype=np.int32))
    text = pa.Array.from_buffers(pa.string(), 1, [None, offsets, buf])
    try:
        text.validate(full=True)  # UTF-8
        if not n_objects:
            return schema.empty_table(), n_lines
        pj = arrow_module("json")
        table = pj.read_json(
            pa.BufferReader(buf),
            read_options=pj.ReadOptions(block_size=1 << 20),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return (table, n_lines) if table.num_rows == n_objects else None


BEIR_DISTRACTORS = "distractors.tsv"  # known distractors: query-id<TAB>corpus-id lines


def beir_split(path: Path, split: str | None) -> Path:
    """``qrels/<split>.tsv`` of a BEIR folder (default: the only split, else ``test``)."""
    qrels_dir = path / "qrels"
    splits = sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
    if split is None:
        if len(splits) == 1:
            split = splits[0]
        elif "test" in splits:
            split = "test"
        else:
            raise EvalSetError(
                f"pick a qrels split with split=...; found: {', '.join(splits) or 'none'}",
                path=str(qrels_dir),
            )
    qrels_path = qrels_dir / f"{split}.tsv"
    if not qrels_path.exists():
        raise EvalSetError(
            f"no qrels for split {split!r}; found: {', '.join(splits) or 'none'}",
            path=str(qrels_path),
        )
    return qrels_path


def read_beir(path: Path, rep: Reporter, split: str | None, *, texts: bool = True) -> ColumnarRead:
    """A BEIR folder: ``corpus.jsonl`` (its texts with ``texts``), ``queries.jsonl``,
    ``qrels/<split>.tsv`` (-1 a known distractor) and ``distractors.tsv``."""
    if not path.is_dir():
        raise EvalSetError("a BEIR eval set is a folder", path=str(path))
    qrels_path = beir_split(path, split)
    corpus = None
    passages = Texts()
    if (path / "corpus.jsonl").exists():
        kept = ("_id", "text", "title") if texts else ("_id",)
        table = _json_file(path / "corpus.jsonl", ("_id", "text", "title"), _corpus_row, kept)
        ids = table.column("_id").combine_chunks()
        corpus = CorpusIds(ids)
        if texts:
            passages = _corpus_texts(ids, table)
        del table
    query_texts: dict[str, str | None] = {}
    query_ids = None
    if (path / "queries.jsonl").exists():
        table = _json_file(path / "queries.jsonl", ("_id", "text"), _query_row)
        query_ids = table.column("_id").combine_chunks()
        query_texts = dict(
            zip(query_ids.to_pylist(), table.column("text").to_pylist(), strict=True)
        )
        del table
    fields = read_fields(qrels_path, BEIR_QRELS)
    pairs, events = _qrels(fields, qrels_path, corpus, query_ids, rep)
    del fields
    report_events(events, rep, str(qrels_path))
    labels = _with_distractors(pairs, path / BEIR_DISTRACTORS, rep)
    queries = query_view(labels, query_texts)
    return ColumnarRead(queries, labels, labels.label_lines(), {}, corpus, passages)


def _corpus_texts(ids: Any, table: Any) -> Texts:
    """A ``corpus.jsonl``'s texts and titles as Arrow arrays (none if no line has one)."""
    pc = arrow_module("compute")
    text = table.column("text")
    if text.null_count == len(text):
        return Texts()
    title = table.column("title")
    if title.null_count == len(title) or not pc.max(pc.binary_length(title)).as_py():
        title = None
    return Texts(docs=[TextSource(ArrowCorpus(ids, text, title))])


Row = tuple[str, str | None, str | None]


def _corpus_row(obj: dict[str, Any], path: Path, line: int) -> Row:
    doc = Where(path, line).id(obj.get("_id"), "_id")
    corpus_text(obj, path, line, required=False)  # raises on a text that is not a string
    title = obj.get("title")
    return doc, obj.get("text"), title if isinstance(title, str) else None


CORPUS_IDS = ("_id", "id", "doc_id")


def corpus_source(path: PathLike) -> TextSource[str]:
    """The texts of a JSONL corpus file (``_id``, ``id`` or ``doc_id``, ``text``,
    ``title``), read as a BEIR folder's when first asked for (a bad line raises then);
    a later line of the same id wins.

    Raises:
        EvalSetError: the file does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise EvalSetError("no such corpus file", path=str(p))

    def read() -> tuple[dict[str, str], dict[str, str]]:
        fields = ("_id", "text", "title")
        table = _json_file(p, fields, _any_corpus_row, required="text", ids=CORPUS_IDS)
        return ArrowCorpus(table.column("_id"), table.column("text"), table.column("title"))()

    return TextSource(read, file=p)


def _first_key(block: memoryview, ids: tuple[str, ...]) -> str:
    """The first of ``ids`` the first line of ``block`` has."""
    try:
        obj = json.loads(bytes(block).lstrip().split(b"\n", 1)[0])
    except ValueError:
        return ids[0]
    return next((k for k in ids if k in obj), ids[0]) if isinstance(obj, dict) else ids[0]


def _any_corpus_row(obj: dict[str, Any], path: Path, line: int) -> Row:
    doc = next((obj[k] for k in CORPUS_IDS if k in obj), None)
    if isinstance(doc, bool) or not isinstance(doc, str | int) or doc == "":
        raise EvalSetError(
            "missing passage id (_id, id or doc_id)", path=str(path), line=line, field="_id"
        )
    corpus_text(obj, path, line, required=True)
    title = obj.get("title")
    return str(doc), obj["text"], title if isinstance(title, str) else None


def _query_row(obj: dict[str, Any], path: Path, line: int) -> Row:
    at = Where(path, line)
    text = at.text(obj.get("text"), "text")
    return at.id(obj.get("_id"), "_id"), text, None


def _json_file(
    path: Path,
    fields: tuple[str, ...],
    row: Callable[[dict[str, Any], Path, int], Row],
    kept: tuple[str, ...] | None = None,
    required: str | None = None,
    ids: tuple[str, ...] = (),
) -> Any:
    """The ``fields`` (id first) of a JSON-lines file as a table of the ``kept`` ones; a
    block failing a check (ids or ``required`` missing, another id key of ``ids``) is walked."""
    pa = pyarrow()
    kept = kept or fields
    foreign: list[bytes] = []
    tables = []
    seen = 0  # lines before the block
    try:
        for block in _line_blocks(path):
            if ids and not seen:  # the first block: its first line's id key
                key = _first_key(block, ids)
                foreign = [f'"{k}"'.encode() for k in ids if k != key]
                fields = (key, *fields[1:])
            got = _read_block(block, fields)
            if (
                got is None
                or not _good_ids(got[0].column(fields[0]))
                or (required and got[0].column(required).null_count)
                or (foreign and any(f in bytes(block) for f in foreign))
            ):
                got = _diagnose(block, seen, path, fields, row)
            table, n_lines = got
            tables.append(table.select([fields[0], *kept[1:]]).rename_columns(list(kept)))
            seen += n_lines
            del table, got
    except (OSError, EOFError) as exc:
        raise EvalSetError(f"cannot read: {exc}", path=str(path)) from None
    schema = pa.schema([(name, pa.string()) for name in kept])
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _good_ids(column: Any) -> bool:
    pc = arrow_module("compute")
    if column.null_count:
        return False
    return not len(column) or pc.min(pc.binary_length(column)).as_py() > 0


def _diagnose(
    block: memoryview,
    seen: int,
    path: Path,
    fields: tuple[str, ...],
    row: Callable[[dict[str, Any], Path, int], Row],
) -> tuple[Any, int]:
    """Walk a block with Python's json: the first bad line raises; else its table and lines."""
    pa = pyarrow()
    lines = list(utf8_lines(path, [bytes(block)], seen + 1))
    values: list[Row] = []
    for line, text in enumerate(lines, seen + 1):
        if not text.strip():
            continue
        obj = json_line(text, path, line)
        if not isinstance(obj, dict):
            raise EvalSetError("each line must be a JSON object", path=str(path), line=line)
        values.append(row(obj, path, line))
    columns = list(zip(*values, strict=True)) if values else [() for _ in fields]
    table = pa.table(
        {name: _strings(column) for name, column in zip(fields, columns, strict=False)}
    )
    return table, len(lines)


_SURROGATE = re.compile("[\\ud800-\\udfff]")


def _strings(values: Sequence[str | None]) -> Any:
    """A pyarrow string array; lone surrogates (Python's json reads ``\\ud800``) as U+FFFD."""
    pa = pyarrow()
    try:
        return pa.array(values, pa.string())
    except UnicodeEncodeError:
        return pa.array(
            [None if v is None else _SURROGATE.sub("\ufffd", v) for v in values], pa.string()
        )


def _qrels(
    fields: Fields,
    path: Path,
    corpus: CorpusIds | None,
    query_ids: Any | None,
    rep: Reporter,
) -> tuple[Pairs, list[Event]]:
    """A BEIR qrels file's labels (repeats removed) and problems."""
    qvocab, q = encode_ids(fields.q)
    docs, d = encode_ids(fields.d)
    value, line = fields.value, fields.line
    pairs = Pairs(qvocab.to_pylist(), docs, q, d, value, line, str(path))
    events = [] if corpus is None else unknown_documents(pairs, corpus, "labelled", 0)
    if query_ids is not None:
        unknown = np.flatnonzero(vocab_positions(qvocab, query_ids) < 0)
        if unknown.size:
            order, starts = pairs.grouped
            first = starts[unknown] if order is None else order[starts[unknown]]
            for code, ln in zip(unknown.tolist(), pairs.line_of(first).tolist(), strict=True):
                msg = f"labelled query {pairs.qids[code]!r} is not in queries.jsonl"
                events.append((ln, 1, ProblemKind.UNKNOWN_QUERY, msg, None))
    return without_repeats(pairs, "qrels", events, rep), events


def _with_distractors(pairs: Pairs, path: Path, rep: Reporter) -> ColumnarLabels:
    """``pairs`` with ``distractors.tsv``'s: flagging a label, or a grade 0 after the query's."""
    if not path.exists():
        return ColumnarLabels.of_grades(pairs)
    pa = pyarrow()
    string = pa.string()
    fields = read_fields(path, BEIR_DISTRACTOR)
    dq = vocab_positions(fields.q.combine_chunks(), pa.array(pairs.qids, string))
    dline = np.arange(1, dq.size + 1) if fields.line is None else fields.line
    unknown = np.flatnonzero(dq < 0)
    if unknown.size:
        qids = vocab_take(fields.q, unknown)
        names = vocab_take(fields.d, unknown)
        message = "distractor {!r} is for query {!r}, which has no labels in this split"
        events: list[Event] = [
            (int(ln), 0, ProblemKind.UNKNOWN_QUERY, message.format(doc, qid), None)
            for qid, doc, ln in zip(qids, names, dline[unknown].tolist(), strict=True)
        ]
        report_events(events, rep, str(path))
    known = np.flatnonzero(dq >= 0)
    dq, dline = dq[known], dline[known]
    dnames = fields.d.combine_chunks().take(pa.array(known))
    del fields
    docs = pairs.docs
    assert pairs.d is not None  # labels' ids are interned
    dd = vocab_positions(dnames, docs).copy()
    new = dd < 0
    if new.any():  # documents not labelled for any query: into the vocabulary
        more, codes = encode_ids(pa.chunked_array([dnames.filter(pa.array(new))], string))
        dd[new] = len(docs) + codes
        docs = pa.concat_arrays([docs, more]) if len(docs) else more
    width = max(len(docs), 1)
    dkey = dq.astype(np.int64) * width + dd
    lkey = pairs.q.astype(np.int64) * width + pairs.d
    flagged = np.isin(lkey, dkey)
    # the distractors of unlabelled documents, each (query, document) once, in file order
    _, first = np.unique(dkey, return_index=True)
    first = np.sort(first)
    add = first[~np.isin(dkey[first], lkey)]
    n = pairs.q.size
    value = np.concatenate([pairs.value, np.zeros(add.size)])
    line = np.concatenate([pairs.line_of(np.arange(n)), dline[add]]) if add.size else pairs.line
    jq = np.concatenate([pairs.q, dq[add].astype(np.int32)])
    jd = np.concatenate([pairs.d, dd[add].astype(np.int32)])
    joined = Pairs(pairs.qids, docs, jq, jd, np.maximum(value, 0.0), line, pairs.source)
    distractor = np.concatenate(
        [flagged | (pairs.value == DISTRACTOR_GRADE), np.ones(add.size, np.bool_)]
    )
    return ColumnarLabels(joined, distractor=distractor)


LABEL_FILES = ("evalset.jsonl", "evalset.jsonl.gz", "qrels.txt", "qrels.trec", "qrels")


def _detect(path: Path, head: str | None) -> bool:
    """A folder with ``qrels/`` or ``corpus.jsonl``; one holding an eval-set file raises."""
    if head is not None:
        return False
    labels = next((path / n for n in LABEL_FILES if (path / n).is_file()), None)
    if labels is not None and not (path / "qrels").is_dir():
        raise EvalSetError(
            f"a folder holding {labels.name}, not an eval set format: call "
            f"load_evalset({str(labels)!r}) or load_inputs({str(path)!r}) (its runs/ too)",
            path=str(path),
        )
    return (path / "qrels").is_dir() or (path / "corpus.jsonl").exists()


BEIR = Format(
    "beir",
    _detect,
    lambda path, rep, options: read_beir(path, rep, options.split, texts=options.texts),
    folder=True,
    what="BEIR folders",
    takes=frozenset({"split"}),
)
