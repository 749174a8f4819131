"""Reference readers, line by line, for the tests of the one column-wise reader of each
format: TREC qrels and run files split with ``str.split()`` (as trec_eval 9 and
pytrec_eval read them; the one reader: :mod:`ragguard.calibration.data.formats.delimited`) and BEIR
folders read with Python's ``json`` one line at a time (the one reader:
:func:`ragguard.calibration.data.formats.beir.read_beir`). The same labels, candidates,
texts, problems (file, line, message) and first error are expected of both.

:func:`careful` loads an eval set with these readers in place of the library's TREC and
BEIR reading (and the JSONL reader's line-by-line path), so a test compares the two.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard.calibration import EvalSet, load_evalset
from ragguard.calibration.data import evalset
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.data.formats import trec
from ragguard.calibration.data.formats.beir import BEIR_DISTRACTORS, beir_split
from ragguard.calibration.data.formats.common import (
    BEIR_DISTRACTOR,
    BEIR_HEADERS,
    BEIR_QRELS,
    TREC_QRELS,
    TREC_RUN,
    Layout,
    Where,
    json_line,
    read_json_run,
)
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import (
    DISTRACTOR_GRADE,
    Labels,
    Query,
    bad_grade,
    grade_error,
)
from ragguard.calibration.data.texts import Texts, TextSource, corpus_text
from ragguard.errors import EvalSetError


@dataclass
class ReadResult:
    """What a reference reader found, as the library's readers give it
    (:class:`~ragguard.calibration.data.columns.ColumnarRead`), held in dicts."""

    queries: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, Any] = field(default_factory=dict)
    label_lines: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)
    runs: dict[str, tuple[dict[str, dict[str, float]], dict[str, int]]] = field(
        default_factory=dict
    )
    corpus: set[str] | None = None
    texts: Texts = field(default_factory=Texts)
    silver: bool = False


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


# --------------------------------------------------------------------------- BEIR


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each line of a UTF-8 file, lines ended as Python's universal
    newlines end them (a byte order mark at the start skipped); a line that is not UTF-8
    raises, naming it."""
    for lineno, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
        try:
            yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise EvalSetError(
                f"not UTF-8 text ({exc.reason})", path=str(path), line=lineno
            ) from None


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, text in _text_lines(path):
        if text.strip():
            obj = json_line(text, path, lineno)
            if not isinstance(obj, dict):
                raise EvalSetError("each line must be a JSON object", path=str(path), line=lineno)
            yield lineno, obj


def _tsv_records(path: Path, layout: Layout) -> Iterator[tuple[int, list[str]]]:
    """The fields of each record of a BEIR TSV file: a line split on tabs when it has
    one, else on whitespace, each field stripped; blank lines, comments (see
    :class:`Layout`) and a header on line 1 left out."""
    for lineno, text in _text_lines(path):
        s = text.strip()
        if not s:
            continue
        parts = [p.strip() for p in s.split("\t")] if "\t" in s else s.split()
        if layout.comment(s, parts) or (lineno == 1 and parts[0].lower() in BEIR_HEADERS):
            continue
        if len(parts) != layout.columns:
            raise EvalSetError(
                f"a {layout.kind} line has {layout.columns} columns ({layout.names}), "
                f"got {len(parts)}",
                path=str(path),
                line=lineno,
            )
        yield lineno, parts


def read_beir(path: Path, rep: Reporter, split: str | None, *, texts: bool = True) -> ReadResult:
    """A BEIR folder read line by line (the split picked first, then ``corpus.jsonl``,
    ``queries.jsonl``, the qrels and ``distractors.tsv``, in that order)."""
    if not path.is_dir():
        raise EvalSetError("a BEIR eval set is a folder", path=str(path))
    qrels_path = beir_split(path, split)
    res = ReadResult()
    corpus_path = path / "corpus.jsonl"
    if corpus_path.exists():
        res.corpus = set()
        passages: dict[str, str] = {}
        titles: dict[str, str] = {}
        for lineno, obj in _json_objects(corpus_path):
            doc = Where(corpus_path, lineno).id(obj.get("_id"), "_id")
            res.corpus.add(doc)
            passage, title = corpus_text(obj, corpus_path, lineno, required=False)
            if passage is not None:
                passages[doc] = passage
                if title is not None:
                    titles[doc] = title
        if passages and texts:
            res.texts = Texts(docs=[TextSource.of(passages, titles)])
    query_texts: dict[str, str | None] = {}
    queries_path = path / "queries.jsonl"
    if queries_path.exists():
        for lineno, obj in _json_objects(queries_path):
            qtext = obj.get("text")
            if qtext is not None and not isinstance(qtext, str):
                raise EvalSetError(f"must be a string, got {type(qtext).__name__}",
                                   path=str(queries_path), line=lineno, field="text")  # fmt: skip
            query_texts[Where(queries_path, lineno).id(obj.get("_id"), "_id")] = qtext
    grades: dict[str, dict[str, int]] = {}
    where = str(qrels_path)
    for lineno, (qid, doc, text) in _tsv_records(qrels_path, BEIR_QRELS):
        try:
            grade = int(text)
        except ValueError:
            raise EvalSetError(
                f"must be an integer, got {text!r}", path=where, line=lineno, field="score"
            ) from None
        if bad_grade(grade):
            raise EvalSetError(grade_error(grade, qid, doc), path=where, line=lineno,
                               field="score")  # fmt: skip
        if res.corpus is not None and doc not in res.corpus:
            msg = f"labelled document {doc!r} (query {qid!r}) is not in corpus.jsonl"
            rep(ProblemKind.UNKNOWN_DOCUMENT, msg, path=where, line=lineno)
        if queries_path.exists() and qid not in query_texts and qid not in grades:
            msg = f"labelled query {qid!r} is not in queries.jsonl"
            rep(ProblemKind.UNKNOWN_QUERY, msg, path=where, line=lineno)
        q = grades.get(qid)
        if q is None:
            q = grades[qid] = {}
            res.label_lines[qid] = (where, lineno)
        if doc in q:
            if q[doc] != grade:
                raise EvalSetError(
                    f"query {qid!r}, document {doc!r}: grade {grade} contradicts {q[doc]}",
                    path=where,
                    line=lineno,
                )
            msg = f"query {qid!r}, document {doc!r} is labelled twice"
            rep(ProblemKind.DUPLICATE_LABEL, msg, path=where, line=lineno)
            continue
        q[doc] = grade
    known: dict[str, set[str]] = {}
    dis_path = path / BEIR_DISTRACTORS
    if dis_path.exists():
        for lineno, (qid, doc) in _tsv_records(dis_path, BEIR_DISTRACTOR):
            if qid not in grades:
                msg = f"distractor {doc!r} is for query {qid!r}, which has no labels in this split"
                rep(ProblemKind.UNKNOWN_QUERY, msg, path=str(dis_path), line=lineno)
                continue
            known.setdefault(qid, set()).add(doc)
    for qid, g in grades.items():
        res.queries[qid] = Query(qid, query_texts.get(qid))
        dis = {d for d, v in g.items() if v == DISTRACTOR_GRADE} | known.get(qid, set())
        labels = {d: max(v, 0) for d, v in g.items()}
        for d in dis:
            labels.setdefault(d, 0)
        res.labels[qid] = Labels(labels, frozenset(dis))
    return res


# --------------------------------------------------------------------------- JSONL


def read_jsonl_reference(path: Path, rep: Reporter, *, texts: bool = True) -> ReadResult:
    """A ragguard JSONL file read as its documentation says (valid files only: no checks),
    one ``json.loads`` a line: a reference for the library's reader."""
    res = ReadResult()
    runs: dict[str, tuple[dict[str, dict[str, float]], dict[str, int]]] = {}
    invalid: dict[str, list[tuple[str, int, str]]] = {}
    pair_texts: dict[tuple[str, str], str] = {}
    metadata: dict[str, Any] = {}
    where = str(path)
    for lineno, text in enumerate(_lines(path), 1):
        if not text.strip():
            continue
        obj = json.loads(text)
        qid = str(obj["query_id"])
        rel = obj.get("relevant", [])
        grades = {str(d): 1 for d in rel} if isinstance(rel, list) else dict(rel)
        grades.update({str(d): 0 for d in obj.get("not_relevant", [])})
        distractors = [str(d) for d in obj.get("distractors", [])]
        grades.update(dict.fromkeys(distractors, 0))
        res.queries[qid] = Query(qid, obj.get("query"), tuple(obj.get("answers", [])))
        res.labels[qid] = Labels(
            grades,
            frozenset(distractors),
            {str(d): float(u) for d, u in obj.get("utilities", {}).items()},
            {str(d): float(p) for d, p in obj.get("no_response", {}).items()},
            obj.get("num_relevant"),
        )
        res.label_lines[qid] = (where, lineno)
        if isinstance(obj.get("metadata"), dict):
            metadata[qid] = obj["metadata"]
        listed = [("default", "candidates", obj["candidates"])] if "candidates" in obj else []
        listed += [(n, f"runs.{n}", c) for n, c in obj.get("runs", {}).items()]
        for name, fld, cands in listed:
            out = runs.setdefault(name, ({}, {}))
            out[1][qid] = lineno
            got = out[0][qid] = {}
            for i, c in enumerate(cands):
                doc = str(c["id"]) if isinstance(c, dict) else str(c)
                score = c.get("score") if isinstance(c, dict) else None
                value = math.nan if score is None else float(score)
                if doc in got:
                    msg = (
                        f"document {doc!r} appears twice among the candidates of query "
                        f"{qid!r} in run {name!r}"
                    )
                    rep(ProblemKind.DUPLICATE_CANDIDATE, msg, path=where, line=lineno,
                        field=f"{fld}[{i}]")  # fmt: skip
                    continue
                got[doc] = value
                if not math.isfinite(value):
                    invalid.setdefault(name, []).append((doc, lineno, f"{fld}[{i}]"))
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    pair_texts.setdefault((qid, doc), c["text"])
    for name, (cands, _) in runs.items():
        if any(math.isfinite(v) for c in cands.values() for v in c.values()):
            for doc, line, fld in invalid.get(name, []):
                msg = f"candidate {doc!r} of run {name!r} has no valid score"
                rep(ProblemKind.INVALID_SCORE, msg, path=where, line=line, field=fld)
    res.runs = runs
    if texts:
        sources = [TextSource.of(pair_texts)] if pair_texts else []
        res.texts = Texts(pairs=sources, metadata=metadata)
    return res


USED: list[str] = []
"""What the line-by-line readers read while patched in (:func:`use_line_reader`)."""


def use_line_reader(m: pytest.MonkeyPatch) -> None:
    """From now on (in ``m``'s scope), TREC files, BEIR folders and JSONL files are read
    by this module's references (each read is recorded in :data:`USED`)."""

    def qrels(path: Path, rep: Reporter) -> ReadResult:
        USED.append(str(path))
        return read_qrels(path, rep)

    def run(path: Path, rep: Reporter, *, known_docs: Any = None) -> Any:
        USED.append(str(path))
        return _read_run(path, rep, known_docs=known_docs)

    m.setattr(trec, "read_qrels", qrels)
    m.setattr(trec, "read_run", run)

    def beir(path: Path, *args: Any, **kw: Any) -> ReadResult:
        USED.append(str(path))
        return read_beir(path, *args, **kw)

    def jsonl(path: Path, rep: Reporter, *, texts: bool = True) -> ReadResult:
        USED.append(str(path))
        return read_jsonl_reference(path, rep, texts=texts)

    formats = evalset.FORMATS
    m.setitem(
        formats,
        "beir",
        replace(formats["beir"], read=lambda p, r, o: beir(p, r, o.split, texts=o.texts)),
    )
    m.setitem(
        formats, "jsonl", replace(formats["jsonl"], read=lambda p, r, o: jsonl(p, r, texts=o.texts))
    )


def careful(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> EvalSet:
    """``load_evalset(*args, **kw)`` read by the line-by-line readers
    (:func:`use_line_reader`); fails when they read nothing."""
    USED.clear()
    with monkeypatch.context() as m:
        use_line_reader(m)
        out = load_evalset(*args, **kw)
    assert USED, "the line-by-line readers read nothing"
    return out


# --- comparing what the column-wise readers read with the references above ---------


def write(path: Path, text: str, *, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode(encoding)))
    else:
        path.write_bytes(text.encode(encoding))
    return path


ARRAY_FIELDS = (
    "n_present", "n_valid", "grades", "judged", "distractor", "given_utility", "no_response",
    "n_relevant", "n_relevant_labelled", "ideal_grades", "ideal_utilities", "grade_counts",
    "max_grade", "order", "scores", "raw", "utility", "n_evidence",
)  # fmt: skip


def assert_same_arrays(a: EvalArrays, b: EvalArrays) -> None:
    assert a.qids == b.qids
    assert a.score_kind == b.score_kind
    assert a.integer_grades == b.integer_grades
    assert dict(a.score_issues) == dict(b.score_issues)
    for name in ARRAY_FIELDS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    for row in range(a.n_queries):
        assert a.doc_ids(row) == b.doc_ids(row)


def assert_same(fast: EvalSet, slow: EvalSet) -> None:
    # ``slow`` came from the line-by-line readers (``careful`` checks they read), so the
    # comparison is not of the column-wise readers with themselves
    assert fast.qids == slow.qids
    assert dict(fast.queries) == dict(slow.queries)
    assert dict(fast.labels) == dict(slow.labels)
    assert list(fast.runs) == list(slow.runs)
    for name in slow.runs:
        fr, sr = fast.runs[name], slow.runs[name]
        assert (fr.name, fr.score_kind, fr.source) == (sr.name, sr.score_kind, sr.source)
        assert list(fr.candidates) == list(sr.candidates)
        for q in sr.candidates:
            f, s = dict(fr.candidates[q]), dict(sr.candidates[q])
            assert list(f) == list(s)  # the run's order
            assert [str(v) for v in f.values()] == [str(v) for v in s.values()]  # NaN too
        assert_same_arrays(fast.arrays(name), slow.arrays(name))
    assert fast.report.problems == slow.report.problems
    assert texts_of(fast) == texts_of(slow)


def texts_of(es: EvalSet) -> tuple[object, ...]:
    """Everything :attr:`EvalSet.texts` holds, as plain values."""
    t = es.texts
    return (
        dict(t.by_pair), dict(t.by_doc), dict(t.titles_by_pair), dict(t.titles_by_doc),
        dict(t.metadata), t.udcg_examples, t.files,
    )  # fmt: skip


def both(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> tuple[EvalSet, EvalSet]:
    fast = load_evalset(*args, **kw)
    slow = careful(monkeypatch, *args, **kw)
    assert_same(fast, slow)
    return fast, slow
