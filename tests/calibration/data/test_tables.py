"""Qrels and runs as tables (pandas / polars DataFrames, pyarrow Tables) and as ranx
objects: the same metric values as the dicts of their rows and as pytrec_eval, the same
eval set, clear errors for bad columns, repeated rows reported like repeated lines."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from ragguard.calibration import Check, EvalSet, Search, calibrate, evaluate, load_evalset
from ragguard.calibration.data.evalset import ProblemKind
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.errors import ArgumentTypeError, ConfigError, EvalSetError
from tests.calibration.conftest import random_trec_data

pytrec_eval = pytest.importorskip("pytrec_eval")
ranx = pytest.importorskip("ranx")

ROOT = Path(__file__).resolve().parents[3]
METRICS = ["ndcg@10", "recall@5", "precision@5", "map", "hit_rate@3", "ndcg"]
TREC = {
    "ndcg@10": "ndcg_cut_10",
    "recall@5": "recall_5",
    "precision@5": "P_5",
    "map": "map",
    "hit_rate@3": "success_3",
    "ndcg": "ndcg",
}
Dicts = dict[str, dict[str, Any]]
Rows = list[tuple[str, str, Any]]
Maker = Callable[[Rows, list[str]], Any]


def rows_of(data: Dicts) -> Rows:
    return [(q, d, v) for q, m in data.items() for d, v in m.items()]


def pandas_table(rows: Rows, names: list[str]) -> Any:
    return pd.DataFrame(rows, columns=names)


def arrow_table(rows: Rows, names: list[str]) -> Any:
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})


def polars_table(rows: Rows, names: list[str]) -> Any:
    pl = pytest.importorskip("polars")
    return pl.DataFrame(rows, schema=names, orient="row")


MAKERS: dict[str, Maker] = {"pandas": pandas_table, "arrow": arrow_table, "polars": polars_table}


@pytest.fixture(params=["columnar", "row by row"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Tables read column-wise with pyarrow, and with every column's values checked one
    by one in Python, as a pandas column of mixed types (which pyarrow cannot convert)
    is read."""
    if request.param == "row by row":
        from ragguard.calibration.data.formats import tables as _tables

        columns = _tables._columns

        def as_lists(obj: Any, kind: str) -> tuple[list[str], Callable[[str], Any]]:
            names, column = columns(obj, kind)

            def values(name: str) -> Any:
                got = column(name)
                return got if isinstance(got, list) else got.to_pylist()

            return names, values

        monkeypatch.setattr(_tables, "_columns", as_lists)
    return str(request.param)


@pytest.fixture(params=list(MAKERS))
def table(request: pytest.FixtureRequest) -> Maker:
    return MAKERS[request.param]


def qrels_table(
    make: Maker, qrels: Dicts, names: tuple[str, ...] = ("qid", "docid", "grade")
) -> Any:
    return make(rows_of(qrels), list(names))


def run_table(make: Maker, run: Dicts, names: tuple[str, ...] = ("qid", "docid", "score")) -> Any:
    return make(rows_of(run), list(names))


def pytrec_values(qrels: Dicts, run: Dicts) -> dict[str, dict[str, float]]:
    per = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    return {m: {q: v[name] for q, v in per.items()} for m, name in TREC.items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_tables_give_the_values_of_their_dicts_and_of_pytrec_eval(
    seed: int, table: Maker, engine: str
) -> None:
    qrels, run = random_trec_data(seed)
    from_dicts = evaluate(qrels, run, METRICS, per_query=True)
    from_tables = evaluate(
        qrels_table(table, qrels), run_table(table, run), METRICS, per_query=True
    )
    assert from_tables == from_dicts
    reference = pytrec_values(qrels, run)
    for metric, values in reference.items():
        for qid, value in values.items():
            assert from_tables[metric][qid] == pytest.approx(value, abs=1e-12), (metric, qid)
    # one of the two as a table, the other as dicts
    mixed = evaluate(qrels, run_table(table, run), METRICS, per_query=True)
    assert mixed == from_dicts


def test_ranx_objects_give_the_values_of_their_dicts_and_of_pytrec_eval() -> None:
    qrels, run = random_trec_data(2)
    got = evaluate(ranx.Qrels(qrels), ranx.Run(run), METRICS, per_query=True)
    assert got == evaluate(qrels, run, METRICS, per_query=True)
    for metric, values in pytrec_values(qrels, run).items():
        assert got[metric] == pytest.approx(values, abs=1e-12)
    with pytest.raises(ArgumentTypeError, match="qrels must be a ranx Qrels, got a ranx Run"):
        evaluate(ranx.Run(run), ranx.Qrels(qrels), "ndcg")


def test_ranx_round_trip() -> None:
    """An eval set's labels and run go to ranx objects and back unchanged, and ranx's
    own DataFrames (columns q_id, doc_id, score) read as tables."""
    qrels, run = random_trec_data(3)
    evalset = EvalSet.from_dicts(qrels, {"bm25": run})
    rq, rr = ranx.Qrels(evalset.qrels()), ranx.Run(evalset.run_dict("bm25"), name="bm25")
    again = EvalSet.from_dicts(rq, {"bm25": rr})
    assert again.qrels() == evalset.qrels()
    assert again.run_dict() == evalset.run_dict()
    assert evaluate(again, metrics=METRICS) == evaluate(evalset, metrics=METRICS)
    frames = EvalSet.from_dicts(rq.to_dataframe(), {"bm25": rr.to_dataframe()})
    assert evaluate(frames, metrics=METRICS) == evaluate(evalset, metrics=METRICS)


def test_evalset_from_tables_is_the_evalset_from_dicts(table: Maker, engine: str) -> None:
    qrels, run = random_trec_data(4)
    run = {q: c for q, c in run.items() if c}  # a table has no row for an empty list
    other = {q: {d: s / 2 for d, s in c.items()} for q, c in run.items()}
    dicts = EvalSet.from_dicts(qrels, {"bm25": run, "dense": other})
    tables = EvalSet.from_dicts(
        qrels_table(table, qrels), {"bm25": run_table(table, run), "dense": other}
    )
    assert data_fingerprint(tables) == data_fingerprint(dicts)
    assert tables.qids == dicts.qids
    for name in ("bm25", "dense"):
        assert evaluate(tables, name, METRICS, per_query=True) == evaluate(
            dicts, name, METRICS, per_query=True
        )
    assert tables.report.counts() == dicts.report.counts()  # the queries the runs missed
    assert tables.report.counts()[ProblemKind.LABELS_WITHOUT_RUN] > 0
    # kept as integer-coded columns, no dict per query
    assert type(tables.labels).__name__ == "ColumnarLabels"
    assert type(tables.runs["bm25"].candidates).__name__ == "ColumnarCandidates"


def test_calibrate_runs_on_tables_as_on_dicts() -> None:
    qrels, run = random_trec_data(5, n_queries=80)
    kwargs: dict[str, Any] = {"check": Check(n_bootstrap=50), "search": Search(max_k=5)}
    from_dicts = calibrate(EvalSet.from_dicts(qrels, {"bm25": run}), **kwargs)
    from_tables = calibrate(
        EvalSet.from_dicts(
            qrels_table(pandas_table, qrels), {"bm25": run_table(pandas_table, run)}
        ),
        **kwargs,
    )
    assert from_tables.header.data_sha256 == from_dicts.header.data_sha256
    a, b = from_dicts.recommended, from_tables.recommended
    assert b.sweep.points[b.written] == a.sweep.points[a.written]


def test_tied_scores_keep_the_tables_row_order(table: Maker, engine: str) -> None:
    run = {"q": {"b": 0.5, "a": 0.5, "c": 0.9, "d": 0.5}}
    qrels = {"q": {"a": 1}}
    per = evaluate(qrels_table(table, qrels), run_table(table, run), "mrr", per_query=True)
    assert per == {"mrr": {"q": 1 / 3}}  # c, b, a, d: the row order breaks the tie
    evalset = EvalSet.from_dicts(qrels_table(table, qrels), {"r": run_table(table, run)})
    assert evalset.arrays().doc_ids(0) == ["c", "b", "a", "d"]


@pytest.mark.parametrize(
    ("qrels_names", "run_names"),
    [
        (("query_id", "doc_id", "relevance"), ("query_id", "doc_id", "score")),
        (("q_id", "corpus-id", "score"), ("q_id", "doc", "score")),  # ranx's, BEIR's
        (("QID", "DocNo", "Label"), ("qid", "docno", "Score")),  # PyTerrier's, any case
        (("query-id", "corpus_id", "rel"), ("queryid", "docid", "score")),
    ],
)
def test_usual_column_names_are_recognised(
    qrels_names: tuple[str, ...], run_names: tuple[str, ...]
) -> None:
    qrels, run = random_trec_data(6, n_queries=20)
    got = evaluate(
        qrels_table(pandas_table, qrels, qrels_names),
        run_table(pandas_table, run, run_names),
        METRICS,
    )
    assert got == evaluate(qrels, run, METRICS)


def test_other_column_names_by_mapping_and_integer_ids(table: Maker, engine: str) -> None:
    qrels = {"1": {"10": 1, "11": 2}, "2": {"20": 1}}
    run = {"1": {"10": 0.3, "12": 0.9, "11": 0.2}, "2": {"20": 0.5}}
    int_rows = [(int(q), int(d), s) for q, d, s in rows_of(run)]
    qrels_rows = [(int(q), int(d), g) for q, d, g in rows_of(qrels)]
    columns = {"qid": "topic", "docid": "passage", "grade": "judgement", "score": "sim"}
    got = evaluate(
        table(qrels_rows, ["topic", "passage", "judgement"]),
        table(int_rows, ["topic", "passage", "sim"]),
        METRICS,
        per_query=True,
        columns=columns,
    )
    assert got == evaluate(qrels, run, METRICS, per_query=True)  # ids as decimal strings


def test_mixed_and_nullable_columns(engine: str) -> None:
    """A pandas object column mixing integer and text ids (which pyarrow cannot type)
    is read value by value; a nullable integer column's missing id is named by its row."""
    qrels = pd.DataFrame({"qid": ["q", "q"], "docid": [7, "a"], "grade": [1, 2]})
    run = pd.DataFrame({"qid": ["q", "q"], "docid": ["a", 7], "score": [0.9, 0.2]})
    got = evaluate(qrels, run, METRICS, per_query=True)
    dicts = {"q": {"7": 1, "a": 2}}, {"q": {"a": 0.9, "7": 0.2}}
    assert got == evaluate(*dicts, METRICS, per_query=True)
    ids = pd.array([1, None], dtype="Int64")
    with pytest.raises(EvalSetError, match=re.escape("run table: row 1: no document id")):
        evaluate(qrels, run.assign(docid=ids), "ndcg")


def test_missing_scores_rank_last_as_none_does_in_dicts(engine: str) -> None:
    run = {"q": {"a": None, "b": 0.1, "c": 0.3}}
    frame = pd.DataFrame(rows_of(run), columns=["qid", "docid", "score"])
    per = evaluate({"q": {"a": 1}}, frame, "mrr", per_query=True)
    assert per == evaluate({"q": {"a": 1}}, run, "mrr", per_query=True) == {"mrr": {"q": 1 / 3}}


def error_cases() -> list[tuple[str, Callable[[], Any], type[Exception], str]]:
    good_run = pd.DataFrame({"qid": ["q"], "docid": ["a"], "score": [0.5]})
    good_qrels = pd.DataFrame({"qid": ["q"], "docid": ["a"], "grade": [1]})
    return [
        (
            "no score column",
            lambda: evaluate(good_qrels, good_run.rename(columns={"score": "sim"}), "ndcg"),
            EvalSetError,
            "run table: no score column (looked for score; its columns: 'qid', 'docid', "
            "'sim'); name it with columns={'score': ...}",
        ),
        (
            "no query id column",
            lambda: evaluate(good_qrels.rename(columns={"qid": "topic"}), good_run, "ndcg"),
            EvalSetError,
            "qrels table: no query id column (looked for qid, query_id, q_id, query-id, "
            "queryid; its columns: 'topic', 'docid', 'grade')",
        ),
        (
            "two grade columns",
            lambda: evaluate(good_qrels.assign(rel=1, label=0), good_run, "ndcg"),
            EvalSetError,
            "qrels table: several grade columns: 'grade', 'rel', 'label'; pick one with "
            "columns={'grade': ...}",
        ),
        (
            "scores are text",
            lambda: evaluate(good_qrels, good_run.assign(score=["high"]), "ndcg"),
            EvalSetError,
            "run table: column 'score' must hold numbers",
        ),
        (
            "grades are text",
            lambda: evaluate(good_qrels.assign(grade=["yes"]), good_run, "ndcg"),
            EvalSetError,
            "qrels table: column 'grade' must hold numbers",
        ),
        (
            "a missing grade",
            lambda: evaluate(good_qrels.assign(grade=[math.nan]), good_run, "ndcg"),
            EvalSetError,
            "qrels table: row 0: no grade (column 'grade')",
        ),
        (
            "a missing query id",
            lambda: evaluate(good_qrels, good_run.assign(qid=[None]), "ndcg"),
            EvalSetError,
            "run table: row 0: no query id (column 'qid')",
        ),
        (
            "float ids",
            lambda: evaluate(good_qrels, good_run.assign(docid=[1.5]), "ndcg"),
            EvalSetError,
            "run table",
        ),
        (
            "mapped column absent",
            lambda: evaluate(good_qrels, good_run, "ndcg", columns={"score": "sim"}),
            EvalSetError,
            "column 'sim' (columns['score']) is not in the table",
        ),
        (
            "unknown columns key",
            lambda: evaluate(good_qrels, good_run, "ndcg", columns={"query": "qid"}),
            ConfigError,
            "columns= keys are qid, docid, grade, score; got 'query'",
        ),
        (
            "contradictory labels",
            lambda: evaluate(pd.concat([good_qrels, good_qrels.assign(grade=2)]), good_run, "ndcg"),
            EvalSetError,
            "qrels table: row 1: query 'q', document 'a': grade 2 contradicts 1 (row 0)",
        ),
        (
            "not a table",
            lambda: evaluate(good_qrels, [("q", "a", 0.5)], "ndcg"),
            ArgumentTypeError,
            "run must be a mapping {query_id: {doc_id: value}}, a pandas or polars DataFrame",
        ),
    ]


@pytest.mark.parametrize(
    ("case", "call", "error", "message"), error_cases(), ids=[c[0] for c in error_cases()]
)
def test_bad_tables_are_clear_errors(
    case: str, call: Callable[[], Any], error: type[Exception], message: str, engine: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_repeated_rows_are_reported_like_repeated_lines(table: Maker, engine: str) -> None:
    qrels_rows = [("q", "a", 1), ("q", "b", 0), ("q", "a", 1)]
    run_rows = [("q", "a", 0.9), ("q", "c", 0.5), ("q", "a", 0.1), ("r", "x", 0.3)]
    evalset = EvalSet.from_dicts(
        table(qrels_rows, ["qid", "docid", "grade"]),
        {"bm25": table(run_rows, ["qid", "docid", "score"])},
    )
    found = [(p.kind, str(p)) for p in evalset.report.problems]
    assert (
        ProblemKind.DUPLICATE_LABEL,
        "qrels table: row 2: query 'q', document 'a' is labelled twice",
    ) in found
    assert (
        ProblemKind.DUPLICATE_CANDIDATE,
        "run table 'bm25': row 2: document 'a' appears twice in query 'q'",
    ) in found
    assert evalset.run_dict("bm25") == {"q": {"a": 0.9, "c": 0.5}}  # the first is kept
    with pytest.raises(EvalSetError, match="appears twice in query 'q' \\(duplicate_candidate"):
        EvalSet.from_dicts(
            {"q": {"a": 1}}, {"bm25": table(run_rows, ["qid", "docid", "score"])}, strict=True
        )


def test_reading_tables_imports_no_table_library_up_front() -> None:
    """pandas, polars, pyarrow and ranx are recognised by module name: importing
    ragguard.calibration, or evaluating dicts, imports none of them; an eval set of dicts
    imports pyarrow (it holds its data as Arrow columns) and nothing else."""
    code = (
        "import sys\n"
        "from ragguard.calibration import EvalSet, evaluate\n"
        "evaluate({'q': {'a': 1}}, {'q': {'a': 0.5}}, 'ndcg')\n"
        "EvalSet.from_dicts({'q': {'a': 1}}, {'r': {'q': {'a': 0.5}}})\n"
        "print(sorted(m for m in ('pandas', 'polars', 'ranx', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['pyarrow']"  # an eval set holds its data as Arrow columns


def test_docs_tables_example_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    page = (ROOT / "docs" / "reference" / "data-formats.md").read_text(encoding="utf-8")
    section = page.split("**Tables.**", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    source = code.group(1)
    exec(compile(source, "docs/reference/data-formats.md", "exec"), {})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    documented = [line[2:] for line in source.splitlines() if line.startswith("# {")]
    assert printed == documented
    assert len(printed) >= 2


# --------------------------------------------------------------------------- grades, empty


def file_grade_error(tmp_path: Path, grade: int) -> EvalSetError:
    """The error a TREC qrels file with ``grade`` raises (the rule tables follow)."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text(f"q1 0 d1 1\nq1 0 d7 {grade}\n")
    with pytest.raises(EvalSetError) as info:
        load_evalset(qrels)
    return info.value


RULE = "must be an integer up to 5 (1-5 relevant, 0 not relevant, -1 a known distractor)"


@pytest.mark.parametrize("grade", [2.5, 7])
def test_grades_files_reject_are_rejected_from_tables_and_dicts(
    grade: float, table: Maker, engine: str, tmp_path: Path
) -> None:
    """DF-11, DF-13: a grade of 2.5 or 7 in a DataFrame / Table / dict is the file
    readers' error (the same rule, naming the query, the document and the grade)."""
    assert RULE in file_grade_error(tmp_path, 7).detail
    expected = f"{RULE}, got {grade} (query 'q1', document 'd7')"
    qrels = {"q1": {"d1": 1, "d7": grade}}
    run = {"q1": {"d1": 0.9, "d3": 0.8, "d7": 0.4}}
    for call in (
        lambda: evaluate(qrels_table(table, qrels), run_table(table, run), ["ndcg@3"]),
        lambda: EvalSet.from_dicts(qrels_table(table, qrels), {"r": run_table(table, run)}),
        lambda: evaluate(qrels, run, ["ndcg@3"]),
        lambda: EvalSet.from_dicts(qrels, {"r": run}),
    ):
        with pytest.raises(EvalSetError) as info:
            call()
        assert expected in str(info.value)


def test_a_grade_of_7_in_a_ranx_qrels_is_rejected() -> None:
    """(ranx itself truncates 2.5 to 2 when its Qrels is built.)"""
    qrels = ranx.Qrels({"q1": {"d1": 1, "d7": 7}})
    run = ranx.Run({"q1": {"d1": 0.9, "d7": 0.4}})
    message = f"{RULE}, got 7 (query 'q1', document 'd7')"
    with pytest.raises(EvalSetError, match=re.escape(message)):
        evaluate(qrels, run, "ndcg@3")
    with pytest.raises(EvalSetError, match=re.escape(message)):
        EvalSet.from_dicts(qrels, {"r": run})


def test_whole_float_and_negative_grades_read_as_in_files(table: Maker, engine: str) -> None:
    """A float column of whole numbers (pandas makes one as soon as a value is missing
    or a column is computed) holds grades; -1 and -2 are accepted, as in files."""
    qrels = {"q1": {"a": 2, "b": 0, "c": -1, "d": -2}, "q2": {"e": 5}}
    run = {"q1": {"a": 0.9, "c": 0.8, "d": 0.3}, "q2": {"e": 0.5}}
    floats = {q: {d: float(g) for d, g in m.items()} for q, m in qrels.items()}
    expected = evaluate(qrels, run, METRICS, per_query=True)
    got = evaluate(qrels_table(table, floats), run_table(table, run), METRICS, per_query=True)
    assert got == expected
    assert evaluate(floats, run, METRICS, per_query=True) == expected


@pytest.mark.parametrize("empty", ["qrels", "run", "both"])
def test_empty_tables_and_dicts_are_errors_not_nan(empty: str, table: Maker, engine: str) -> None:
    """DF-14: no rows is no labelled queries (as an empty qrels file says) or a run
    without candidates (as an empty run file is), never NaN metrics."""
    qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1": 0.9}}
    if empty in ("qrels", "both"):
        qrels = {}
    if empty in ("run", "both"):
        run = {}
    what = "no labelled queries" if empty != "run" else "no candidates"
    q_table = table([], ["qid", "docid", "grade"]) if not qrels else qrels_table(table, qrels)
    r_table = table([], ["qid", "docid", "score"]) if not run else run_table(table, run)
    for call in (
        lambda: evaluate(q_table, r_table, ["ndcg@3", "mrr"]),
        lambda: evaluate(qrels, run, ["ndcg@3", "mrr"]),
        lambda: EvalSet.from_dicts(q_table, {"r": r_table}),
        lambda: EvalSet.from_dicts(qrels, {"r": run}),
    ):
        with pytest.raises(EvalSetError, match=what):
            call()
