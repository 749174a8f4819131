"""ragguard's JSONL eval sets: the one reader (docs/reference/data-formats.md)."""

from __future__ import annotations

import math
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from ragguard.calibration.data.columns import ColumnarRead, LabelColumns, RunColumns
from ragguard.calibration.data.formats.common import Format, Where, json_objects
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import MAX_GRADE, MIN_GRADE, Labels, Query, domain_problem
from ragguard.calibration.data.texts import Texts, TextSource
from ragguard.errors import EvalSetError

JSONL_FIELDS = frozenset(
    {
        "query_id",
        "query",
        "relevant",
        "not_relevant",
        "distractors",
        "utilities",
        "no_response",
        "num_relevant",
        "needs",
        "answers",
        "candidates",
        "runs",
        "metadata",
        "domain",
    }
)
CANDIDATE_FIELDS = frozenset({"id", "score", "text", "metadata"})


def _doc_numbers(
    obj: dict[str, Any], name: str, at: Where, lo: float, hi: float
) -> dict[str, float]:
    value = obj.get(name, {})
    if not isinstance(value, dict):
        at.fail(f"must be an object {{id: number}}, got {type(value).__name__}", name)
    return {at.id(d, f"{name}.{d}"): at.number(v, f"{name}.{d}", lo, hi) for d, v in value.items()}


def _detect(path: Path, head: str | None) -> bool:
    """A file whose first line is a JSON object (a ``.json`` one raises: a run?)."""
    if head is None or not head.startswith("{"):
        return False
    if path.name.lower().endswith(".json"):
        raise EvalSetError(
            "a JSON object is not an eval set format (a run {query: {doc: score}}? "
            "pass it as runs=...); eval sets are JSONL, TREC qrels, BEIR or UDCG JSON",
            path=str(path),
        )
    return True


class _Run:
    """One run as it is read."""

    def __init__(self) -> None:
        self.columns = RunColumns()
        self.lines: dict[str, int] = {}
        self.invalid: list[tuple[str, int, str]] = []
        self.scored = False


def read_jsonl(path: Path, rep: Reporter, *, texts: bool = True) -> ColumnarRead:
    """A ragguard JSONL eval set; ``texts``: keep candidates' texts and lines' metadata."""
    source = str(path)
    queries: dict[str, Query] = {}
    label_lines: dict[str, tuple[str | None, int | None]] = {}
    labels = LabelColumns()
    runs: dict[str, _Run] = {}
    pair_texts: dict[tuple[str, str], str] | None = {} if texts else None
    metadata: dict[str, dict[str, Any]] = {}
    silver = False  # a line written by ragguard synth says its labels are generated
    for lineno, obj in json_objects(path):
        at = Where(path, lineno)
        unknown = sorted(obj.keys() - JSONL_FIELDS)
        if unknown:
            at.fail(
                f"unknown field; allowed: {', '.join(sorted(JSONL_FIELDS))} (put extra data "
                "under 'metadata')",
                unknown[0],
            )
        qid = at.id(obj.get("query_id"), "query_id")
        if qid in label_lines:
            at.fail(f"query id {qid!r} was already used on line {label_lines[qid][1]}", "query_id")
        query = at.text(obj.get("query"), "query")
        answers = at.strings(obj.get("answers", []), "answers")
        needs = obj.get("needs")
        if needs is not None and (type(needs) is not int or needs < 1):
            at.fail(f"must be a whole number >= 1 (passages needed), got {needs!r}", "needs")
        domain = obj.get("domain")
        if domain is not None and (problem := domain_problem(domain)) is not None:
            at.fail(problem, "domain")
        labels.add(qid, _labels(obj, at))
        queries[qid] = Query(qid, query, answers, needs, domain)
        label_lines[qid] = (source, lineno)
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            synth = meta.get("synth")
            silver = silver or (isinstance(synth, dict) and synth.get("labels") == "silver")
            if texts:
                metadata[qid] = meta
        for name, fld, cands in _candidate_lists(obj, at):
            run = runs.setdefault(name, _Run())
            docs, scores, cand_texts = _candidates(cands, fld, at, qid, name, rep, run.invalid)
            run.columns.add(qid, docs, scores)
            run.lines[qid] = lineno
            run.scored = run.scored or any(map(math.isfinite, scores))
            if pair_texts is not None:
                for doc, text in cand_texts:
                    pair_texts.setdefault((qid, doc), text)
    for name, run in runs.items():
        if run.scored:
            for doc, line, fld in run.invalid:
                message = f"candidate {doc!r} of run {name!r} has no valid score"
                Where(path, line).report(rep, ProblemKind.INVALID_SCORE, message, fld)
    sources = [TextSource.of(pair_texts)] if pair_texts else []
    return ColumnarRead(
        queries,
        labels.build(source),
        label_lines,
        {name: (run.columns.build(source), run.lines) for name, run in runs.items()},
        texts=Texts(pairs=sources, metadata=metadata),
        silver=silver,
    )


def _labels(obj: dict[str, Any], at: Where) -> Labels:
    grades: dict[str, int] = {}
    owner: dict[str, str] = {}

    def claim(doc: str, fld: str, grade: int) -> None:
        if doc in owner:
            at.fail(f"document {doc!r} is also listed in {owner[doc]!r}", fld)
        owner[doc] = fld.split("[")[0].split(".")[0]
        grades[doc] = grade

    rel = obj.get("relevant", [])
    if isinstance(rel, list):
        for i, doc in enumerate(at.id_list(rel, "relevant")):
            claim(doc, f"relevant[{i}]", 1)
    elif isinstance(rel, dict):
        for doc, g in rel.items():
            fld = f"relevant.{doc}"
            if isinstance(g, bool) or not isinstance(g, int) or not MIN_GRADE <= g <= MAX_GRADE:
                at.fail(f"a grade must be an integer {MIN_GRADE}-{MAX_GRADE}, got {g!r}", fld)
            claim(at.id(doc, fld), fld, g)
    else:
        at.fail(f"must be a list of ids or {{id: grade}}, got {type(rel).__name__}", "relevant")
    for name in ("not_relevant", "distractors"):
        for i, doc in enumerate(at.id_list(obj.get(name, []), name)):
            claim(doc, f"{name}[{i}]", 0)
    utilities = _doc_numbers(obj, "utilities", at, -1.0, 1.0)
    no_response = _doc_numbers(obj, "no_response", at, 0.0, 1.0)
    n_rel = obj.get("num_relevant")
    if n_rel is not None:
        labelled = sum(1 for g in grades.values() if g >= 1)
        if isinstance(n_rel, bool) or not isinstance(n_rel, int) or n_rel < labelled:
            at.fail(
                f"must be an integer >= the {labelled} relevant documents listed, got {n_rel!r}",
                "num_relevant",
            )
    distractors = frozenset(d for d, o in owner.items() if o == "distractors")
    return Labels(grades, distractors, utilities, no_response, n_rel)


def _candidate_lists(obj: dict[str, Any], at: Where) -> list[tuple[str, str, object]]:
    """(run name, field, candidate list) of one line, ``candidates`` as run ``default``."""
    listed: list[tuple[str, str, object]] = []
    if "candidates" in obj:
        listed.append(("default", "candidates", obj["candidates"]))
    extra = obj.get("runs", {})
    if not isinstance(extra, dict):
        at.fail(f"must be an object {{run name: candidates}}, got {type(extra).__name__}", "runs")
    for name, cands in extra.items():
        if name == "default" and "candidates" in obj:
            at.fail("a run named 'default' clashes with 'candidates'", f"runs.{name}")
        listed.append((name, f"runs.{name}", cands))
    return listed


_SCORE_TYPES = frozenset({float, int, type(None)})


def _checked(value: object) -> tuple[list[str], list[Any], list[tuple[str, str]]] | None:
    """(ids, scores, texts) of a list of good candidates, checked as a whole; else ``None``."""
    if type(value) is not list or set(map(type, value)) - {dict}:
        return None
    keys: set[str] = set().union(*value)
    if not keys <= CANDIDATE_FIELDS or "id" not in keys:
        return None
    try:
        docs = list(map(itemgetter("id"), value))
    except KeyError:
        return None
    if set(map(type, docs)) - {str} or "" in docs or len(set(docs)) != len(docs):
        return None
    scores = list(map(dict.get, value, repeat("score")))
    if set(map(type, scores)) - _SCORE_TYPES:
        return None
    texts: list[tuple[str, str]] = []
    if "text" in keys:
        texts = [
            (d, c["text"]) for d, c in zip(docs, value, strict=True) if c.get("text") is not None
        ]
        if not all(type(t) is str for _, t in texts):
            return None
    return docs, scores, texts


def _candidates(
    value: object,
    fld: str,
    at: Where,
    qid: str,
    run: str,
    rep: Reporter,
    invalid: list[tuple[str, int, str]],
) -> tuple[list[str], list[float], list[tuple[str, str]]]:
    """(ids, scores, (id, text) pairs) of one candidate list; one ``_checked`` rejects is walked."""
    whole = _checked(value)
    if whole is not None:
        docs, scores, texts = whole
        if None in scores:
            scores = [math.nan if s is None else s for s in scores]
        if not all(map(math.isfinite, scores)):
            for i, s in enumerate(scores):
                if not math.isfinite(s):
                    invalid.append((docs[i], at.line or 0, f"{fld}[{i}]"))
        return docs, scores, texts
    if not isinstance(value, list):
        at.fail(f"must be a list of candidates, got {type(value).__name__}", fld)
    out: dict[str, float] = {}
    walked: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        where = f"{fld}[{i}]"
        if isinstance(item, dict):
            unknown = sorted(item.keys() - CANDIDATE_FIELDS)
            if unknown:
                at.fail(
                    f"unknown field {unknown[0]!r} in a candidate; allowed: "
                    f"{', '.join(sorted(CANDIDATE_FIELDS))}",
                    where,
                )
            doc = at.id(item.get("id"), f"{where}.id")
            score = at.score(item.get("score"), f"{where}.score")
            text = item.get("text")
            if text is not None:
                if not isinstance(text, str):
                    at.fail(f"must be a string or null, got {type(text).__name__}", f"{where}.text")
                walked.append((doc, text))
        else:
            doc = at.id(item, where)
            score = math.nan
        if doc in out:
            message = f"document {doc!r} appears twice among the candidates of query {qid!r} in"
            at.report(rep, ProblemKind.DUPLICATE_CANDIDATE, f"{message} run {run!r}", where)
            continue
        out[doc] = score
        if not math.isfinite(score):
            invalid.append((doc, at.line or 0, where))
    return list(out), list(out.values()), walked


JSONL = Format(
    "jsonl",
    _detect,
    lambda path, rep, options: read_jsonl(path, rep, texts=options.texts),
    suffixes=(".jsonl", ".jsonl.gz"),
)
