"""``ragguard train-reranker`` on examples/notes and examples/nq: held-out AUCs, then the
two-stage calibrated guard with the chosen scorer against plain top-k.

Per eval set (calibrate's split: holdout 0.3, seed 0; training reads only the
calibration queries):

1. **Training.** Each candidate kind (default ``fusion``, ``bi-encoder`` and the opt-in
   ``new-cross-encoder``; base: the packaged all-MiniLM-L6-v2) is trained by its own
   ``RerankerTrainer(kinds=[kind]).fit`` call (same split, pairs and seed as one call with
   every kind, so its validation AUCs are the same; a separate call lets a candidate
   that beats the base be written and scored on held-out queries). Printed: validation
   AUCs of the base, its inputs and every candidate, steps, training wall time, and the
   candidate one call with every kind would write (``ragguard.calibration.train.choice.choose``)
   or that none would.
2. **Held-out AUCs** (calibrate's held-out queries, never read by training): relevant vs
   labelled distractor and relevant vs the other candidates of the runs, for BM25 (document
   frequencies of the corpus), MiniLM cosine and every written candidate.
3. **The guard.** For each run (``bm25``, ``dense-minilm``): ``calibrate(evalset,
   runs=[run], constraints=["evidence_recall>=0.8"], split=Split(holdout=0.3, seed=0),
   rerank=RerankSearch(reranker=R))`` with R the chosen
   scorer, or MiniLM cosine (``examples.rerankers.MiniLMCosine``) when nothing was
   written (said so). Held-out means of UDCG, evidence recall, distractor rate and
   passages kept: the two-stage choice; calibrate's own plain top-k baseline (k chosen
   on the calibration queries under the same recall constraint) with the paired 95%
   bootstrap interval of the UDCG difference; and the best plain top-k *at equal or
   higher held-out evidence recall* (k chosen on the held-out queries themselves, which
   favours top-k).

Offline; CPU by default (``--device cuda``)::

    python benchmarks/train_reranker.py [--max-steps 200] [--sets notes nq]
        [--kinds fusion bi-encoder new-cross-encoder] [--pretrain-data DIR]

Use ``--max-steps 4`` while developing; ``--guard-only`` runs part 3 alone with the base
scorer (what a run in which nothing was written compares). The script always exits 0: it
is a report.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from ragguard.calibration import Check, RerankSearch, Split, calibrate, load_inputs
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.statistics import metric_values
from ragguard.calibration.fit.sweep import describe_point
from ragguard.calibration.train.choice import Candidate, choose, pair_auc
from ragguard.calibration.train.pairs import validation_queries
from ragguard.calibration.train.reranker import RerankerTrainer, Training, TrainResult
from ragguard.errors import EvalSetError
from ragguard.trained import PACKAGED_ENCODER, Lexical, Signals, TrainedReranker, load_encoder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from examples.rerankers import MiniLMCosine  # noqa: E402

RUNS = ("bm25", "dense-minilm")
HOLDOUT, SEED, MIN_RECALL = 0.3, 0, 0.8
GUARD_METRICS = ("udcg", "evidence_recall", "distractor_rate", "passages")
Score = Callable[[str, Sequence[str]], Any]


def _f(x: float) -> str:
    return "  n/a" if math.isnan(x) else f"{x:.3f}"


def held_out_auc(
    ev: EvalSet, result: TrainResult, lookup: Callable[[str, str], str | None], score: Score
) -> tuple[float, float]:
    held = validation_queries(
        ev, result.split.held_out, runs=list(ev.runs), has_text=lambda q, d: bool(lookup(q, d))
    )
    dis, oth = [], []
    for v in held:
        s = np.asarray(
            score(ev.queries[v.qid].text or "", [lookup(v.qid, d) or "" for d in v.docs])
        )
        a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
        dis.append((s[:a], s[a:b]))
        oth.append((s[:a], s[b:]))
    return pair_auc(dis), pair_auc(oth)


def train_all(
    ev: EvalSet, kinds: Sequence[str], tmp: Path, args: argparse.Namespace
) -> tuple[list[Candidate], dict[str, TrainResult], str]:
    """Every kind by its own call; the candidates as one call would list them."""
    results: dict[str, TrainResult] = {}
    for kind in kinds:
        print(f"  -- training {kind}")
        training = Training(device=args.device, max_steps=args.max_steps)
        trainer = RerankerTrainer(kinds=[kind], holdout=HOLDOUT, seed=SEED, training=training)
        results[kind] = trainer.fit(
            ev, out=tmp / kind, pretrain_data=args.pretrain_data,
            progress=lambda line: print("     " + line),
        )  # fmt: skip
    first = next(iter(results.values()))
    cands = [c for c in first.candidates if c.role != "trained"]
    cands += [c for r in results.values() for c in r.candidates if c.role == "trained"]
    return cands, results, first.selection_metric


def guard_comparison(ev: EvalSet, name: str, reranker: Any, cache: Path, n_boot: int) -> None:
    for run in RUNS:
        t0 = time.perf_counter()
        res = calibrate(
            ev,
            constraints=[f"evidence_recall>={MIN_RECALL}"],
            runs=[run],
            split=Split(holdout=HOLDOUT, seed=SEED),
            check=Check(n_bootstrap=n_boot),
            rerank=RerankSearch(reranker=reranker, cache_dir=cache),
        )
        two = res.rerank
        assert two is not None
        r = res.recommended
        rows = res.header.heldout_rows
        guarded = {m: two.comparison.guarded[m].mean for m in GUARD_METRICS}
        base = {m: two.comparison.baseline[m].mean for m in GUARD_METRICS}
        d = two.comparison.difference["udcg"]
        # every plain top-k on the held-out queries; the best UDCG at >= the two-stage recall
        width = r.kernel.width
        tops = []
        for k in range(1, width + 1):
            kept = np.minimum(k, r.arrays.n_present).astype(np.intp)
            # nan-aware, as calibrate's means: evidence recall is undefined for a query
            # without a relevant candidate
            vals = np.nanmean(metric_values(r.kernel, kept, GUARD_METRICS, rows), axis=1)
            tops.append((k, dict(zip(GUARD_METRICS, vals.tolist(), strict=True))))
        ok = [t for t in tops if t[1]["evidence_recall"] >= guarded["evidence_recall"] - 1e-12]
        best_k, best = (
            max(ok, key=lambda t: t[1]["udcg"])
            if ok
            else max(tops, key=lambda t: t[1]["evidence_recall"])
        )

        def line(label: str, v: dict[str, float]) -> str:
            return (
                f"    {label:<46} {v['udcg']:6.3f} {v['evidence_recall']:8.3f} "
                f"{v['distractor_rate']:7.3f} {v['passages']:8.2f}"
            )

        print(
            f"  run {run}: {rows.size} held-out queries; two-stage with {name}: "
            f"{two.describe(two.written)}"
            f"{' (fallback: ' + two.fallback + ')' if two.fallback else ''}"
        )
        print(f"    {'':<46} {'UDCG':>6} {'ev.recall':>8} {'d.rate':>7} {'passages':>8}")
        print(line("two-stage calibrated guard", guarded))
        print(line(f"calibrate's top-k baseline ({describe_point(r.baseline_params)})", base))
        note = "" if ok else ", none reaches it: highest"
        print(line(f"best top-k at >= its recall (held-out k={best_k}{note})", best))
        print(
            f"    two-stage minus calibrate's top-k, UDCG: {d.mean:+.3f} "
            f"[{d.low:+.3f}, {d.high:+.3f}]; minus best top-k at >= recall: "
            f"{guarded['udcg'] - best['udcg']:+.3f} ({time.perf_counter() - t0:.1f} s)"
        )


def one_set(folder: Path, args: argparse.Namespace, tmp: Path) -> None:
    ev = load_inputs(folder)
    print(f"\n=== {folder.relative_to(ROOT)}: {len(ev.qids)} labelled queries ===")
    started = time.perf_counter()
    chosen_path: Path | None = None
    chosen_name = ""
    if not args.guard_only:
        chosen_path, chosen_name = train_and_compare(ev, args, tmp / folder.name)
    if chosen_path is not None:
        name = f"the chosen {chosen_name}"
        reranker: Any = TrainedReranker(chosen_path, device=args.device)
    else:
        name = "MiniLM cosine (the base" + (")" if args.guard_only else ": nothing was written)")
        reranker = MiniLMCosine()
    print(f"two-stage calibrated guard with {name}, min_recall {MIN_RECALL}:")
    guard_comparison(ev, name, reranker, tmp / "cache", args.bootstrap)
    print(f"({folder.relative_to(ROOT)}: {time.perf_counter() - started:.1f} s)")


def train_and_compare(ev: EvalSet, args: argparse.Namespace, tmp: Path) -> tuple[Path | None, str]:
    """Parts 1 and 2; the chosen scorer's folder (``None``: nothing written) and name."""
    lookup = ev.texts.get
    started = time.perf_counter()
    try:
        cands, results, metric = train_all(ev, args.kinds, tmp, args)
    except EvalSetError as exc:  # too few usable validation queries to show a win
        print(f"not trained: {exc}")
        return None, ""
    wall = time.perf_counter() - started
    chosen = choose(cands, metric)
    first = next(iter(results.values()))
    val = validation_queries(
        ev, first.split.validation, runs=list(ev.runs), has_text=lambda q, d: bool(lookup(q, d))
    )
    n_dis = sum(len(v.relevant) * len(v.distractors) for v in val)
    print(
        f"validation AUCs (selection by {metric}; {sum(bool(v.distractors) for v in val)} of "
        f"{len(val)} validation queries have labelled distractors, {n_dis} relevant-distractor "
        "pairs):"
    )
    for c in cands:
        flag = " written" if c.role == "trained" and results[c.name].path is not None else ""
        print(
            f"  {c.name:<18} {c.role:<8} rel-vs-distractor {_f(c.auc_distractor)}  rel-vs-other "
            f"{_f(c.auc_other)}  {c.seconds:7.1f} s{flag}  {c.note}"
        )
    print(
        f"training wall time, every kind: {wall:.1f} s; one call with every kind would write: "
        f"{chosen.name if chosen else 'nothing (no candidate beat the base)'}"
    )

    signals = Signals(load_encoder(PACKAGED_ENCODER, args.device), Lexical.fit([]))
    docs = sorted({d for r in ev.runs.values() for c in r.candidates.values() for d in c})
    bm25 = Lexical.fit([lookup("", d) or "" for d in docs])
    scorers: dict[str, Score] = {
        "BM25 (corpus df)": lambda q, t: [bm25.scores(q, x)[0] for x in t],
        "MiniLM cosine (base)": signals.cosine,
    }
    for kind, r in results.items():
        if r.path is not None:
            scorers[f"{kind}{' (chosen)' if chosen and chosen.name == kind else ''}"] = (
                TrainedReranker(r.path, device=args.device)
            )
    print(f"held-out AUCs ({len(first.split.held_out)} queries, never read by training):")
    for name, score in scorers.items():
        d, o = held_out_auc(ev, first, lookup, score)
        print(f"  {name:<28} rel-vs-distractor {_f(d)}  rel-vs-other {_f(o)}")
    if chosen is None:
        return None, ""
    return results[chosen.name].path, chosen.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--sets", nargs="*", default=["notes", "nq"])
    parser.add_argument("--kinds", nargs="*", default=["fusion", "bi-encoder", "new-cross-encoder"])
    parser.add_argument("--pretrain-data", type=Path, default=None)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument(
        "--guard-only",
        action="store_true",
        help="skip training; the guard comparison with the base scorer (MiniLM cosine)",
    )
    args = parser.parse_args()
    print(
        f"train_reranker: python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, device {args.device}; max_steps {args.max_steps}, kinds "
        f"{' '.join(args.kinds)}, pretrain data {args.pretrain_data or 'none'}"
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ragguard-train-bench-") as tmp:
        for name in args.sets:
            try:
                one_set(ROOT / "examples" / name, args, Path(tmp))
            except Exception as exc:  # a report, never a failure
                print(f"\nexamples/{name}: failed: {exc!r}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("train_reranker"):
        sys.exit(main())
