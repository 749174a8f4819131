"""Offline pre-training pairs for ``train-reranker --pretrain-data``: questions with their
gold passage, in the layout of NQ-open oracle files (``read_pretrain``). Nothing is
downloaded."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragguard.calibration.data.texts import PathLike, json_lines
from ragguard.calibration.train.fine_tune import TextPair
from ragguard.errors import ConfigError, EvalSetError

LICENCE_PREFIXES = ("LICENSE", "LICENCE", "COPYING")


def normalise(text: str) -> str:
    """Lower case, whitespace collapsed: how questions and passages are compared."""
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class PretrainData:
    """Questions, their gold passages (texts and titles) and the licence files found."""

    path: Path
    questions: tuple[str, ...]
    passages: tuple[str, ...]
    titles: tuple[str | None, ...]
    licences: tuple[Path, ...]


def read_pretrain(path: PathLike) -> PretrainData:
    """Read pre-training questions from a file or a folder of ``*.jsonl(.gz)`` files, one
    ``{"question": ..., "ctxs": [{"title", "text", "isgold"}]}`` a line: the gold passage
    (the first ``isgold``, else the first) reads ``title`` + newline + ``text``."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"pretrain data {p} does not exist")
    folder = p if p.is_dir() else p.parent
    licences = sorted(
        f for f in folder.iterdir() if f.is_file() and f.name.upper().startswith(LICENCE_PREFIXES)
    )
    files = [p]
    if p.is_dir():
        files = sorted(
            f for f in p.iterdir() if f.is_file() and f.name.endswith((".jsonl", ".jsonl.gz"))
        )
    if not files:
        raise ConfigError(f"no *.jsonl or *.jsonl.gz file in {p}")
    questions: list[str] = []
    passages: list[str] = []
    titles: list[str | None] = []
    for f in files:
        for lineno, obj in json_lines(f):
            question = obj.get("question") if isinstance(obj, dict) else None
            ctxs = obj.get("ctxs") if isinstance(obj, dict) else None
            if not isinstance(question, str) or not question.strip():
                raise EvalSetError("missing question", path=str(f), line=lineno, field="question")
            if not isinstance(ctxs, list) or not ctxs or not all(isinstance(c, dict) for c in ctxs):
                raise EvalSetError(
                    "ctxs must be a non-empty list of objects",
                    path=str(f),
                    line=lineno,
                    field="ctxs",
                )
            gold = next((c for c in ctxs if c.get("isgold") is True), ctxs[0])
            text, title = gold.get("text"), gold.get("title")
            if not isinstance(text, str) or not text.strip():
                raise EvalSetError(
                    "the gold passage has no text", path=str(f), line=lineno, field="ctxs.text"
                )
            title = title.strip() if isinstance(title, str) and title.strip() else None
            questions.append(question)
            passages.append(f"{title}\n{text}" if title else text)
            titles.append(title)
    return PretrainData(p, tuple(questions), tuple(passages), tuple(titles), tuple(licences))


def pretrain_pairs(
    data: PretrainData,
    *,
    exclude_queries: Collection[str],
    exclude_passages: Collection[str],
    negatives: int,
    seed: int,
) -> tuple[list[TextPair], dict[str, int]]:
    """Pairs and their counts: per kept question its gold passage, then ``negatives``
    other gold passages, those with the same title first; a question equal to one of
    ``exclude_queries`` or whose gold passage is one of ``exclude_passages`` is dropped."""
    keep = []
    dropped_q = dropped_p = 0
    for i, (q, t) in enumerate(zip(data.questions, data.passages, strict=True)):
        if normalise(q) in exclude_queries:
            dropped_q += 1
        elif normalise(t) in exclude_passages:
            dropped_p += 1
        else:
            keep.append(i)
    by_title: dict[str, list[int]] = {}
    for i in keep:
        title = data.titles[i]
        if title is not None:
            by_title.setdefault(title, []).append(i)
    rng = np.random.default_rng([seed, 4])
    golds = [normalise(t) for t in data.passages]
    pairs: list[TextPair] = []
    counts = {"questions": len(keep), "relevant": 0, "same_title": 0, "random": 0}
    for i in keep:
        group = f"pretrain:{i}"
        q = data.questions[i]
        pairs.append(TextPair(group, q, data.passages[i], 1.0, "relevant"))
        counts["relevant"] += 1
        title = data.titles[i]
        pool = by_title.get(title, []) if title is not None else []
        same = [j for j in pool if golds[j] != golds[i]]
        picks = [same[k] for k in rng.permutation(len(same))[:negatives]]
        for j in picks:
            pairs.append(TextPair(group, q, data.passages[j], 0.0, "same_title"))
        counts["same_title"] += len(picks)
        need = negatives - len(picks)
        for k in rng.permutation(len(keep)) if need > 0 else ():
            j = keep[int(k)]
            if j in picks or golds[j] == golds[i]:
                continue
            picks.append(j)
            pairs.append(TextPair(group, q, data.passages[j], 0.0, "random"))
            counts["random"] += 1
            need -= 1
            if need == 0:
                break
    counts["dropped_same_query"] = dropped_q
    counts["dropped_labelled_passage"] = dropped_p
    return pairs, counts
