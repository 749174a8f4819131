"""Whitespace- or tab-separated text files (TREC qrels and runs, BEIR's TSV files): the
one reader, column-wise, its two steps described in docs/benchmarks/calibrate_scale.md
("Why pyarrow"); a block failing a column-wise check is walked row by row (``_diagnose``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.columns import arrow_module, pyarrow, string_array
from ragguard.calibration.data.formats.common import BEIR_HEADERS, Layout
from ragguard.calibration.data.labels import F64, I64
from ragguard.calibration.data.records import MAX_GRADE, grade_error
from ragguard.calibration.data.texts import utf8_lines
from ragguard.errors import EvalSetError

_BLOCK = 1 << 24  # bytes per streamed block
# one of these, not in the file, separates "fields" when lines are streamed as one column
_LINE_DELIMITERS = ("\x1f", "\x1e", "\x1d", "\x1c", "\x01", "\x02")
# whitespace str.split() splits on besides spaces, tabs, \v, \f (and line ends)
_EXOTIC = (
    "[\\x1c-\\x1f\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}]"
)
# bytes of the whitespace str.split() splits on other than the space (and line ends)
_OTHER_SPACE = re.compile(
    rb"[\t\x0b\x0c\x1c-\x1f]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]"
    rb"|\xe2\x81\x9f|\xe3\x80\x80"
)
_ASCII_SPACE = (b"\t", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\x1f")


@dataclass(frozen=True, slots=True)
class Fields:
    """Query and document columns (chunked strings), values, lines (``None``: row i is line i+1)."""

    q: Any
    d: Any
    value: F64
    line: I64 | None


@dataclass(frozen=True, slots=True)
class _Block:
    """A streamed block's content lines, the lines before it, its rows kept (``None``: all),
    and whether Python splits it."""

    text: Any
    first: int
    kept: NDArray[np.intp] | None
    python: bool = False

    def line(self, row: int) -> int:
        return self.first + 1 + (row if self.kept is None else int(self.kept[row]))


def read_fields(path: Path, layout: Layout) -> Fields:
    """The id columns and values of a delimited file (gzipped when named ``.gz``).

    Raises:
        EvalSetError: the first bad line, with file, line and field; a file that cannot
            be read or is not UTF-8.
        MissingDependencyError: pyarrow is not installed.
    """
    pyarrow()
    typed = None if layout.tsv else _typed(path, layout)
    if typed is not None:
        return typed
    for delimiter in _LINE_DELIMITERS:
        try:
            return _streamed(_blocks(path, layout, delimiter), path, layout)
        except _InText:
            continue
    raise EvalSetError(
        "cannot read: the file holds every one of the control characters "
        f"{', '.join(map(repr, _LINE_DELIMITERS))}",
        path=str(path),
    )


class _InText(Exception):
    """The character the lines are streamed with occurs in the file."""


def _only_spaces(path: Path) -> bool:
    """Whether the only whitespace inside a plain (not gzip) file's lines is the space."""
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


def _csv_options(delimiter: str, types: dict[str, Any]) -> tuple[Any, Any]:
    """CSV options reading text as it is (no quotes, escapes or nulls; blank lines kept)."""
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


def _typed(path: Path, layout: Layout) -> Fields | None:
    """A file of fields joined by single spaces, read with typed columns; else ``None``."""
    pa = pyarrow()
    csv, pc = arrow_module("csv"), arrow_module("compute")
    if not _only_spaces(path):
        return None
    names = [f"f{i}" for i in range(layout.columns)]
    qi, di = layout.ids
    vi = layout.value
    assert vi is not None
    types = {names[qi]: pa.string(), names[di]: pa.string()}
    types[names[vi]] = _value_type(layout)
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
    # an empty first field is a blank line (a "#" line parsed so is a record: see Layout)
    if table.num_rows and pc.any(pc.equal(q, "")).as_py():
        return None
    values = _cast(table.column(names[vi]), layout)  # None: the streamed reader names the line
    return None if values is None else Fields(q, d, values, None)


def _streamed(blocks: Iterator[_Block], path: Path, layout: Layout) -> Fields:
    pa = pyarrow()
    pc = arrow_module("compute")
    qi, di = layout.ids
    vi = layout.value
    tsv = layout.tsv
    qs: list[Any] = []
    ds: list[Any] = []
    vs: list[F64] = []
    spans: list[tuple[int, NDArray[np.intp] | None, int]] = []  # (first, kept, rows)
    for block in blocks:
        text = block.text
        n = len(text)
        parts = pc.ascii_split_whitespace(text)
        if tsv:
            tabbed = pc.match_substring(text, "\t")
            if pc.any(tabbed).as_py():
                parts = pc.if_else(tabbed, pc.split_pattern(text, "\t"), parts)
        values = None
        if not n or pc.all(pc.equal(pc.list_value_length(parts), layout.columns)).as_py():
            q, d = pc.list_element(parts, qi), pc.list_element(parts, di)
            v = pc.list_element(parts, vi) if vi is not None else None
            if tsv:
                q, d = pc.ascii_trim_whitespace(q), pc.ascii_trim_whitespace(d)
                v = None if v is None else pc.ascii_trim_whitespace(v)
            values = np.zeros(n) if v is None else _cast(v, layout)
        if block.python or values is None:
            values, qs_py, ds_py = _diagnose(path, block, layout)  # or it raises
            q, d = string_array(qs_py), string_array(ds_py)
        qs.append(q)
        ds.append(d)
        vs.append(values)
        spans.append((block.first, block.kept, n))
        del parts
    string = pa.string()
    value = np.concatenate(vs) if vs else np.zeros(0)
    q_all, d_all = pa.chunked_array(qs, type=string), pa.chunked_array(ds, type=string)
    return Fields(q_all, d_all, value, _lines(spans))


def _lines(spans: list[tuple[int, NDArray[np.intp] | None, int]]) -> I64 | None:
    """Each row's line from (lines before, rows kept, rows); ``None`` when all are kept."""
    if all(kept is None for _, kept, _ in spans):
        return None
    parts = [
        np.arange(first + 1, first + n + 1, dtype=np.int64)
        if kept is None
        else kept.astype(np.int64) + first + 1
        for first, kept, n in spans
    ]
    return np.concatenate(parts)


def _value_type(layout: Layout) -> Any:
    return pyarrow().int64() if layout.parse is int else pyarrow().float64()


def _cast(column: Any, layout: Layout) -> F64 | None:
    """The value column as float64; ``None`` when pyarrow does not parse a value or a grade
    is above ``MAX_GRADE`` (the row-by-row walk names it)."""
    pa = pyarrow()
    try:
        cast = arrow_module("compute").cast(column, _value_type(layout))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return None
    values = np.asarray(cast.to_numpy(), dtype=np.float64)
    return None if layout.parse is int and values.size and values.max() > MAX_GRADE else values


def _diagnose(path: Path, block: _Block, layout: Layout) -> tuple[F64, list[str], list[str]]:
    """Walk a block row by row: the first bad line raises; else its values and ids."""
    vi = layout.value
    qi, di = layout.ids
    fld = None if vi is None else layout.names.split()[vi]
    out: list[float] = []
    qs: list[str] = []
    ds: list[str] = []
    for row, s in enumerate(block.text.to_pylist()):
        parts = layout.split(s)

        def fail(message: str, field: str | None = None, row: int = row) -> NoReturn:
            raise EvalSetError(message, path=str(path), line=block.line(row), field=field)

        if len(parts) != layout.columns:
            fail(
                f"a {layout.kind} line has {layout.columns} columns ({layout.names}), "
                f"got {len(parts)}"
            )
        qs.append(parts[qi])
        ds.append(parts[di])
        if vi is None:
            out.append(0.0)
            continue
        text = parts[vi]
        try:
            value = layout.parse(text)
        except ValueError:
            what = "an integer" if layout.parse is int else "a number"
            fail(f"must be {what}, got {text!r}", fld)
        if layout.parse is int and isinstance(value, int) and value > MAX_GRADE:
            fail(grade_error(value, parts[qi], parts[di]), fld)
        out.append(float(value))  # type: ignore[arg-type]
    return np.asarray(out, dtype=np.float64), qs, ds


def _batches(path: Path, delimiter: str) -> Iterator[Any]:
    """A file's line batches; one holding ``delimiter`` raises ``_InText``."""
    pa = pyarrow()
    csv = arrow_module("csv")
    gz = path.name.lower().endswith(".gz")
    parse, convert = _csv_options(delimiter, {"line": pa.string()})
    try:
        yield from csv.open_csv(
            pa.input_stream(str(path), compression="gzip" if gz else None),
            read_options=csv.ReadOptions(column_names=["line"], block_size=_BLOCK),
            parse_options=parse,
            convert_options=convert,
        )
    except pa.ArrowInvalid as exc:
        if "Expected 1 columns" in str(exc):
            raise _InText from None
        if str(exc) == "Empty CSV file":
            return
        for _ in utf8_lines(path):  # raises at the first line that is not UTF-8
            pass
        raise EvalSetError(f"cannot read: {exc}", path=str(path)) from None
    except (OSError, EOFError) as exc:
        raise EvalSetError(f"cannot read: {exc}", path=str(path)) from None


def _blocks(path: Path, layout: Layout, delimiter: str) -> Iterator[_Block]:
    """Each streamed block's content lines, trimmed, without blanks, comments and a BEIR header."""
    pa = pyarrow()
    pc = arrow_module("compute")
    pool = pa.default_memory_pool()
    seen = 0
    for batch in _batches(path, delimiter):
        text = batch.column(0)
        n = len(text)
        python = pc.any(pc.match_substring_regex(text, _EXOTIC)).as_py()
        if python:  # stripped as Python strips
            trimmed = pa.array([s.strip() for s in text.to_pylist()], pa.string())
        else:
            trimmed = pc.ascii_trim_whitespace(text)
        mask = pc.not_equal(trimmed, "").to_numpy(zero_copy_only=False).copy()
        hashed = pc.starts_with(trimmed, "#")
        if pc.any(hashed).as_py():
            at = np.flatnonzero(hashed.to_numpy(zero_copy_only=False))
            lines = trimmed.take(at).to_pylist()
            mask[at[[layout.comment(s, layout.split(s)) for s in lines]]] = False
        if layout.tsv and seen == 0 and n and mask[0]:
            mask[0] = layout.split(trimmed[0].as_py())[0].lower() not in BEIR_HEADERS
        if mask.all():
            yield _Block(trimmed, seen, None, python)
        else:
            kept = np.flatnonzero(mask)
            yield _Block(trimmed.take(kept), seen, kept, python)
        seen += n
        del text, trimmed
        pool.release_unused()
