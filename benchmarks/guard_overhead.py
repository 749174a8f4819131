"""How much latency does ``ContextGuard.select()`` add to a RAG request?

The guard sits between the retriever and the LLM on every request, so its cost must be
small next to retrieval. This script measures, on this machine:

1. ``select()`` on 20, 100 and 1,000 pre-built candidates (random similarity scores in
   input order, not sorted) with ``max_k=5, relative_threshold=0.7,
   score_kind="similarity"``; candidate construction is outside the timed region. A
   second row per size times ``select()`` followed by ``selection.dropped``, which
   materialises one :class:`~ragguard.Decision` (with its message) per dropped
   candidate, so both the lazy and the full cost are visible.
2. The same selection written by hand in plain Python (sort descending, keep scores
   >= 0.7 x top, cap at 5) as a baseline, and the ratio ``select()`` / baseline. The
   script checks that both keep the same candidates.
3. When ``langchain-core`` is installed: ``InMemoryVectorStore.similarity_search_with_score``
   (query embedding included, as a user sees it) over 10,000 documents with
   ``DeterministicFakeEmbedding(size=384)``, the conversion of its 20 ``(Document,
   score)`` pairs to Candidates (what an adapter does), and ``select()`` as a share of
   that retrieval call. For scale, it also times an exact top-20 search in numpy over a
   pre-built float32 matrix of the same size (single-threaded ``einsum``), a much faster
   retriever than ``InMemoryVectorStore``.
4. ``select()`` with the stages after the cut on (``max_tokens=300`` with the default
   ``chars:4`` counter, ``near_duplicate_threshold=0.8``), interleaved with ``select()``
   on the same candidates with the stages off, at 20, 100 and 1,000 candidates whose
   texts are 40 to 120 words (every fourth one a near-copy of the one before it), so the
   difference is the cost of shingling, comparing and counting the kept passages.
5. ``select()`` on 20 of those text candidates with ``conflicts="flag"`` (every fourth
   text is a near-copy with two words changed: a conflicting pair), and with
   ``min_evidence`` set, interleaved with ``select()`` with both off, so the differences
   are the cost of the conflict detection and of the answerability floor.
6. The adapter paths on the same 20 scored passages, interleaved with ``select()`` on
   them: a LangChain retriever that returns 20 fixed documents, bare and wrapped
   (``guard.wrap``); LlamaIndex's ``SimilarityPostprocessor`` and the guard's
   ``GuardPostprocessor`` on the same 20 nodes; a Haystack component that returns 20
   fixed documents, bare and followed by ``GuardRanker``. No callback handler or event
   handler listens and no tracer is set. What each adapter adds over its bare path is
   given as a multiple of ``select()``'s median (each framework needs its extra).
7. Whether the goals hold: ``select()`` on 100 candidates under 100 microseconds
   (median), ``select()`` on the 20 retrieved candidates under 5% of the retrieval
   call, and each adapter path adding at most 1.5x what ``select()`` costs.

Every figure is a median (and p90) of per-call ``time.perf_counter_ns`` timings after a
warm-up, with the garbage collector left on as in a real process. Rows that are compared
with each other are measured interleaved (in rounds), so a machine that drifts between
faster and slower periods shifts them together. The script always exits 0: it is a
report, not a test.

Run: ``python benchmarks/guard_overhead.py`` (``--quick`` for a fast smoke run).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import ragguard
from ragguard import Candidate, ContextGuard, GuardConfig, Reason

SIZES = (20, 100, 1_000)
MAX_K = 5
RELATIVE_THRESHOLD = 0.7
RETRIEVAL_K = 20
STORE_DOCS = 10_000
EMBEDDING_SIZE = 384
QUERY = "which passages should reach the language model?"
STAGE_MAX_TOKENS = 300
STAGE_NEAR_DUPLICATE = 0.8
STAGE_MAX_K = 10
WORDS = tuple(f"w{i}" for i in range(400))

STAGE_REASONS = (Reason.OVER_TOKEN_BUDGET, Reason.NEAR_DUPLICATE)
CONFLICT_CANDIDATES = 20
MIN_EVIDENCE = 0.3
ROUNDS = 10
GOAL_SELECT_100_US = 100.0
GOAL_SHARE_OF_RETRIEVAL = 0.05
GOAL_ADAPTER_MULTIPLE = 1.5


@dataclass(frozen=True, slots=True)
class Timing:
    """Summary of per-call wall times, in nanoseconds."""

    median_ns: float
    p90_ns: float
    repeats: int

    @property
    def median_us(self) -> float:
        return self.median_ns / 1_000

    @property
    def p90_us(self) -> float:
        return self.p90_ns / 1_000


def _summary(samples: list[int]) -> Timing:
    samples.sort()
    p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
    return Timing(float(statistics.median(samples)), float(p90), len(samples))


def measure(fn: Callable[[], object], *, repeats: int, warmup: int) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls."""
    return measure_interleaved([fn], repeats=repeats, warmup=warmup, rounds=1)[0]


def measure_interleaved(
    fns: Sequence[Callable[[], object]], *, repeats: int, warmup: int, rounds: int = ROUNDS
) -> list[Timing]:
    """Time each of ``fns`` ``repeats`` times, alternating between them in ``rounds`` blocks.

    Shared virtual machines drift between faster and slower periods; interleaving puts
    every function through the same periods, so their ratios stay meaningful.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    clock = time.perf_counter_ns
    samples: list[list[int]] = [[] for _ in fns]
    per_round = max(1, repeats // rounds)
    for _ in range(rounds):
        for fn, out in zip(fns, samples, strict=True):
            append = out.append
            for _ in range(per_round):
                start = clock()
                fn()
                append(clock() - start)
    return [_summary(out) for out in samples]


def make_candidates(n: int, seed: int) -> tuple[Candidate, ...]:
    """``n`` candidates with seeded uniform similarity scores, in unsorted input order."""
    rng = random.Random(seed + n)
    return tuple(Candidate(id=f"d{i}", text=f"passage {i}", score=rng.random()) for i in range(n))


def baseline_select(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The same policy by hand: sort descending, relative threshold, cap at max_k."""
    ranked = sorted(candidates, key=lambda c: c.score or 0.0, reverse=True)
    bar = RELATIVE_THRESHOLD * (ranked[0].score or 0.0)
    return [c for c in ranked if (c.score or 0.0) >= bar][:MAX_K]


def _fmt_us(us: float) -> str:
    if us >= 10_000:
        return f"{us / 1_000:,.1f} ms"
    return f"{us:,.1f} us"


class Report:
    """A plain-text table printed row by row."""

    def __init__(self) -> None:
        self._header_printed = False

    def row(self, label: str, timing: Timing, note: str = "") -> None:
        if not self._header_printed:
            print(f"{'measurement':<52} {'median':>11} {'p90':>11} {'n':>6}  note")
            print("-" * 96)
            self._header_printed = True
        print(
            f"{label:<52} {_fmt_us(timing.median_us):>11} {_fmt_us(timing.p90_us):>11} "
            f"{timing.repeats:>6}  {note}"
        )


def bench_select(
    guard: ContextGuard, report: Report, *, repeats: int, warmup: int, seed: int
) -> dict[int, Timing]:
    """Parts 1 and 2: select() vs select()+dropped vs the hand-written baseline."""
    results: dict[int, Timing] = {}
    for n in SIZES:
        cands = make_candidates(n, seed)
        kept_ids = [c.id for c in guard.select("q", cands).kept]
        base_ids = [c.id for c in baseline_select(cands)]
        if kept_ids != base_ids:
            print(f"WARNING: select() and the baseline disagree on {n}: {kept_ids} vs {base_ids}")

        def run_select(c: tuple[Candidate, ...] = cands) -> object:
            return guard.select("q", c)

        def run_select_dropped(c: tuple[Candidate, ...] = cands) -> object:
            return guard.select("q", c).dropped

        def run_baseline(c: tuple[Candidate, ...] = cands) -> object:
            return baseline_select(c)

        sel, full, base = measure_interleaved(
            [run_select, run_select_dropped, run_baseline], repeats=repeats, warmup=warmup
        )
        results[n] = sel
        n_dropped = n - len(kept_ids)
        report.row(f"select(), {n:,} candidates", sel, f"kept {len(kept_ids)}")
        report.row(f"select() + .dropped, {n:,} candidates", full, f"{n_dropped:,} Decisions built")
        report.row(
            f"plain-Python baseline, {n:,} candidates",
            base,
            f"select()/baseline = {sel.median_ns / base.median_ns:.1f}x",
        )
    return results


def make_text_candidates(n: int, seed: int) -> tuple[Candidate, ...]:
    """``n`` candidates with seeded scores and texts of 40-120 words; every fourth text
    is the one before it with two words changed (a near-duplicate)."""
    rng = random.Random(seed + 7 * n)
    out: list[Candidate] = []
    for i in range(n):
        if i % 4 == 3:
            words = out[-1].text.split()
            for _ in range(2):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
        else:
            words = [rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
        out.append(Candidate(id=f"d{i}", text=" ".join(words), score=rng.random()))
    return tuple(out)


def bench_stages(report: Report, *, repeats: int, warmup: int, seed: int) -> None:
    """Part 4: select() with the token budget and near-duplicate control on vs off."""
    base = {"max_k": STAGE_MAX_K, "relative_threshold": 0.5, "score_kind": "similarity"}
    plain = ContextGuard(GuardConfig(**base))
    staged = ContextGuard(
        GuardConfig(
            **base, max_tokens=STAGE_MAX_TOKENS, near_duplicate_threshold=STAGE_NEAR_DUPLICATE
        )
    )
    for n in SIZES:
        cands = make_text_candidates(n, seed)
        sel = staged.select("q", cands)
        by_stage = sum(1 for d in sel.dropped if d.reason in STAGE_REASONS)

        def run_plain(c: tuple[Candidate, ...] = cands) -> object:
            return plain.select("q", c)

        def run_staged(c: tuple[Candidate, ...] = cands) -> object:
            return staged.select("q", c)

        off, on = measure_interleaved([run_plain, run_staged], repeats=repeats, warmup=warmup)
        report.row(
            f"select(), stages off, {n:,} candidates", off, f"kept {len(plain.select('q', cands))}"
        )
        report.row(
            f"select(), budget + near-dup on, {n:,} candidates",
            on,
            f"kept {len(sel)}, {by_stage} dropped by the stages, "
            f"+{on.median_us - off.median_us:.1f} us",
        )


def bench_conflicts(report: Report, *, repeats: int, warmup: int, seed: int) -> Timing:
    """Part 5: select() with conflicts="flag", and with min_evidence, vs both off."""
    base = {"max_k": STAGE_MAX_K, "relative_threshold": 0.5, "score_kind": "similarity"}
    plain = ContextGuard(GuardConfig(**base))
    flag = ContextGuard(GuardConfig(**base, conflicts="flag"))
    floor = ContextGuard(GuardConfig(**base, min_evidence=MIN_EVIDENCE))
    n = CONFLICT_CANDIDATES
    cands = make_text_candidates(n, seed)
    flagged = flag.select("q", cands)

    def run_plain(c: tuple[Candidate, ...] = cands) -> object:
        return plain.select("q", c)

    def run_flag(c: tuple[Candidate, ...] = cands) -> object:
        return flag.select("q", c)

    def run_floor(c: tuple[Candidate, ...] = cands) -> object:
        return floor.select("q", c)

    off, on, ev = measure_interleaved(
        [run_plain, run_flag, run_floor], repeats=repeats, warmup=warmup
    )
    report.row(f"select(), conflicts off, {n} candidates", off, f"kept {len(flagged)}")
    report.row(
        f"select(), conflicts='flag', {n} candidates",
        on,
        f"{len(flagged.conflicts)} conflict groups, verdict {flagged.verdict.value}, "
        f"{on.median_us - off.median_us:+.1f} us",
    )
    report.row(
        f"select(), min_evidence={MIN_EVIDENCE}, {n} candidates",
        ev,
        f"verdict {floor.select('q', cands).verdict.value}, {ev.median_us - off.median_us:+.1f} us",
    )
    return on


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    retrieval: Timing
    convert: Timing
    select_retrieved: Timing


def bench_langchain(
    guard: ContextGuard,
    report: Report,
    *,
    docs: int,
    retrieval_repeats: int,
    repeats: int,
    warmup: int,
) -> RetrievalResult | None:
    """Part 3: the guard next to a LangChain in-memory vector store query."""
    try:
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from langchain_core.vectorstores import InMemoryVectorStore
    except ImportError:
        print(
            "langchain-core is not importable: skipping the retrieval comparison "
            "(pip install 'ragguard-context[langchain]')."
        )
        return None

    embedding = DeterministicFakeEmbedding(size=EMBEDDING_SIZE)
    store = InMemoryVectorStore(embedding)
    setup_start = time.perf_counter()
    store.add_texts(
        [f"passage {i} about topic {i % 97}" for i in range(docs)],
        metadatas=[{"source": f"doc-{i // 10}", "chunk": i % 10} for i in range(docs)],
        ids=[f"d{i}" for i in range(docs)],
    )
    setup_s = time.perf_counter() - setup_start
    print(
        f"(InMemoryVectorStore with {docs:,} documents x {EMBEDDING_SIZE} dims built "
        f"in {setup_s:.1f} s, not timed)"
    )

    def retrieve() -> list[tuple[Any, float]]:
        return store.similarity_search_with_score(QUERY, k=RETRIEVAL_K)

    pairs = retrieve()

    def convert(p: list[tuple[Any, float]] = pairs) -> tuple[Candidate, ...]:
        return tuple(
            Candidate(
                id=doc.id if doc.id is not None else str(i),
                text=doc.page_content,
                score=score,
                metadata=doc.metadata,
                source=doc,
            )
            for i, (doc, score) in enumerate(p)
        )

    converted = convert()
    n_kept = len(guard.select(QUERY, converted).kept)

    def run_select(c: tuple[Candidate, ...] = converted) -> object:
        return guard.select(QUERY, c)

    retrieval = measure(retrieve, repeats=retrieval_repeats, warmup=min(2, retrieval_repeats))
    conv, sel = measure_interleaved([convert, run_select], repeats=repeats, warmup=warmup)
    report.row(
        f"similarity_search_with_score(k={RETRIEVAL_K}), {docs:,} docs",
        retrieval,
        "query embedding included",
    )
    report.row(f"convert {RETRIEVAL_K} (Document, score) -> Candidate", conv, "adapter work")
    report.row(
        f"select() on the {RETRIEVAL_K} retrieved candidates",
        sel,
        f"kept {n_kept}",
    )

    # For scale only: exact top-k over a pre-built matrix, as a flat index does it. einsum
    # rather than `matrix @ q`: multi-threaded BLAS mat-vec swings by >10x on small shared
    # machines, and this row is a yardstick, not a measurement of the store.
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((docs, EMBEDDING_SIZE), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    qvec = np.asarray(embedding.embed_query(QUERY), dtype=np.float32)

    def flat_topk() -> object:
        sims = np.einsum("ij,j->i", matrix, qvec / np.linalg.norm(qvec))
        top = np.argpartition(sims, -RETRIEVAL_K)[-RETRIEVAL_K:]
        return top[np.argsort(sims[top])[::-1]]

    flat = measure(flat_topk, repeats=max(retrieval_repeats, 200), warmup=10)
    report.row(
        f"(reference) numpy exact top-{RETRIEVAL_K}, pre-built matrix",
        flat,
        "no embedding; not a goal",
    )
    print(
        f"  select() on the {RETRIEVAL_K} retrieved candidates = "
        f"{sel.median_ns / retrieval.median_ns:.3%} of the InMemoryVectorStore call, "
        f"{sel.median_ns / flat.median_ns:.0%} of the numpy top-{RETRIEVAL_K}"
    )
    return RetrievalResult(retrieval, conv, sel)


def _adapter_paths(guard: ContextGuard, seed: int) -> dict[str, Callable[[], object]]:
    """``{label: call}``: each installed framework's bare path and its adapter path on
    the same 20 scored passages, each pair in that order."""
    rng = random.Random(seed)
    rows = [
        (
            f"d{i}",
            f"passage {i} about topic {i % 7}",
            rng.random(),
            {"source": f"doc-{i // 10}", "chunk": i % 10},
        )
        for i in range(RETRIEVAL_K)
    ]
    paths: dict[str, Callable[[], object]] = {}
    try:
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
    except ImportError:
        print("langchain-core is not importable: skipping the LangChain adapter path.")
    else:

        class FixedRetriever(BaseRetriever):
            docs: list[Document]

            def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
                return self.docs

        docs = [
            Document(id=i, page_content=t, metadata={**m, "relevance_score": s})
            for i, t, s, m in rows
        ]
        bare, wrapped = FixedRetriever(docs=docs), guard.wrap(FixedRetriever(docs=docs))
        paths["LangChain: fixed retriever, bare"] = lambda: bare.invoke(QUERY)
        paths["LangChain: guard.wrap(fixed retriever)"] = lambda: wrapped.invoke(QUERY)
    try:
        from llama_index.core.postprocessor import SimilarityPostprocessor
        from llama_index.core.schema import NodeWithScore, TextNode
    except ImportError:
        print("llama-index-core is not importable: skipping the LlamaIndex adapter path.")
    else:
        nodes = [
            NodeWithScore(node=TextNode(id_=i, text=t, metadata=m), score=s) for i, t, s, m in rows
        ]
        cutoff = SimilarityPostprocessor(similarity_cutoff=RELATIVE_THRESHOLD / 2)
        post = guard.as_postprocessor()
        paths["LlamaIndex: SimilarityPostprocessor"] = lambda: cutoff.postprocess_nodes(
            nodes, query_str=QUERY
        )
        paths["LlamaIndex: GuardPostprocessor"] = lambda: post.postprocess_nodes(
            nodes, query_str=QUERY
        )
    try:
        import haystack
    except ImportError:
        print("haystack-ai is not importable: skipping the Haystack adapter path.")
    else:
        hs_docs = [haystack.Document(id=i, content=t, meta=m, score=s) for i, t, s, m in rows]

        @haystack.component
        class FixedHaystackRetriever:
            @haystack.component.output_types(documents=list[haystack.Document])
            def run(self, query: str) -> dict[str, Any]:
                return {"documents": list(hs_docs)}

        fixed, ranker = FixedHaystackRetriever(), guard.as_haystack()
        paths["Haystack: fixed retriever, bare"] = lambda: fixed.run(QUERY)
        paths["Haystack: fixed retriever + GuardRanker"] = lambda: ranker.run(
            QUERY, fixed.run(QUERY)["documents"]
        )
    return paths


def bench_adapters(
    guard: ContextGuard, report: Report, *, repeats: int, warmup: int, seed: int
) -> list[tuple[str, float]]:
    """Part 6: each adapter path next to its bare path and select(); returns
    ``(framework, added cost / select())`` per framework."""
    paths = _adapter_paths(guard, seed)
    if not paths:
        return []
    cands = make_candidates(RETRIEVAL_K, seed)

    def run_select(c: tuple[Candidate, ...] = cands) -> object:
        return guard.select(QUERY, c)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the same warnings every call; not what is timed
        sel, *timings = measure_interleaved(
            [run_select, *paths.values()], repeats=repeats, warmup=warmup
        )
    report.row(f"select(), {RETRIEVAL_K} candidates (next to the adapters)", sel, "")
    multiples: list[tuple[str, float]] = []
    labels = list(paths)
    for k in range(0, len(labels), 2):
        bare, guarded = timings[k], timings[k + 1]
        added = guarded.median_ns - bare.median_ns
        framework = labels[k].split(":")[0]
        report.row(labels[k], bare, "")
        report.row(
            labels[k + 1],
            guarded,
            f"+{added / 1_000:.1f} us = {added / sel.median_ns:.2f}x select()",
        )
        multiples.append((framework, added / sel.median_ns))
    return multiples


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, help="timed calls per row (default 3000)")
    parser.add_argument("--warmup", type=int, help="untimed calls before timing (default 300)")
    parser.add_argument(
        "--retrieval-repeats", type=int, help="timed vector-store queries (default 20)"
    )
    parser.add_argument("--docs", type=int, default=STORE_DOCS, help="documents in the store")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random scores")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="default to 300 / 30 / 5 repeats, for a smoke run (noisier figures)",
    )
    args = parser.parse_args(argv)
    defaults = (300, 30, 5) if args.quick else (3_000, 300, 20)
    for name, default in zip(("repeats", "warmup", "retrieval_repeats"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)

    print(
        f"ragguard {ragguard.__version__}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, {platform.machine()} {platform.system()}"
    )
    print(
        f"guard: max_k={MAX_K}, relative_threshold={RELATIVE_THRESHOLD}, "
        f"score_kind='similarity'; {args.repeats:,} timed calls per row after "
        f"{args.warmup:,} warm-up calls"
    )
    timer = measure(lambda: None, repeats=args.repeats, warmup=args.warmup)
    print(f"timer + call overhead (empty lambda): {timer.median_ns:.0f} ns median\n")

    guard = ContextGuard(
        GuardConfig(max_k=MAX_K, relative_threshold=RELATIVE_THRESHOLD, score_kind="similarity")
    )
    report = Report()
    selects = bench_select(guard, report, repeats=args.repeats, warmup=args.warmup, seed=args.seed)
    print(
        f"\nstages after the cut: max_k={STAGE_MAX_K}, relative_threshold=0.5, "
        f"max_tokens={STAGE_MAX_TOKENS} (chars:4), near_duplicate_threshold={STAGE_NEAR_DUPLICATE}"
    )
    bench_stages(report, repeats=args.repeats, warmup=args.warmup, seed=args.seed)
    print(
        f"\nconflicts and answerability: max_k={STAGE_MAX_K}, relative_threshold=0.5, "
        f"{CONFLICT_CANDIDATES} text candidates (every fourth a near-copy, two words changed)"
    )
    conflicts = bench_conflicts(report, repeats=args.repeats, warmup=args.warmup, seed=args.seed)
    print()
    retrieval = bench_langchain(
        guard,
        report,
        docs=args.docs,
        retrieval_repeats=args.retrieval_repeats,
        repeats=args.repeats,
        warmup=args.warmup,
    )

    print(f"\nadapter paths on {RETRIEVAL_K} scored passages (no listener, no tracer)")
    adapters = bench_adapters(
        guard, report, repeats=args.repeats, warmup=args.warmup, seed=args.seed
    )

    print("\nGoals")
    sel100 = selects[100].median_us
    print(
        f"  {verdict(sel100 < GOAL_SELECT_100_US)}: select() on 100 candidates, median "
        f"{sel100:.1f} us < {GOAL_SELECT_100_US:.0f} us"
    )
    if retrieval is None:
        print("  SKIPPED: select() < 5% of the retrieval call (langchain-core not installed)")
    else:
        for label, sel in (
            (f"{RETRIEVAL_K} random-score candidates", selects[RETRIEVAL_K]),
            (f"the {RETRIEVAL_K} retrieved candidates", retrieval.select_retrieved),
        ):
            share = sel.median_ns / retrieval.retrieval.median_ns
            print(
                f"  {verdict(share < GOAL_SHARE_OF_RETRIEVAL)}: select() on {label}, "
                f"{share:.3%} of similarity_search_with_score(k={RETRIEVAL_K}) "
                f"< {GOAL_SHARE_OF_RETRIEVAL:.0%}"
            )
        both = (retrieval.convert.median_ns + retrieval.select_retrieved.median_ns) / (
            retrieval.retrieval.median_ns
        )
        print(f"  (info) conversion + select(): {both:.3%} of the retrieval call")
        share = conflicts.median_ns / retrieval.retrieval.median_ns
        print(
            f"  {verdict(share < GOAL_SHARE_OF_RETRIEVAL)}: select() with conflicts='flag' on "
            f"{CONFLICT_CANDIDATES} text candidates, {share:.3%} of the retrieval call "
            f"< {GOAL_SHARE_OF_RETRIEVAL:.0%}"
        )
    for framework, multiple in adapters:
        print(
            f"  {verdict(multiple <= GOAL_ADAPTER_MULTIPLE)}: the {framework} adapter adds "
            f"{multiple:.2f}x what select() costs on {RETRIEVAL_K} candidates "
            f"<= {GOAL_ADAPTER_MULTIPLE}x"
        )
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("guard_overhead"):
        sys.exit(main())
