"""Two-stage calibration data: retrieval that ranks look-alike distractors as high as
answers, a reranker that reads the passage (``oracle``) and one whose calls fail on some
queries (``Breaking``), and the same data as a folder with a reranker module; shared by
the tests of two-stage calibration, of answerability and of the command line."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragguard.calibration import EvalSet

N_QUERIES, N_CANDS = 40, 8


def text_noise(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF - 0.5


def oracle(query: str, texts: Sequence[str]) -> list[float]:
    """A reranker that reads the passage: +3 for an answer, -2 otherwise, plus a fixed
    per-text noise in [-2, 2] (so the map and the cuts have something to calibrate)."""
    return [(3.0 if "answer" in t else -2.0) + 4.0 * text_noise(t) for t in texts]


oracle.score_kind = "logit"  # type: ignore[attr-defined]


def make_data() -> tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]]:
    """Retrieval ranks look-alike distractors as high as answers; the reranker can tell."""
    rng = np.random.default_rng(5)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    texts: dict[str, str] = {}
    queries: dict[str, str] = {}
    for q in range(N_QUERIES):
        qid = f"q{q:02d}"
        queries[qid] = f"question {q}"
        n_rel = int(rng.integers(1, 3))
        cands: dict[str, float] = {}
        for c in range(N_CANDS):
            doc = f"{qid}-d{c}"
            relevant = c < n_rel
            texts[doc] = f"passage {doc} " + ("with the answer" if relevant else "look alike")
            cands[doc] = round(float(rng.uniform(0.5, 0.9)), 3)
        qrels[qid] = {f"{qid}-d{c}": 1 for c in range(n_rel)}
        run[qid] = dict(sorted(cands.items(), key=lambda kv: -kv[1]))
    es = EvalSet.from_dicts(qrels, {"dense": run}, queries=queries)
    return es, texts, run


BROKEN = {"question 3", "question 17", "question 29"}


class Breaking:
    """``oracle``, except that on the queries of ``BROKEN`` the call goes wrong as
    ``how`` says (a NaN or an infinite score, one score too few, an exception), while
    ``broken`` is set."""

    score_kind = "logit"

    def __init__(self, how: str) -> None:
        self.how = how
        self.broken = True
        self.pairs = 0

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        self.pairs += len(texts)
        out = oracle(query, texts)
        if not self.broken or query not in BROKEN:
            return out
        if self.how == "raise":
            raise ConnectionError("the rerank service is down")
        if self.how == "short":
            return out[:-1]
        out[-1] = {"nan": math.nan, "inf": math.inf}[self.how]
        return out


RERANKER_MODULE = """
import hashlib

def _noise(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF - 0.5

def judge(query, texts):
    return [(3.0 if "answer" in t else -2.0) + 4.0 * _noise(t) for t in texts]

judge.score_kind = "logit"
"""


def write_folder(tmp_path: Path) -> Path:
    """``tmp_path/data``: the eval set of :func:`make_data` with a run and a corpus, and
    ``tmp_path/myjudge.py``, a reranker module (``myjudge:judge``)."""
    es, texts, run = make_data()
    root = tmp_path / "data"
    (root / "runs").mkdir(parents=True)
    with (root / "evalset.jsonl").open("w") as fh:
        for qid in es.qids:
            relevant = sorted(es.labels[qid].grades)
            fh.write(json.dumps({"query_id": qid, "query": es.queries[qid].text,
                                 "relevant": relevant}) + "\n")  # fmt: skip
    with (root / "runs" / "dense.trec").open("w") as fh:
        for qid, cands in run.items():
            for rank, (doc, score) in enumerate(cands.items(), 1):
                fh.write(f"{qid} Q0 {doc} {rank} {score} dense\n")
    with (root / "corpus.jsonl").open("w") as fh:
        for doc, text in texts.items():
            fh.write(json.dumps({"_id": doc, "text": text}) + "\n")
    (tmp_path / "myjudge.py").write_text(RERANKER_MODULE)
    return root
