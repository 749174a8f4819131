"""What does the guard's rerank stage cost on top of the cross-encoder itself?

The rerank stage spends nearly all its time in the model; everything the guard adds
(ranking by retrieval score, the top_n pick, building the pairs, mapping logits to
probabilities, the policy, the Selection) should be lost in the noise. This script
measures, on this machine:

1. ``CrossEncoder.predict`` called directly on the (query, passage) pairs of one request
   (``batch_size=32``, no progress bar): the baseline;
2. ``ContextGuard.select()`` with ``rerank.enabled`` on the same candidates, with the
   same model object (the guard's own ``CrossEncoderReranker``, loaded once), reranking
   all of them (``top_n`` = the number of candidates);
3. the same ``select()`` with ``rerank.timeout_ms`` set, which moves the model call to
   the stage's worker thread (same goal, reported; the default has no timeout);
4. the stage without the model: ``select()`` with a reranker that returns precomputed
   scores, i.e. the guard's own work per call (info only, in microseconds).

for 20 and 100 candidates, and reports pairs per second and the guard's overhead
(goal: within 5% of ``predict``). Rows 1 to 3 are measured in rounds, one call of
each per round in rotating order, so a machine that drifts between faster and slower
periods shifts them together; an overhead is the median of the per-round ratios
``select / predict`` (and, as a check, the ratio of the medians is printed too).

The model is a BERT shaped like ``cross-encoder/ms-marco-MiniLM-L6-v2`` (6 layers,
hidden 384, 12 heads, intermediate 1536, a 30,522-token WordPiece vocabulary, one output
label, ``Identity`` activation so ``predict`` returns logits), built with random
weights in a temporary directory and loaded through ``sentence_transformers.CrossEncoder``
like any local model: nothing is downloaded. Throughput does not depend on the trained
weights, only on the architecture and the token counts. Passages are seeded synthetic
text of about ``--passage-words`` words (one token per word), the query 12 words.
``--model PATH`` runs a real local model instead.

Run: ``python benchmarks/rerank_throughput.py`` (``--quick`` for a smoke run;
``--device cuda --fp16`` on a GPU machine). It always exits 0: a report, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local model: never reach the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

import ragguard
from ragguard import Candidate, ContextGuard, CrossEncoderReranker, GuardConfig

SIZES = (20, 100)
BATCH_SIZE = 32
GOAL_OVERHEAD = 0.05
QUERY_WORDS = 12
VOCAB_SIZE = 30_522
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_minilm_shaped_model(path: Path, *, seed: int) -> Path:
    """Save a random-weight BERT cross-encoder shaped like ms-marco-MiniLM-L6-v2."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIAL_TOKENS))]
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + words)}
    tokenizer = BertTokenizerFast(vocab=vocab)  # a dict: see tests/rerank_models.py
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        num_labels=1,
    )
    # what ms-marco models carry: predict() returns logits
    config.sbert_ce_default_activation_function = "torch.nn.modules.linear.Identity"
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # spread the random head's outputs over a logit-like range
        model.classifier.weight.normal_(0.0, 2.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_request(n: int, passage_words: int, seed: int) -> tuple[str, list[Candidate]]:
    """A query and ``n`` candidates with synthetic text and seeded similarity scores."""
    rng = random.Random(seed + n)
    vocab = VOCAB_SIZE - len(SPECIAL_TOKENS)

    def text(words: int) -> str:
        return " ".join(f"w{rng.randrange(vocab)}" for _ in range(words))

    query = text(QUERY_WORDS)
    candidates = [
        Candidate(f"d{i}", text(rng.randint(passage_words * 3 // 4, passage_words * 5 // 4)),
                  rng.random())
        for i in range(n)
    ]  # fmt: skip
    return query, candidates


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000.0


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def guard_for(reranker: Any, n: int, **rerank: Any) -> ContextGuard:
    config = GuardConfig(
        score_kind="similarity",
        max_k=5,
        relative_threshold=0.7,
        rerank={"enabled": True, "top_n": n, "batch_size": BATCH_SIZE, **rerank},
    )
    return ContextGuard(config, reranker=reranker)


class Precomputed:
    """A reranker that returns fixed logits: the stage's cost without a model."""

    score_kind = "logit"

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def __call__(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return self.scores[: len(texts)]


def bench_size(
    reranker: CrossEncoderReranker, n: int, args: argparse.Namespace
) -> dict[str, float]:
    model = reranker.load()
    query, cands = make_request(n, args.passage_words, args.seed)
    pairs = [(query, c.text) for c in cands]
    tokens = [len(model.tokenizer(query, c.text)["input_ids"]) for c in cands]

    def direct() -> object:
        return model.predict(pairs, batch_size=BATCH_SIZE, show_progress_bar=False)

    guard = guard_for(reranker, n)
    budget_guard = guard_for(reranker, n, timeout_ms=600_000)

    def through_guard() -> object:
        return guard.select(query, cands)

    def through_budget_guard() -> object:
        return budget_guard.select(query, cands)

    # the same scores both ways (the guard ranks candidates by retrieval score first)
    sel = guard.select(query, cands)
    assert sel.rerank is not None
    got = dict(zip(sel.rerank.positions, sel.rerank.raw_scores, strict=True))
    want = np.asarray(direct(), dtype=np.float64)
    worst = max(abs(got[i] - want[i]) for i in range(n))
    logits = f"logits {want.min():.1f}..{want.max():.1f}"

    for fn in (direct, through_guard, through_budget_guard):
        for _ in range(args.warmup):
            fn()

    fns = [direct, through_guard, through_budget_guard]
    samples: list[list[float]] = [[], [], []]
    for r in range(args.rounds):
        for k in range(3):  # rotate the order: none always runs first
            j = (r + k) % 3
            samples[j].append(timed(fns[j]))
    t_direct, t_guard, t_budget = samples
    ratios = [g / d for g, d in zip(t_guard, t_direct, strict=True)]
    budget_ratios = [b / d for b, d in zip(t_budget, t_direct, strict=True)]

    # the guard's own work, with a reranker that costs nothing
    free = guard_for(Precomputed(want), n)
    for _ in range(200):
        free.select(query, cands)
    t_free = [timed(lambda: free.select(query, cands)) for _ in range(2_000)]

    d, g, b = median_ms(t_direct), median_ms(t_guard), median_ms(t_budget)
    overhead = statistics.median(ratios) - 1.0
    budget_overhead = statistics.median(budget_ratios) - 1.0
    print(
        f"{n} candidates: tokens per pair {min(tokens)}-{max(tokens)} "
        f"(mean {statistics.mean(tokens):.0f}), {logits}; guard vs predict max |diff| "
        f"{worst:.2g}, kept {len(sel.kept)}"
    )
    rows = [
        ("CrossEncoder.predict (direct)", d, t_direct, ""),
        ("ContextGuard.select, rerank on", g, t_guard, f"overhead {overhead:+.2%}"),
        ("  same, rerank.timeout_ms set", b, t_budget, f"overhead {budget_overhead:+.2%}"),
    ]
    for label, med, samples, note in rows:
        p90 = float(np.percentile(samples, 90)) * 1000.0
        print(
            f"  {label:<34} {med:9.1f} ms  p90 {p90:9.1f} ms  {n / med * 1000.0:8.1f} pairs/s"
            f"  n={len(samples):<3} {note}"
        )
    free_us = statistics.median(t_free) * 1e6
    print(
        f"  {'stage without model (fixed scores)':<34} {free_us:9.1f} us "
        f"= {free_us / 1000.0 / d:.3%} of predict"
    )
    print(f"  ratio of medians select/predict: {g / d - 1:+.2%} (timeout_ms set: {b / d - 1:+.2%})")
    return {"overhead": overhead, "direct_ms": d, "guard_ms": g}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, help="timed calls of each kind (default 25)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls of each first")
    parser.add_argument("--passage-words", type=int, default=100, help="mean passage length")
    parser.add_argument("--model", help="a local CrossEncoder model instead of the built one")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument(
        "--fp16", action="store_true", help="run the model in float16 (for GPUs; slow on CPU)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="5 rounds: a smoke run")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 5 if args.quick else 25

    import sentence_transformers
    import torch
    import transformers

    print(
        f"ragguard {ragguard.__version__}, Python {platform.python_version()}, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), transformers "
        f"{transformers.__version__}, sentence-transformers {sentence_transformers.__version__}"
    )
    print(f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, device {args.device}")

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            path = args.model
            print(f"model: {path}")
        else:
            start = time.perf_counter()
            path = str(build_minilm_shaped_model(Path(tmp) / "minilm-l6-shaped", seed=args.seed))
            print(
                "model: BERT shaped like ms-marco-MiniLM-L6-v2 (6 x 384, 12 heads, vocab "
                f"30,522), random weights, built in {time.perf_counter() - start:.1f} s"
            )
        reranker = CrossEncoderReranker(path, device=args.device, batch_size=BATCH_SIZE)
        model = reranker.load()
        if args.fp16:
            model.half()
        print(
            f"batch_size={BATCH_SIZE}, {args.rounds} rounds per size (each row once per round, "
            f"in rotating order) after "
            f"{args.warmup} warm-up calls; dtype {next(model.parameters()).dtype}\n"
        )
        results = {n: bench_size(reranker, n, args) for n in SIZES}

    print("\nGoal: the guard's rerank stage within 5% of CrossEncoder.predict")
    for n, r in results.items():
        ok = r["overhead"] < GOAL_OVERHEAD
        print(
            f"  {'PASS' if ok else 'FAIL'}: {n} candidates, overhead {r['overhead']:+.2%} "
            f"(median of per-round ratios) < {GOAL_OVERHEAD:.0%}"
        )
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("rerank_throughput"):
        sys.exit(main())
