"""How fast ragguard computes ranking metrics from Python dicts, next to pytrec_eval and ranx.

Run from the repository root with the project's virtual environment active::

    python benchmarks/metrics_speed.py                 # 10,000 and 100,000 queries
    python benchmarks/metrics_speed.py --sizes 10000   # quicker
    python benchmarks/metrics_speed.py --workloads realistic   # one workload
    python benchmarks/metrics_speed.py --sizes 10000 --workloads issue24 --repeats 5
    python benchmarks/metrics_speed.py --quick         # smoke run: 2,000 queries, 1 repeat

Six metrics (ndcg@10, mrr@10, recall@10, precision@10, map@100, hit@10) on two
workloads of Q queries each, and four on a third:

* ``full``: 100 candidates per query from 10,000 document ids, 1-12 judged documents
  (grades 0-3), some of them not retrieved: few labels, every candidate list full;
* ``realistic``: 5-100 candidates per query (uniform) from 1,000,000 document ids,
  about 30% of them judged (grades 0-3), and for 80% of the queries 1-3 relevant
  documents (grades 1-3) the run missed: labels close to a third of the candidates,
  lists of every length, and some tied scores (listed best first, as a run file is).
* ``issue24``: the workload of issue 24's "must not regress" line, four metrics only
  (ndcg@10, recall@10, precision@10, map@100): as ``realistic`` but with **distinct**
  scores (float32-exact, listed best first), so no tool meets a tie.

Every tool starts from the same Python dicts ``{qid: {doc: grade}}`` and
``{qid: {doc: score}}`` and ends with the six means. Timed, per tool, workload and size
(best of ``--repeats`` rounds, tools interleaved within a round):

* ragguard end to end: ``evaluate(qrels, run, metrics)``, i.e. dicts -> dense arrays ->
  metrics -> means; also its two parts: the conversion alone
  (``arrays_from_dicts``) and the metric pass on the prepared arrays alone;
* pytrec_eval: ``RelevanceEvaluator(qrels, measures).evaluate(run)`` for ndcg_cut_10,
  recall_10, P_10, map_cut_100 and success_10, plus ``recip_rank`` on the run cut to
  its top 10 (trec_eval's reciprocal rank has no cutoff), plus the means. The cut of the
  run is timed on its own and *not* charged to pytrec_eval in the ratio. On ``issue24``:
  one ``RelevanceEvaluator(qrels, {ndcg_cut_10, recall_10, P_10, map_cut_100})`` built
  and run, plus the four means: nothing else, nothing left out;
* ranx, warm (its numba JIT compiled before timing): ``evaluate(Qrels(qrels),
  Run(run), metrics)``, building ranx's own structures included.

Scores are float32-exact numbers, distinct in ``full`` and ``issue24``; ``realistic``
lists tied ones in trec_eval's order (document id descending), so ragguard (which keeps
the run's order on ties) and pytrec_eval rank identically, and ranx may not. The script
checks that all per-query values agree with pytrec_eval's to 1e-12 and, without ties,
that the means agree with ranx's to 1e-12, and prints PASS/FAIL lines for the goals: on
``full`` and ``realistic`` on the best round of each tool (the team's first measure), on
``issue24`` on the median rounds (the issue's measure; the best rounds' ratio is printed
too). It always exits 0.
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

from ragguard.calibration import evaluate
from ragguard.calibration.metrics.evaluate import arrays_from_dicts

METRICS = ["ndcg@10", "mrr@10", "recall@10", "precision@10", "map@100", "hit@10"]
# issue 24's metrics: no mrr@10, so pytrec_eval needs no second evaluator on a cut run
METRICS_ISSUE24 = ["ndcg@10", "recall@10", "precision@10", "map@100"]
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
WORKLOADS = ("full", "realistic", "issue24")
# end-to-end goals: how many times faster than each tool, per workload
GOALS = {
    "full": {"pytrec_eval": 3.0, "ranx": 10.0},
    "realistic": {"pytrec_eval": 1.5},
    "issue24": {"pytrec_eval": 1.5},
}
# which rounds a goal reads: the best of each tool, or the median (issue 24's measure)
GOAL_ROUNDS = {"full": "best", "realistic": "best", "issue24": "median"}
METRIC_PASS_GOAL_S = 0.3  # per 100,000 queries

Data = tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]


def make_data(n_queries: int, n_cands: int, seed: int) -> Data:
    """The ``full`` workload: per query ``n_cands`` candidates from a 10,000-document
    collection, 1-12 judged documents (grades 0-3), some of them not retrieved."""
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


def _trec_order(item: tuple[str, float]) -> tuple[float, list[int]]:
    """Sort key of trec_eval's ranking: score descending, then document id descending."""
    return -item[1], [*(-b for b in item[0].encode()), 1]


def make_realistic(n_queries: int, seed: int, *, distinct: bool = False) -> Data:
    """The ``realistic`` workload: per query 5-100 candidates from a 1,000,000-document
    collection, each judged with probability 0.3 (grades 0-3), and for 80% of the
    queries 1-3 relevant documents (grades 1-3) that the run missed. With ``distinct``
    (the ``issue24`` workload) no two scores of a query are equal."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        n = int(rng.integers(5, 101))
        picked = rng.choice(1_000_000, n + 3, replace=False).tolist()
        docs = [f"doc{i}" for i in picked[:n]]
        if distinct:
            # distinct float32-exact scores k / 2**12 for distinct integers k
            scores = (rng.choice(1 << 20, n, replace=False) / 4096.0).tolist()
        else:
            # float32-exact scores k / 2**6 with k drawn from 2**14 values, so some
            # lists have ties
            scores = (rng.integers(0, 1 << 14, n) / 64.0).tolist()
        # listed best first, ties by document id descending (trec_eval's order, so
        # every tool ranks alike)
        run[qid] = dict(sorted(zip(docs, scores, strict=True), key=_trec_order))
        judged = (rng.random(n) < 0.3).tolist()
        judged[int(rng.integers(n))] = True  # every query judged (pytrec_eval skips others)
        grades = rng.integers(0, 4, n).tolist()
        labels = {d: g for d, j, g in zip(docs, judged, grades, strict=True) if j}
        if rng.random() < 0.8:
            n_missed = int(rng.integers(1, 4))
            missed_grades = rng.integers(1, 4, n_missed).tolist()
            for i, g in zip(picked[n : n + n_missed], missed_grades, strict=True):
                labels[f"doc{i}"] = g
        qrels[qid] = labels
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


def run_size(workload: str, n_queries: int, repeats: int, seed: int) -> dict[str, Any]:
    import pytrec_eval
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    t = time.perf_counter()
    if workload == "full":
        qrels, run = make_data(n_queries, 100, seed)
    else:
        qrels, run = make_realistic(n_queries, seed, distinct=workload == "issue24")
    metrics = METRICS_ISSUE24 if workload == "issue24" else METRICS
    trec_names = {m: TREC[m] for m in metrics if m in TREC}
    with_rr = "mrr@10" in metrics  # trec_eval's recip_rank needs the run cut to 10
    ties = workload == "realistic"
    n_cands = sum(map(len, run.values()))
    n_labels = sum(map(len, qrels.values()))
    n_hits = sum(d in run[q] for q, labels in qrels.items() for d in labels)
    print(
        f"\n== {workload}: {n_queries:,} queries, {n_cands:,} candidates, {n_labels:,} "
        f"labels ({n_hits:,} of them retrieved), {len(metrics)} metrics"
    )
    print(f"(data generated in {time.perf_counter() - t:.1f} s, not timed)")

    def ours() -> dict[str, float]:
        return evaluate(qrels, run, metrics=metrics)

    def ours_convert() -> Any:
        return arrays_from_dicts(qrels, run)

    def trec_cut() -> dict[str, dict[str, float]]:
        return top_k(run, 10)

    cut_run = trec_cut() if with_rr else {}

    def trec() -> dict[str, float]:
        per = pytrec_eval.RelevanceEvaluator(qrels, set(trec_names.values())).evaluate(run)
        out = {m: float(np.mean([v[name] for v in per.values()])) for m, name in trec_names.items()}
        if with_rr:
            rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
            out["mrr@10"] = float(np.mean([v["recip_rank"] for v in rr.values()]))
        return out

    def ranx_() -> dict[str, float]:
        res = ranx_evaluate(Qrels(qrels), Run(run), [RANX[m] for m in metrics])
        return {m: float(res[RANX[m]]) for m in metrics}

    tools: list[tuple[str, Callable[[], Any], str, str]] = [
        ("ours", ours, "ragguard evaluate(qrels, run)",
         f"dicts -> arrays -> {len(metrics)} metrics -> means"),
        ("convert", ours_convert, "  of which: dicts -> EvalArrays", "arrays_from_dicts()"),
        ("metric pass", lambda: evaluate(arrays, metrics=metrics),
         "  of which: metric pass", "evaluate(arrays, ...)"),
        ("pytrec_eval", trec, "pytrec_eval",
         f"{len(trec_names)} measures + recip_rank on the top-10 run" if with_rr
         else f"RelevanceEvaluator built + evaluate(), {len(trec_names)} measures + means"),
        ("cut", trec_cut, "  cut run to top 10 (not charged)", "needed for mrr@10"),
        ("ranx", ranx_, "ranx (warm)", "Qrels + Run + evaluate"),
    ]  # fmt: skip
    if not with_rr:
        tools = [tool for tool in tools if tool[0] != "cut"]
    times: dict[str, list[float]] = {key: [] for key, *_ in tools}
    results: dict[str, Any] = {}
    arrays = ours_convert()
    for _ in range(repeats):
        for key, fn, *_ in tools:
            dt, res = time_best(fn, 1)
            times[key].append(dt)
            results[key] = res

    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'measurement':40} {'best':>9} {'median':>9} {'worst':>9}  note")
    for key, _, label, note in tools:
        worst = max(times[key])
        print(f"{label:40} {best[key]:8.3f}s {median[key]:8.3f}s {worst:8.3f}s  {note}")

    # --- agreement
    per_ours = evaluate(qrels, run, metrics=metrics, per_query=True)
    per_trec = pytrec_eval.RelevanceEvaluator(qrels, set(trec_names.values())).evaluate(run)
    worst = 0.0
    for m, name in trec_names.items():
        worst = max(worst, max(abs(per_ours[m][q] - per_trec[q][name]) for q in per_trec))
    if with_rr:
        per_rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
        worst = max(
            worst, max(abs(per_ours["mrr@10"][q] - per_rr[q]["recip_rank"]) for q in per_rr)
        )
    worst_ranx = max(abs(results["ours"][m] - results["ranx"][m]) for m in metrics)
    # ranx orders tied scores its own way: its means are compared only without ties
    ranx_ok = worst_ranx <= 1e-12 or ties
    ok = worst <= 1e-12 and ranx_ok and len(per_trec) == n_queries
    print(
        f"agreement: max |ragguard - pytrec_eval| per query = {worst:.1e}, "
        f"max |ragguard - ranx| of means = {worst_ranx:.1e}"
        f"{' (ties: ranx orders them its own way)' if ties else ''}"
        f" -> {'OK' if ok else 'MISMATCH'}"
    )
    print("means:", ", ".join(f"{m}={results['ours'][m]:.4f}" for m in metrics))
    return {"best": best, "median": median, "ok": ok, "n": n_queries, "workload": workload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS), help="default all"
    )
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

    summary = [run_size(w, n, args.repeats, args.seed) for w in args.workloads for n in args.sizes]
    print("\nGoals")
    for res in summary:
        n = res["n"]
        workload = res["workload"]
        what = f"{workload}, {n:,} queries"
        rounds = GOAL_ROUNDS[workload]
        for tool in ("pytrec_eval", "ranx"):
            ratio = res[rounds][tool] / res[rounds]["ours"]
            other = "median" if rounds == "best" else "best"
            also = f"{other} rounds {res[other][tool] / res[other]['ours']:.2f}x"
            factor = GOALS[workload].get(tool)
            if factor is None:
                print(
                    f"  info: {what}, {tool} / ragguard end to end = {ratio:.2f}x "
                    f"({rounds} rounds; {also}; no goal)"
                )
                continue
            verdict = "PASS" if ratio >= factor else "FAIL"
            print(
                f"  {verdict}: {what}, {tool} / ragguard end to end = {ratio:.2f}x "
                f"({rounds} rounds; goal >= {factor:g}x; {also})"
            )
        metric_pass = res["best"]["metric pass"]
        per_100k = metric_pass * 100_000 / n
        verdict = "PASS" if per_100k < METRIC_PASS_GOAL_S else "FAIL"
        print(
            f"  {verdict}: {what}, metric pass on prepared arrays = "
            f"{metric_pass:.3f} s ({per_100k:.3f} s per 100,000; goal < "
            f"{METRIC_PASS_GOAL_S} s)"
        )
        print(f"  {'PASS' if res['ok'] else 'FAIL'}: {what}, values agree")


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("metrics_speed"):
        main()
