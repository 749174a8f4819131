"""The UDCG authors' JSON files (a list of examples with ``example_id``, ``question``
and ``passages``): the one reader, with Python's json."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from ragguard.calibration.data.columns import ColumnarLabels, ColumnarRead
from ragguard.calibration.data.formats.common import (
    Candidates,
    Format,
    Where,
    json_file_error,
)
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import Labels, Query
from ragguard.calibration.data.texts import Texts, TextSource, corpus_text, utf8_lines
from ragguard.errors import EvalSetError

_DECODER = json.JSONDecoder()


def _json_list_items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, element) of each element of a top-level JSON list."""
    text = "".join(utf8_lines(path, numbered=False))

    def fail(pos: int, message: str) -> NoReturn:
        raise EvalSetError(message, path=str(path), line=text.count("\n", 0, pos) + 1)

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos = skip(0)
    if not text.startswith("[", pos):
        fail(pos, "a UDCG file is a JSON list of examples")
    pos = skip(pos + 1)
    first = True
    while not text.startswith("]", pos):
        if pos >= len(text):
            fail(pos, "malformed JSON: the list is not closed with ']'")
        if not first:
            if text[pos] != ",":
                fail(pos, "malformed JSON: expected ',' or ']' between examples")
            pos = skip(pos + 1)
        try:
            item, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise json_file_error(exc, path) from None
        yield text.count("\n", 0, pos) + 1, item
        pos = skip(end)
        first = False


def read_udcg(path: Path, rep: Reporter, model: str | None) -> ColumnarRead:
    """A UDCG file: its labels, utilities and passages (one unscored run, ``passages``)."""
    queries: dict[str, Query] = {}
    labels: dict[str, Labels] = {}
    lines: dict[str, int] = {}
    examples: list[tuple[Where, str, dict[str, int], dict[str, dict[str, float]]]] = []
    run: Candidates = {}
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
        if qid in lines:
            at.fail(
                f"example id {qid!r} was already used on line {lines[qid]}", f"{base}.example_id"
            )
        question = at.text(ex.get("question"), f"{base}.question")
        passages = ex.get("passages")
        if not isinstance(passages, list):
            at.fail(
                "missing list of passages" if passages is None else "must be a list",
                f"{base}.passages",
            )
        grades: dict[str, int] = {}
        probs: dict[str, dict[str, float]] = {}
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
            if doc in grades:
                message = f"document {doc!r} appears twice in example {qid!r}"
                at.report(rep, ProblemKind.DUPLICATE_CANDIDATE, message, fld)
                continue
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
        answers = ex.get("answers")
        answers = () if answers is None else at.strings(answers, f"{base}.answers")
        queries[qid] = Query(qid, question, answers)
        lines[qid] = lineno
        run[qid] = dict.fromkeys(grades, math.nan)
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
        labels[qid] = Labels(grades, no_response=no_response)
    source = Texts(pairs=[TextSource.of(texts, titles)] if texts else (), udcg_examples=originals)
    columns = ColumnarLabels.of_labels(labels, str(path))
    label_lines = {q: (str(path), n) for q, n in lines.items()}
    return ColumnarRead(queries, columns, label_lines, {"passages": (run, lines)}, texts=source)


UDCG = Format(
    "udcg",
    lambda path, head: head is not None and head.startswith("["),
    lambda path, rep, options: read_udcg(path, rep, options.model),
    what="UDCG files",
    takes=frozenset({"model"}),
    no_runs="a UDCG file is its own run (its passages); runs= does not apply",
)
