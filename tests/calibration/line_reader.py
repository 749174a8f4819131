"""A reference reader of TREC qrels and run files, line by line with ``str.split()``
(as trec_eval 9 and pytrec_eval read them), for the tests of the one column-wise reader
(:mod:`ragguard.calibration.delimited`): the same labels, candidates, problems (file,
line, message) and first error are expected of both.

:func:`careful` loads an eval set with this reader in place of the library's TREC
reading (and the JSON readers' line-by-line paths), so a test compares the two.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import EvalSet, evalset, load_evalset
from ragguard.calibration import _columnar as columnar
from ragguard.calibration._problems import ProblemKind, Reporter
from ragguard.calibration._readers import (
    DISTRACTOR_GRADE,
    TREC_QRELS,
    TREC_RUN,
    Layout,
    ReadResult,
    bad_grade,
    grade_error,
    read_json_run,
)
from ragguard.calibration._records import Labels, Query
from ragguard.errors import EvalSetError


def _lines(path: Path) -> Iterator[str]:
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            yield from fh
    except UnicodeDecodeError as exc:
        raise EvalSetError(f"not UTF-8 text ({exc.reason})", path=str(path)) from None


def _records(path: Path, layout: Layout) -> Iterator[tuple[int, list[str]]]:
    n = layout.columns
    for lineno, text in enumerate(_lines(path), 1):
        s = text.strip()
        parts = s.split()
        if not s or layout.comment(s, parts):
            continue
        if len(parts) != n:
            raise EvalSetError(
                f"a {layout.kind} line has {n} columns ({layout.names}), got {len(parts)}",
                path=str(path),
                line=lineno,
            )
        yield lineno, parts


def read_qrels(path: Path, rep: Reporter) -> ReadResult:
    res = ReadResult()
    grades: dict[str, dict[str, int]] = {}
    for lineno, (qid, _, doc, text) in _records(path, TREC_QRELS):
        try:
            grade = int(text)
        except ValueError:
            raise EvalSetError(
                f"must be an integer, got {text!r}", path=str(path), line=lineno, field="grade"
            ) from None
        if bad_grade(grade):
            raise EvalSetError(
                grade_error(grade, qid, doc), path=str(path), line=lineno, field="grade"
            )
        q = grades.get(qid)
        if q is None:
            q = grades[qid] = {}
            res.label_lines[qid] = (str(path), lineno)
        if doc in q:
            if q[doc] != grade:
                raise EvalSetError(
                    f"query {qid!r}, document {doc!r}: grade {grade} contradicts {q[doc]}",
                    path=str(path),
                    line=lineno,
                )
            rep(
                ProblemKind.DUPLICATE_LABEL,
                f"query {qid!r}, document {doc!r} is labelled twice",
                path=str(path),
                line=lineno,
            )
            continue
        q[doc] = grade
    for qid, g in grades.items():
        known = {d for d, v in g.items() if v == DISTRACTOR_GRADE}
        res.queries[qid] = Query(qid)
        res.labels[qid] = Labels({d: max(v, 0) for d, v in g.items()}, frozenset(known))
    return res


def read_run(
    path: Path, rep: Reporter, known_docs: Any = None
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    cands: dict[str, dict[str, float]] = {}
    lines: dict[str, int] = {}
    for lineno, (qid, _, doc, _, text, _) in _records(path, TREC_RUN):
        try:
            score = float(text)
        except ValueError:
            raise EvalSetError(
                f"must be a number, got {text!r}", path=str(path), line=lineno, field="score"
            ) from None
        q = cands.get(qid)
        if q is None:
            q = cands[qid] = {}
            lines[qid] = lineno
        where = {"path": str(path), "line": lineno}
        if doc in q:
            msg = f"document {doc!r} appears twice in query {qid!r}"
            rep(ProblemKind.DUPLICATE_CANDIDATE, msg, **where)
            continue
        if known_docs is not None and doc not in known_docs:
            msg = f"run document {doc!r} (query {qid!r}) is not in corpus.jsonl"
            rep(ProblemKind.UNKNOWN_DOCUMENT, msg, **where)
        if not math.isfinite(score):
            msg = f"document {doc!r} of query {qid!r} has score {score!r}"
            rep(ProblemKind.INVALID_SCORE, msg, **where, field="score")
        q[doc] = score
    return cands, lines


def _read_run(
    path: Path, rep: Reporter, *, known_docs: Any = None
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    with path.open("rb") as fh:
        if fh.read(1) == b"{":  # a JSON run: the library's JSON reader
            return read_json_run(path, rep, known_docs=known_docs)
    return read_run(path, rep, known_docs)


USED: list[str] = []
"""What the line-by-line readers read while patched in (:func:`use_line_reader`)."""


def use_line_reader(m: pytest.MonkeyPatch) -> None:
    """From now on (in ``m``'s scope), TREC files are read by this module and JSON-lines
    files and BEIR folders by the library's line-by-line readers (each read is recorded
    in :data:`USED`)."""

    def qrels(path: Path, rep: Reporter) -> ReadResult:
        USED.append(str(path))
        return read_qrels(path, rep)

    def run(path: Path, rep: Reporter, *, known_docs: Any = None) -> Any:
        USED.append(str(path))
        return _read_run(path, rep, known_docs=known_docs)

    def not_column_wise(path: Path, *args: Any, **kw: Any) -> None:
        USED.append(str(path))

    m.setattr(columnar, "read_qrels", qrels)
    m.setattr(columnar, "read_run", run)
    m.setattr(evalset, "read_jsonl", not_column_wise)
    m.setattr(evalset, "read_beir", not_column_wise)


def careful(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> EvalSet:
    """``load_evalset(*args, **kw)`` read by the line-by-line readers
    (:func:`use_line_reader`); fails when they read nothing."""
    USED.clear()
    with monkeypatch.context() as m:
        use_line_reader(m)
        out = load_evalset(*args, **kw)
    assert USED, "the line-by-line readers read nothing"
    return out
