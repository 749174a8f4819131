"""Why issue 24's measure of evaluate() against pytrec_eval and the team's ``realistic``
measure in metrics_speed.py disagree: each difference between them timed on its own.

Run from the repository root with the project's virtual environment active::

    python benchmarks/metrics_speed_factors.py              # 15 rounds, about 2 min
    python benchmarks/metrics_speed_factors.py --rounds 5   # quicker, noisier

The two measures, 10,000 queries each (the data of metrics_speed.py):

* the team's (``realistic``): tied scores, six metrics, pytrec_eval charged with two
  evaluators (five measures, then ``recip_rank`` on the run cut to its top 10; the cut
  itself not charged), best round of each tool;
* issue 24's (``issue24``): distinct scores, four metrics (ndcg@10, recall@10,
  precision@10, map@100), one pytrec_eval evaluator built and run, median rounds.

One process, no ranx; every round times every variant once (interleaved), with
``gc.collect()`` before each call unless the line says otherwise. Printed: each variant's
best and median, then the ratios pytrec_eval / ragguard of the chain from the team's
measure to the issue's, one difference at a time (best rounds, median rounds, and the
median of the per-round ratios, the steadiest of the three on a shared machine), and
each factor's effect on each tool alone. It always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytrec_eval

from metrics_speed import METRICS, METRICS_ISSUE24, TREC, Data, make_realistic, top_k
from ragguard.calibration import evaluate

Fn = Callable[[], Any]


def ours(data: Data, metrics: list[str]) -> Fn:
    return lambda: evaluate(data[0], data[1], metrics=metrics)


def trec(data: Data, metrics: list[str], cut: dict[str, dict[str, float]] | None = None) -> Fn:
    qrels, run = data
    names = {m: TREC[m] for m in metrics if m in TREC}

    def fn() -> dict[str, float]:
        per = pytrec_eval.RelevanceEvaluator(qrels, set(names.values())).evaluate(run)
        out = {m: float(np.mean([v[n] for v in per.values()])) for m, n in names.items()}
        if cut is not None:
            rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
            out["mrr@10"] = float(np.mean([v["recip_rank"] for v in rr.values()]))
        return out

    return fn


def shuffled(data: Data, seed: int) -> Data:
    """The same qrels, and each query's run listed in random order."""
    rng = random.Random(seed)
    run = {}
    for q, cands in data[1].items():
        items = list(cands.items())
        rng.shuffle(items)
        run[q] = dict(items)
    return data[0], run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    ties = make_realistic(args.queries, args.seed)
    distinct = make_realistic(args.queries, args.seed, distinct=True)
    unordered = shuffled(distinct, args.seed + 1)
    five = [m for m in METRICS if m != "mrr@10"]
    cut_ties, cut_distinct = top_k(ties[1], 10), top_k(distinct[1], 10)
    qrels_d = distinct[0]
    variants: dict[str, Fn] = {
        "ties: ragguard, 6 metrics": ours(ties, METRICS),
        "ties: ragguard, 4 metrics": ours(ties, METRICS_ISSUE24),
        "ties: pytrec_eval, 5 measures + recip_rank evaluator": trec(ties, five, cut_ties),
        "ties: pytrec_eval, 5 measures": trec(ties, five),
        "ties: pytrec_eval, 4 measures": trec(ties, METRICS_ISSUE24),
        "ties: cut run to top 10 (not charged)": lambda: top_k(ties[1], 10),
        "distinct: ragguard, 6 metrics": ours(distinct, METRICS),
        "distinct: ragguard, 4 metrics": ours(distinct, METRICS_ISSUE24),
        "distinct: pytrec_eval, 5 measures + recip_rank evaluator": trec(
            distinct, five, cut_distinct
        ),
        "distinct: pytrec_eval, 4 measures": trec(distinct, METRICS_ISSUE24),
        "distinct: pytrec_eval, evaluator built only": lambda: pytrec_eval.RelevanceEvaluator(
            qrels_d, {TREC[m] for m in METRICS_ISSUE24}
        ),
        "random order: ragguard, 4 metrics": ours(unordered, METRICS_ISSUE24),
        "random order: pytrec_eval, 4 measures": trec(unordered, METRICS_ISSUE24),
    }
    gc_variants = ("distinct: ragguard, 4 metrics", "distinct: pytrec_eval, 4 measures")
    for fn in variants.values():  # warm-up
        fn()
    times: dict[tuple[str, str], list[float]] = {(k, "collect"): [] for k in variants}
    for k in gc_variants:
        times[(k, "no collect")] = []
        times[(k, "gc off")] = []
    for _ in range(args.rounds):
        for key, mode in times:
            if mode != "no collect":
                gc.collect()
            if mode == "gc off":
                gc.disable()
            t = time.perf_counter()
            variants[key]()
            times[(key, mode)].append(time.perf_counter() - t)
            gc.enable()

    print(f"{args.queries:,} queries, {args.rounds} rounds, variants interleaved\n")
    print(f"{'variant':58} {'gc':10} {'best':>8} {'median':>8}")
    for (key, mode), v in times.items():
        print(f"{key:58} {mode:10} {min(v) * 1e3:6.1f}ms {statistics.median(v) * 1e3:6.1f}ms")

    def ratios(a: str, b: str, mode: str = "collect") -> str:
        ta, tb = times[(a, mode)], times[(b, mode)]
        best = min(ta) / min(tb)
        med = statistics.median(ta) / statistics.median(tb)
        paired = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
        return f"{best:5.2f}x {med:6.2f}x {paired:6.2f}x"

    print(f"\n{'pytrec_eval / ragguard':66} {'best':>6} {'median':>7} {'paired':>7}")
    chain = [
        (
            "team's measure: ties, 6 metrics, 2 pytrec_eval evaluators",
            "ties: pytrec_eval, 5 measures + recip_rank evaluator",
            "ties: ragguard, 6 metrics",
        ),
        (
            "  without the recip_rank evaluator (5 measures, one evaluator)",
            "ties: pytrec_eval, 5 measures",
            "ties: ragguard, 6 metrics",
        ),
        (
            "  and 4 metrics for both",
            "ties: pytrec_eval, 4 measures",
            "ties: ragguard, 4 metrics",
        ),
        (
            "  and distinct scores: issue 24's measure",
            "distinct: pytrec_eval, 4 measures",
            "distinct: ragguard, 4 metrics",
        ),
        (
            "issue 24's data, the team's measure (6 metrics, 2 evaluators)",
            "distinct: pytrec_eval, 5 measures + recip_rank evaluator",
            "distinct: ragguard, 6 metrics",
        ),
        (
            "issue 24's measure, each run listed in random order",
            "random order: pytrec_eval, 4 measures",
            "random order: ragguard, 4 metrics",
        ),
    ]
    for label, a, b in chain:
        print(f"{label:66} {ratios(a, b)}")
    ours4, trec4 = gc_variants
    for mode in ("no collect", "gc off"):
        label = "issue 24's measure, " + mode
        print(f"{label:66} {ratios(trec4, ours4, mode)}")

    print("\neach factor alone (median of per-round ratios)")
    alone = [
        ("pytrec_eval: + recip_rank evaluator on the cut run (ties)",
         "ties: pytrec_eval, 5 measures + recip_rank evaluator", "ties: pytrec_eval, 5 measures"),
        ("pytrec_eval: 5 measures / 4 measures (ties)",
         "ties: pytrec_eval, 5 measures", "ties: pytrec_eval, 4 measures"),
        ("pytrec_eval: ties / distinct",
         "ties: pytrec_eval, 4 measures", "distinct: pytrec_eval, 4 measures"),
        ("pytrec_eval: random order / best first",
         "random order: pytrec_eval, 4 measures", "distinct: pytrec_eval, 4 measures"),
        ("pytrec_eval: building the evaluator / the whole (distinct)",
         "distinct: pytrec_eval, evaluator built only", "distinct: pytrec_eval, 4 measures"),
        ("ragguard: 6 metrics / 4 metrics (ties)",
         "ties: ragguard, 6 metrics", "ties: ragguard, 4 metrics"),
        ("ragguard: ties / distinct", "ties: ragguard, 4 metrics", "distinct: ragguard, 4 metrics"),
        ("ragguard: random order / best first",
         "random order: ragguard, 4 metrics", "distinct: ragguard, 4 metrics"),
        ("cut run (not charged) / the team's pytrec_eval (ties)",
         "ties: cut run to top 10 (not charged)",
         "ties: pytrec_eval, 5 measures + recip_rank evaluator"),
    ]  # fmt: skip
    for label, a, b in alone:
        ta, tb = times[(a, "collect")], times[(b, "collect")]
        paired = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
        print(f"  {label:64} {paired:5.2f}")


if __name__ == "__main__":
    main()
