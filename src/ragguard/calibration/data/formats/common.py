"""What the eval-set formats share: ``Format`` (an entry of
``ragguard.calibration.data.evalset.FORMATS``), the line layouts of TREC and BEIR files,
``Where`` (errors naming file, line and field) and the JSON helpers.

Each reader validates as it reads and raises [`EvalSetError`][ragguard.EvalSetError]
with the file, the line and the field of the first malformed value; problems that leave
the data usable go to the ``Reporter``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ragguard.calibration.data.columns import ColumnarRead
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.texts import utf8_lines
from ragguard.errors import EvalSetError

Candidates = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What ``load_evalset`` passes every reader besides the path and the reporter."""

    split: str | None = None
    model: str | None = None
    texts: bool = True
    corpus: tuple[Path, ...] = ()
    """Corpus files a RAGAS testset's contexts are matched against (else the
    ``corpus.jsonl`` beside it)."""


@dataclass(frozen=True, slots=True)
class Format:
    """An eval-set format, an entry of ``FORMATS``: ``load_evalset`` and the CLI read
    the registry, so a format added there (``FORMATS[name] = Format(...)``) loads."""

    name: str
    detect: Callable[[Path, str | None], bool]
    """Whether a folder (``head`` None) or a file (``head`` its first content line,
    ``first_content``) holds this format; it may raise saying why one that looks like
    it is not."""
    read: Callable[[Path, Reporter, ReadOptions], ColumnarRead]
    suffixes: tuple[str, ...] = ()
    """A file whose (lower-case) name ends so is this format, unless a format before it
    in ``FORMATS`` detects its first line."""
    folder: bool = False
    what: str = ""
    """The format's data in messages (``BEIR folders``)."""
    takes: frozenset[str] = frozenset()
    """The options of ``ReadOptions`` beyond ``texts`` it reads (``split``, ``model``)."""
    no_runs: str | None = None
    """Why ``runs=`` does not apply, when the data is its own (unscored) run."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns of a line of a qrels or run file, and which one holds a number.

    A line starting with ``#`` is a comment only when it cannot be a record
    (``comment``): trec_eval up to 9 (and pytrec_eval) know no comments, so
    ``#7 0 docA 1`` labels query ``#7``; trec_eval 10 skips every line starting with
    ``#``, which would drop that query without a word. Here such a line is read, and a
    ``#`` line that has not the layout's number of columns, or no number where the
    grade or score goes (a header, a note), is a comment.
    """

    names: str
    """The columns, as error messages name them (``query_id iteration doc_id grade``)."""
    kind: str
    """What a line is, for error messages (``qrels``, ``run``)."""
    value: int | None = None
    """The column holding a number, if any."""
    parse: Callable[[str], object] = float
    """How that number is read (``int``, ``float``)."""
    ids: tuple[int, int] = (0, 2)
    """The columns holding the query id and the document id."""

    @property
    def columns(self) -> int:
        """The number of columns of a record."""
        return len(self.names.split())

    def record(self, parts: Sequence[str]) -> bool:
        """Whether a line split into ``parts`` can be a record: the layout's number of
        columns, and a number where the value goes."""
        if len(parts) != self.columns:
            return False
        if self.value is None:
            return True
        try:
            self.parse(parts[self.value])
        except ValueError:
            return False
        return True

    def comment(self, line: str, parts: Sequence[str]) -> bool:
        """Whether a (stripped) line, split into ``parts``, is a comment: it starts with
        ``#`` and cannot be a record."""
        return line.startswith("#") and not self.record(parts)


TREC_QRELS = Layout("query_id iteration doc_id grade", "qrels", 3, int)
TREC_RUN = Layout("query_id Q0 doc_id rank score tag", "run", 4, float)
BEIR_QRELS = Layout("query-id corpus-id score", "BEIR qrels", 2, int, (0, 1))
BEIR_DISTRACTOR = Layout("query-id corpus-id", "distractors", ids=(0, 1))
BEIR_HEADERS = frozenset({"query-id", "query_id", "qid"})
"""First fields of a BEIR TSV file's header line (line 1, skipped)."""


def first_content(path: Path) -> tuple[str, int]:
    """The first non-blank, non-comment line of a file (stripped) and its number; a line
    starting with ``#`` is a comment unless it can be a TREC qrels or run record."""
    for n, line in enumerate(utf8_lines(path, numbered=False), 1):
        s = line.strip()
        if s and not (TREC_QRELS.comment(s, parts := s.split()) and TREC_RUN.comment(s, parts)):
            return s, n
    raise EvalSetError("the file is empty", path=str(path))


class Where:
    """Errors of one line of a file: each method checks a value read from JSON and raises
    [`EvalSetError`][ragguard.EvalSetError] naming the file, the line and the field."""

    def __init__(self, path: Path, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line

    def fail(self, message: str, fld: str | None = None) -> NoReturn:
        raise EvalSetError(message, path=self.path, line=self.line, field=fld)

    def report(
        self, rep: Reporter, kind: ProblemKind, message: str, fld: str | None = None
    ) -> None:
        """Report a problem of this line to ``rep``."""
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

    def id_list(self, value: object, fld: str) -> list[str]:
        if not isinstance(value, list):
            self.fail(f"must be a list of ids, got {type(value).__name__}", fld)
        return [self.id(v, f"{fld}[{i}]") for i, v in enumerate(value)]


def json_line(text: str, path: Path, line: int) -> Any:
    """One line of a JSON-lines file as Python's json reads it (``NaN`` and
    ``Infinity`` included).

    Raises:
        EvalSetError: malformed JSON, naming file, line and column.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalSetError(
            f"malformed JSON: {exc.msg} ({json_where(exc, 'line')[1]})", path=str(path), line=line
        ) from None


def json_where(exc: json.JSONDecodeError, what: str) -> tuple[int, str]:
    """The line (1-based, within the text decoded) of a JSON error and ``column N``,
    with ``the end of the <what>`` when the text ends there (it was cut short): such an
    error points just past the last character, not past the final newline."""
    text = exc.doc
    end = len(text.rstrip())
    pos = min(exc.pos, end)
    line = text.count("\n", 0, pos) + 1
    line_start = text.rfind("\n", 0, pos) + 1
    column = f"column {pos - line_start + 1}"
    return line, f"{column}, the end of the {what}" if pos >= end else column


def json_file_error(exc: json.JSONDecodeError, path: Path) -> EvalSetError:
    """The error of malformed JSON in a whole file, naming its line and column."""
    line, column = json_where(exc, "file")
    return EvalSetError(f"malformed JSON: {exc.msg} ({column})", path=str(path), line=line)


def json_file(path: Path) -> Any:
    """A whole JSON file as Python's json reads it.

    Raises:
        EvalSetError: an empty file, text that is not UTF-8, malformed JSON (naming its
            line and column).
    """
    text = "".join(utf8_lines(path, numbered=False))
    if not text.strip():
        raise EvalSetError("the file is empty", path=str(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise json_file_error(exc, path) from None


LONG_PASSAGE = 100_000
"""Characters above which a passage of a generated eval set is reported as
``ProblemKind.LONG_PASSAGE`` (a whole document rather than a passage?)."""


def normalised(text: str) -> str:
    """``text`` with its runs of whitespace made one space and its ends stripped: how
    generated eval sets' passage texts are compared."""
    return " ".join(text.split())


def same_texts(texts: Mapping[str, str], rep: Reporter, path: Path) -> dict[str, list[str]]:
    """Normalised text -> the ids of the passages of ``texts`` holding it (in order);
    each group of several ids (the same text, whitespace aside) is reported as
    ``DUPLICATE_TEXT``, and each passage over ``LONG_PASSAGE`` characters as
    ``LONG_PASSAGE``."""
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
    """A JSON run file, ``{query_id: {doc_id: score}}`` (TREC run files are read
    column-wise, ``ragguard.calibration.data.formats.delimited``)."""
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
