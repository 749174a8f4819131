"""TREC files are read column-wise (pyarrow) into exactly what a line-by-line reader with
Python's ``str.split()`` reads (the reference in ``line_reader.py``, as trec_eval 9 and
pytrec_eval read them): the same labels, candidates, order, problems and errors, on
clean and messy files; and the arrays built column-wise equal those built from dicts."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.data import columns as columnar
from ragguard.calibration.data.columns import ColumnarCandidates, ColumnarLabels
from ragguard.calibration.data.formats import delimited, trec
from ragguard.calibration.data.formats.common import TREC_QRELS, TREC_RUN
from ragguard.errors import EvalSetError
from tests.calibration.data.line_reader import (
    assert_same,
    assert_same_arrays,
    both,
    careful,
    write,
)

pytest.importorskip("pyarrow")

QRELS = "q1 0 a 1\nq1 0 b 0\nq2 0 c 2\nq2 0 zz 3\nq3 0 d 1\n"
RUN = (
    "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4 x\nq1 Q0 e 3 0.4 x\n"
    "q2 Q0 c 1 0.7 x\nq2 Q0 a 2 0.1 x\nq9 Q0 a 1 0.5 x\n"
)


def test_clean_files_are_read_column_wise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qrels = write(tmp_path / "qrels.txt", QRELS)
    run = write(tmp_path / "run.trec", RUN)
    fast, _ = both(monkeypatch, qrels, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)
    assert isinstance(fast.runs["run"].candidates, ColumnarCandidates)
    # hand-checked: q9 has no labels; q3 has no candidates
    assert [p.kind.value for p in fast.report.problems] == [
        "run_query_without_labels",
        "labels_without_run",
    ]
    assert fast.report.problems[0].line == 6
    assert fast.arrays().doc_ids(0) == ["a", "b", "e"]


MESSY_QRELS = (
    "\ufeff# qrels with a comment\n"
    "q2\t0\tc\t2\n"
    "\n"
    "q1   0  a 1   \n"
    "   \n"
    "q1 0 b 0\r\n"  # (a negative grade goes to the careful reader: see below)
    "q2 0 c 2\n"  # repeated, same grade
    "q1 0 a 1\n"  # repeated
    "q3 0 d 1"  # no final newline
)
MESSY_RUN = (
    "# a run\n"
    "q1 Q0 a 1 0.9 x\n"
    "q2\tQ0\tc\t1\t0.7\tx\n"
    "\n"
    "q1  Q0  b  2  nan  x\n"
    "q1 Q0 e 3 0.4 x\r\n"
    "q1 Q0 a 4 0.3 x\n"  # repeated candidate
    "q2 Q0 a 2 inf x\n"
    "q2 Q0 f 3 -1e-3 x\n"
    "  q3 Q0 d 1 0.5 x  \n"
    "q1 Q0 g 5 0.9 x\n"  # q1 again after other queries: the run's order within q1
)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_messy_files_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    qrels = write(tmp_path / f"qrels.txt{suffix}", MESSY_QRELS)
    run = write(tmp_path / f"run.trec{suffix}", MESSY_RUN)
    fast, _ = both(monkeypatch, qrels, runs=run, format="trec")
    assert isinstance(fast.labels, ColumnarLabels)
    kinds = [(p.kind.value, p.line) for p in fast.report.problems]
    assert kinds == [
        ("duplicate_label", 7),
        ("duplicate_label", 8),
        ("invalid_score", 5),
        ("duplicate_candidate", 7),
        ("invalid_score", 8),
    ]
    assert list(fast.runs["run"].candidates["q1"]) == ["a", "b", "e", "g"]
    assert fast.labels["q1"].grades == {"a": 1, "b": 0}


def test_strict_raises_the_first_problem_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels = write(tmp_path / "qrels.txt", MESSY_QRELS)
    run = write(tmp_path / "run.trec", MESSY_RUN)
    with pytest.raises(EvalSetError) as fast:
        load_evalset(qrels, runs=run, format="trec", strict=True)
    with pytest.raises(EvalSetError) as slow:
        careful(monkeypatch, qrels, runs=run, format="trec", strict=True)
    assert str(fast.value) == str(slow.value)
    assert "qrels.txt:7:" in str(fast.value)


@pytest.mark.parametrize(
    ("qrels", "run", "where"),
    [
        (QRELS, "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4\n", "run.trec:2:"),
        (QRELS, "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 high x\n", "run.trec:2, field 'score'"),
        (QRELS + "q4 0 a x\n", RUN, "qrels.txt:6, field 'grade'"),
        (QRELS + "q4 0 a 7\n", RUN, "qrels.txt:6, field 'grade'"),
        (QRELS + "q1 0 a 2\n", RUN, "qrels.txt:6:"),
        ("q1 0 a 1\nq1 0 a\n", RUN, "qrels.txt:2:"),
    ],
)
def test_errors_name_file_line_and_field_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qrels: str, run: str, where: str
) -> None:
    q = write(tmp_path / "qrels.txt", qrels)
    r = write(tmp_path / "run.trec", run)
    with pytest.raises(EvalSetError) as fast:
        load_evalset(q, runs=r, format="trec")
    with pytest.raises(EvalSetError) as slow:
        careful(monkeypatch, q, runs=r, format="trec")
    assert str(fast.value) == str(slow.value)
    assert where in str(fast.value), str(fast.value)


def test_not_utf8_is_named_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = write(tmp_path / "qrels.txt", QRELS)
    r = tmp_path / "run.trec"
    r.write_bytes(b"q1 Q0 caf\xe9 1 0.9 x\n")
    with pytest.raises(EvalSetError) as fast:
        load_evalset(q, runs=r, format="trec")
    with pytest.raises(EvalSetError) as slow:
        careful(monkeypatch, q, runs=r, format="trec")
    assert str(fast.value) == str(slow.value)
    assert "not UTF-8" in str(fast.value)


@pytest.mark.parametrize(
    "line",
    [
        "q1 Q0 b 2 1_000 x",  # Python's float() reads underscores
        "q1 Q0 b 2 Infinity x",
        "q1 Q0 b 2 -NaN x",
        "q1 Q0 b 2 +.5 x",
        "q1 Q0 b 2 1E3 x",
        "q1 Q0 b\x1f2 0.5 x",  # whitespace for str.split(), not for the fast path
        "q1 Q0 b\u00a02 0.5 x",
        "q1 Q0 b\u20032 0.5 x",
        "q1\x0bQ0 b 2 0.5 x",
        "q1 Q0 caf\u00e9 2 0.5 x",
    ],
)
def test_odd_numbers_and_whitespace_read_as_python_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    q = write(tmp_path / "qrels.txt", QRELS)
    r = write(tmp_path / "run.trec", f"q1 Q0 a 1 0.9 x\n{line}\n")
    read_alike_or_fail_alike(monkeypatch, q, r)


def read_alike_or_fail_alike(monkeypatch: pytest.MonkeyPatch, qrels: Path, run: Path) -> None:
    """Both paths read the TREC files alike, or raise the same error."""
    try:
        slow = careful(monkeypatch, qrels, runs=run, format="trec")
    except EvalSetError as exc:
        with pytest.raises(EvalSetError) as info:
            load_evalset(qrels, runs=run, format="trec")
        assert str(info.value) == str(exc)
        return
    assert_same(load_evalset(qrels, runs=run, format="trec"), slow)


def test_grades_parse_as_python_int(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = write(tmp_path / "qrels.txt", "q1 0 a +1\nq1 0 b 03\nq1 0 c -0\n")
    r = write(tmp_path / "run.trec", "q1 Q0 a 1 0.9 x\n")
    fast, _ = both(monkeypatch, q, runs=r, format="trec")
    assert fast.labels["q1"].grades == {"a": 1, "b": 3, "c": 0}


def test_beir_corpus_checks_run_documents_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "beir"
    write(folder / "corpus.jsonl", '{"_id": "a"}\n{"_id": "b"}\n{"_id": "c"}\n')
    write(folder / "queries.jsonl", '{"_id": "q1", "text": "one"}\n{"_id": "q2", "text": "two"}\n')
    write(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tc\t2\n")
    run = write(tmp_path / "run.trec", "q1 Q0 a 1 0.9 x\nq1 Q0 zz 2 0.5 x\nq2 Q0 c 1 0.4 x\n")
    fast, _ = both(monkeypatch, folder, runs=run)
    assert [(p.kind.value, p.line) for p in fast.report.problems] == [("unknown_document", 2)]


def test_many_queries_with_ties_and_unsorted_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    qrels_lines, run_lines = [], []
    for q in range(60):
        docs = rng.choice(40, int(rng.integers(0, 25)), replace=False)
        for rank, d in enumerate(docs):
            score = float(rng.integers(0, 4)) / 2  # many ties
            run_lines.append(f"q{q} Q0 d{d} {rank + 1} {score} tag")
        for d in rng.choice(40, int(rng.integers(1, 6)), replace=False):
            qrels_lines.append(f"q{q} 0 d{d} {int(rng.integers(-1, 4))}")
    rng.shuffle(run_lines)  # queries interleaved
    q = write(tmp_path / "qrels.txt", "\n".join(qrels_lines) + "\n")
    r = write(tmp_path / "run.trec", "\n".join(run_lines) + "\n")
    for kind in ("similarity", "distance", "logit"):
        fast, _ = both(monkeypatch, q, runs=r, score_kind=kind)
        assert isinstance(fast.runs["run"].candidates, ColumnarCandidates)


def test_fingerprint_is_the_same_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragguard.calibration.fit.result import data_fingerprint

    q = write(tmp_path / "qrels.txt", MESSY_QRELS)
    r = write(tmp_path / "run.trec", MESSY_RUN)
    fast, slow = both(monkeypatch, q, runs=r, format="trec")
    assert data_fingerprint(fast) == data_fingerprint(slow)
    assert not math.isnan(fast.arrays().scores[0, 0])
    # known distractors (-1) in two queries, rows out of query order: the labels'
    # distractor part is hashed as the dicts' is; and it changes the fingerprint
    q = write(tmp_path / "dis.txt", "q2 0 zz -1\nq1 0 b -1\nq1 0 a 1\nq2 0 c 2\nq2 0 y -1\n")
    fast, slow = both(monkeypatch, q, runs=r, format="trec")
    assert isinstance(fast.labels, ColumnarLabels) and fast.labels.distractor is not None
    assert data_fingerprint(fast) == data_fingerprint(slow)
    plain = write(tmp_path / "plain.txt", "q2 0 zz 0\nq1 0 b 0\nq1 0 a 1\nq2 0 c 2\nq2 0 y 0\n")
    assert data_fingerprint(load_evalset(plain, runs=r)) != data_fingerprint(fast)


def test_the_guard_and_loading_import_no_pyarrow_until_a_file_is_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, ragguard, ragguard.calibration\n"
        "from ragguard import ContextGuard\n"
        "assert 'pyarrow' not in sys.modules, 'imported too early'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_distractor_grades_and_profile_grades_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-1 marks a known distractor: the fast path hands such a file to the careful reader,
    so both give the same distractors; a profile's grades shape the arrays alike."""
    qrels = write(tmp_path / "qrels", "q1 0 a 2\nq1 0 b -1\nq1 0 e 1\nq2 0 c 2\n")
    run = write(tmp_path / "run", RUN)
    fast, slow = load_evalset(qrels, runs=run), careful(monkeypatch, qrels, runs=run)
    assert fast.labels["q1"].distractors == slow.labels["q1"].distractors == {"b"}
    assert_same(fast, slow)
    plain = write(tmp_path / "plain", "q1 0 a 2\nq1 0 e 1\nq2 0 c 2\n")
    fast, slow = load_evalset(plain, runs=run), careful(monkeypatch, plain, runs=run)
    from ragguard.calibration import UtilityRules

    for rules in (None, UtilityRules(2, 1)):
        assert_same_arrays(fast.arrays("run", rules=rules), slow.arrays("run", rules=rules))
    # evidence: grade >= 2 leaves one relevant candidate in q1, grade >= 1 two
    assert fast.arrays("run", rules=UtilityRules(2, 1)).n_evidence.tolist()[0] == 1
    assert fast.arrays("run").n_evidence.tolist()[0] == 2


# --------------------------------------------------------------------------- typed reader


def _typed_taken(path: Path, kind: str) -> bool:
    return delimited._typed(path, TREC_RUN if kind == "run" else TREC_QRELS) is not None


@pytest.mark.parametrize(
    "text",
    [
        "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4 x\tx\n",  # a tab inside the tag: 7 fields in Python
        "q1 Q0 a 1 0.9 x\nq1 Q0 b\u00a02 0.4 x\n",  # a no-break space splits in Python
        "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4 x\u3000\n",  # an ideographic space, at the end
        "q1 Q0 a 1 0.9 x\n\nq1 Q0 b 2 0.4 x\n",  # a blank line
        "# made by bm25 k1 b\nq1 Q0 a 1 0.9 x\n",  # a comment of exactly six fields
        "q1 Q0 a 1 0.9 x \nq1 Q0 b 2 0.4 x\n",  # a trailing space
        "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4\n",  # five fields
        "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 1_000 x\n",  # a number only Python reads
        "# qid Q0 docno rank score tag\nq1 Q0 b 2 0.4 x\n",  # a header: no score, a comment
    ],
)
def test_lines_the_typed_reader_leaves_to_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """The space-delimited CSV reader takes only files whose lines are fields joined by
    single spaces; anything else is read by the line-wise split or the careful reader,
    and the result is what Python's str.split() reads."""
    run = write(tmp_path / "run.trec", text)
    q = write(tmp_path / "qrels.txt", "q1 0 a 1\nq1 0 b 2\n")
    assert not _typed_taken(run, "run")
    read_alike_or_fail_alike(monkeypatch, q, run)


def test_plain_files_with_a_bom_and_crlf_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = write(tmp_path / "qrels.txt", "\ufeffq1 0 a 1\r\nq1 0 b 2\r\n")
    run = write(tmp_path / "run.trec", "\ufeffq1 Q0 a 1 0.9 x\r\nq1 Q0 b 2 0.4 x\r\n")
    assert _typed_taken(run, "run") and _typed_taken(q, "qrels")
    fast, _ = both(monkeypatch, q, runs=run, format="trec")
    assert fast.qids == ("q1",)
    assert fast.labels["q1"].grades == {"a": 1, "b": 2}


def _ids() -> list[str]:
    # lengths around the 8- and 16-byte words the keys read, ids alike but in the middle,
    # prefixes of one another, and non-ASCII ids (multi-byte UTF-8)
    base = ["", "a", "ab", "abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklmnop"]
    long = [f"doc-{'x' * 10}{i}{'y' * 10}-end" for i in range(4)]  # same first/last bytes
    return [*(b or "z" for b in base), *long, "é", "éé", "日本語の文書", "abcdefgh\u00e9"]


@pytest.mark.parametrize("collide", [False, True])
def test_repeated_candidates_are_found_by_their_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collide: bool
) -> None:
    """Repeats within a query are found exactly, whatever the ids' keys: with every key
    forced equal (``collide``), only the text decides, and the result is the careful
    reader's."""
    if collide:
        monkeypatch.setattr(trec, "_chunk_keys", lambda arr: np.zeros(len(arr), dtype=np.uint64))
    ids = _ids()
    lines, labels = [], []
    for qn in range(6):
        for rank, d in enumerate(ids):
            lines.append(f"q{qn} Q0 {d} {rank + 1} {0.5 + 0.01 * rank} t")
        lines.append(f"q{qn} Q0 {ids[qn + 7]} 99 0.1 t")  # a repeat, long ids included
        labels.append(f"q{qn} 0 {ids[qn]} {qn % 3 + 1}")
        labels.append(f"q{qn} 0 {ids[-qn - 1]} 1")
    q = write(tmp_path / "qrels.txt", "\n".join(labels) + "\n")
    for order in ("grouped", "interleaved"):
        if order == "interleaved":
            lines = lines[1::2] + lines[::2]
        run = write(tmp_path / f"run-{order}.trec", "\n".join(lines) + "\n")
        assert _typed_taken(run, "run")
        fast, _ = both(monkeypatch, q, runs=run, format="trec")
        repeats = [p for p in fast.report.problems if p.kind.value == "duplicate_candidate"]
        assert len(repeats) == 6


def test_keys_of_equal_ids_are_equal_and_of_short_ones_distinct() -> None:
    pa = pytest.importorskip("pyarrow")
    ids = _ids()
    column = pa.chunked_array([pa.array(ids[:5]), pa.array(ids[5:] + ids)])
    keys = trec.doc_keys(column)
    n = len(ids)
    assert keys[:n].tolist() == keys[n:].tolist()  # equal ids, equal keys, across chunks
    short = [i for i, d in enumerate(ids) if len(d.encode()) <= 16]
    assert len({int(keys[i]) for i in short}) == len(short)  # up to 16 bytes: all distinct
    sliced = trec.doc_keys(pa.array(ids).slice(3))
    assert sliced.tolist() == keys[3:n].tolist()  # an array's offset is honoured


def test_rankings_take_one_byte_a_cell_when_rows_are_short(tmp_path: Path) -> None:
    q = write(tmp_path / "qrels.txt", "q1 0 d3 1\n")
    for n, dtype in ((100, np.int8), (300, np.int16)):
        lines = [f"q1 Q0 d{i} {i + 1} {1.0 / (i + 1)} t" for i in range(n)]
        run = write(tmp_path / f"run{n}.trec", "\n".join(lines) + "\n")
        arrays = load_evalset(q, runs=run, format="trec").arrays()
        assert arrays.order.dtype == dtype
        assert arrays.order[0].tolist() == list(range(n))  # already in score order
        assert arrays.doc_ids(0)[:3] == ["d0", "d1", "d2"]


def test_line_steps_after_rows_are_taken_out() -> None:
    """Lines kept as steps give every row's line, also after repeated rows are removed,
    as the per-row numbers would (random files with blank lines, random removals)."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        line = np.cumsum(rng.integers(1, 4, n)).astype(np.int64)  # gaps: blank lines
        steps = columnar.Lines.of_steps(line if trial % 3 else None)
        every = steps.of(np.arange(n))
        assert every.tolist() == (line if trial % 3 else np.arange(1, n + 1)).tolist()
        removed = np.sort(rng.choice(n, int(rng.integers(0, n)), replace=False))
        left = np.setdiff1d(np.arange(n), removed)
        assert steps.without(removed).of(np.arange(left.size)).tolist() == every[left].tolist()


def test_raw_scores_of_uneven_rows_and_of_row_slices(tmp_path: Path) -> None:
    """Rows of different lengths keep their raw scores flat; read whole or by row slice
    they are the padded, ranked raw scores (hand-checked)."""
    q = write(tmp_path / "qrels.txt", "q1 0 a 1\nq2 0 c 1\nq3 0 f 1\n")
    run = write(
        tmp_path / "run.trec",
        "q1 Q0 a 1 0.2 t\nq1 Q0 b 2 0.9 t\nq2 Q0 c 1 0.5 t\nq3 Q0 d 1 0.1 t\n"
        "q3 Q0 e 2 0.3 t\nq3 Q0 f 3 nan t\n",
    )
    arrays = load_evalset(q, runs=run, format="trec").arrays()
    nan = math.nan
    expected = [[0.9, 0.2, nan], [0.5, nan, nan], [0.3, 0.1, nan]]
    np.testing.assert_array_equal(arrays.raw, expected)
    np.testing.assert_array_equal(arrays.row_slice(1, 3).raw, expected[1:])
    assert arrays.row_slice(2, 3).doc_ids(0) == ["e", "d", "f"]


def test_taking_rows_across_chunks_keeps_their_order() -> None:
    pa = pytest.importorskip("pyarrow")
    words = [f"w{i}" for i in range(23)]
    column = pa.chunked_array([pa.array(words[:5]), pa.array(words[5:6]), pa.array(words[6:])])
    rng = np.random.default_rng(1)
    for size in (0, 1, 4, 30):
        rows = rng.integers(0, len(words), size)
        assert columnar.take(column, rows).to_pylist() == [words[r] for r in rows.tolist()]
    assert columnar.take(column, np.arange(6, 9)).to_pylist() == words[6:9]  # one chunk


def test_rankings_computed_in_small_chunks_equal_the_careful_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The column-wise arrays rank a few rows at a time; with chunks of one or two rows,
    scores, order and the score issues (counted per row, summed over chunks) are those
    of the careful reader's arrays."""
    import ragguard.calibration.data.arrays as arrays_module

    rng = np.random.default_rng(5)
    run_lines, qrels_lines = [], []
    for q in range(9):
        n = int(rng.integers(1, 7))
        scores = rng.normal(size=n) * 2  # some below -1: negative similarities
        if q % 3 == 0:
            scores = np.sort(scores)  # ascending: an issue for similarities
        for rank, s in enumerate(scores):
            run_lines.append(f"q{q} Q0 d{rank} {rank + 1} {s:.3f} t")
        qrels_lines.append(f"q{q} 0 d{int(rng.integers(0, n))} 1")
    q = write(tmp_path / "qrels.txt", "\n".join(qrels_lines) + "\n")
    r = write(tmp_path / "run.trec", "\n".join(run_lines) + "\n")
    monkeypatch.setattr(arrays_module, "_CHUNK_CELLS", 7)
    for kind in ("similarity", "distance"):
        fast, _ = both(monkeypatch, q, runs=r, score_kind=kind)
        assert isinstance(fast.runs["run"].candidates, ColumnarCandidates)
        assert dict(fast.arrays().score_issues)  # the data do raise issues


# --------------------------------------------------------------------------- '#'

HASH_QRELS = "#7 0 docA 1\n#7 0 docB 0\nq1 0 docA 1\n"
HASH_RUN = "#7 Q0 docA 1 0.9 r\n#7 Q0 docB 2 0.5 r\nq1 Q0 docA 1 0.9 r\n"


@pytest.mark.parametrize(
    ("qrels", "run"),
    [
        (HASH_QRELS, HASH_RUN),  # single spaces: the typed reader's shape
        (HASH_QRELS.replace(" ", "\t"), HASH_RUN.replace(" ", "  ")),  # the line-wise split
        (  # comments that cannot be records (too few fields, no number) around them
            "# qid iter docno rel\n#\n" + HASH_QRELS + "#7 0 docC\n",
            "# run bm25 k1=0.9 b=0.4\n" + HASH_RUN + "#\tQ0 docC 3 high r\n",
        ),
    ],
)
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_query_ids_starting_with_hash_are_data_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qrels: str, run: str, suffix: str
) -> None:
    """CR-47: a line starting with '#' is a comment only when it cannot be a record (not
    the file's number of fields, or no number where the grade or score goes): query
    '#7' is read on every path, as pytrec_eval (trec_eval 9) reads it."""
    q = write(tmp_path / f"qrels.txt{suffix}", qrels)
    r = write(tmp_path / f"run.trec{suffix}", run)
    if (qrels, run, suffix) == (HASH_QRELS, HASH_RUN, ""):  # records of typed fields
        assert _typed_taken(q, "qrels") and _typed_taken(r, "run")
    fast, _ = both(monkeypatch, q, runs=r)
    assert fast.qids == ("#7", "q1")
    assert fast.labels["#7"].grades == {"docA": 1, "docB": 0}
    assert dict(fast.runs["run"].candidates["#7"]) == {"docA": 0.9, "docB": 0.5}
    assert not fast.report.problems
    assert fast.arrays().doc_ids(0) == ["docA", "docB"]


# --------------------------------------------------------------------------- one reader


def test_negative_grades_are_read_column_wise(tmp_path: Path) -> None:
    """-1 marks a known distractor and -2 is judged not relevant: no second reader; the
    arrays flag the distractor where it was retrieved (hand-checked)."""
    q = write(tmp_path / "qrels.txt", "q1 0 a 2\nq1 0 b -1\nq1 0 c -2\nq2 0 c 1\n")
    r = write(tmp_path / "run.trec", "q1 Q0 b 1 0.9 x\nq1 Q0 a 2 0.5 x\nq2 Q0 c 1 0.7 x\n")
    es = load_evalset(q, runs=r)
    assert isinstance(es.labels, ColumnarLabels)
    assert es.labels["q1"].grades == {"a": 2, "b": 0, "c": 0}
    assert es.labels["q1"].distractors == {"b"}
    assert es.unanswerable == ()
    a = es.arrays()
    assert a.distractor.tolist() == [[True, False], [False, False]]
    assert a.grades.tolist() == [[0.0, 2.0], [1.0, 0.0]]


def test_text_that_is_not_utf8_is_named_by_its_line(tmp_path: Path) -> None:
    q = tmp_path / "qrels.txt"
    q.write_bytes(b"q1 0 a 1\nq1 0 b 0\nq2 0 caf\xe9 1\n")
    with pytest.raises(EvalSetError) as info:
        load_evalset(q, format="trec")
    assert "qrels.txt:3: not UTF-8 text (invalid continuation byte)" in str(info.value)
    gz = tmp_path / "qrels.txt.gz"
    gz.write_bytes(gzip.compress(b"q1 0 a 1\n\xff\n"))
    with pytest.raises(EvalSetError, match=r"qrels.txt.gz:2: not UTF-8"):
        load_evalset(gz, format="trec")


def test_a_truncated_gzip_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    gz = tmp_path / "qrels.txt.gz"
    gz.write_bytes(gzip.compress(("q1 0 a 1\n" * 5000).encode())[:-30])
    with pytest.raises(EvalSetError, match=r"qrels.txt.gz: cannot read"):
        load_evalset(gz, format="trec")


def test_strict_reports_a_repeat_before_a_later_contradiction(tmp_path: Path) -> None:
    """Line by line, the repeated label on line 2 comes before the contradiction on line
    4: strict loading raises the first, as a line reader would; without strict the
    contradiction is the error."""
    q = write(tmp_path / "qrels.txt", "q1 0 a 1\nq1 0 a 1\nq1 0 b 0\nq1 0 b 2\n")
    with pytest.raises(EvalSetError, match=r"qrels.txt:2: .*labelled twice"):
        load_evalset(q, format="trec", strict=True)
    with pytest.raises(EvalSetError, match=r"qrels.txt:4: .*grade 2 contradicts 0"):
        load_evalset(q, format="trec")


def test_a_line_delimiter_in_the_text_is_read_as_whitespace(tmp_path: Path) -> None:
    """Lines are streamed as one column split on a control character; a file holding it
    is streamed with another, and the character is whitespace, as for str.split()."""
    q = write(tmp_path / "qrels.txt", "q1 0 a\x1f1\nq1\x1e0 b 0\nq2 0 c\x1d\x1c1\n")
    es = load_evalset(q, format="trec")
    assert {k: dict(v.grades) for k, v in es.labels.items()} == {
        "q1": {"a": 1, "b": 0},
        "q2": {"c": 1},
    }


def test_without_pyarrow_loading_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from ragguard.errors import MissingDependencyError

    q = write(tmp_path / "qrels.txt", QRELS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingDependencyError, match=r"ragguard-context\[calibrate\]"):
        load_evalset(q, format="trec")
