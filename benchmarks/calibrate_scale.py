"""How long ``ragguard calibrate`` takes, and how much memory it needs, on large TREC files,
next to reading the same files with pandas and scoring ONE setting with pytrec_eval.

Run from the repository root with the project's virtual environment active::

    python benchmarks/calibrate_scale.py                       # 100,000 queries x 100
    python benchmarks/calibrate_scale.py --queries 1000000     # 1,000,000 x 100 (3.4 GB run)
    python benchmarks/calibrate_scale.py --quick               # smoke run: 5,000 queries
    python benchmarks/calibrate_scale.py --format beir         # the labels as a BEIR folder
    python benchmarks/calibrate_scale.py --format jsonl        # one JSONL eval set

Data (written once into ``--folder``, reused when present): ``run.trec``, Q queries x 100
candidates in TREC run format (``q17 Q0 D4821093 3 18.4471 bm25``, documents drawn from
10 million ids, scores descending with 4 decimals), and ``qrels.trec``, per query 3
judged retrieved candidates (grades 0-3, distinct positions) and 1 relevant document the
run missed (grade 1-3). With ``--format beir`` the same labels are also written as a BEIR
folder ``beir/`` (``qrels/test.tsv``, ``queries.jsonl``, ``corpus.jsonl`` with every
document of the run and qrels) and calibrate reads it instead of ``qrels.trec``; with
``--format jsonl`` they are written as one ragguard JSONL file ``eval.jsonl`` holding the
run's candidates (``relevant`` / ``not_relevant`` lists: grades 2-3 read as 1) and
calibrate reads that alone.

Each command runs in its own process; its wall time and peak resident memory
(``ru_maxrss`` of that child, from ``os.wait4``) are reported:

* **ragguard calibrate** end to end: ``ragguard calibrate qrels.trec --run run.trec
  --score-kind similarity --no-report``: reading, checking, arrays, the sweep of the
  default grid (max_k 1..10 x relative threshold, plus the gap / autocut rules), the
  choice, the held-out bootstrap comparison and the config file;
* **pandas + pytrec_eval** for ONE setting: ``pandas.read_csv(sep=r"\\s+")`` of both
  files, conversion to ``{qid: {doc: score}}`` dicts, and pytrec_eval's ``ndcg_cut_10``
  over all queries (the least a user does to score one setting).

Goals (issue 15): calibrate no slower than the reference; peak memory under 1 GB per
100,000 x 100 candidates. Always exits 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REFERENCE = r"""
import sys
import pandas as pd
import pytrec_eval

qrels_path, run_path = sys.argv[1:3]
run_df = pd.read_csv(run_path, sep=r"\s+", header=None,
                     names=["qid", "q0", "doc", "rank", "score", "tag"],
                     usecols=["qid", "doc", "score"],
                     dtype={"qid": str, "doc": str, "score": float})
qrels_df = pd.read_csv(qrels_path, sep=r"\s+", header=None,
                       names=["qid", "it", "doc", "grade"], usecols=["qid", "doc", "grade"],
                       dtype={"qid": str, "doc": str, "grade": int})
run = {}
for q, d, s in zip(run_df["qid"].tolist(), run_df["doc"].tolist(), run_df["score"].tolist()):
    run.setdefault(q, {})[d] = s
qrels = {}
for q, d, g in zip(qrels_df["qid"].tolist(), qrels_df["doc"].tolist(),
                   qrels_df["grade"].tolist()):
    qrels.setdefault(q, {})[d] = g
del run_df, qrels_df
res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
vals = [v["ndcg_cut_10"] for v in res.values()]
print(f"ndcg@10 {sum(vals) / len(vals):.4f} over {len(vals)} queries")
"""


def _text(arr: object) -> memoryview:
    """The concatenated bytes of a pyarrow string array (its value buffer)."""
    buffers = arr.buffers()  # type: ignore[attr-defined]
    offsets = np.frombuffer(buffers[1], dtype=np.int32)
    start = arr.offset  # type: ignore[attr-defined]
    off = offsets[start : start + len(arr) + 1]  # type: ignore[arg-type]
    return memoryview(buffers[2])[int(off[0]) : int(off[-1])]


def write_files(folder: Path, n_queries: int, n_cands: int = 100, seed: int = 0) -> None:
    """Write ``run.trec`` and ``qrels.trec`` (see the module docstring), in chunks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def strings(values: np.ndarray, prefix: str = "") -> pa.Array:
        s = pc.cast(pa.array(values), pa.string())
        return pc.binary_join_element_wise(prefix, s, "") if prefix else s

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    step = 10_000
    with (folder / "run.trec").open("wb") as run, (folder / "qrels.trec").open("wb") as qrels:
        for start in range(0, n_queries, step):
            n = min(step, n_queries - start)
            qnum = np.arange(start, start + n)
            docs = rng.integers(0, 10_000_000, (n, n_cands))
            scores = np.round(-np.sort(-rng.random((n, n_cands)) * 20, axis=1), 4)
            rank = np.tile(np.arange(1, n_cands + 1), n)
            line = pc.binary_join_element_wise(
                strings(np.repeat(qnum, n_cands), "q"), "Q0", strings(docs.ravel(), "D"),
                strings(rank), strings(scores.ravel()), "bm25\n", " ",
            )  # fmt: skip
            run.write(_text(line))
            judged = np.argsort(rng.random((n, n_cands)), axis=1)[:, :3]
            lab_q = np.concatenate([np.repeat(qnum, 3), qnum])
            lab_d = np.concatenate(
                [
                    np.take_along_axis(docs, judged, axis=1).ravel(),
                    rng.integers(10_000_000, 20_000_000, n),
                ]
            )
            grade = np.concatenate([rng.integers(0, 4, 3 * n), rng.integers(1, 4, n)])
            order = np.argsort(lab_q, kind="stable")
            text = pc.binary_join_element_wise(
                strings(lab_q[order], "q"), "0", strings(lab_d[order], "D"),
                pc.binary_join_element_wise(strings(grade[order]), "\n", ""), " ",
            )  # fmt: skip
            qrels.write(_text(text))


def columns(path: Path, names: list[str], keep: list[str]) -> object:
    """The ``keep`` columns of a space-separated file, as strings (a pyarrow table)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    return pcsv.read_csv(
        path,
        read_options=pcsv.ReadOptions(column_names=names),
        parse_options=pcsv.ParseOptions(delimiter=" "),
        convert_options=pcsv.ConvertOptions(
            include_columns=keep, column_types=dict.fromkeys(keep, pa.string())
        ),
    )


def write_beir(folder: Path) -> Path:
    """The data of ``folder``'s TREC files as a BEIR folder ``folder/beir``:
    ``qrels/test.tsv`` (with a header), ``queries.jsonl`` (``{"_id": "q17", "text":
    "query 17"}``) and ``corpus.jsonl`` (one short passage per document of the run and
    qrels, ``{"_id": "D4821093", "title": "", "text": "passage 4821093"}``). The run
    stays ``run.trec`` (a BEIR folder's runs are TREC files)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    beir = folder / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    qrels: Any = columns(folder / "qrels.trec", ["q", "it", "d", "g"], ["q", "d", "g"])
    grade = pc.binary_join_element_wise(qrels.column("g"), "\n", "")
    lines = pc.binary_join_element_wise(qrels.column("q"), qrels.column("d"), grade, "\t")
    with (beir / "qrels" / "test.tsv").open("wb") as fh:
        fh.write(b"query-id\tcorpus-id\tscore\n")
        for chunk in lines.chunks:
            fh.write(_text(chunk))
    qids = pc.unique(qrels.column("q"))
    number = pc.utf8_slice_codeunits(qids, 1)
    with (beir / "queries.jsonl").open("wb") as fh:
        fh.write(_text(pc.binary_join_element_wise(
            '{"_id": "', qids, '", "text": "query ', number, '"}\n', ""
        )))  # fmt: skip
    run: Any = columns(folder / "run.trec", ["q", "z", "d", "r", "s", "t"], ["d"])
    run_docs = run.column("d")
    docs = pc.unique(pa.chunked_array(run_docs.chunks + qrels.column("d").chunks))
    number = pc.utf8_slice_codeunits(docs, 1)
    with (beir / "corpus.jsonl").open("wb") as fh:
        step = 1_000_000
        for lo in range(0, len(docs), step):
            part = pc.binary_join_element_wise(
                '{"_id": "', docs[lo : lo + step], '", "title": "", "text": "passage ',
                number[lo : lo + step], '"}\n', "",
            )  # fmt: skip
            fh.write(_text(part))
    return beir


def write_jsonl(folder: Path) -> Path:
    """The data of ``folder``'s TREC files as one ragguard JSONL eval set ``eval.jsonl``:
    per query ``{"query_id", "query", "relevant": [...], "not_relevant": [...],
    "candidates": [{"id", "score"}, ...]}``, the candidates in the run's order. JSONL
    lists carry no grade, so grades 2-3 read as 1 (graded ``{id: grade}`` objects are
    read by the careful reader, see benchmarks/README.md)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    run: Any = columns(folder / "run.trec", ["q", "z", "d", "r", "s", "t"], ["q", "d", "s"])
    qrels: Any = columns(folder / "qrels.trec", ["q", "it", "d", "g"], ["q", "d", "g"])
    enc = run.column("q").combine_chunks().dictionary_encode()
    qids, code = enc.dictionary, enc.indices.to_numpy()
    assert bool((np.diff(code) >= 0).all()), "run.trec lists each query's lines together"

    def grouped(rows: np.ndarray, strings: pa.Array, n: int) -> pa.Array:
        """Per query 0..n-1, its ``strings`` (ordered by query) joined with commas."""
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
        return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), strings), ", ")

    lab_code = pc.index_in(qrels.column("q"), value_set=qids).to_numpy()
    relevant = pc.not_equal(qrels.column("g"), "0").to_numpy(zero_copy_only=False)
    path = folder / "eval.jsonl"
    step = 10_000
    with path.open("wb") as fh:
        for lo in range(0, len(qids), step):
            hi = min(lo + step, len(qids))
            rows = slice(*np.searchsorted(code, [lo, hi]))
            cands = pc.binary_join_element_wise(
                '{"id": "', run.column("d")[rows], '", "score": ', run.column("s")[rows], "}", ""
            )  # fmt: skip
            parts = [grouped(code[rows] - lo, cands.combine_chunks(), hi - lo)]
            for wanted in (True, False):
                keep = np.flatnonzero((relevant == wanted) & (lab_code >= lo) & (lab_code < hi))
                keep = keep[np.argsort(lab_code[keep], kind="stable")]
                docs = pc.take(qrels.column("d"), pa.array(keep)).combine_chunks()
                quoted = pc.binary_join_element_wise('"', docs, '"', "")
                parts.append(grouped(lab_code[keep] - lo, quoted, hi - lo))
            batch = qids[lo:hi]
            lines = pc.binary_join_element_wise(
                '{"query_id": "', batch, '", "query": "query ', pc.utf8_slice_codeunits(batch, 1),
                '", "relevant": [', parts[1], '], "not_relevant": [', parts[2],
                '], "candidates": [', parts[0], "]}\n", "",
            )  # fmt: skip
            fh.write(_text(lines))
    return path


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(seconds, peak MB, last output line) of one command in its own process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    if proc.returncode != 0:
        return seconds, usage.ru_maxrss / 1024, "FAILED: " + " | ".join(lines[-5:])
    return seconds, usage.ru_maxrss / 1024, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="skip pandas + pytrec_eval (at 1,000,000 queries its dicts need ~30 GB)",
    )
    parser.add_argument(
        "--format",
        choices=["trec", "beir", "jsonl"],
        default="trec",
        help="labels as TREC qrels (default), or the same data as a BEIR folder, or as one "
        "ragguard JSONL file with the run's candidates in it",
    )
    args = parser.parse_args()
    n = 5_000 if args.quick else args.queries
    folder = args.folder or Path(f"/tmp/ragguard-scale-{n}")
    if not (folder / "run.trec").exists():
        t = time.perf_counter()
        write_files(folder, n)
        print(f"wrote {folder} in {time.perf_counter() - t:.1f} s")
    labels = folder / "qrels.trec"
    if args.format == "beir":
        labels = folder / "beir"
        if not (labels / "corpus.jsonl").exists():
            t = time.perf_counter()
            write_beir(folder)
            print(f"wrote {labels} in {time.perf_counter() - t:.1f} s")
        corpus_mb = (labels / "corpus.jsonl").stat().st_size / 1e6
        print(f"BEIR folder {labels}: corpus.jsonl {corpus_mb:,.0f} MB")
    if args.format == "jsonl":
        labels = folder / "eval.jsonl"
        if not labels.exists():
            t = time.perf_counter()
            write_jsonl(folder)
            print(f"wrote {labels} in {time.perf_counter() - t:.1f} s")
        print(f"JSONL eval set {labels}: {labels.stat().st_size / 1e6:,.0f} MB")
    run_mb = (folder / "run.trec").stat().st_size / 1e6
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}")
    print(f"{n:,} queries x 100 candidates; run.trec {run_mb:,.0f} MB\n")

    ragguard = [
        sys.executable, "-c", "from ragguard.cli import main; main()", "calibrate",
        str(labels), *([] if args.format == "jsonl" else ["--run", str(folder / "run.trec")]),
        "--score-kind", "similarity", "--no-report", "-o", str(folder / "ragguard.toml"),
    ]  # fmt: skip
    rows = [("ragguard calibrate (columnar)", ragguard, None)]
    reference = [sys.executable, "-c", REFERENCE, str(folder / "qrels.trec"),
                 str(folder / "run.trec")]  # fmt: skip
    if not args.no_reference:
        rows.append(("pandas + pytrec_eval, one setting", reference, None))
    results: dict[str, tuple[float, float]] = {}
    print(f"{'':38s} {'seconds':>8s} {'peak MB':>9s}")
    for name, cmd, env in rows:
        seconds, mb, last = measure(cmd, env)
        results[name] = (seconds, mb)
        print(f"{name:38s} {seconds:8.1f} {mb:9.0f}   {last[:90]}")
    ours = results["ragguard calibrate (columnar)"]
    per_100k = ours[1] / (n / 100_000)
    print()
    if not args.no_reference:
        ref = results["pandas + pytrec_eval, one setting"]
        print(
            f"{'PASS' if ours[0] <= ref[0] else 'FAIL'}  calibrate end to end "
            f"{ours[0]:.1f} s vs reference {ref[0]:.1f} s (ratio {ref[0] / ours[0]:.2f}x)"
        )
    print(
        f"{'PASS' if per_100k < 1024 else 'FAIL'}  peak memory {ours[1]:,.0f} MB "
        f"({per_100k:,.0f} MB per 100,000 x 100; goal < 1,024)"
    )


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("calibrate_scale"):
        main()
