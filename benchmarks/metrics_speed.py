"""How fast ragguard computes ranking metrics from Python dicts, next to pytrec_eval and ranx.

Run from the repository root with the project's virtual environment active::

    python benchmarks/metrics_speed.py                 # 10,000 and 100,000 queries
    python benchmarks/metrics_speed.py --sizes 10000   # quicker
    python benchmarks/metrics_speed.py --quick         # smoke run: 2,000 queries, 1 repeat

Six metrics (ndcg@10, mrr@10, recall@10, precision@10, map@100, hit@10) on Q queries x
100 candidates. Every tool starts from the same Python dicts ``{qid: {doc: grade}}`` and
``{qid: {doc: score}}`` and ends with the six means. Timed, per tool and size (best of
``--repeats`` rounds, tools interleaved within a round):

* ragguard end to end: ``evaluate(qrels, run, metrics)``, i.e. dicts -> dense arrays ->
  metrics -> means; also its two parts: the conversion alone
  (``arrays_from_dicts``) and the metric pass on the prepared arrays alone;
* pytrec_eval: ``RelevanceEvaluator(qrels, measures).evaluate(run)`` for ndcg_cut_10,
  recall_10, P_10, map_cut_100 and success_10, plus ``recip_rank`` on the run cut to
  its top 10 (trec_eval's reciprocal rank has no cutoff), plus the means. The cut of the
  run is timed on its own and *not* charged to pytrec_eval in the ratio;
* ranx, warm (its numba JIT compiled before timing): ``evaluate(Qrels(qrels),
  Run(run), metrics)``, building ranx's own structures included.

Scores are distinct float32-exact numbers, so every tool ranks identically; the script
checks that all per-query values agree to 1e-12 (pytrec_eval) and the means agree to
1e-12 (ranx), and prints PASS/FAIL lines for the goals. It always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ragguard.calibration import arrays_from_dicts, evaluate

METRICS = ["ndcg@10", "mrr@10", "recall@10", "precision@10", "map@100", "hit@10"]
TREC = {
    "ndcg@10": "ndcg_cut_10",
    "recall@10": "recall_10",
    "precision@10": "P_10",
    "map@100": "map_cut_100",
    "hit@10": "success_10",
}
RANX = {
    "ndcg@10": "ndcg@10",
    "mrr@10": "mrr@10",
    "recall@10": "recall@10",
    "precision@10": "precision@10",
    "map@100": "map@100",
    "hit@10": "hit_rate@10",
}
GOALS = {"pytrec_eval": 3.0, "ranx": 10.0}
METRIC_PASS_GOAL_S = 0.3  # per 100,000 queries


def make_data(
    n_queries: int, n_cands: int, seed: int
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Qrels and a run: per query 100 candidates from a 10,000-document collection,
    1-12 judged documents (grades 0-3), some of them not retrieved."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    pool = np.array([f"doc{i}" for i in range(10_000)], dtype=object)
    for q in range(n_queries):
        qid = f"q{q}"
        picked = rng.choice(10_000, n_cands + 12, replace=False)
        docs = pool[picked[:n_cands]].tolist()
        # distinct float32-exact scores: k / 2**12 for distinct integers k
        scores = (rng.choice(1 << 20, n_cands, replace=False) / 4096.0).tolist()
        run[qid] = dict(zip(docs, scores, strict=True))
        n_judged = int(rng.integers(1, 13))
        judged_pos = rng.choice(n_cands + 12, n_judged, replace=False)
        judged_docs = pool[picked[judged_pos]].tolist()
        grades = rng.integers(0, 4, n_judged).tolist()  # 0: judged not relevant
        qrels[qid] = dict(zip(judged_docs, grades, strict=True))
    return qrels, run


def time_best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def top_k(run: dict[str, dict[str, float]], k: int) -> dict[str, dict[str, float]]:
    return {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:k]) for q, d in run.items()}


def run_size(n_queries: int, repeats: int, seed: int) -> dict[str, float]:
    import pytrec_eval
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    print(f"\n== {n_queries:,} queries x 100 candidates")
    t = time.perf_counter()
    qrels, run = make_data(n_queries, 100, seed)
    print(f"(data generated in {time.perf_counter() - t:.1f} s, not timed)")

    def ours() -> dict[str, float]:
        return evaluate(qrels, run, metrics=METRICS)

    def ours_convert() -> Any:
        return arrays_from_dicts(qrels, run)

    def trec_cut() -> dict[str, dict[str, float]]:
        return top_k(run, 10)

    cut_run = trec_cut()

    def trec() -> dict[str, float]:
        per = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
        out = {m: float(np.mean([v[name] for v in per.values()])) for m, name in TREC.items()}
        out["mrr@10"] = float(np.mean([v["recip_rank"] for v in rr.values()]))
        return out

    def ranx_() -> dict[str, float]:
        res = ranx_evaluate(Qrels(qrels), Run(run), list(RANX.values()))
        return {m: float(res[name]) for m, name in RANX.items()}

    times: dict[str, list[float]] = {
        k: [] for k in ("ours", "convert", "metric pass", "pytrec_eval", "cut", "ranx")
    }
    results: dict[str, Any] = {}
    arrays = ours_convert()
    for _ in range(repeats):
        for name, fn in (
            ("ours", ours),
            ("convert", ours_convert),
            ("metric pass", lambda: evaluate(arrays, metrics=METRICS)),
            ("pytrec_eval", trec),
            ("cut", trec_cut),
            ("ranx", ranx_),
        ):
            dt, res = time_best(fn, 1)
            times[name].append(dt)
            results[name] = res

    best = {k: min(v) for k, v in times.items()}
    rows = [
        ("ragguard evaluate(qrels, run)", best["ours"], "dicts -> arrays -> 6 metrics -> means"),
        ("  of which: dicts -> EvalArrays", best["convert"], "arrays_from_dicts()"),
        ("  of which: metric pass", best["metric pass"], "evaluate(arrays, ...)"),
        ("pytrec_eval", best["pytrec_eval"], "5 measures + recip_rank on the top-10 run"),
        ("  cut run to top 10 (not charged)", best["cut"], "needed for mrr@10"),
        ("ranx (warm)", best["ranx"], "Qrels + Run + evaluate"),
    ]
    print(f"{'measurement':40} {'best':>9} {'median':>9}  note")
    for (label, value, note), key in zip(
        rows, ["ours", "convert", "metric pass", "pytrec_eval", "cut", "ranx"], strict=True
    ):
        med = statistics.median(times[key])
        print(f"{label:40} {value:8.3f}s {med:8.3f}s  {note}")

    # --- agreement
    per_ours = evaluate(qrels, run, metrics=METRICS, per_query=True)
    per_trec = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    per_rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
    worst = 0.0
    for m, name in TREC.items():
        worst = max(worst, max(abs(per_ours[m][q] - per_trec[q][name]) for q in per_trec))
    worst = max(worst, max(abs(per_ours["mrr@10"][q] - per_rr[q]["recip_rank"]) for q in per_rr))
    worst_ranx = max(abs(results["ours"][m] - results["ranx"][m]) for m in METRICS)
    ok = worst <= 1e-12 and worst_ranx <= 1e-12 and len(per_trec) == n_queries
    print(
        f"agreement: max |ragguard - pytrec_eval| per query = {worst:.1e}, "
        f"max |ragguard - ranx| of means = {worst_ranx:.1e} -> {'OK' if ok else 'MISMATCH'}"
    )
    print("means:", ", ".join(f"{m}={results['ours'][m]:.4f}" for m in METRICS))
    return {**best, "ok": float(ok), "n": float(n_queries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2,000 queries, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = [2_000], 1

    import numba
    import pytrec_eval  # noqa: F401
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    print(
        f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}"
        f", {platform.machine()}"
    )
    t = time.perf_counter()
    wq, wr = make_data(50, 100, 1)
    ranx_evaluate(Qrels(wq), Run(wr), list(RANX.values()))
    evaluate(wq, wr, metrics=METRICS)
    print(f"(warm-up, ranx JIT included: {time.perf_counter() - t:.1f} s, not timed)")

    summary = [run_size(n, args.repeats, args.seed) for n in args.sizes]
    print("\nGoals")
    for res in summary:
        n = int(res["n"])
        for tool, factor in GOALS.items():
            ratio = res[tool] / res["ours"]
            verdict = "PASS" if ratio >= factor else "FAIL"
            print(
                f"  {verdict}: {n:,} queries, {tool} / ragguard end to end = {ratio:.1f}x "
                f"(goal >= {factor:g}x)"
            )
        per_100k = res["metric pass"] * 100_000 / n
        verdict = "PASS" if per_100k < METRIC_PASS_GOAL_S else "FAIL"
        print(
            f"  {verdict}: {n:,} queries, metric pass on prepared arrays = "
            f"{res['metric pass']:.3f} s ({per_100k:.3f} s per 100,000; goal < "
            f"{METRIC_PASS_GOAL_S} s)"
        )
        print(f"  {'PASS' if res['ok'] else 'FAIL'}: {n:,} queries, values agree")


if __name__ == "__main__":
    main()
