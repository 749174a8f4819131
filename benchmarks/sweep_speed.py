"""How fast the calibration sweep scores a grid of policy settings, next to ranx one
setting at a time.

Run from the repository root with the project's virtual environment active::

    python benchmarks/sweep_speed.py                  # 100,000 queries, about 2.5 min
    python benchmarks/sweep_speed.py --queries 20000  # quicker
    python benchmarks/sweep_speed.py --quick          # smoke run: 5,000 queries

Data: Q queries x 100 candidates with distinct float32-exact scores (the run's order is
random), 1-12 judged documents per query with grades 0-3 (some not retrieved), converted
once to :class:`~ragguard.calibration.data.arrays.EvalArrays` (support profile). Grid:
``max_k`` 1..10 x ``relative_threshold`` 0, 0.05, ..., 0.95 (200 settings, ``min_k=1``).
Metrics: every metric of the registry (``ragguard.calibration.metrics.METRICS``, 21 of
them, default parameters, no cutoff: each reads the kept context) at every setting, plus
the mean number kept.

Timed (best of ``--repeats``):

* **ragguard sweep**: ``SweepKernel`` (rank once, tabulate every metric at context sizes
  0..10) then ``sweep()`` over the 200 settings (the runtime policy's ``cut_ranked`` per
  setting, each metric read at each query's cut). This is the goal: under 30 s at
  100,000 queries. Also the default grid with the label-free cut rules (240 settings).
* **ragguard, one setting at a time**: ``cut_ranked`` + ``evaluate(arrays, metrics,
  cut=...)`` per setting, without the tables; a few settings timed, the rest
  extrapolated linearly (stated as such).
* **ranx, one setting at a time** (warm): per setting, the kept candidates as a ranx
  ``Run`` (dict of dicts, as a user would build it), then ``ranx.evaluate`` of the six
  classic metrics ranx has (ndcg, mrr, recall, precision, map, hit_rate; ranx has no
  UDCG, utility or distractor metrics, so it does less work than the sweep). Timed on
  ``--ranx-queries`` queries (default 10,000) for a few settings and extrapolated to the
  full size and grid, linearly in queries and settings (stated as such).

Checks (printed): the sweep's means equal ``evaluate(..., cut=cut_ranked(...).n_kept)``
on sampled settings to 1e-12, and ranx's means equal the sweep's on the ranx subset to
1e-12. Always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ragguard.calibration import SweepGrid, evaluate
from ragguard.calibration.fit.sweep import SweepKernel, sweep
from ragguard.calibration.metrics import METRICS
from ragguard.calibration.metrics.evaluate import arrays_from_dicts
from ragguard.policy import PolicyParams, cut_ranked

GOAL_S = 30.0
RANX = {"ndcg": "ndcg", "mrr": "mrr", "recall": "recall", "precision": "precision",
        "map": "map", "hit_rate": "hit_rate"}  # fmt: skip


def make_data(
    n_queries: int, n_cands: int, seed: int
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    pool = np.array([f"doc{i}" for i in range(10_000)], dtype=object)
    for q in range(n_queries):
        qid = f"q{q}"
        picked = rng.choice(10_000, n_cands + 12, replace=False)
        docs = pool[picked[:n_cands]].tolist()
        scores = (rng.choice(1 << 20, n_cands, replace=False) / 4096.0).tolist()
        run[qid] = dict(zip(docs, scores, strict=True))
        n_judged = int(rng.integers(1, 13))
        # judged documents favour the top of the ranking, so thresholds matter
        top = np.argsort(-np.array(scores))[:20]
        judged = rng.choice(np.concatenate((picked[top], picked[n_cands:])), n_judged, False)
        qrels[qid] = dict(
            zip(pool[judged].tolist(), rng.integers(0, 4, n_judged).tolist(), strict=True)
        )
    return qrels, run


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def ranx_point(
    qrels_ranx: Any, arrays: Any, kept: np.ndarray, raw: np.ndarray, ids: list[list[str]]
) -> dict[str, float]:
    from ranx import Run
    from ranx import evaluate as ranx_evaluate

    run = {
        q: dict(zip(ids[i][: kept[i]], raw[i, : kept[i]].tolist(), strict=True))
        for i, q in enumerate(arrays.qids)
    }
    res = ranx_evaluate(qrels_ranx, Run(run), list(RANX.values()))
    return {m: float(res[name]) for m, name in RANX.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--ranx-queries", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="5,000 queries, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.queries, args.ranx_queries, args.repeats = 5_000, 2_000, 1

    from importlib.metadata import version

    from ranx import Qrels

    # ranx's own numba kernels cast uint64 to int64 (exact here); not ragguard's warning
    warnings.filterwarnings("ignore", message=".*unsafe cast from uint64 to int64")

    print(
        f"python {platform.python_version()}, numpy {np.__version__}, ranx {version('ranx')}, "
        f"numba {version('numba')}, {platform.machine()}, {os.cpu_count()} CPUs"
    )
    n = args.queries
    t = time.perf_counter()
    qrels, run = make_data(n, 100, args.seed)
    print(f"(data: {n:,} queries x 100 candidates generated in {time.perf_counter() - t:.1f} s)")
    t = time.perf_counter()
    arrays = arrays_from_dicts(qrels, run)
    _ = arrays.utility
    print(f"(dicts -> EvalArrays + utilities once: {time.perf_counter() - t:.1f} s, not timed)")

    metrics = list(METRICS)
    grid = SweepGrid(cut_rules=())  # 10 x 20
    points = grid.points()
    full_grid = SweepGrid()

    def run_sweep(g: SweepGrid) -> Any:
        kernel = SweepKernel(arrays, [*metrics, "passages"], max(g.max_k))
        return sweep(kernel, g, metrics)

    t_sweep, result = best_of(lambda: run_sweep(grid), args.repeats)
    t_tables, _ = best_of(lambda: SweepKernel(arrays, [*metrics, "passages"], 10), 1)
    t_full, _ = best_of(lambda: run_sweep(full_grid), 1)

    # ragguard one setting at a time, without the tables (a few settings, extrapolated)
    ranked = arrays.ranked()
    sample = [points[i] for i in (3, 77, 151)]

    def one_at_a_time() -> list[dict[str, float]]:
        return [evaluate(arrays, metrics=metrics, cut=cut_ranked(ranked, p).n_kept) for p in sample]

    t_naive, naive = best_of(one_at_a_time, 1)
    t_naive_total = t_naive / len(sample) * len(points)

    worst = 0.0
    for p, expected in zip(sample, naive, strict=True):
        got = result.point_means(result.index(p))
        for m in metrics:
            a, b = got[m], expected[m]
            if not (np.isnan(a) and np.isnan(b)):
                worst = max(worst, abs(a - b))

    # ranx one setting at a time, on a subset, extrapolated
    nr = min(args.ranx_queries, n)
    sub_q = {f"q{i}": qrels[f"q{i}"] for i in range(nr)}
    sub_r = {f"q{i}": run[f"q{i}"] for i in range(nr)}
    sub = arrays_from_dicts(sub_q, sub_r)
    sub_ranked = sub.ranked()
    ids = [sub.doc_ids(i) for i in range(nr)]
    raw = sub.raw
    qrels_ranx = Qrels(sub_q)
    warm = cut_ranked(sub_ranked, PolicyParams(max_k=3)).n_kept
    ranx_point(qrels_ranx, sub, warm, raw, ids)  # JIT warm-up, not timed
    ranx_sample = [points[i] for i in (3, 77, 151)]
    cuts = [cut_ranked(sub_ranked, p).n_kept for p in ranx_sample]

    def ranx_points() -> list[dict[str, float]]:
        return [ranx_point(qrels_ranx, sub, c, raw, ids) for c in cuts]

    t_ranx, ranx_means = best_of(ranx_points, 1)
    t_ranx_total = t_ranx / len(ranx_sample) * len(points) * (n / nr)
    sub_sweep = sweep(sub, ranx_sample, list(RANX))
    worst_ranx = 0.0
    for i, means in enumerate(ranx_means):
        for m in RANX:
            worst_ranx = max(worst_ranx, abs(means[m] - sub_sweep.mean(i, m)))

    print(f"\n== {n:,} queries x 100 candidates, {len(metrics)} registry metrics + passages")
    print(f"{'measurement':58} {'seconds':>9}  note")
    rows = [
        (f"ragguard sweep, {len(points)} settings (10 max_k x 20 t)", t_sweep,
         f"best of {args.repeats}; tables + settings"),
        ("  of which: SweepKernel (rank once, metric tables 0..10)", t_tables, "once"),
        ("  of which: the settings (cut_ranked + gather)", t_sweep - t_tables,
         f"{(t_sweep - t_tables) / len(points) * 1000:.1f} ms per setting"),
        (f"ragguard sweep, default grid ({len(full_grid.points())} settings, + gap/autocut)",
         t_full, "info"),
        (f"ragguard evaluate() one setting at a time, {len(points)} settings", t_naive_total,
         f"extrapolated from {len(sample)} settings ({t_naive / len(sample):.2f} s each)"),
        (f"ranx one setting at a time, {len(points)} settings, 6 metrics", t_ranx_total,
         f"extrapolated from {len(ranx_sample)} settings x {nr:,} queries "
         f"({t_ranx / len(ranx_sample):.2f} s each)"),
    ]  # fmt: skip
    for label, value, note in rows:
        print(f"{label:58} {value:9.2f}  {note}")
    ok = worst <= 1e-12 and worst_ranx <= 1e-12
    print(
        f"agreement: sweep vs evaluate(cut=...) max |diff| = {worst:.1e}; sweep vs ranx "
        f"(6 metrics, {nr:,} queries) max |diff| = {worst_ranx:.1e} -> "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    best = result.column("udcg").argmax()
    print(
        f"(best mean udcg on this random data: {result.mean(int(best), 'udcg'):.4f} at "
        f"max_k={points[best].max_k}, t={points[best].relative_threshold:g})"
    )
    print("\nGoals")
    verdict = "PASS" if t_sweep < GOAL_S else "FAIL"
    scale = "" if n == 100_000 else f" (at {n:,} queries, not the goal's 100,000)"
    print(f"  {verdict}: sweep of {len(points)} settings x {len(metrics)} metrics = "
          f"{t_sweep:.1f} s < {GOAL_S:g} s{scale}")  # fmt: skip
    print(f"  (info) ranx one setting at a time / sweep = {t_ranx_total / t_sweep:.0f}x "
          f"(ranx extrapolated, 6 of the {len(metrics)} metrics)")  # fmt: skip
    print(f"  (info) evaluate() one setting at a time / sweep = {t_naive_total / t_sweep:.1f}x")
    print(f"  {'PASS' if ok else 'FAIL'}: values agree")


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("sweep_speed"):
        main()
