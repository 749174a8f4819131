"""Parsers for the eval-set and run formats (see :mod:`ragguard.calibration.evalset`).

Each parser validates as it reads and raises :class:`~ragguard.errors.EvalSetError`
with the file, the line and the field of the first malformed value; problems that leave
the data usable go to the :class:`~ragguard.calibration._problems.Reporter`.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ragguard.calibration._problems import ProblemKind, Reporter
from ragguard.calibration._records import Labels, Query
from ragguard.calibration.texts import Texts, TextSource, corpus_text
from ragguard.errors import EvalSetError

__all__ = [
    "BEIR_DISTRACTOR",
    "BEIR_HEADERS",
    "BEIR_QRELS",
    "MAX_GRADE",
    "MIN_GRADE",
    "TREC_QRELS",
    "TREC_RUN",
    "Layout",
    "ReadResult",
    "Where",
    "bad_grade",
    "first_content",
    "grade_error",
    "json_id",
    "json_line",
    "json_value",
    "open_text",
    "read",
    "read_json_run",
]

Candidates = dict[str, dict[str, float]]
Lines = dict[str, int]


@dataclass
class ReadResult:
    """What a reader found: queries, labels (with where each query's labels start),
    embedded runs (with the line of each query), the corpus ids when known, and the
    passage texts the file carries."""

    queries: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, Any] = field(default_factory=dict)
    label_lines: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)
    runs: dict[str, tuple[Candidates, Lines]] = field(default_factory=dict)
    corpus: set[str] | None = None
    texts: Texts = field(default_factory=Texts)


def open_text(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (gzipped when its name ends in ``.gz``); a byte
    order mark at its start, as some editors write, is skipped."""
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8-sig") as fh:
                yield from fh
        else:
            with path.open(encoding="utf-8-sig") as fh:
                yield from fh
    except UnicodeDecodeError as exc:
        raise EvalSetError(f"not UTF-8 text ({exc.reason})", path=str(path)) from None
    except (OSError, EOFError) as exc:
        raise EvalSetError(f"cannot read: {exc}", path=str(path)) from None


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns of a line of a qrels or run file, and which one holds a number.

    A line starting with ``#`` is a comment only when it cannot be a record
    (:meth:`comment`): trec_eval up to 9 (and pytrec_eval) know no comments, so
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
    for n, line in enumerate(open_text(path), 1):
        s = line.strip()
        if s and not (TREC_QRELS.comment(s, parts := s.split()) and TREC_RUN.comment(s, parts)):
            return s, n
    raise EvalSetError("the file is empty", path=str(path))


class Where:
    """Errors of one line of a file: each method checks a value read from JSON and raises
    :class:`~ragguard.errors.EvalSetError` naming the file, the line and the field."""

    def __init__(self, path: Path, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line

    def fail(self, message: str, fld: str | None = None) -> NoReturn:
        raise EvalSetError(message, path=self.path, line=self.line, field=fld)

    def id(self, value: object, fld: str) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int):
            if value is None:
                self.fail("missing id", fld)
            self.fail(f"an id must be a string, got {type(value).__name__} {value!r}", fld)
        text = str(value)
        if not text:
            self.fail("an id must not be empty", fld)
        return text

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


# --------------------------------------------------------------------------- JSONL

MIN_GRADE, MAX_GRADE = 1, 5
"""Grades of relevant documents; 0 is judged not relevant. TREC and BEIR qrels use the
same scale, plus DISTRACTOR_GRADE for a known distractor (JSONL lists those under
``distractors``)."""
DISTRACTOR_GRADE = -1
"""A qrels grade of -1 marks a known distractor: judged not relevant (grade 0) and listed
in ``Labels.distractors``. Grades below -1 (the TREC Web tracks' -2 for junk) are read
as judged not relevant."""


def bad_grade(grade: Any) -> bool:
    """Whether a number cannot be a qrels grade: the one rule for grades read from files,
    tables and dicts. A grade is a whole number up to MAX_GRADE (1-5 relevant, 0 judged
    not relevant, DISTRACTOR_GRADE a known distractor, below it judged not relevant); a
    whole float (``1.0``, as a typed table column holds it) is one, ``2.5``, ``7`` and
    NaN are not. (In a text file a grade is read with ``int``, so ``1.0`` is not an
    integer there.)"""
    if isinstance(grade, int):
        return grade > MAX_GRADE
    value = float(grade)
    return not (value <= MAX_GRADE and value.is_integer())


def grade_error(grade: Any, qid: str, doc: str) -> str:
    """The message for a grade :func:`bad_grade` rejects, naming the query and document."""
    value = grade if isinstance(grade, int) else float(grade)
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return (
        f"must be an integer up to {MAX_GRADE} (1-{MAX_GRADE} relevant, 0 not relevant, "
        f"{DISTRACTOR_GRADE} a known distractor), got {text} (query {qid!r}, document {doc!r})"
    )


def _json_line(text: str, at: Where) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at.fail(f"malformed JSON: {exc.msg} ({_json_where(exc, 'line')[1]})")


def json_value(text: str, at: Where) -> Any:
    """One line of JSON as Python's json reads it (``NaN`` and ``Infinity`` included).

    Raises:
        EvalSetError: malformed JSON, naming file, line and column.
    """
    return _json_line(text, at)


def json_line(text: str, path: Path, line: int) -> Any:
    """One line of a JSON-lines file as Python's json reads it.

    Raises:
        EvalSetError: malformed JSON, naming file, line and column.
    """
    return _json_line(text, Where(path, line))


def json_id(value: object, path: Path, line: int, fld: str) -> str:
    """An id read from JSON: a non-empty string, or an integer as its decimal text.

    Raises:
        EvalSetError: a missing (``None``) or empty id, or one of another type (a
            boolean, a float, a list...), naming file, line and field.
    """
    return Where(path, line).id(value, fld)


def _json_where(exc: json.JSONDecodeError, what: str) -> tuple[int, str]:
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


def _add_candidate(
    cands: Candidates,
    lines: Lines,
    qid: str,
    doc: str,
    score: float,
    at: Where,
    rep: Reporter,
    known_docs: Set[str] | None,
) -> None:
    q = cands.get(qid)
    if q is None:
        q = cands[qid] = {}
        lines[qid] = at.line or 0
    if doc in q:
        rep(
            ProblemKind.DUPLICATE_CANDIDATE,
            f"document {doc!r} appears twice in query {qid!r}",
            path=at.path,
            line=at.line,
        )
        return
    if known_docs is not None and doc not in known_docs:
        rep(
            ProblemKind.UNKNOWN_DOCUMENT,
            f"run document {doc!r} (query {qid!r}) is not in corpus.jsonl",
            path=at.path,
            line=at.line,
        )
    if not math.isfinite(score):
        rep(
            ProblemKind.INVALID_SCORE,
            f"document {doc!r} of query {qid!r} has score {score!r}",
            path=at.path,
            line=at.line,
            field="score",
        )
    q[doc] = score


def read_json_run(
    path: Path, rep: Reporter, *, known_docs: Set[str] | None = None
) -> tuple[Candidates, Lines]:
    """A JSON run file, ``{query_id: {doc_id: score}}`` (TREC run files are read
    column-wise, :mod:`ragguard.calibration.delimited`)."""
    return _read_json_run(path, rep, known_docs)


def _read_json_run(
    path: Path, rep: Reporter, known_docs: Set[str] | None
) -> tuple[Candidates, Lines]:
    at = Where(path)
    text = "".join(open_text(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        line, column = _json_where(exc, "file")
        raise EvalSetError(
            f"malformed JSON: {exc.msg} ({column})", path=str(path), line=line
        ) from None
    if not isinstance(data, dict):
        at.fail("a JSON run is an object {query_id: {doc_id: score}}")
    cands: Candidates = {}
    lines: Lines = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            at.fail(f"must be an object {{doc_id: score}}, got {type(docs).__name__}", qid)
        cands[qid] = {}
        for doc, score in docs.items():
            s = at.score(score, f"{qid}.{doc}")
            _add_candidate(cands, lines, qid, doc, s, at, rep, known_docs)
    return cands, lines


# --------------------------------------------------------------------------- UDCG JSON


def _json_list_items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, element) of each element of a top-level JSON list, with line numbers."""
    text = "".join(open_text(path))
    decoder = json.JSONDecoder()
    ws = " \t\r\n"

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def fail(pos: int, message: str) -> NoReturn:
        raise EvalSetError(message, path=str(path), line=line_of(pos))

    pos = len(text) - len(text.lstrip(ws))
    if not text.startswith("[", pos):
        fail(pos, "a UDCG file is a JSON list of examples")
    pos += 1
    first = True
    while True:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if pos >= len(text):
            fail(pos, "malformed JSON: the list is not closed with ']'")
        if text[pos] == "]":
            return
        if not first:
            if text[pos] != ",":
                fail(pos, "malformed JSON: expected ',' or ']' between examples")
            pos += 1
            while pos < len(text) and text[pos] in ws:
                pos += 1
        try:
            item, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            line, column = _json_where(exc, "file")
            raise EvalSetError(
                f"malformed JSON: {exc.msg} ({column})", path=str(path), line=line
            ) from None
        yield line_of(pos), item
        pos = end
        first = False


def _read_udcg(path: Path, rep: Reporter, model: str | None) -> ReadResult:
    res = ReadResult()
    examples: list[tuple[Where, str, dict[str, int], dict[str, dict[str, float]]]] = []
    run: Candidates = {}
    lines: Lines = {}
    seen: dict[str, int] = {}
    models: set[str] = set()
    texts: dict[tuple[str, str], str] = {}
    titles: dict[tuple[str, str], str] = {}
    originals: dict[str, dict[str, Any]] = {}
    for index, (lineno, ex) in enumerate(_json_list_items(path)):
        at = Where(path, lineno)
        base = f"[{index}]"
        if not isinstance(ex, dict):
            at.fail(f"an example must be an object, got {type(ex).__name__}", base)
        qid = at.id(ex.get("example_id"), f"{base}.example_id")
        if qid in seen:
            at.fail(
                f"example id {qid!r} was already used on line {seen[qid]}", f"{base}.example_id"
            )
        seen[qid] = lineno
        question = ex.get("question")
        if question is not None and not isinstance(question, str):
            at.fail(f"must be a string, got {type(question).__name__}", f"{base}.question")
        passages = ex.get("passages")
        if not isinstance(passages, list):
            at.fail("missing list of passages" if passages is None else "must be a list",
                    f"{base}.passages")  # fmt: skip
        grades: dict[str, int] = {}
        probs: dict[str, dict[str, float]] = {}
        cands: dict[str, float] = {}
        for i, p in enumerate(passages):
            fld = f"{base}.passages[{i}]"
            if not isinstance(p, dict):
                at.fail(f"a passage must be an object, got {type(p).__name__}", fld)
            doc = at.id(p.get("doc_id"), f"{fld}.doc_id")
            rel = p.get("is_relevant")
            if not isinstance(rel, bool):
                at.fail(f"must be true or false, got {rel!r}", f"{fld}.is_relevant")
            info = p.get("models_info", {})
            if not isinstance(info, dict):
                at.fail(f"must be an object, got {type(info).__name__}", f"{fld}.models_info")
            text, title = corpus_text(p, path, lineno, required=False, field=f"{fld}.text")
            if text is not None:
                texts.setdefault((qid, doc), text)
                if title is not None:
                    titles.setdefault((qid, doc), title)
            if doc in cands:
                rep(
                    ProblemKind.DUPLICATE_CANDIDATE,
                    f"document {doc!r} appears twice in example {qid!r}",
                    path=str(path),
                    line=lineno,
                    field=fld,
                )
                continue
            cands[doc] = math.nan
            grades[doc] = int(rel)
            for name, entry in info.items():
                mfld = f"{fld}.models_info.{name}"
                if not isinstance(entry, dict):
                    at.fail(f"must be an object, got {type(entry).__name__}", mfld)
                if "no_res_prob" in entry:
                    probs.setdefault(name, {})[doc] = at.number(
                        entry["no_res_prob"], f"{mfld}.no_res_prob", 0.0, 1.0
                    )
                    models.add(name)
        res.queries[qid] = Query(qid, question, _answers(ex.get("answers"), at, base))
        res.label_lines[qid] = (str(path), lineno)
        run[qid] = cands
        lines[qid] = lineno
        examples.append((at, qid, grades, probs))
        originals[qid] = ex
    if model is None and len(models) > 1:
        raise EvalSetError(
            f"the file has no_res_prob for several models; pick one with model=...: "
            f"{', '.join(sorted(models))}",
            path=str(path),
        )
    chosen = model if model is not None else next(iter(models), None)
    if model is not None and model not in models:
        raise EvalSetError(
            f"no passage has no_res_prob for model {model!r}; models in the file: "
            f"{', '.join(sorted(models)) or 'none'}",
            path=str(path),
        )
    for at, qid, grades, probs in examples:
        no_response: dict[str, float] = {}
        if chosen is not None:
            no_response = probs.get(chosen, {})
            missing = [d for d in grades if d not in no_response]
            if missing:
                at.fail(
                    f"passage {missing[0]!r} of example {qid!r} has no no_res_prob for model "
                    f"{chosen!r}",
                    "models_info",
                )
        res.labels[qid] = Labels(grades, no_response=no_response)
    res.runs["passages"] = (run, lines)
    res.texts = Texts(
        pairs=[TextSource.of(texts, titles)] if texts else (), udcg_examples=originals
    )
    return res


def _answers(value: object, at: Where, base: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        at.fail("must be a list of strings", f"{base}.answers")
    return tuple(value)


def read(fmt: str, path: Path, rep: Reporter, *, model: str | None) -> ReadResult:
    """Read labels (and embedded runs) in format ``fmt`` (``"udcg"``; TREC qrels, BEIR
    folders and JSONL files have readers of their own)."""
    if not path.is_file():
        raise EvalSetError("no such file", path=str(path))
    return _read_udcg(path, rep, model)
