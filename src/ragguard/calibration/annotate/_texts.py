"""Passage texts for annotation: from the eval-set file itself or from a corpus file.

:func:`~ragguard.calibration.load_evalset` keeps ids, labels and scores, not texts; the
model needs the texts. They come from, in order:

1. the eval-set file: ``text`` of the candidates in ragguard's JSONL (in
   ``candidates`` and ``runs``), ``text`` of the passages in the UDCG authors' JSON,
   ``corpus.jsonl`` of a BEIR folder (``title`` and ``text``);
2. corpus files passed as ``corpus=``: JSONL, one passage a line, with an id
   (``_id``, ``id`` or ``doc_id``), ``text`` and optionally ``title`` (BEIR's
   ``corpus.jsonl`` is one). A title is put on its own line before the text.

A text found in the eval-set file for a (query, passage) pair wins over a corpus text
for the same passage id; UDCG files reuse ids such as ``doc_1`` across examples, so
their texts are kept per query.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragguard.errors import EvalSetError

__all__ = ["Texts", "read_texts"]

PathLike = str | os.PathLike[str]


@dataclass
class Texts:
    """Passage texts per (query, passage) and per passage, plus what the source file
    carried that the output should keep (JSONL metadata, UDCG examples)."""

    by_pair: dict[tuple[str, str], str] = field(default_factory=dict)
    by_doc: dict[str, str] = field(default_factory=dict)
    titles_by_pair: dict[tuple[str, str], str] = field(default_factory=dict)
    titles_by_doc: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    udcg_examples: dict[str, dict[str, Any]] | None = None

    def get(self, qid: str, doc: str) -> str | None:
        """The text of passage ``doc`` for query ``qid``, or ``None``."""
        text = self.by_pair.get((qid, doc))
        return text if text is not None else self.by_doc.get(doc)

    def title(self, qid: str, doc: str) -> str | None:
        """The title of passage ``doc`` for query ``qid`` (a corpus's or a UDCG
        passage's ``title``), or ``None``."""
        title = self.titles_by_pair.get((qid, doc))
        return title if title is not None else self.titles_by_doc.get(doc)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            yield from enumerate(fh, 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalSetError(f"cannot read: {exc}", path=str(path)) from None


def json_lines(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) of each non-blank line of a JSON-lines file (gzipped
    when its name ends in ``.gz``); a malformed line raises :class:`EvalSetError` naming
    file and line."""
    for lineno, raw in _lines(path):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EvalSetError(f"malformed JSON: {exc.msg}", path=str(path), line=lineno) from None


def _joined(title: object, text: str) -> str:
    return f"{title}\n{text}" if isinstance(title, str) and title.strip() else text


def _title(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def read_corpus(path: PathLike, into: dict[str, str], titles: dict[str, str] | None = None) -> None:
    """Read a JSONL corpus (``_id`` / ``id`` / ``doc_id``, ``text``, ``title``) into
    ``into`` (id -> title and text) and, when given, ``titles`` (id -> title)."""
    p = Path(path)
    if not p.is_file():
        raise EvalSetError("no such corpus file", path=str(p))
    for lineno, obj in json_lines(p):
        if not isinstance(obj, dict):
            raise EvalSetError("each line must be a JSON object", path=str(p), line=lineno)
        doc = next((obj[k] for k in ("_id", "id", "doc_id") if k in obj), None)
        if isinstance(doc, bool) or not isinstance(doc, str | int) or doc == "":
            raise EvalSetError(
                "missing passage id (_id, id or doc_id)", path=str(p), line=lineno, field="_id"
            )
        text = obj.get("text")
        if not isinstance(text, str):
            raise EvalSetError("missing or non-string text", path=str(p), line=lineno,
                               field="text")  # fmt: skip
        into[str(doc)] = _joined(obj.get("title"), text)
        title = _title(obj.get("title"))
        if titles is not None and title is not None:
            titles[str(doc)] = title


def _read_jsonl(path: Path, texts: Texts) -> None:
    for _, obj in json_lines(path):
        if not isinstance(obj, dict):
            continue  # (the loader has validated the file)
        qid = str(obj["query_id"])
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            texts.metadata[qid] = meta
        lists = [obj.get("candidates", [])]
        lists += list((obj.get("runs") or {}).values())
        for cands in lists:
            for c in cands:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    texts.by_pair.setdefault((qid, str(c["id"])), c["text"])


def _read_udcg(path: Path, texts: Texts) -> None:
    with path.open(encoding="utf-8") as fh:
        data = json.load(fh)
    texts.udcg_examples = {}
    for ex in data:
        qid = str(ex["example_id"])
        texts.udcg_examples[qid] = ex
        for p in ex.get("passages", []):
            if isinstance(p.get("text"), str):
                text = _joined(p.get("title"), p["text"])
                texts.by_pair.setdefault((qid, str(p["doc_id"])), text)
                title = _title(p.get("title"))
                if title is not None:
                    texts.titles_by_pair.setdefault((qid, str(p["doc_id"])), title)


def read_texts(path: PathLike, fmt: str, corpus: Sequence[PathLike] = ()) -> Texts:
    """Texts from the eval-set file at ``path`` (in format ``fmt``) and corpus files."""
    p = Path(path)
    texts = Texts()
    if fmt == "jsonl":
        _read_jsonl(p, texts)
    elif fmt == "udcg":
        _read_udcg(p, texts)
    elif fmt == "beir" and (p / "corpus.jsonl").exists():
        read_corpus(p / "corpus.jsonl", texts.by_doc, texts.titles_by_doc)
    for c in corpus:
        read_corpus(c, texts.by_doc, texts.titles_by_doc)
    return texts
