"""RAGAS testsets, JSONL or CSV: the one reader (docs/reference/data-formats.md, "RAGAS
testsets"); the reference contexts are matched by text to a corpus's passages, and are
the (silver) relevant passages."""

from __future__ import annotations

import ast
import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragguard.calibration.data.columns import ColumnarLabels, ColumnarRead
from ragguard.calibration.data.formats.beir import corpus_source
from ragguard.calibration.data.formats.common import (
    LONG_PASSAGE,
    Format,
    Where,
    json_line,
    json_objects,
    normalised,
    same_texts,
)
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import Labels, Query
from ragguard.calibration.data.texts import Texts, TextSource, utf8_lines
from ragguard.errors import EvalSetError

NAMES = (  # a sample's (query, contexts, answer) fields: RAGAS 0.2+, then RAGAS 0.1
    ("user_input", "reference_contexts", "reference"),
    ("question", "contexts", "ground_truth"),
)
_IDS = "reference_context_ids"


def _is_table(path: Path) -> bool:
    return path.name.lower().endswith((".csv", ".csv.gz"))


def _samples(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, sample) of each sample; a CSV cell holding a list (``['a', 'b']``) is the list."""
    if not _is_table(path):
        yield from json_objects(path)
        return
    rows = csv.DictReader(io.StringIO("".join(utf8_lines(path, numbered=False)), newline=""))
    line = 2
    try:
        for row in rows:
            at = Where(path, line)
            if None in row:
                at.fail("the row has more cells than the header has columns")
            sample: dict[str, Any] = {k: v or None for k, v in row.items()}
            for key in (NAMES[0][1], NAMES[1][1], _IDS):
                cell = sample.get(key)
                if not isinstance(cell, str):
                    continue
                try:
                    sample[key] = ast.literal_eval(cell)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    at.fail(f"must be a list of strings (['...', ...]), got {cell[:40]!r}", key)
            yield line, sample
            line = rows.line_num + 1
    except csv.Error as exc:
        why = f"malformed CSV: {exc}"
        if "field larger than field limit" in str(exc):
            why = (
                f"a cell has over {csv.field_size_limit():,} characters, more than Python's csv "
                "reads (a whole document?); write the testset with to_jsonl instead"
            )
        raise EvalSetError(why, path=str(path), line=line) from None


def _strings(value: object, at: Where, fld: str) -> list[str]:
    if not isinstance(value, list) or not value:
        what = "an empty list" if value == [] else type(value).__name__
        at.fail(f"must be a non-empty list of passage texts, got {what}", fld)
    for i, text in enumerate(value):
        if not isinstance(text, str) or not text.strip():
            at.fail(f"must be a non-blank string, got {text!r:.40}", f"{fld}[{i}]")
    return value


class _Corpus:
    """The corpus passages by normalised text (with or without a title), read when asked."""

    def __init__(self, testset: Path, given: tuple[Path, ...], rep: Reporter) -> None:
        self.paths = given or (testset.parent / "corpus.jsonl",)
        self.name = ", ".join(p.name for p in self.paths)
        self.given = bool(given)
        self.rep = rep
        self._by_text: dict[str, list[str]] | None = None
        self.ids: set[str] | None = None

    def by_text(self, at: Where) -> dict[str, list[str]]:
        if self._by_text is None:
            if not self.given and not self.paths[0].is_file():
                at.fail(
                    "a RAGAS testset gives its reference contexts as texts: put the corpus "
                    f"they come from beside it as {self.name} (JSONL: _id, text) or name it "
                    "with --corpus (corpus=) to match them to passage ids",
                    NAMES[0][1],
                )
            sources = [corpus_source(p) for p in self.paths]
            texts = {doc: text for s in sources for doc, text in s.texts.items()}
            self._by_text = same_texts(texts, self.rep, self.paths[-1])
            for source in sources:  # the text without its title line too
                for doc in source.titles:
                    body = source.texts[doc].split("\n", 1)[-1]
                    self._by_text.setdefault(normalised(body), []).append(doc)
            self.ids = set(texts)
        return self._by_text


def read_ragas(path: Path, rep: Reporter, corpus_files: tuple[Path, ...] = ()) -> ColumnarRead:
    """A RAGAS testset: query ``q<n>`` for its n-th sample, labelled (grade 1, silver)
    with the passages its reference contexts match; no run. A context matching none is
    reported and left out, as is a sample none of whose contexts matches."""
    corpus = _Corpus(path, corpus_files, rep)
    queries: dict[str, Query] = {}
    labels: dict[str, Labels] = {}
    lines: dict[str, tuple[str | None, int | None]] = {}
    named: dict[str, str] = {}
    n = unmatched = 0
    for lineno, sample in _samples(path):
        at = Where(path, lineno)
        n += 1
        qid = f"q{n}"
        key, ctx_key, ref_key = next((k for k in NAMES if k[0] in sample), NAMES[0])
        text = sample.get(key)
        if isinstance(text, list):
            at.fail("a multi-turn sample (a list of messages) is not read; use single-turn", key)
        if not isinstance(text, str) or not text.strip():
            at.fail(f"must be the query text, got {text!r:.40}", key)
        contexts = _strings(sample.get(ctx_key), at, ctx_key)
        grades: dict[str, int] = {}
        ids = sample.get(_IDS)
        if ids is not None:
            docs = at.id_list(ids, _IDS)
            if len(docs) != len(contexts):
                at.fail(f"has {len(docs)} ids for {len(contexts)} reference contexts", _IDS)
            for i, (doc, context) in enumerate(zip(docs, contexts, strict=True)):
                grades[doc] = 1
                named.setdefault(doc, context)
                if len(context) > LONG_PASSAGE:  # (a corpus reports its own)
                    message = f"passage {doc!r} has {len(context):,} characters: a whole document?"
                    at.report(rep, ProblemKind.LONG_PASSAGE, message, f"{ctx_key}[{i}]")
        else:
            by_text = corpus.by_text(at)
            for i, context in enumerate(contexts):
                found = by_text.get(normalised(context), [])
                grades.update(dict.fromkeys(found, 1))
                if not found:
                    unmatched += 1
                    message = (
                        f"reference context of query {qid!r} matches no passage of "
                        f"{corpus.name} by text: {context[:60]!r}"
                    )
                    at.report(rep, ProblemKind.UNMATCHED_CONTEXT, message, f"{ctx_key}[{i}]")
        if not grades:
            message = f"query {qid!r} is left out: none of its reference contexts matches a passage"
            at.report(rep, ProblemKind.UNMATCHED_CONTEXT, message, ctx_key)
            continue
        reference = sample.get(ref_key)
        answers = (reference,) if isinstance(reference, str) and reference.strip() else ()
        queries[qid] = Query(qid, text, answers)
        labels[qid] = Labels(grades)
        lines[qid] = (str(path), lineno)
    if n and not labels:
        raise EvalSetError(
            f"none of the {unmatched} reference contexts matches a passage of "
            f"{corpus.name} by text (whitespace aside): was the testset generated from "
            "this corpus's passages?",
            path=str(path),
        )
    columns = ColumnarLabels.of_labels(labels, str(path))
    texts = Texts(docs=[TextSource.of(named)]) if named else Texts()
    return ColumnarRead(queries, columns, lines, {}, corpus.ids, texts, silver=True)


def _detect(path: Path, head: str | None) -> bool:
    """A JSONL or CSV file whose first sample or header names a sample's fields."""
    if head is None:
        return False
    if _is_table(path):
        columns = set(next(csv.reader([head]), []))
    elif head.startswith("{"):
        try:
            obj = json_line(head, path, 1)
        except EvalSetError:
            return False
        columns = set(obj) if isinstance(obj, dict) else set()
    else:
        return False
    return any({query, contexts} <= columns for query, contexts, _ in NAMES)


RAGAS = Format(
    "ragas",
    _detect,
    lambda path, rep, options: read_ragas(path, rep, options.corpus),
    what="RAGAS testsets",
)
