"""What the eval-set readers share: ``Format``, the TREC and BEIR line layouts, ``Where``
(each reader raises ``EvalSetError`` naming file, line and field of the first bad value)
and the JSON helpers (docs/reference/data-formats.md, "How files are read")."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.columns import ColumnarRead, Event, Pairs, missing_ids
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.texts import utf8_lines
from ragguard.errors import EvalSetError

Candidates = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What ``load_evalset`` passes every reader (``corpus``: the files RAGAS contexts match)."""

    split: str | None = None
    model: str | None = None
    texts: bool = True
    corpus: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class Format:
    """An entry of ``FORMATS`` (a format added there loads). ``detect``: whether a folder
    (``head`` None) or a file (``head`` its ``first_content``) holds it, or raises why not;
    ``suffixes``: file names it owns unless an earlier format detects them; ``what``: its
    data in messages; ``takes``: the ``ReadOptions`` it reads beyond ``texts``;
    ``no_runs``: why ``runs=`` does not apply."""

    name: str
    detect: Callable[[Path, str | None], bool]
    read: Callable[[Path, Reporter, ReadOptions], ColumnarRead]
    suffixes: tuple[str, ...] = ()
    folder: bool = False
    what: str = ""
    takes: frozenset[str] = frozenset()
    no_runs: str | None = None


@dataclass(frozen=True, slots=True)
class Layout:
    """A qrels or run line's columns (as messages name them), what it is, its number's column
    and parser, its id columns, and whether it is BEIR TSV (split on tabs, maybe a header).
    A ``#`` line is a comment only when it cannot be a record: trec_eval up to 9 (and
    pytrec_eval) read ``#7 0 docA 1`` as query ``#7``, which trec_eval 10 drops silently.
    """

    names: str
    kind: str
    value: int | None = None
    parse: Callable[[str], object] = float
    ids: tuple[int, int] = (0, 2)
    tsv: bool = False

    @property
    def columns(self) -> int:
        return len(self.names.split())

    def comment(self, line: str, parts: Sequence[str]) -> bool:
        """Whether a stripped line starts with ``#`` and cannot be a record."""
        if len(parts) == self.columns and self.value is not None:
            try:
                self.parse(parts[self.value])
            except ValueError:
                return line.startswith("#")
        return line.startswith("#") and len(parts) != self.columns

    def split(self, line: str) -> list[str]:
        """A stripped line's fields (a TSV line with a tab: on tabs, each stripped)."""
        return [p.strip() for p in line.split("\t")] if self.tsv and "\t" in line else line.split()


TREC_QRELS = Layout("query_id iteration doc_id grade", "qrels", 3, int)
TREC_RUN = Layout("query_id Q0 doc_id rank score tag", "run", 4, float)
BEIR_QRELS = Layout("query-id corpus-id score", "BEIR qrels", 2, int, (0, 1), tsv=True)
BEIR_DISTRACTOR = Layout("query-id corpus-id", "distractors", ids=(0, 1), tsv=True)
BEIR_HEADERS = frozenset({"query-id", "query_id", "qid"})  # a BEIR TSV header's first field


def first_content(path: Path) -> tuple[str, int]:
    """The first non-blank line of a file that is no TREC comment (stripped), and its number."""
    for n, line in enumerate(utf8_lines(path, numbered=False), 1):
        s = line.strip()
        if s and not (TREC_QRELS.comment(s, parts := s.split()) and TREC_RUN.comment(s, parts)):
            return s, n
    raise EvalSetError("the file is empty", path=str(path))


class Where:
    """One line of a file: each method checks a JSON value, raising naming file, line and field."""

    def __init__(self, path: Path, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line

    def fail(self, message: str, fld: str | None = None) -> NoReturn:
        raise EvalSetError(message, path=self.path, line=self.line, field=fld)

    def report(
        self, rep: Reporter, kind: ProblemKind, message: str, fld: str | None = None
    ) -> None:
        rep(kind, message, path=self.path, line=self.line, field=fld)

    def id(self, value: object, fld: str) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int):
            if value is None:
                self.fail("missing id", fld)
            self.fail(f"an id must be a string, got {type(value).__name__} {value!r}", fld)
        text = str(value)
        if not text:
            self.fail("an id must not be empty", fld)
        return text

    def text(self, value: object, fld: str) -> str | None:
        if value is not None and not isinstance(value, str):
            self.fail(f"must be a string, got {type(value).__name__}", fld)
        return value

    def number(self, value: object, fld: str, lo: float, hi: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"must be a number in [{lo:g}, {hi:g}], got {value!r}", fld)
        x = float(value)
        if not lo <= x <= hi:  # NaN fails too
            self.fail(f"must be a number in [{lo:g}, {hi:g}], got {value!r}", fld)
        return x

    def score(self, value: object, fld: str) -> float:
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"a score must be a number or null, got {value!r}", fld)
        return float(value)

    def strings(self, value: object, fld: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            self.fail("must be a list of strings", fld)
        return tuple(value)

    def id_list(self, value: object, fld: str) -> list[str]:
        if not isinstance(value, list):
            self.fail(f"must be a list of ids, got {type(value).__name__}", fld)
        return [self.id(v, f"{fld}[{i}]") for i, v in enumerate(value)]


def json_line(text: str, path: Path, line: int) -> Any:
    """One line of a JSON-lines file as Python's json reads it (``NaN`` included)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalSetError(
            f"malformed JSON: {exc.msg} ({json_where(exc, 'line')[1]})", path=str(path), line=line
        ) from None


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each non-blank line of a JSON-lines file."""
    for n, text in enumerate(utf8_lines(path, numbered=False), 1):
        if text.strip():
            obj = json_line(text, path, n)
            if not isinstance(obj, dict):
                Where(path, n).fail(f"each line must be a JSON object, got {type(obj).__name__}")
            yield n, obj


def json_where(exc: json.JSONDecodeError, what: str) -> tuple[int, str]:
    """A JSON error's line and ``column N`` (``, the end of the <what>``: the text is cut)."""
    text = exc.doc
    end = len(text.rstrip())
    pos = min(exc.pos, end)
    line = text.count("\n", 0, pos) + 1
    line_start = text.rfind("\n", 0, pos) + 1
    column = f"column {pos - line_start + 1}"
    return line, f"{column}, the end of the {what}" if pos >= end else column


def json_file_error(exc: json.JSONDecodeError, path: Path) -> EvalSetError:
    line, column = json_where(exc, "file")
    return EvalSetError(f"malformed JSON: {exc.msg} ({column})", path=str(path), line=line)


def json_file(path: Path) -> Any:
    """A whole JSON file as Python's json reads it; raises on an empty file."""
    text = "".join(utf8_lines(path, numbered=False))
    if not text.strip():
        raise EvalSetError("the file is empty", path=str(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise json_file_error(exc, path) from None


LONG_PASSAGE = 100_000  # characters: a whole document rather than a passage?


def normalised(text: str) -> str:
    """How generated eval sets' passage texts are compared: whitespace runs as one space."""
    return " ".join(text.split())


def same_texts(texts: Mapping[str, str], rep: Reporter, path: Path) -> dict[str, list[str]]:
    """Normalised text -> ids of the passages holding it; repeated and long texts are reported."""
    by_text: dict[str, list[str]] = {}
    for doc, text in texts.items():
        by_text.setdefault(normalised(text), []).append(doc)
        if len(text) > LONG_PASSAGE:
            message = f"passage {doc!r} has {len(text):,} characters: a whole document?"
            rep(ProblemKind.LONG_PASSAGE, message, path=str(path))
    for ids in by_text.values():
        if len(ids) > 1:
            shown = ", ".join(map(repr, ids[:3])) + (", ..." if len(ids) > 3 else "")
            message = f"{len(ids)} passages have the same text: {shown}"
            rep(ProblemKind.DUPLICATE_TEXT, message, path=str(path))
    return by_text


def read_json_run(
    path: Path, rep: Reporter, *, known_docs: Set[str] | None = None
) -> tuple[Candidates, dict[str, int]]:
    """A JSON run file, ``{query_id: {doc_id: score}}``."""
    at = Where(path)
    data = json_file(path)
    if not isinstance(data, dict):
        at.fail("a JSON run is an object {query_id: {doc_id: score}}")
    cands: Candidates = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            at.fail(f"must be an object {{doc_id: score}}, got {type(docs).__name__}", qid)
        q = cands[qid] = {}
        for doc, value in docs.items():
            score = q[doc] = at.score(value, f"{qid}.{doc}")
            if known_docs is not None and doc not in known_docs:
                message = f"run document {doc!r} (query {qid!r}) is not in corpus.jsonl"
                at.report(rep, ProblemKind.UNKNOWN_DOCUMENT, message)
            if not math.isfinite(score):
                message = f"document {doc!r} of query {qid!r} has score {score!r}"
                at.report(rep, ProblemKind.INVALID_SCORE, message, "score")
    return cands, {}


def row_events(
    pairs: Pairs,
    rows: NDArray[np.intp],
    order: int,
    kind: ProblemKind,
    message: str,
    fld: str | None = None,
) -> list[Event]:
    """An event of each of ``rows``, ``message`` formatted with ``doc``, ``qid``, ``score``."""
    lines = pairs.line_of(rows).tolist()
    return [
        (ln, order, kind, message.format(doc=doc, qid=pairs.qids[q], score=v), fld)
        for doc, q, v, ln in zip(
            pairs.doc_ids(rows),
            pairs.q[rows].tolist(),
            pairs.value[rows].tolist(),
            lines,
            strict=True,
        )
    ]


def unknown_documents(pairs: Pairs, known: Set[str], who: str, order: int) -> list[Event]:
    """An ``UNKNOWN_DOCUMENT`` event of each row whose document is not in ``known``."""
    unknown = missing_ids(pairs.docs, known)  # per id of docs: per row when d is None
    if pairs.d is not None and unknown.size:
        unknown = unknown[pairs.d]
    message = who + " document {doc!r} (query {qid!r}) is not in corpus.jsonl"
    return row_events(pairs, np.flatnonzero(unknown), order, ProblemKind.UNKNOWN_DOCUMENT, message)
