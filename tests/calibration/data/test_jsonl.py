"""BEIR folders and ragguard JSONL eval sets read column-wise (pyarrow) give exactly what
a line-by-line reader gives: the same queries, texts, labels, candidates, problems and
errors, on clean and messy data.

A BEIR folder has one reader (:func:`ragguard.calibration.data.formats.beir.read_beir`):
it is compared with the line-by-line reference of ``tests/calibration/data/line_reader.py``,
and its errors name file, line and field. A JSONL file the column-wise reader does not
read goes to the library's careful reader, and still reads alike."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard.calibration import Check, EvalSet, Split, Stages, calibrate, load_evalset
from ragguard.calibration.data.columns import ColumnarCandidates, ColumnarLabels
from ragguard.calibration.data.formats import beir as columnar_json
from ragguard.calibration.data.problems import Reporter
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.errors import EvalSetError
from tests.calibration.data.line_reader import assert_same, assert_same_arrays, both, careful, write

pytest.importorskip("pyarrow")

CORPUS = (
    '{"_id": "a", "title": "", "text": "alpha"}\n'
    '{"_id": "b", "title": "B", "text": "beta", "metadata": {"url": "x"}}\n'
    '{"_id": "c", "text": "gamma"}\n'
    '{"_id": "d", "text": "delta"}\n'
)
QUERIES = (
    '{"_id": "q1", "text": "one"}\n{"_id": "q2", "text": "two"}\n{"_id": "q3", "text": null}\n'
)
QRELS = "query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t0\nq2\tc\t2\nq3\td\t1\n"
RUN = "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4 x\nq2 Q0 c 1 0.7 x\nq2 Q0 zz 2 0.1 x\n"


def beir(
    root: Path,
    qrels: str = QRELS,
    *,
    corpus: str | None = CORPUS,
    queries: str | None = QUERIES,
    distractors: str | None = None,
    splits: tuple[str, ...] = ("test",),
) -> Path:
    folder = root / "beir"
    if corpus is not None:
        write(folder / "corpus.jsonl", corpus)
    if queries is not None:
        write(folder / "queries.jsonl", queries)
    for split in splits:
        write(folder / "qrels" / f"{split}.tsv", qrels)
    if distractors is not None:
        write(folder / "distractors.tsv", distractors)
    return folder


def same_error(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> str:
    """The error the reader raises; the references of TREC and BEIR files raise the same
    (the JSONL reference reads valid files only)."""
    with pytest.raises(EvalSetError) as fast:
        load_evalset(*args, **kw)
    if not str(args[0]).endswith((".jsonl", ".jsonl.gz")):
        with pytest.raises(EvalSetError) as slow:
            careful(monkeypatch, *args, **kw)
        assert str(fast.value) == str(slow.value)
    return str(fast.value)


def alike_or_same_error(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> None:
    """The reader reads the data as the reference does, or raises as it does (TREC and
    BEIR: their references judge bad input too)."""
    try:
        fast = load_evalset(*args, **kw)
    except EvalSetError:
        same_error(monkeypatch, *args, **kw)
        return
    assert_same(fast, careful(monkeypatch, *args, **kw))


# --------------------------------------------------------------------------- BEIR


def test_a_clean_beir_folder_is_read_column_wise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = beir(tmp_path)
    run = write(tmp_path / "run.trec", RUN)
    fast, _ = both(monkeypatch, folder, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)
    assert isinstance(fast.runs["run"].candidates, ColumnarCandidates)
    # hand-checked: texts from queries.jsonl (q3's is null), grades from the qrels
    assert [(q.id, q.text) for q in fast.queries.values()] == [
        ("q1", "one"),
        ("q2", "two"),
        ("q3", None),
    ]
    assert fast.labels["q2"].grades == {"c": 2}
    # zz is not in corpus.jsonl (line 4 of the run); q3 has no candidates
    assert [(p.kind.value, p.line) for p in fast.report.problems] == [
        ("unknown_document", 4),
        ("labels_without_run", 5),
    ]
    assert data_fingerprint(fast) == data_fingerprint(careful(monkeypatch, folder, runs=run))


@pytest.mark.parametrize(
    "qrels",
    [
        "query_id corpus_id score\nq1 a 1\nq2 c 2\n",  # header with spaces
        "QID\tdocid\trel\r\nq1\ta\t1\r\nq2\tc\t2\r\n",  # CRLF, another header
        "\ufeffquery-id\tcorpus-id\tscore\nq1\ta\t1\n",  # byte order mark
        "q1\ta\t1\nq2\tc\t2",  # no header, no final newline
        "# judged by hand\n\nq1\ta\t1\n   \nq2 c 2\n\n",  # comment, blank lines, spaces
        "query-id\tcorpus-id\tscore\nq1\t a \t1\nq2\tc d\t2\n",  # spaces around, inside
        "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tc\t2\nq1\ta\t1\nq1\tzz\t0\nq1\tzz\t0\n",
        "query-id\tcorpus-id\tscore\nq9\ta\t1\nq1\ta\t1\nq9\tb\t0\n",  # q9 has no text
        "query-id\tcorpus-id\tscore\nq1\ta\t+1\nq2\tc\t03\n",  # numbers Python reads
        "query-id\tcorpus-id\tscore\nq1\ta\t1.0\n",  # not an integer: an error
        "query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t-1\nq2\tc\t-2\n",  # distractor, junk
        "query-id\tcorpus-id\tscore\nq1\ta\u00a0x\t1\n",  # whitespace only Python splits on
        "query-id\tcorpus-id\n",  # only a header: no labels
        "",  # an empty file: no labels
    ],
)
def test_messy_beir_qrels_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qrels: str
) -> None:
    folder = beir(tmp_path, qrels)
    run = write(tmp_path / "run.trec", RUN)
    alike_or_same_error(monkeypatch, folder, runs=run)


def test_duplicates_and_unknown_ids_are_reported_alike_in_line_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels = (
        "query-id\tcorpus-id\tscore\n"
        "q1\ta\t1\n"
        "q9\tzz\t1\n"  # 3: zz unknown, then q9 unknown
        "\n"
        "q1\ta\t1\n"  # 5: repeated
        "q9\tzz\t1\n"  # 6: zz unknown again, then repeated (q9 is known by now)
        "q2\tc\t2\n"
    )
    folder = beir(tmp_path, qrels)
    run = write(tmp_path / "run.trec", RUN)
    fast, _ = both(monkeypatch, folder, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)
    assert [(p.kind.value, p.line) for p in fast.report.problems][:5] == [
        ("unknown_document", 3),
        ("unknown_query", 3),
        ("duplicate_label", 5),
        ("unknown_document", 6),
        ("duplicate_label", 6),
    ]
    message = same_error(monkeypatch, folder, runs=run, strict=True)
    assert "test.tsv:3:" in message


@pytest.mark.parametrize(
    ("corpus", "queries"),
    [
        ('\n{"_id": "a"}\r\n\n{"_id": "b", "x": NaN}\n{"_id": "c"}', QUERIES),  # blank, CRLF
        ('{"_id": "a", "text": "Inf, -NaN: Infinity"}\n{"_id": "b"}\n', QUERIES),  # in text
        ('{"_id": "a"}\n{"_id": 7}\n', QUERIES),  # a number as id: Python reads "7"
        ('{"_id": "a", "_id": "b"}\n', QUERIES),  # repeated key: Python keeps the last
        ("", QUERIES),  # an empty corpus
        (CORPUS, '{"_id": "q1", "text": "old"}\n{"_id": "q1", "text": "new"}\n'),
        (CORPUS, '{"_id": "q1"}\n{"_id": "q2", "text": "two", "metadata": {"k": [1]}}\n'),
        ('{"_id": "a", "title": 5, "text": "x"}\n{"_id": "b", "text": null}\n', QUERIES),
        ('{"_id": "a", "title": "A", "text": ""}\n{"_id": "a", "text": "again"}\n', QUERIES),
        (None, None),  # no corpus.jsonl, no queries.jsonl
    ],
)
def test_corpus_and_queries_files_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: str | None, queries: str | None
) -> None:
    folder = beir(tmp_path, corpus=corpus, queries=queries)
    run = write(tmp_path / "run.trec", RUN)
    alike_or_same_error(monkeypatch, folder, runs=run)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\ta\tx\n", "test.tsv:2, field 'score'"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\ta\t7\n", "test.tsv:2, field 'score'"),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\ta\n", "test.tsv:2:"),
        ("qrels/test.tsv", "q1\ta\t1\nq1\ta\t2\n", "test.tsv:2:"),  # contradictory grades
        ("qrels/test.tsv", "\nquery-id\tcorpus-id\tscore\n", "test.tsv:2, field 'score'"),
        ("corpus.jsonl", '{"_id": "a"}\n{"_id": "b"\n', "corpus.jsonl:2: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a"} {"_id": "b"}\n', "corpus.jsonl:1: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a",\n "text": "x"}\n', "corpus.jsonl:1: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a",\r"text": "x"}\n', "corpus.jsonl:1: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a", "x": Inf}\n', "corpus.jsonl:1: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a", "x": -NaN}\n', "corpus.jsonl:1: malformed JSON"),
        ("corpus.jsonl", '{"_id": "a"}\n[1]\n', "corpus.jsonl:2:"),
        ("corpus.jsonl", '{"text": "no id"}\n', "corpus.jsonl:1, field '_id'"),
        ("corpus.jsonl", '{"_id": ""}\n', "corpus.jsonl:1, field '_id'"),
        ("corpus.jsonl", '{"_id": true}\n', "corpus.jsonl:1, field '_id'"),
        ("queries.jsonl", '{"_id": "q1", "text": 3}\n', "queries.jsonl:1, field 'text'"),
        ("corpus.jsonl", '{"_id": "a"}\n{"_id": "b", "text": 5}\n', "corpus.jsonl:2, field 'text'"),
        ("corpus.jsonl", '{"_id": "a", "text": ["x"]}\n', "corpus.jsonl:1, field 'text'"),
        ("distractors.tsv", "query-id\tcorpus-id\nq1\ta\tb\n", "distractors.tsv:2: a dis"),
        ("distractors.tsv", "q1\ta\nq2\n", "distractors.tsv:2: a distractors line has 2"),
    ],
)
def test_beir_errors_name_file_line_and_field_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str, where: str
) -> None:
    folder = beir(tmp_path)
    write(folder / name, text)
    message = same_error(monkeypatch, folder)
    assert where in message, message


def test_text_that_is_not_utf8_is_named_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = beir(tmp_path)
    (folder / "corpus.jsonl").write_bytes(b'{"_id": "a", "text": "caf\xe9"}\n')
    message = same_error(monkeypatch, folder)
    assert "not UTF-8" in message


def test_distractors_file_and_grades_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qrels = "query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t-1\nq2\tc\t2\n"
    folder = beir(tmp_path, qrels, distractors="query-id\tcorpus-id\nq2\td\nq7\ta\n")
    run = write(tmp_path / "run.trec", RUN)
    fast, _ = both(monkeypatch, folder, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)  # the one reader, not a fallback
    # hand-checked: b is a distractor by grade, d by the file; q7 has no labels
    assert fast.labels["q1"].distractors == {"b"}
    assert fast.labels["q2"].distractors == {"d"}
    assert fast.labels["q2"].grades == {"c": 2, "d": 0}
    assert ("unknown_query", 3) in [(p.kind.value, p.line) for p in fast.report.problems]


@pytest.mark.parametrize(
    "distractors",
    ["", "query-id\tcorpus-id\n", "# none yet\n\n", "q7\ta\r\nq1\tc\r\nq2\tc\r\n", "q1 c\n"],
)
def test_distractors_files_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, distractors: str
) -> None:
    folder = beir(tmp_path, distractors=distractors)
    fast, _ = both(monkeypatch, folder, runs=write(tmp_path / "run.trec", RUN))
    assert isinstance(fast.labels, ColumnarLabels)


def test_a_distractors_file_is_read_column_wise_into_the_labels_and_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``distractors.tsv`` (odd header, comment, blank line, spaces, a repeat, an
    unknown query) flags the labels column-wise; the labels, the arrays' ``distractor``
    flags and the fingerprint are those of the same data given as dicts."""
    qrels = "query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t-1\nq2\tc\t2\nq3\td\t0\nq1\te\t0\n"
    distractors = (
        "QID\tdocid\n"
        "q2\td\n"  # not labelled for q2: judged, grade 0
        "# by hand\n\n"
        "q1  e\n"  # labelled 0: flagged
        "q7\ta\n"  # q7 has no labels in this split: reported
        "q2\td\n"  # a repeat: once
        " q3 \t d \n"  # labelled 0: flagged
        "q1\tzz\n"  # not in the corpus: a label anyway, as in the qrels
    )
    folder = beir(tmp_path, qrels, distractors=distractors)
    run = write(tmp_path / "run.trec", RUN + "q3 Q0 d 1 0.3 x\nq1 Q0 zz 3 0.2 x\n")
    fast, _ = both(monkeypatch, folder, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)
    assert fast.labels.distractor is not None
    expected = {
        "q1": ({"a": 1, "b": 0, "e": 0, "zz": 0}, {"b", "e", "zz"}),
        "q2": ({"c": 2, "d": 0}, {"d"}),
        "q3": ({"d": 0}, {"d"}),
    }
    assert {q: (dict(lab.grades), set(lab.distractors)) for q, lab in fast.labels.items()} == (
        expected
    )
    problems = [(p.kind.value, p.path, p.line) for p in fast.report.problems]
    assert ("unknown_query", str(folder / "distractors.tsv"), 6) in problems
    dicts = EvalSet.from_dicts(
        {q: {d: max(g, 0) for d, g in grades.items()} for q, (grades, _) in expected.items()},
        {"run": fast.run_dict("run")},
        distractors={q: sorted(dis) for q, (_, dis) in expected.items()},
    )
    a, b = fast.arrays("run"), dicts.arrays("run")
    np.testing.assert_array_equal(a.distractor, b.distractor)
    np.testing.assert_array_equal(a.utility, b.utility)
    # hand-checked: q1's candidates a (0.9), b (0.4), zz (0.2): b and zz known distractors
    assert a.distractor[0, :3].tolist() == [False, True, True]
    assert data_fingerprint(fast) == data_fingerprint(dicts)
    assert data_fingerprint(fast) != data_fingerprint(load_evalset(beir(tmp_path / "x", qrels),
                                                                   runs=run))  # fmt: skip
    # a relevant document listed as a distractor stays relevant and is flagged
    # (EvalSet.from_dicts refuses such labels)
    folder = beir(tmp_path / "graded", qrels, distractors="q1\ta\n")
    fast, _ = both(monkeypatch, folder, runs=run)
    assert (fast.labels["q1"].grades["a"], fast.labels["q1"].distractors) == (1, {"a", "b"})


def test_ids_that_are_integers_are_read_as_their_decimal_text(tmp_path: Path) -> None:
    corpus = '{"_id": 7, "text": "seven"}\n{"_id": "a", "text": "alpha"}\n'
    queries = '{"_id": 12, "text": "twelve"}\n'
    folder = beir(tmp_path, "query-id\tcorpus-id\tscore\n12\t7\t1\n12\ta\t0\n",
                  corpus=corpus, queries=queries)  # fmt: skip
    es = load_evalset(folder, strict=True)  # no unknown document or query
    assert isinstance(es.labels, ColumnarLabels)
    assert es.queries["12"].text == "twelve"
    assert es.labels["12"].grades == {"7": 1, "a": 0}
    assert (es.texts.get("12", "7"), es.texts.get("12", "a")) == ("seven", "alpha")


def test_a_lone_surrogate_escape_is_read_as_a_replacement_character(tmp_path: Path) -> None:
    """Python's json reads ``\\ud800`` as a lone surrogate, which no UTF-8 text (nor an
    Arrow string) can hold: the one reader keeps U+FFFD in its place."""
    corpus = '{"_id": "a", "title": "T\\udc00", "text": "x\\ud800y"}\n{"_id": "b"}\n'
    es = load_evalset(beir(tmp_path, corpus=corpus))
    assert es.texts.get("q1", "a") == "T\ufffd\nx\ufffdy"
    assert es.texts.title("q1", "a") == "T\ufffd"
    # a real pair of surrogate escapes is one character, read by pyarrow as by Python
    corpus = '{"_id": "a", "text": "\\ud83d\\ude00"}\n'
    assert load_evalset(beir(tmp_path / "pair", corpus=corpus)).texts.get("q1", "a") == "\U0001f600"


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ('{"_id": "x"', "corpus.jsonl:{n}: malformed JSON: Expecting ',' delimiter"),
        ('{"_id": "x", "text": 5}', "corpus.jsonl:{n}, field 'text'"),
        ('{"text": "no id"}', "corpus.jsonl:{n}, field '_id': missing id"),
        ('{"_id": 1.5}', "corpus.jsonl:{n}, field '_id': an id must be a string, got float 1.5"),
        ('"x"', "corpus.jsonl:{n}: each line must be a JSON object"),
    ],
)
def test_a_bad_corpus_line_in_a_later_block_is_named_by_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, where: str
) -> None:
    """Blocks of a few lines: the first is read column-wise, a later one holding the bad
    line is walked line by line and names it (blank lines and a lone ``\\r`` line end
    counted before it, as Python counts lines)."""
    monkeypatch.setattr(columnar_json, "_BLOCK", 64)
    lines = [f'{{"_id": "d{i}", "text": "passage {i}"}}' for i in range(12)]
    lines[3] += '\r{"_id": "cr"}'  # one more line in Python's count
    lines[5] = ""
    corpus = "\n".join([*lines, bad, *lines[:2]]) + "\n"
    folder = beir(tmp_path, corpus=corpus)
    with pytest.raises(EvalSetError) as err:
        load_evalset(folder)
    assert where.format(n=14) in str(err.value), str(err.value)
    message = same_error(monkeypatch, folder)
    assert where.format(n=14) in message


def test_good_blocks_after_a_diagnosed_one_keep_their_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block walked line by line (an integer id) gives Python's values; the blocks after
    it are read column-wise with the lines counted on, so a qrels problem and the corpus
    read alike."""
    monkeypatch.setattr(columnar_json, "_BLOCK", 64)
    corpus = "".join(f'{{"_id": {i}, "text": "t{i}"}}\n' if i == 2 else
                     f'{{"_id": "d{i}", "text": "t{i}"}}\n' for i in range(10))  # fmt: skip
    qrels = "query-id\tcorpus-id\tscore\nq1\t2\t1\nq1\td9\t1\nq2\td2\t1\n"
    folder = beir(tmp_path, qrels, corpus=corpus)
    fast, _ = both(monkeypatch, folder)
    assert fast.texts.get("q1", "2") == "t2" and fast.texts.get("q1", "d9") == "t9"
    assert [(p.kind.value, p.line) for p in fast.report.problems] == [("unknown_document", 4)]


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [
        ("corpus.jsonl", b'{"_id": "a"}\n\n{"_id": "b", "text": "caf\xe9"}\n', 3),
        ("queries.jsonl", b'{"_id": "q1"}\n{"_id": "q2", "text": "\xff"}\n', 2),
        ("qrels/test.tsv", b"query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\xe9\t1\n", 3),
        ("distractors.tsv", b"q1\ta\nq1\t\xc3\n", 2),
    ],
)
def test_text_that_is_not_utf8_is_named_by_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, content: bytes, line: int
) -> None:
    folder = beir(tmp_path)
    (folder / name).write_bytes(content)
    message = same_error(monkeypatch, folder)
    assert f"{Path(name).name}:{line}: not UTF-8 text" in message, message


def test_without_texts_no_passage_text_is_kept_and_a_consumer_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = beir(tmp_path)
    run = write(tmp_path / "run.trec", RUN)
    read = columnar_json.read_beir(folder, Reporter(False), None, texts=False)
    assert read.texts.by_doc == {} and read.corpus is not None and "zz" not in read.corpus
    es = load_evalset(folder, runs=run, texts=False)
    full = load_evalset(folder, runs=run)
    assert dict(es.labels) == dict(full.labels) and dict(es.queries) == dict(full.queries)
    assert es.report.problems == full.report.problems  # zz not in the corpus: still checked
    assert data_fingerprint(es) == data_fingerprint(full)
    for look_up in (lambda t: t.get("q1", "a"), lambda t: t.by_doc, lambda t: t.metadata):
        with pytest.raises(EvalSetError, match=r"beir: .*loaded without its passage texts"):
            look_up(es.texts)
    # corpus files given later cannot stand in for the eval set's own texts
    more = write(tmp_path / "more.jsonl", '{"_id": "a", "text": "other"}\n')
    with pytest.raises(EvalSetError, match="with texts=True"):
        es.with_texts(corpus=[more]).texts.get("q1", "a")
    with pytest.raises(EvalSetError, match="with texts=True") as err:
        calibrate(es, check=Check(n_bootstrap=20), stages=Stages(max_tokens=50))
    assert "\n" not in str(err.value)
    plain = calibrate(es, split=Split(holdout=0), check=Check(n_bootstrap=20))  # needs no text
    with_texts = calibrate(full, split=Split(holdout=0), check=Check(n_bootstrap=20)).config()
    # (the provenance's time of writing may fall in another second)
    assert plain.config().model_dump(exclude={"provenance"}) == with_texts.model_dump(
        exclude={"provenance"}
    )
    assert plain.header.data_sha256 == data_fingerprint(full)
    # the texts are checked all the same
    write(folder / "corpus.jsonl", '{"_id": "a", "text": 5}\n')
    with pytest.raises(EvalSetError, match=r"corpus\.jsonl:1, field 'text'"):
        load_evalset(folder, texts=False)


@pytest.mark.parametrize(
    ("splits", "split"), [(("train", "dev"), None), (("train", "test"), "train"), (("a",), "b")]
)
def test_splits_are_picked_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, splits: tuple[str, ...], split: str | None
) -> None:
    folder = beir(tmp_path, splits=splits)
    alike_or_same_error(monkeypatch, folder, split=split)


def test_a_corpus_checks_json_and_trec_runs_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus read column-wise is asked per document by the careful run reader (a
    JSON run) and column-wise by the fast one (a TREC run)."""
    folder = beir(tmp_path)
    runs = {
        "json": write(tmp_path / "run.json", json.dumps({"q1": {"a": 0.9, "zz": 0.5}})),
        "trec": write(tmp_path / "run.trec", RUN),
    }
    fast, _ = both(monkeypatch, folder, runs=runs)
    unknown = [(p.path, p.line) for p in fast.report.problems if p.kind.value == "unknown_document"]
    assert unknown == [(str(runs["json"]), None), (str(runs["trec"]), 4)]


@pytest.mark.parametrize("doc", ["a", "b"])  # the corpus's first id, and another
def test_a_document_retrieved_for_several_queries_is_in_the_corpus_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: str
) -> None:
    """CR-48: a corpus document in the run of two queries is in corpus.jsonl for each;
    ``strict=True`` accepts the valid folder on both paths."""
    folder = beir(tmp_path, "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\ta\t1\n")
    run = write(
        tmp_path / "run.trec",
        f"q1 Q0 {doc} 1 0.9 r\nq2 Q0 {doc} 1 0.9 r\nq2 Q0 c 2 0.5 r\nq1 Q0 zz 2 0.1 r\n",
    )
    fast, _ = both(monkeypatch, folder, runs=run)
    assert isinstance(fast.labels, ColumnarLabels)
    assert isinstance(fast.runs["run"].candidates, ColumnarCandidates)
    assert [(p.kind.value, p.line) for p in fast.report.problems] == [("unknown_document", 4)]
    ok = write(tmp_path / "ok.trec", f"q1 Q0 {doc} 1 0.9 r\nq2 Q0 {doc} 1 0.9 r\n")
    for strict in (load_evalset, lambda *a, **k: careful(monkeypatch, *a, **k)):
        assert strict(folder, runs=ok, strict=True).qids == ("q1", "q2")


# --------------------------------------------------------------------------- JSONL


def jsonl(path: Path, *lines: object) -> Path:
    return write(path, "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


CLEAN = (
    {
        "query_id": "q1",
        "query": "what is alpha",
        "answers": ["a letter"],
        "relevant": ["a", "c"],
        "not_relevant": ["b"],
        "candidates": [{"id": "a", "score": 0.9, "text": "alpha"}, {"id": "b", "score": 0.4}],
        "metadata": {"source": "wiki"},
    },
    {"query_id": "q2", "relevant": ["d"], "candidates": [{"id": "d", "score": 3}]},
    {"query_id": "q3", "query": "no candidates", "relevant": []},
)


def test_a_clean_jsonl_file_is_read_column_wise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jsonl(tmp_path / "eval.jsonl", *CLEAN)
    fast, slow = both(monkeypatch, path)
    assert isinstance(fast.labels, ColumnarLabels)
    assert isinstance(fast.runs["default"].candidates, ColumnarCandidates)
    assert fast.queries["q1"].answers == ("a letter",)
    assert fast.queries["q2"].text is None
    assert fast.labels["q1"].grades == {"a": 1, "c": 1, "b": 0}
    assert fast.labels["q3"].grades == {}
    assert dict(fast.runs["default"].candidates["q2"]) == {"d": 3.0}
    # q3 lists no candidates: counted with none, its line named
    assert [(p.kind.value, p.line) for p in fast.report.problems] == [("labels_without_run", 3)]
    assert data_fingerprint(fast) == data_fingerprint(slow)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_messy_jsonl_reads_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    lines = (
        "\ufeff",  # a byte order mark, then a blank line
        '{"query_id": "q1", "relevant": ["a"], "candidates": [{"id": "a", "score": 1}, '
        '{"id": "b", "score": null}, {"id": "a", "score": 0.5}, {"id": "c", "score": NaN}]}\r',
        "   ",
        {"query_id": "q2", "candidates": []},
        {"query_id": "q3", "not_relevant": ["x"], "candidates": [{"id": "x"}, {"id": "y"}]},
        '{"query_id": "q4", "candidates": [{"id": "z", "score": Infinity}], "query": "\\u00e9"}',
    )
    path = jsonl(tmp_path / f"eval.jsonl{suffix}", *lines)
    fast, _ = both(monkeypatch, path)
    assert isinstance(fast.labels, ColumnarLabels)
    # hand-checked: a repeated on line 2, then the scores that are not finite
    assert [(p.kind.value, p.line, p.field) for p in fast.report.problems] == [
        ("duplicate_candidate", 2, "candidates[2]"),
        ("invalid_score", 2, "candidates[1]"),
        ("invalid_score", 2, "candidates[3]"),
        ("invalid_score", 5, "candidates[0]"),
        ("invalid_score", 5, "candidates[1]"),
        ("invalid_score", 6, "candidates[0]"),
    ]
    first = same_error(monkeypatch, path, strict=True)
    assert f"eval.jsonl{suffix}:2, field 'candidates[2]'" in first


def test_a_run_without_any_score_keeps_its_order_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jsonl(
        tmp_path / "eval.jsonl",
        {"query_id": "q1", "relevant": ["b"], "candidates": [{"id": "a"}, {"id": "b"}]},
    )
    fast, _ = both(monkeypatch, path)
    assert fast.runs["default"].score_kind is None
    assert fast.report.problems == []  # no score at all: nothing is invalid


@pytest.mark.parametrize(
    "line",
    [
        {"query_id": "q9", "relevant": {"a": 2}},  # graded labels
        {"query_id": "q9", "distractors": ["a"]},
        {"query_id": "q9", "utilities": {"a": 0.5}},
        {"query_id": "q9", "no_response": {"a": 0.5}},
        {"query_id": "q9", "relevant": ["a"], "num_relevant": 3},
        {"query_id": "q9", "runs": {"bm25": [{"id": "a", "score": 1.0}]}},
        {"query_id": "q9", "candidates": ["a", "b"]},  # bare ids
        {"query_id": 9, "relevant": [7]},  # numbers as ids
        {"query_id": "q9", "metadata": "text"},  # metadata of two types in one file
        {"query_id": "q9", "query": None, "answers": []},
        {"query_id": "q9", "candidates": [{"id": "a", "text": None}, {"id": "b", "text": "b"}]},
        {"query_id": "q9", "metadata": None},
        {"query_id": "q9", "metadata": {}},
        {"query_id": "q9", "metadata": {"source": 3, "k": [None, {"x": 1.5}]}},  # other types
    ],
)
def test_shapes_read_by_the_careful_reader_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: dict[str, object]
) -> None:
    path = jsonl(tmp_path / "eval.jsonl", *CLEAN, line)
    both(monkeypatch, path)  # every shape is valid: read, and as the reference reads it


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ({"query_id": "q9", "relevent": ["a"]}, "field 'relevent'"),
        ({"query_id": "q9", "candidates": [{"id": "a", "rank": 1}]}, "field 'candidates[0]'"),
        ({"query_id": "q1"}, "field 'query_id'"),  # used on line 1
        ({"query_id": "q9", "relevant": ["a"], "not_relevant": ["a"]}, "'not_relevant[0]'"),
        ({"query_id": "q9", "relevant": ["a", "a"]}, "field 'relevant[1]'"),
        ({"query_id": "q9", "relevant": None}, "field 'relevant'"),
        ({"query_id": "q9", "candidates": None}, "field 'candidates'"),
        ({"query_id": "q9", "answers": None}, "field 'answers'"),
        ({"query_id": "q9", "answers": ["x", None]}, "field 'answers'"),
        ({"query_id": "q9", "candidates": [None]}, "field 'candidates[0]"),
        ({"query_id": "q9", "candidates": [{"id": ""}]}, "field 'candidates[0].id'"),
        ({"query_id": "q9", "candidates": [{"score": 1}]}, "field 'candidates[0].id'"),
        ({"query_id": "q9", "candidates": [{"id": "a", "score": True}]}, "'candidates[0].score'"),
        ({"query_id": "q9", "candidates": [{"id": "a", "text": 5}]}, "'candidates[0].text'"),
        ({"query_id": "q9", "candidates": [{"id": "a"}, {"id": "b", "text": {}}]}, "[1].text'"),
        ({"query_id": "q9", "relevant": [""]}, "field 'relevant[0]'"),
        ({"query_id": "", "relevant": ["a"]}, "field 'query_id'"),
        ({"query_id": "q9", "query": 3}, "field 'query'"),
        ('{"query_id": "q9"} {"query_id": "q10"}', "eval.jsonl:4: malformed JSON"),
        ('{"query_id": "q9", "candidates": [{"id": "a", "score": Inf}]}', "malformed JSON"),
        ("[1, 2]", "eval.jsonl:4: each line must be a JSON object"),
        ('{"query_id": "q9",', "eval.jsonl:4: malformed JSON"),
    ],
)
def test_jsonl_errors_name_file_line_and_field_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: object, where: str
) -> None:
    path = jsonl(tmp_path / "eval.jsonl", *CLEAN, line)
    message = same_error(monkeypatch, path)
    assert where in message, message
    assert "eval.jsonl:4" in message


def test_a_jsonl_object_over_two_lines_is_named_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "eval.jsonl", '{"query_id": "q1",\n "relevant": ["a"]}\n')
    message = same_error(monkeypatch, path)
    assert "eval.jsonl:1: malformed JSON" in message


def test_jsonl_runs_and_labels_build_the_same_arrays_at_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    rng = np.random.default_rng(5)
    lines = []
    for q in range(80):
        docs = [f"d{d}" for d in rng.choice(30, int(rng.integers(0, 20)), replace=False)]
        judged = [f"d{d}" for d in rng.choice(30, int(rng.integers(0, 6)), replace=False)]
        cands = [{"id": d, "score": float(rng.integers(0, 4)) / 2} for d in docs]  # ties
        line: dict[str, object] = {"query_id": f"q{q}", "relevant": judged[:2]}
        line["not_relevant"] = judged[2:]
        if q % 7:
            line["candidates"] = cands
        lines.append(line)
    path = jsonl(tmp_path / "eval.jsonl", *lines)
    for kind in ("similarity", "distance"):
        fast, _ = both(monkeypatch, path, score_kind=kind)
        assert isinstance(fast.runs["default"].candidates, ColumnarCandidates)


def test_files_read_in_many_small_blocks_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of a few lines (a line longer than a block, blank lines and repeats across
    blocks): the same rows, lines and problems as one block gives."""
    from ragguard.calibration.data.formats import beir as _columnar_json
    from ragguard.calibration.data.formats import delimited

    monkeypatch.setattr(_columnar_json, "_BLOCK", 40)
    monkeypatch.setattr(delimited, "_BLOCK", 64)
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i % 7}\t{'abcd'[i % 4]}\t{i % 28 % 3}\n" + ("\n" if i % 5 == 0 else "")
        for i in range(40)
    )
    corpus = "".join(f'{{"_id": "{d}", "text": "{d * 30}"}}\n\n' for d in "abcdzz")
    folder = beir(tmp_path, qrels, corpus=corpus, queries=None)
    fast, _ = both(monkeypatch, folder, runs=write(tmp_path / "run.trec", RUN))
    assert isinstance(fast.labels, ColumnarLabels)
    # hand-checked: i = 28, 29 repeat i = 0, 1; line of i: header + i + 1 + blank lines
    # after i = 0, 5, ..., 25
    repeated = [p.line for p in fast.report.problems if p.kind.value == "duplicate_label"]
    assert repeated[:2] == [36, 37]
    lines = [*CLEAN, "", {"query_id": "q5", "candidates": [{"id": "a"}, {"id": "a"}]}]
    fast, _ = both(monkeypatch, jsonl(tmp_path / "eval.jsonl", *lines))
    assert isinstance(fast.labels, ColumnarLabels)
    first = fast.report.problems[0]
    assert (first.kind.value, first.line) == ("duplicate_candidate", 5)


# --------------------------------------------------------------------------- JSONL input


def test_jsonl_that_is_not_utf8_or_truncated_is_an_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "eval.jsonl"
    bad.write_bytes(b'{"query_id": "q1", "relevant": ["caf\xe9"]}\n')
    with pytest.raises(EvalSetError, match=r"eval.jsonl: not UTF-8 text"):
        load_evalset(bad)
    gz = tmp_path / "eval.jsonl.gz"
    line = '{"query_id": "q%d", "relevant": ["a"], "candidates": [{"id": "a", "score": 1}]}\n'
    gz.write_bytes(gzip.compress("".join(line % i for i in range(3000)).encode())[:-40])
    with pytest.raises(EvalSetError, match=r"eval.jsonl.gz"):
        load_evalset(gz)


def test_nan_and_infinite_scores_in_a_whole_list_are_counted_and_ranked_last(
    tmp_path: Path,
) -> None:
    """Python's json reads NaN and Infinity: a list that passes the whole-list check
    still reports each such score (hand-checked fields) and ranks it after the scored."""
    path = write(
        tmp_path / "eval.jsonl",
        '{"query_id": "q1", "relevant": ["b"], "candidates": [{"id": "a", "score": NaN}, '
        '{"id": "b", "score": 0.5}, {"id": "c", "score": Infinity}, {"id": "d"}]}\n',
    )
    es = load_evalset(path)
    problems = [(p.kind.value, p.field) for p in es.report.problems]
    assert problems == [
        ("invalid_score", "candidates[0]"),
        ("invalid_score", "candidates[2]"),
        ("invalid_score", "candidates[3]"),
    ]
    assert es.arrays().doc_ids(0)[0] == "b"


def test_labels_given_only_a_utility_or_a_probability_build_the_dicts_arrays() -> None:
    """Labels as columns (a document with only a utility, or only a probability, has no
    grade: not judged) give the arrays build_arrays gives from the same dicts; a value out
    of range is the same error."""
    from ragguard.calibration.data.arrays import build_arrays

    qrels = {"q1": {"a": 2, "b": 0}, "q2": {"c": 1}}
    run = {"q1": {"a": 0.9, "u": 0.8, "b": 0.4, "p": 0.3}, "q2": {"c": 0.7, "u": 0.2}}
    utilities = {"q1": {"u": -0.5, "a": 0.8}, "q2": {"x": 0.9}}
    no_response = {"q1": {"p": 0.2}}
    es = EvalSet.from_dicts(
        qrels, {"r": run}, utilities=utilities, no_response=no_response, n_relevant={"q2": 3}
    )
    ref = build_arrays(
        ["q1", "q2"], [run["q1"], run["q2"]], [qrels["q1"], qrels["q2"]],
        utilities=[utilities["q1"], utilities["q2"]], no_response=[no_response["q1"], {}],
        n_relevant=[None, 3],
    )  # fmt: skip
    assert_same_arrays(es.arrays(), ref)
    assert es.labels["q1"].utilities == {"u": -0.5, "a": 0.8}
    assert es.labels["q1"].grades == {"a": 2, "b": 0}  # u and p are not judged
    for bad in (1.5, float("nan")):
        with pytest.raises(EvalSetError) as got:
            EvalSet.from_dicts(qrels, {"r": run}, utilities={"q1": {"u": bad}}).arrays()
        with pytest.raises(EvalSetError) as want:
            build_arrays(["q1", "q2"], [run["q1"], run["q2"]], [qrels["q1"], qrels["q2"]],
                         utilities=[{"u": bad}, {}])  # fmt: skip
        assert str(got.value) == str(want.value)
