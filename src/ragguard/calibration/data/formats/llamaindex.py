"""LlamaIndex's ``EmbeddingQAFinetuneDataset`` JSON (``save_json``): the one reader
(docs/reference/data-formats.md, "LlamaIndex datasets"); each query's source nodes are
its (silver) relevant passages."""

from __future__ import annotations

import re
from pathlib import Path

from ragguard.calibration.data.columns import ColumnarLabels, ColumnarRead
from ragguard.calibration.data.formats.common import (
    Format,
    Where,
    json_file,
    normalised,
    same_texts,
)
from ragguard.calibration.data.problems import Reporter
from ragguard.calibration.data.records import Labels, Query
from ragguard.calibration.data.texts import Texts, TextSource, head_bytes

_OPENING = re.compile(r'\{\s*"queries"\s*:')


def _text_map(data: dict[str, object], name: str, at: Where) -> dict[str, str]:
    value = data.get(name)
    if not isinstance(value, dict):
        at.fail(f"must be an object {{id: text}}, got {type(value).__name__}", name)
    if not value:
        at.fail("is empty", name)
    for key, text in value.items():
        if not isinstance(text, str):
            at.fail(f"must be a string, got {type(text).__name__} {text!r:.40}", f"{name}.{key}")
        if not text.strip():
            at.fail("must not be blank", f"{name}.{key}")
    return value


def read_llamaindex(path: Path, rep: Reporter) -> ColumnarRead:
    """A LlamaIndex dataset: its queries, each labelled (grade 1) with its
    ``relevant_docs`` and the nodes of the same text, and the ``corpus`` texts; no run."""
    at = Where(path)
    data = json_file(path)
    if not isinstance(data, dict):
        at.fail("a LlamaIndex dataset is a JSON object {queries, corpus, relevant_docs}")
    if data.get("mode", "text") != "text":
        at.fail(f"only mode 'text' is read, got {data['mode']!r}", "mode")
    texts = _text_map(data, "queries", at)
    corpus = _text_map(data, "corpus", at)
    relevant = data.get("relevant_docs")
    if not isinstance(relevant, dict):
        at.fail(
            f"must be an object {{query id: [node id, ...]}}, got {type(relevant).__name__}",
            "relevant_docs",
        )
    stray = next((q for q in relevant if q not in texts), None)
    if stray is not None:
        at.fail(f"query {stray!r} is not in queries", f"relevant_docs.{stray}")
    by_text = same_texts(corpus, rep, path)
    queries: dict[str, Query] = {}
    labels: dict[str, Labels] = {}
    for qid, text in texts.items():
        fld = f"relevant_docs.{qid}"
        if qid not in relevant:
            at.fail(f"query {qid!r} has no relevant_docs entry", "relevant_docs")
        nodes = at.id_list(relevant[qid], fld)
        if not nodes:
            at.fail("lists no node", fld)
        grades: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if node not in corpus:
                at.fail(f"node {node!r} is not in corpus", f"{fld}[{i}]")
            grades.update(dict.fromkeys(by_text[normalised(corpus[node])], 1))
        queries[qid] = Query(qid, text)
        labels[qid] = Labels(grades)
    lines = {q: (str(path), None) for q in labels}
    columns = ColumnarLabels.of_labels(labels, str(path))
    source = Texts(docs=[TextSource.of(corpus)])
    return ColumnarRead(queries, columns, lines, {}, set(corpus), source, silver=True)


def _detect(path: Path, head: str | None) -> bool:
    if head is None or not path.name.lower().endswith((".json", ".json.gz")):
        return False
    opening = head_bytes(path, 256).decode("utf-8", "replace")
    return _OPENING.match(opening.lstrip("\ufeff \t\r\n")) is not None


LLAMAINDEX = Format(
    "llamaindex",
    _detect,
    lambda path, rep, _: read_llamaindex(path, rep),
    what="LlamaIndex datasets",
)
