"""TREC qrels and run files, column-wise (``read_trec``); a run's document ids stay as
read, repeats found from a 64-bit key of each id (docs/benchmarks/calibrate_scale.md)."""

from __future__ import annotations

from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.columns import (
    ColumnarCandidates,
    ColumnarLabels,
    ColumnarRead,
    Event,
    Lines,
    Pairs,
    encode_ids,
    pyarrow,
    query_view,
    report_events,
    without_repeats,
)
from ragguard.calibration.data.formats.common import (
    TREC_QRELS,
    TREC_RUN,
    Format,
    first_content,
    read_json_run,
    row_events,
    unknown_documents,
)
from ragguard.calibration.data.formats.delimited import read_fields
from ragguard.calibration.data.labels import I64
from ragguard.calibration.data.problems import ProblemKind, Reporter


def read_trec(path: Path, kind: str, rep: Reporter, *, known_docs: Set[str] | None = None) -> Pairs:
    """A TREC run or qrels (``kind``) file; problems go to ``rep`` in line order. A run's
    document ids stay as read; labels' are interned, their grades as written."""
    pa = pyarrow()
    layout = TREC_RUN if kind == "run" else TREC_QRELS
    fields = read_fields(path, layout)
    qvocab, q = encode_ids(fields.q)
    line = None if fields.line is None else Lines(fields.line)
    repeats = None
    if kind == "run":
        pairs = Pairs(qvocab.to_pylist(), fields.d, q, None, fields.value, line, str(path))
        repeats = text_repeats(pairs, doc_keys(fields.d))
    else:
        docs, d = encode_ids(fields.d)
        pairs = Pairs(qvocab.to_pylist(), docs, q, d, fields.value, line, str(path))
    del fields
    pa.default_memory_pool().release_unused()
    events: list[Event] = []
    pairs = without_repeats(pairs, kind, events, rep, repeats)
    if kind == "run":
        events.extend(_run_events(pairs, known_docs))
    report_events(events, rep, str(path))
    return pairs


_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser (wraps mod 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX_1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX_2
    out: NDArray[np.uint64] = x ^ (x >> np.uint64(31))
    return out


def doc_keys(column: Any) -> NDArray[np.uint64]:
    """A 64-bit key of each id: its first 8 bytes as one word, its length and last 8 mixed in."""
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


def text_repeats(pairs: Pairs, keys: NDArray[np.uint64]) -> NDArray[np.intp]:
    """Rows repeating an earlier (query, document): equal (query, key), confirmed on the text."""
    q = pairs.q
    n = q.size
    if n < 2:
        return np.zeros(0, np.intp)
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


def _run_events(pairs: Pairs, known_docs: Set[str] | None) -> list[Event]:
    out = [] if known_docs is None else unknown_documents(pairs, known_docs, "run", 1)
    bad = np.flatnonzero(~np.isfinite(pairs.value))
    message = "document {doc!r} of query {qid!r} has score {score!r}"
    return out + row_events(pairs, bad, 2, ProblemKind.INVALID_SCORE, message, "score")


def read_qrels(path: Path, rep: Reporter) -> ColumnarRead:
    labels = ColumnarLabels.of_grades(read_trec(path, "qrels", rep))
    return ColumnarRead(query_view(labels), labels, labels.label_lines(), {})


def read_run(
    path: Path, rep: Reporter, *, known_docs: Set[str] | None = None
) -> tuple[Mapping[str, Mapping[str, float]], Mapping[str, int]]:
    """A TREC or JSON run file: its candidates and the line of each query's first."""
    head, _ = first_content(path)
    if head.startswith("{"):
        return read_json_run(path, rep, known_docs=known_docs)
    cands = ColumnarCandidates(read_trec(path, "run", rep, known_docs=known_docs))
    return cands, cands.first_lines()


def _detect(path: Path, head: str | None) -> bool:
    fields = (head or "[").split()
    if fields[0].startswith("[") or len(fields) != 4:
        return False
    try:
        int(fields[3])
    except ValueError:
        return False
    return True


TREC = Format("trec", _detect, lambda path, rep, _: read_qrels(path, rep))
