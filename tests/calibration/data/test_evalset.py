"""Loading eval sets: real files through the real loaders, an error naming file, line and
field for each kind of malformed input, and problems counted rather than skipped."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import EvalSet, UtilityRules, evaluate, load_evalset
from ragguard.calibration.data.columns import ColumnarLabels, ColumnarRead, query_view
from ragguard.calibration.data.evalset import FORMATS, Format, ProblemKind, detect_format
from ragguard.calibration.data.formats.common import ReadOptions
from ragguard.calibration.data.problems import Reporter
from ragguard.calibration.data.records import Labels
from ragguard.errors import EvalSetError, RagguardError
from tests.calibration.conftest import random_trec_data
from tests.calibration.data.line_reader import careful, use_line_reader

pytrec_eval = pytest.importorskip("pytrec_eval")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(tmp_path: Path, *records: dict[str, Any] | str, name: str = "eval.jsonl") -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return write(tmp_path, name, "\n".join(lines) + "\n")


def fails(path: Path, pattern: str, **kw: Any) -> EvalSetError:
    with pytest.raises(EvalSetError) as info:
        load_evalset(path, **kw)
    assert re.search(pattern, str(info.value)), str(info.value)
    return info.value


# --- ragguard JSONL -------------------------------------------------------------------

GOOD = [
    {
        "query_id": "q1",
        "query": "What was my 500 lb deadlift PR?",
        "relevant": {"log-03-02": 5, "log-02-10": 3},
        "not_relevant": ["nutrition"],
        "distractors": ["squat-pr"],
        "utilities": {"goal-2024": -0.25},
        "answers": ["March 2"],
        "candidates": [
            {"id": "squat-pr", "score": 0.9},
            {"id": "log-03-02", "score": 0.83},
            {"id": "goal-2024", "score": 0.7},
            {"id": "nutrition", "score": 0.2},
        ],
        "runs": {"bm25": [{"id": "log-02-10", "score": 12.0}, {"id": "log-03-02", "score": 9.5}]},
        "metadata": {"topic": "training"},
    },
    {
        "query_id": 2,
        "relevant": ["a"],
        "num_relevant": 3,
        "candidates": [{"id": "b", "score": 0.5}, {"id": "a", "score": 0.4}],
        "runs": {"bm25": [{"id": "a", "score": 3.0}]},
    },
]


def test_jsonl_loads_labels_and_runs(tmp_path: Path) -> None:
    es = load_evalset(jsonl(tmp_path, *GOOD))
    assert es.qids == ("q1", "2")
    assert set(es.runs) == {"default", "bm25"}
    assert es.queries["q1"].text == "What was my 500 lb deadlift PR?"
    assert es.queries["q1"].answers == ("March 2",)
    lab = es.labels["q1"]
    assert lab.grades == {"log-03-02": 5, "log-02-10": 3, "nutrition": 0, "squat-pr": 0}
    assert lab.distractors == {"squat-pr"}
    assert es.labels["2"].n_relevant == 3
    assert not es.report
    with pytest.raises(ValueError, match="several runs; pick one of: default, bm25"):
        evaluate(es, metrics="ndcg@3")
    got = evaluate(es, "default", metrics=["recall@2", "distractor_rate@2"], per_query=True)
    assert got["recall@2"] == {"q1": 0.5, "2": pytest.approx(1 / 3)}  # stated R = 3
    # q1: squat-pr is a known distractor; in q2, b is unjudged at rank 1 (top-3 window)
    assert got["distractor_rate@2"] == {"q1": 0.5, "2": 0.5}
    bm25 = evaluate(es, "bm25", metrics="mrr", per_query=True)["mrr"]
    assert bm25 == {"q1": 1.0, "2": 1.0}
    arrays = es.arrays("default", rules=UtilityRules(relevant_grade=4, partial_grade=3))
    assert arrays.utility[0].tolist() == [-1.0, 1.0, -0.25, 0.0]


def test_jsonl_gz_and_unscored_candidates(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "eval.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"query_id": "q", "relevant": ["b"], "candidates": ["a", "b"]}))
    es = load_evalset(path)
    assert es.runs["default"].score_kind is None  # no scores anywhere: run order
    assert evaluate(es, metrics="mrr") == {"mrr": 0.5}
    assert not es.report


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ('{"query_id": "q1", ', r"eval\.jsonl:2: malformed JSON"),
        ('["q1"]', r"eval\.jsonl:2: each line must be a JSON object"),
        ('{"query": "no id"}', r"eval\.jsonl:2, field 'query_id': missing id"),
        ('{"query_id": 1.5}', r"field 'query_id': an id must be a string, got float"),
        ('{"query_id": "q0"}', r"eval\.jsonl:2, field 'query_id': .*already used on line 1"),
        ('{"query_id": "q", "relevent": ["a"]}', r"field 'relevent': unknown field"),
        ('{"query_id": "q", "relevant": {"a": 7}}', r":2, field 'relevant.a': .*integer 1-5"),
        ('{"query_id": "q", "relevant": {"a": 2.5}}', r"field 'relevant.a': .*got 2.5"),
        ('{"query_id": "q", "relevant": {"a": true}}', r"field 'relevant.a': .*got True"),
        ('{"query_id": "q", "relevant": "a"}', r"field 'relevant': must be a list of ids"),
        ('{"query_id": "q", "relevant": [3]}', None),  # an integer id is its string
        (
            '{"query_id": "q", "relevant": ["a"], "distractors": ["a"]}',
            r"field 'distractors\[0\]': document 'a' is also listed in 'relevant'",
        ),
        ('{"query_id": "q", "utilities": {"a": -2}}', r"field 'utilities.a': .*\[-1, 1\]"),
        ('{"query_id": "q", "no_response": {"a": 1.5}}', r"field 'no_response.a': .*\[0, 1\]"),
        (
            '{"query_id": "q", "relevant": ["a", "b"], "num_relevant": 1}',
            r"field 'num_relevant': must be an integer >= the 2 relevant",
        ),
        ('{"query_id": "q", "needs": 0}', r"field 'needs': must be a whole number >= 1.*got 0"),
        ('{"query_id": "q", "needs": -2}', r"field 'needs': .*got -2"),
        ('{"query_id": "q", "needs": 1.5}', r"field 'needs': .*got 1.5"),
        ('{"query_id": "q", "needs": NaN}', r"field 'needs': .*got nan"),
        ('{"query_id": "q", "needs": "2"}', r"field 'needs': .*got '2'"),
        ('{"query_id": "q", "needs": true}', r"field 'needs': .*got True"),
        ('{"query_id": "q", "answers": "x"}', r"field 'answers': must be a list of strings"),
        ('{"query_id": "q", "candidates": {"a": 1}}', r"field 'candidates': must be a list"),
        ('{"query_id": "q", "candidates": [{"score": 1}]}', r"'candidates\[0\].id': missing id"),
        (
            '{"query_id": "q", "candidates": [{"id": "a", "score": "high"}]}',
            r"field 'candidates\[0\].score': a score must be a number or null",
        ),
        (
            '{"query_id": "q", "candidates": [{"id": "a", "rank": 1}]}',
            r"field 'candidates\[0\]': unknown field 'rank'",
        ),
        ('{"query_id": "q", "runs": [1]}', r"field 'runs': must be an object"),
    ],
)
def test_jsonl_errors_name_file_line_and_field(
    tmp_path: Path, line: str, pattern: str | None
) -> None:
    path = jsonl(tmp_path, {"query_id": "q0", "relevant": ["x"]}, line)
    if pattern is None:
        assert load_evalset(path).labels["q"].grades == {"3": 1}
        return
    err = fails(path, pattern)
    assert err.path == str(path) and err.line == 2
    assert isinstance(err, RagguardError) and isinstance(err, ValueError)


def test_empty_file_and_missing_file(tmp_path: Path) -> None:
    fails(write(tmp_path, "empty.jsonl", "\n\n"), "no labelled queries")
    fails(tmp_path / "nope.jsonl", "no such file")


# --- counted problems -----------------------------------------------------------------


def test_problems_are_counted_reported_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = jsonl(
        tmp_path,
        {
            "query_id": "q1",
            "relevant": ["a"],
            "candidates": [
                {"id": "a", "score": 0.9},
                {"id": "a", "score": 0.1},
                {"id": "b", "score": None},
                {"id": "c", "score": 0.5},
            ],
        },
        {"query_id": "q2", "relevant": ["z"]},
    )
    run = write(tmp_path, "extra.trec", "q1 Q0 a 1 3.0 t\nq9 Q0 a 1 2.0 t\nq9 Q0 b 2 1.0 t\n")
    with caplog.at_level(logging.WARNING, logger="ragguard"):
        es = load_evalset(path, runs={"extra": run})
    counts = es.report.counts()
    assert counts == {
        ProblemKind.DUPLICATE_CANDIDATE: 1,
        ProblemKind.INVALID_SCORE: 1,
        ProblemKind.RUN_QUERY_WITHOUT_LABELS: 1,
        ProblemKind.LABELS_WITHOUT_RUN: 2,  # q2 in both runs
    }
    assert es.report.skipped == 1
    text = es.report.summary()
    assert "1 x run_query_without_labels (skipped)" in text
    assert "extra.trec:2: run 'extra' has 2 candidates for query 'q9'" in text
    assert "eval.jsonl:1, field 'candidates[1]'" in text
    assert "problems while loading" in caplog.text
    # the kept data: first occurrence of a, b ranked last, q2 with no candidates
    arrays = es.arrays("default")
    assert arrays.doc_ids(0) == ["a", "c", "b"]
    assert evaluate(es, "default", metrics="recall", per_query=True)["recall"] == {
        "q1": 1.0,
        "q2": 0.0,
    }


def test_strict_mode_raises_on_the_first_problem(tmp_path: Path) -> None:
    path = jsonl(tmp_path, {"query_id": "q1", "relevant": ["a"], "candidates": ["a", "a"]})
    err = fails(path, r"eval\.jsonl:1, field 'candidates\[1\]'.*duplicate_candidate", strict=True)
    assert "strict=False" in str(err)


# --- TREC -----------------------------------------------------------------------------


def test_trec_files_match_pytrec_eval_on_the_same_files(tmp_path: Path) -> None:
    qrels, run = random_trec_data(8, n_queries=40)
    qrels_text = "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    run_lines = []
    for q, docs in run.items():
        for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda kv: -kv[1]), 1):
            run_lines.append(f"{q} Q0 {d} {rank} {s!r} test\n")
    qpath = write(tmp_path, "qrels.txt", qrels_text)
    rpath = write(tmp_path, "bm25.run", "".join(run_lines))
    assert detect_format(qpath) == "trec"
    es = load_evalset(qpath, runs=rpath)
    # queries with an empty run are in the labels but not in the run file
    assert set(es.report.counts()) <= {ProblemKind.LABELS_WITHOUT_RUN}
    with qpath.open() as fq, rpath.open() as fr:
        ref_qrels = pytrec_eval.parse_qrel(fq)
        ref_run = pytrec_eval.parse_run(fr)
    measures = {"ndcg_cut_10", "map", "P_5", "recall_20"}
    ref = pytrec_eval.RelevanceEvaluator(ref_qrels, measures).evaluate(ref_run)
    ours = evaluate(es, metrics=["ndcg@10", "map", "precision@5", "recall@20"], per_query=True)
    for qid, values in ref.items():
        assert ours["ndcg@10"][qid] == pytest.approx(values["ndcg_cut_10"], abs=1e-12)
        assert ours["map"][qid] == pytest.approx(values["map"], abs=1e-12)
        assert ours["precision@5"][qid] == pytest.approx(values["P_5"], abs=1e-12)
        assert ours["recall@20"][qid] == pytest.approx(values["recall_20"], abs=1e-12)


def test_json_run_and_several_run_files(tmp_path: Path) -> None:
    qpath = write(tmp_path, "qrels", "q1 0 a 1\nq1 0 b 0\n")
    r1 = write(tmp_path, "dense.json", json.dumps({"q1": {"b": 0.9, "a": 0.5}}))
    r2 = write(tmp_path, "sparse.trec", "q1 Q0 a 1 7.5 bm25\n")
    es = load_evalset(qpath, runs=[r1, r2], score_kind={"dense": "similarity", "sparse": None})
    assert evaluate(es, "dense", metrics="mrr") == {"mrr": 0.5}
    assert evaluate(es, "sparse", metrics="mrr") == {"mrr": 1.0}
    assert es.runs["sparse"].score_kind is None
    assert es.qrels() == {"q1": {"a": 1, "b": 0}}
    assert es.run_dict("dense") == {"q1": {"b": 0.9, "a": 0.5}}
    with pytest.raises(ValueError, match="score_kind names unknown runs: nope"):
        load_evalset(qpath, runs=[r1], score_kind={"nope": "distance"})


@pytest.mark.parametrize(
    ("qrels", "run", "pattern"),
    [
        ("q1 0 a\n", None, r"qrels:1: a qrels line has 4 columns"),
        ("q1 0 a 1\nq1 0 b high\n", None, r"qrels:2, field 'grade': must be an integer"),
        ("q1 0 a 1\nq1 0 a 2\n", None, r"qrels:2: query 'q1', document 'a': grade 2 contra"),
        ("q1 0 a 1\n", "q1 Q0 a 1 0.5\n", r"run:1: a run line has 6 columns"),
        ("q1 0 a 1\n", "q1 Q0 a 1 0.5 t\nq1 Q0 b 2 x t\n", r"run:2, field 'score': must be a"),
        ("q1 0 a 1\n", '{"q1": {"a": "x"}}', r"run, field 'q1.a': a score must be a number"),
        ("q1 0 a 1\n", '{"q1": [1, 2]}', r"run, field 'q1': must be an object"),
        ("q1 0 a 1\n", '{"q1": {"a": 1}', r"run:1: malformed JSON"),
    ],
)
def test_trec_errors(tmp_path: Path, qrels: str, run: str | None, pattern: str) -> None:
    qpath = write(tmp_path, "qrels", qrels)
    runs = None if run is None else write(tmp_path, "run", run)
    fails(qpath, pattern, format="trec", runs=runs)


def test_trec_repeated_label_and_non_finite_score_are_counted(tmp_path: Path) -> None:
    qpath = write(tmp_path, "qrels", "q1 0 a 1\nq1 0 a 1\n")
    rpath = write(tmp_path, "run", "q1 Q0 a 1 nan t\nq1 Q0 b 2 0.5 t\nq1 Q0 b 3 0.4 t\n")
    es = load_evalset(qpath, runs=rpath)
    assert es.report.counts() == {
        ProblemKind.DUPLICATE_LABEL: 1,
        ProblemKind.INVALID_SCORE: 1,
        ProblemKind.DUPLICATE_CANDIDATE: 1,
    }
    assert es.arrays().doc_ids(0) == ["b", "a"]


def test_trec_lines_starting_with_hash_are_records_when_they_can_be(tmp_path: Path) -> None:
    """CR-47: '#7 0 docA 1' is a label of query '#7', as pytrec_eval reads it (trec_eval
    9 has no comments; trec_eval 10 skips every '#' line); a '#' line that cannot be a
    record is a comment. The format is detected from such a line too."""
    qrels = write(tmp_path, "qrels", "#7 0 docA 1\n#7 0 docB 0\nq1 0 docA 1\n")
    run = write(tmp_path, "run", "#7 Q0 docA 1 0.9 r\n#7 Q0 docB 2 0.5 r\nq1 Q0 docA 1 0.9 r\n")
    es = load_evalset(qrels, runs=run)
    assert es.qids == ("#7", "q1") and not es.report.problems
    expected = pytrec_eval.RelevanceEvaluator(
        {"#7": {"docA": 1, "docB": 0}, "q1": {"docA": 1}}, {"ndcg"}
    ).evaluate({"#7": {"docA": 0.9, "docB": 0.5}, "q1": {"docA": 0.9}})
    assert evaluate(es, metrics="ndcg", per_query=True)["ndcg"] == {
        q: v["ndcg"] for q, v in expected.items()
    }
    only = write(tmp_path, "only", "#7 0 docA 1\n")
    assert load_evalset(only).qids == ("#7",)
    commented = write(tmp_path, "commented", "# query iter doc grade\n#7 0 docA 1\n# done\n")
    assert load_evalset(commented).qids == ("#7",)
    fails(write(tmp_path, "seven", "#7 0 docA 7\n"), r"seven:1, field 'grade': must be an")


# --- BEIR -----------------------------------------------------------------------------


def beir(tmp_path: Path, qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n") -> Path:
    root = tmp_path / "scifact"
    write(root, "corpus.jsonl", '{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": "y"}\n')
    write(root, "queries.jsonl", '{"_id": "q1", "text": "first?"}\n{"_id": "q2", "text": "?"}\n')
    write(root, "qrels/test.tsv", qrels)
    return root


def test_beir_folder_with_a_run(tmp_path: Path) -> None:
    root = beir(tmp_path)
    run = write(tmp_path, "run.trec", "q1 Q0 d2 1 2.0 x\nq1 Q0 d1 2 1.0 x\nq1 Q0 d9 3 0.5 x\n")
    assert detect_format(root) == "beir"
    es = load_evalset(root, runs=run)
    assert es.queries["q1"].text == "first?"
    assert es.qids == ("q1",)  # q2 has no qrels in this split: not evaluated
    assert es.report.counts() == {ProblemKind.UNKNOWN_DOCUMENT: 1}  # d9
    assert evaluate(es, metrics="mrr") == {"mrr": 0.5}


def test_beir_problems_and_errors(tmp_path: Path) -> None:
    root = beir(tmp_path, "query-id\tcorpus-id\tscore\nq7\tdx\t1\n")
    es = load_evalset(root)
    assert es.report.counts() == {ProblemKind.UNKNOWN_DOCUMENT: 1, ProblemKind.UNKNOWN_QUERY: 1}
    with pytest.raises(EvalSetError, match="no runs"):
        es.arrays()
    fails(root, r"no qrels for split 'dev'; found: test", split="dev")
    bad = beir(tmp_path / "b", "q1\td1\t1\textra\n")
    fails(bad, r"test\.tsv:1: a BEIR qrels line has 3 columns")
    write(bad, "corpus.jsonl", '{"id": "d1"}\n')
    fails(bad, r"corpus\.jsonl:1, field '_id': missing id")
    write(bad, "corpus.jsonl", '{"_id": "d1"}\n')
    write(bad, "qrels/dev.tsv", "q1\td1\t1\n")
    (bad / "qrels" / "test.tsv").unlink()
    (bad / "qrels" / "train.tsv").write_text("q1\td1\t1\n")
    fails(bad, "pick a qrels split with split=...; found: dev, train")


# --- UDCG authors' format ---------------------------------------------------------------


def udcg_file(tmp_path: Path, examples: Any, name: str = "ex.json") -> Path:
    return write(tmp_path, name, json.dumps(examples, indent=2))


def passage(doc: str, rel: bool, **models: float) -> dict[str, Any]:
    return {
        "doc_id": doc,
        "is_relevant": rel,
        "models_info": {m.replace("_", "/"): {"no_res_prob": p} for m, p in models.items()},
    }


def test_udcg_detection_and_model_choice(tmp_path: Path) -> None:
    passages = [passage("a", True, m_a=0.1, m_b=0.5), passage("b", False, m_a=0.2, m_b=0.0)]
    path = udcg_file(tmp_path, [{"example_id": "e1", "question": "q?", "passages": passages}])
    assert detect_format(path) == "udcg"
    fails(path, r"several models; pick one with model=...: m/a, m/b")
    fails(path, r"no passage has no_res_prob for model 'm/c'", model="m/c")
    es = load_evalset(path, model="m/b")
    assert es.arrays().utility[0].tolist() == pytest.approx([0.5, -1.0])
    assert evaluate(es, metrics="udcg(gamma=1)")["udcg(gamma=1)"] == pytest.approx(
        1 / (1 + math.exp(0.25))
    )


@pytest.mark.parametrize(
    ("examples", "pattern"),
    [
        ({"example_id": "e"}, r"ex\.json:1: a UDCG file is a JSON list of examples"),
        ([{"question": "q", "passages": []}], r"ex\.json:2, field '\[0\]\.example_id': missing"),
        ([{"example_id": "e"}], r"field '\[0\]\.passages': missing list of passages"),
        (
            [{"example_id": "e", "passages": [{"doc_id": "a", "is_relevant": "yes"}]}],
            r"field '\[0\]\.passages\[0\]\.is_relevant': must be true or false",
        ),
        (
            [{"example_id": "e", "passages": [passage("a", True, m=1.5)]}],
            r"'\[0\]\.passages\[0\]\.models_info\.m\.no_res_prob': must be a number in \[0, 1\]",
        ),
        (
            [{"example_id": "e", "passages": [passage("a", True, m=0.1), passage("b", False)]}],
            r"passage 'b' of example 'e' has no no_res_prob for model 'm'",
        ),
        (
            [{"example_id": "e", "passages": []}, {"example_id": "e", "passages": []}],
            r"field '\[1\]\.example_id': example id 'e' was already used on line 2",
        ),
    ],
)
def test_udcg_errors(tmp_path: Path, examples: Any, pattern: str) -> None:
    fails(udcg_file(tmp_path, examples), pattern, format="udcg")


def test_udcg_malformed_json_reports_the_line(tmp_path: Path) -> None:
    good = json.dumps({"example_id": "e1", "passages": [passage("a", True)]}, indent=2)
    path = write(tmp_path, "bad.json", "[\n" + good + ",\n" + '{"example_id": "e2", }' + "\n]")
    err = fails(path, r"bad\.json:\d+: malformed JSON")
    assert err.line == good.count("\n") + 3
    fails(write(tmp_path, "open.json", "[\n" + good), r"the list is not closed")
    fails(write(tmp_path, "comma.json", "[" + good + " " + good + "]"), r"expected ','")


# --- detection and the EvalSet API ----------------------------------------------------


def test_detect_format_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalSetError, match="is not an eval set format"):
        detect_format(write(tmp_path, "run.json", '{"q": {"a": 1}}'))
    with pytest.raises(EvalSetError, match=r"x\.txt:2: cannot detect the format"):
        detect_format(write(tmp_path, "x.txt", "# c\nhello world\n"))
    with pytest.raises(EvalSetError, match=r"neither qrels/ nor corpus\.jsonl"):
        detect_format(tmp_path)
    with pytest.raises(ValueError, match="format must be one of"):
        load_evalset(write(tmp_path, "q", "q 0 a 1\n"), format="csv")
    with pytest.raises(ValueError, match="model= applies to UDCG files only"):
        load_evalset(write(tmp_path, "q", "q 0 a 1\n"), model="m")


def test_a_csv_file_is_refused_naming_the_formats_and_the_table_path(tmp_path: Path) -> None:
    path = write(tmp_path, "labels.csv", "query_id,doc_id,relevance\nq1,d1,1\n")
    message = str(fails(path, r"labels\.csv:1: cannot detect the format"))
    assert "format=" not in message  # no format reads CSV; the CLI has no such option
    assert "EvalSet.from_dicts(pandas.read_csv(...))" in message
    pandas = pytest.importorskip("pandas")
    assert EvalSet.from_dicts(pandas.read_csv(path)).qids == ("q1",)  # the path it names


def test_a_folder_holding_an_evalset_file_names_the_calls_that_read_it(tmp_path: Path) -> None:
    # examples/notes's layout: evalset.jsonl, corpus.jsonl beside it, runs/; the
    # corpus.jsonl made it read as a BEIR folder ("pick a qrels split ...; found: none")
    folder = tmp_path / "notes"
    labels = jsonl(folder, {"query_id": "q1", "relevant": ["d1"]}, name="evalset.jsonl")
    write(folder, "corpus.jsonl", '{"id": "d1", "text": "x"}\n')
    write(folder, "runs/bm25.trec", "q1 Q0 d1 1 2.0 bm25\n")
    error = fails(folder, "a folder holding evalset.jsonl")
    message = str(error)
    assert "\n" not in message
    assert f"load_evalset({str(labels)!r})" in message
    assert f"load_inputs({str(folder)!r})" in message
    assert "split" not in message
    assert load_evalset(labels).qids == ("q1",)  # the call it names works


def _read_toy(path: Path, rep: Reporter, options: ReadOptions) -> ColumnarRead:
    """A toy format, ``query doc grade`` separated by commas, one label a line."""
    labels: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, doc, grade = line.split(",")
        labels.setdefault(qid, {})[doc] = int(grade)
    columns = ColumnarLabels.of_labels({q: Labels(g) for q, g in labels.items()}, str(path))
    return ColumnarRead(query_view(columns), columns, columns.label_lines(), {})


def test_a_format_registered_from_outside_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a format added to FORMATS (here, by this test) is detected and read by
    load_evalset, with no change to evalset.py; the options of other formats still
    refuse it."""
    toy = Format("toy", lambda path, head: head is not None and head.count(",") == 2, _read_toy)
    monkeypatch.setitem(FORMATS, "toy", toy)
    path = write(tmp_path, "labels.txt", "q1,a,2\nq1,b,0\nq2,c,1\n")
    assert detect_format(path) == "toy"
    es = load_evalset(path, runs=write(tmp_path, "bm25.trec", "q1 Q0 b 1 2.0 t\n"))
    assert es.qrels() == {"q1": {"a": 2, "b": 0}, "q2": {"c": 1}}
    assert es.run_dict("bm25") == {"q1": {"b": 2.0}}
    assert [p.kind for p in es.report.problems] == [ProblemKind.LABELS_WITHOUT_RUN]
    with pytest.raises(EvalSetError, match="split= applies to BEIR folders only"):
        load_evalset(path, format="toy", split="dev")
    with pytest.raises(
        EvalSetError, match=r"format must be one of ragas, llamaindex, jsonl, trec, beir, udcg, toy"
    ):
        load_evalset(path, format="csv")


def test_from_dicts_and_cached_arrays() -> None:
    es = EvalSet.from_dicts(
        {"q1": {"a": 1}, "q2": {"b": 2}},
        {"r": {"q1": {"a": 0.9, "x": 0.8}, "q2": {"c": 0.1}}},
        distractors={"q1": ["x"]},
    )
    assert es.labels["q1"].grades == {"a": 1, "x": 0}
    first = es.arrays()
    assert es.arrays() is first
    assert es.arrays(profile="medical") is not first
    assert es.arrays(profile="medical").grades is first.grades  # profiles share conversion
    assert first.utility[0, :2].tolist() == [1.0, -1.0]
    with pytest.raises(ValueError, match="no run named 'zz'; runs: r"):
        es.arrays("zz")
    with pytest.raises(EvalSetError, match="both relevant and a known distractor"):
        EvalSet.from_dicts({"q": {"a": 1}}, distractors={"q": ["a"]})
    assert evaluate(es.qrels(), es.run_dict(), ["ndcg@2"]) == evaluate(es, metrics=["ndcg@2"])
    assert repr(es) == "EvalSet(2 queries, runs=['r'], problems=0)"


def test_plain_dicts_with_wrong_types_are_named() -> None:
    with pytest.raises(TypeError, match=r"run\['q'\] must be a mapping .*, got list"):
        evaluate({"q": {"a": 1}}, {"q": ["a"]}, "ndcg")  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"qrels\['q'\] must be a mapping"):
        evaluate({"q": ["a"]}, {"q": {"a": 1.0}}, "ndcg")  # type: ignore[dict-item]
    with pytest.raises(EvalSetError, match="run 'r': the score of document 'a' in query 'q'"):
        EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": {"a": "high"}}})  # type: ignore[dict-item]
    es = EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": {"a": None, "b": 0.5}}})  # type: ignore[dict-item]
    assert es.arrays().doc_ids(0) == ["b", "a"]


def test_run_scores_of_any_number_type_become_float_columns() -> None:
    """An EvalSet built from Run dicts holds each score as float64 whatever its Python
    type (int, bool, numpy float, a numeric string), and ``None`` as NaN (unscored), as
    numpy reads them; the columns are gathered in blocks, so a value that is not a plain
    float must not stop or shift the others."""
    import numpy as np

    from ragguard.calibration.data.evalset import Labels, Query, Run

    scores = {"a": None, "b": 2, "c": np.float32(0.5), "d": "0.25", "e": True}
    es = EvalSet(
        {"q": Query("q"), "p": Query("p")},
        {"q": Labels({"b": 1}), "p": Labels({"x": 1})},
        {"r": Run("r", {"q": scores, "p": {"x": 0.125}})},  # type: ignore[dict-item]
    )
    got = es.run_dict()
    assert math.isnan(got["q"].pop("a"))
    assert got == {"q": {"b": 2.0, "c": 0.5, "d": 0.25, "e": 1.0}, "p": {"x": 0.125}}
    assert es.arrays().doc_ids(0) == ["b", "e", "c", "d", "a"]


def test_the_data_fingerprint_is_pinned(tmp_path: Path) -> None:
    """The data's sha256 (``data_sha256`` of every written config, the key of cached
    scores) stays what it was: grades, known distractors, utilities, abstention
    probabilities and stated counts (hashed column-wise since one path serves them
    all), and plain grades from dicts. Values computed by the previous implementation,
    which hashed rich labels through per-query dicts."""
    from ragguard.calibration.fit.result import data_fingerprint

    lines = [
        {"query_id": "q1", "relevant": {"a": 2, "é": 1}, "not_relevant": ["b"],
         "distractors": ["c"], "utilities": {"a": 0.5, "u": -0.25},
         "candidates": [{"id": "c", "score": 0.9}, {"id": "a", "score": 0.5}]},
        {"query_id": "q2", "relevant": ["z"], "no_response": {"z": 0.1, "y": 0.75},
         "num_relevant": 3, "candidates": [{"id": "y", "score": None}, {"id": "z", "score": 1}]},
        {"query_id": "q3", "not_relevant": ["a"], "candidates": [{"id": "a", "score": 0.2}]},
    ]  # fmt: skip
    path = tmp_path / "pin.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    rich = "c50143856f1bff7cf876acc24d071df232bc92bf1d622de6b69ecc5f05334948"
    assert data_fingerprint(load_evalset(path)) == rich
    es = EvalSet.from_dicts(
        {"q1": {"a": 2, "b": 0}, "q2": {"z": 1}},
        {"r": {"q1": {"a": 0.5, "c": 0.9}, "q2": {"z": 1.0}}},
    )
    plain = "4308ec8f0230238dd3ea3e48dd0050f59b5164f46df76183ba7ecbca55c53d0d"
    assert data_fingerprint(es) == plain


# --- files as users write them --------------------------------------------------------

BOM = "\ufeff"  # what "UTF-8 with BOM" editors write first; encoded: EF BB BF


def test_a_byte_order_mark_is_skipped_in_every_format(tmp_path: Path) -> None:
    qrels, run = "q01 0 a 2\nq01 0 b 0\nq02 0 c 1\n", "q01 Q0 b 1 2.0 t\nq01 Q0 a 2 1.0 t\n"
    plain = load_evalset(write(tmp_path, "p/qrels", qrels), runs=write(tmp_path, "p/r", run))
    es = load_evalset(
        write(tmp_path, "bom/qrels", BOM + qrels), runs=write(tmp_path, "bom/r", BOM + run)
    )
    assert (tmp_path / "bom" / "qrels").read_bytes()[:3] == b"\xef\xbb\xbf"
    assert es.qids == plain.qids == ("q01", "q02")
    assert es.run_dict() == plain.run_dict()
    assert [p.message for p in es.report.problems] == [p.message for p in plain.report.problems]
    assert evaluate(es, metrics=["ndcg@2"]) == evaluate(plain, metrics=["ndcg@2"])

    json_run = write(tmp_path, "bom/r.json", BOM + '{"q01": {"a": 1.0}}')
    assert load_evalset(tmp_path / "bom" / "qrels", runs=json_run).run_dict() == {"q01": {"a": 1.0}}
    lines = BOM + json.dumps({"query_id": "q1", "relevant": ["a"]}) + "\n"
    assert load_evalset(write(tmp_path, "e.jsonl", lines)).qids == ("q1",)
    root = beir(tmp_path, BOM + "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    write(root, "queries.jsonl", BOM + '{"_id": "q1", "text": "first?"}\n')
    beir_es = load_evalset(root)
    assert beir_es.qids == ("q1",) and beir_es.queries["q1"].text == "first?"
    assert not beir_es.report
    udcg = [{"example_id": "x", "passages": [{"doc_id": "d", "is_relevant": True}]}]
    assert load_evalset(write(tmp_path, "u.json", BOM + json.dumps(udcg))).qids == ("x",)


@pytest.mark.parametrize("grade", [6, 1000000])
def test_qrels_grades_above_the_scale_are_errors(tmp_path: Path, grade: int) -> None:
    err = fails(
        write(tmp_path, "qrels", f"q1 0 a 1\nq1 0 b {grade}\n"),
        rf"qrels:2, field 'grade': must be an integer up to 5 .*got {grade}",
        format="trec",
    )
    assert err.line == 2
    root = beir(tmp_path, f"query-id\tcorpus-id\tscore\nq1\td1\t{grade}\n")
    fails(root, rf"test\.tsv:2, field 'score': must be an integer up to 5 .*got {grade}")


def test_qrels_grades_share_the_jsonl_scale(tmp_path: Path) -> None:
    """TREC grades mean what JSONL's do: 1-5 relevant, 0 judged not relevant, -1 a known
    distractor; below -1 (TREC's -2 for junk) judged not relevant."""
    qrels = write(tmp_path, "qrels", "q1 0 a 5\nq1 0 b 0\nq1 0 c -2\nq1 0 d -1\n")
    line = {"query_id": "q1", "relevant": {"a": 5}, "not_relevant": ["b", "c"]}
    line["distractors"] = ["d"]
    run = "q1 Q0 d 1 4.0 t\nq1 Q0 c 2 3.0 t\nq1 Q0 b 3 2.0 t\nq1 Q0 a 4 1.0 t\n"
    trec = load_evalset(qrels, runs=write(tmp_path, "run", run))
    same = load_evalset(jsonl(tmp_path, line), runs=tmp_path / "run")
    assert trec.labels["q1"].grades == {"a": 5, "b": 0, "c": 0, "d": 0}
    assert trec.labels["q1"].distractors == {"d"}
    assert trec.labels["q1"] == same.labels["q1"]
    metrics = ["ndcg@3", "mrr", "udcg@3", "distractor_rate@3", "recall@2"]
    assert evaluate(trec, "run", metrics=metrics) == evaluate(same, "run", metrics=metrics)
    # the known distractor carries the profile's full penalty (medical: -1.0)
    arrays = trec.arrays("run", profile="medical")
    utility = dict(zip(arrays.doc_ids(0), arrays.utility[0].tolist(), strict=False))
    assert utility["d"] == -1.0 and utility["a"] == 1.0


def test_beir_query_ids_starting_with_hash_are_data(tmp_path: Path) -> None:
    """As in TREC files: a '#' line that has a BEIR record's columns is one."""
    root = beir(tmp_path, "query-id\tcorpus-id\tscore\n# by hand\n#7\td1\t1\nq1\td2\t1\n")
    write(root, "distractors.tsv", "# none known\n#7\td2\n")
    es = load_evalset(root)
    assert es.qids == ("#7", "q1")
    assert es.labels["#7"].grades == {"d1": 1, "d2": 0}
    assert es.labels["#7"].distractors == {"d2"}
    assert [p.kind for p in es.report.problems] == [ProblemKind.UNKNOWN_QUERY]  # no text


def test_beir_marks_distractors_by_grade_and_by_file(tmp_path: Path) -> None:
    root = beir(tmp_path, "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t-1\n")
    write(root, "distractors.tsv", "query-id\tcorpus-id\nq1\td3\nq9\td1\n")
    es = load_evalset(root)
    labels = es.labels["q1"]
    assert labels.distractors == {"d2", "d3"}
    assert labels.grades == {"d1": 1, "d2": 0, "d3": 0}
    # a distractor of a query the split does not label is reported, not invented
    assert any("q9" in p.message for p in es.report.problems)
    bad = beir(tmp_path / "bad")
    write(bad, "distractors.tsv", "q1\td1\textra\n")
    fails(bad, r"distractors.tsv:1: a distractors line has 2 columns")


def test_a_truncated_jsonl_line_reports_its_real_line_and_column(tmp_path: Path) -> None:
    cut = '{"query_id": "q2", "relevant": ['
    err = fails(
        jsonl(tmp_path, {"query_id": "q1", "relevant": ["a"]}, cut),
        rf"eval\.jsonl:2: malformed JSON: Expecting value \(column {len(cut) + 1}, the end",
    )
    assert err.line == 2
    bad = '{"query_id": "q3",, "relevant": ["a"]}'
    fails(
        jsonl(tmp_path, {"query_id": "q1"}, bad, name="mid.jsonl"),
        rf"mid\.jsonl:2: malformed JSON: .* \(column {bad.index(',,') + 2}\)$",
    )
    last = ' "q2": {"b":'
    run = write(tmp_path, "run.json", '{"q1": {"a": 1},\n' + last + "\n")
    fails(
        write(tmp_path, "qrels", "q1 0 a 1\n"),
        rf"run\.json:2: malformed JSON: Expecting value \(column {len(last) + 1}, the end of",
        runs=run,
    )


def test_bad_arguments_are_eval_set_errors(tmp_path: Path) -> None:
    qrels = write(tmp_path, "qrels", "q1 0 a 1\n")
    run = write(tmp_path, "r.trec", "q1 Q0 a 1 0.5 t\n")
    with pytest.raises(EvalSetError, match="format must be one of"):
        load_evalset(qrels, format="csv")
    with pytest.raises(EvalSetError, match="split= applies to BEIR folders only"):
        load_evalset(qrels, split="dev")
    with pytest.raises(
        EvalSetError, match=r"run 'r': score_kind must be one of similarity, distance, .*'cosine'"
    ):
        load_evalset(qrels, runs=run, score_kind="cosine")
    with pytest.raises(EvalSetError, match="score_kind must be one of"):
        EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": {"a": 0.5}}}, score_kind="cosine")
    es = EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": {"a": 0.5}}, "s": {"q": {"a": 1.0}}})
    with pytest.raises(EvalSetError, match="no run named 'zz'"):
        es.arrays("zz")
    with pytest.raises(EvalSetError, match="several runs; pick one of: r, s"):
        es.arrays()


# --- unanswerable queries ---------------------------------------------------------------

# q-ans: a relevant candidate; q-none: judged candidates, none relevant (unanswerable);
# q-dis: only a known distractor judged (unanswerable); q-open: no label at all (not
# judged: neither); q-miss: the relevant document was not retrieved (answerable in the
# corpus, not unanswerable)
UNANSWERABLE = ("q-none", "q-dis")
ANSWER_GRADES: dict[str, dict[str, int]] = {
    "q-ans": {"a1": 1, "a2": 0},
    "q-none": {"n1": 0, "n2": 0},
    "q-dis": {"x1": -1},
    "q-miss": {"m-gone": 2, "m1": 0},
}
ANSWER_RUN: dict[str, dict[str, float]] = {
    "q-ans": {"a1": 0.9, "a2": 0.4},
    "q-none": {"n1": 0.5, "n2": 0.3},
    "q-dis": {"x1": 0.7},
    "q-miss": {"m1": 0.6},
}


def _check_unanswerable(es: EvalSet, expected: tuple[str, ...] = UNANSWERABLE) -> None:
    assert es.unanswerable == expected
    for name in es.runs:
        a = es.arrays(name)
        assert tuple(q for q, u in zip(a.qids, a.unanswerable, strict=True) if u) == expected
        assert a.n_unanswerable == len(expected)


@pytest.mark.parametrize("columnar", ["1", "0"])
def test_unanswerable_queries_in_jsonl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columnar: str
) -> None:
    if columnar == "0":
        use_line_reader(monkeypatch)
    records = []
    for q, grades in ANSWER_GRADES.items():
        rec: dict[str, Any] = {
            "query_id": q,
            "relevant": [d for d, g in grades.items() if g >= 1],
            "not_relevant": [d for d, g in grades.items() if g == 0],
            "candidates": [{"id": d, "score": s} for d, s in ANSWER_RUN[q].items()],
        }
        if any(g < 0 for g in grades.values()):
            rec["distractors"] = [d for d, g in grades.items() if g < 0]
        records.append(rec)
    records.append({"query_id": "q-open", "relevant": [], "candidates": [{"id": "o1"}]})
    es = load_evalset(jsonl(tmp_path, *records))
    assert "q-open" in es.qids
    _check_unanswerable(es)
    # without distractors the file is read column-wise (pyarrow), unless turned off
    plain = [r for r in records if "distractors" not in r]
    es = load_evalset(jsonl(tmp_path, *plain, name="plain.jsonl"))
    _check_unanswerable(es, ("q-none",))
    # a stated number of relevant documents makes a query answerable in the corpus
    stated = [dict(r, num_relevant=1) if r["query_id"] == "q-none" else r for r in records]
    _check_unanswerable(load_evalset(jsonl(tmp_path, *stated, name="b.jsonl")), ("q-dis",))


@pytest.mark.parametrize("columnar", ["1", "0"])
def test_unanswerable_queries_in_trec_and_beir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columnar: str
) -> None:
    if columnar == "0":
        use_line_reader(monkeypatch)
    qrels = "".join(f"{q} 0 {d} {g}\n" for q, gs in ANSWER_GRADES.items() for d, g in gs.items())
    run = "".join(
        f"{q} Q0 {d} {i} {s} x\n"
        for q, c in ANSWER_RUN.items()
        for i, (d, s) in enumerate(c.items(), 1)
    )
    run_path = write(tmp_path, "run.trec", run)
    _check_unanswerable(load_evalset(write(tmp_path, "qrels.txt", qrels), runs=run_path))
    # without a negative grade the qrels are read column-wise (pyarrow), unless turned off
    plain = "".join(line for line in qrels.splitlines(keepends=True) if " -1" not in line)
    es = load_evalset(write(tmp_path, "plain.txt", plain), runs=run_path)
    _check_unanswerable(es, ("q-none",))
    tsv = "query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, gs in ANSWER_GRADES.items() for d, g in gs.items()
    )
    root = tmp_path / "beir"
    docs = sorted({d for gs in ANSWER_GRADES.values() for d in gs})
    write(root, "corpus.jsonl", "".join(json.dumps({"_id": d, "text": d}) + "\n" for d in docs))
    write(root, "queries.jsonl", "".join(json.dumps({"_id": q}) + "\n" for q in ANSWER_GRADES))
    write(root, "qrels/test.tsv", tsv)
    _check_unanswerable(load_evalset(root, runs=run_path))


def test_unanswerable_queries_in_udcg_files_tables_and_dicts(tmp_path: Path) -> None:
    examples = [
        {"example_id": "e-ans", "passages": [passage("a", True, m=0.1), passage("b", False, m=0)]},
        {"example_id": "e-none", "passages": [passage("c", False, m=0.9)]},
    ]
    _check_unanswerable(load_evalset(udcg_file(tmp_path, examples)), ("e-none",))
    _check_unanswerable(EvalSet.from_dicts(ANSWER_GRADES, {"r": ANSWER_RUN}))
    # the distractor of q-dis given as distractors=, not as a grade
    grades = {q: g for q, g in ANSWER_GRADES.items() if q != "q-dis"} | {"q-dis": {}}
    es = EvalSet.from_dicts(grades, {"r": ANSWER_RUN}, distractors={"q-dis": ["x1"]})
    _check_unanswerable(es)
    rows = [(q, d, g) for q, gs in ANSWER_GRADES.items() for d, g in gs.items()]
    cands = [(q, d, s) for q, c in ANSWER_RUN.items() for d, s in c.items()]
    pd = pytest.importorskip("pandas")
    qrels_df = pd.DataFrame(rows, columns=["qid", "docid", "grade"])
    run_df = pd.DataFrame(cands, columns=["qid", "docid", "score"])
    _check_unanswerable(EvalSet.from_dicts(qrels_df, {"r": run_df}))
    pl = pytest.importorskip("polars")
    _check_unanswerable(EvalSet.from_dicts(pl.from_pandas(qrels_df), {"r": pl.from_pandas(run_df)}))


# --- passage texts: read with the labels, once ------------------------------------------

TEXTS_JSONL = [
    {
        "query_id": "q1",
        "query": "first?",
        "relevant": ["d1"],
        "candidates": [
            {"id": "d1", "score": 0.9, "text": "one"},
            {"id": "d2", "score": 0.5},
            {"id": "d1", "score": 0.1, "text": "a repeat"},
            {"id": "d4", "score": 0.2, "text": None},
        ],
        "metadata": {"topic": "x", "n": [1, 2.5, None], "deep": {"k": "v"}},
    },
    {"query_id": "q2", "relevant": ["d1"], "candidates": [{"id": "d1", "text": "other one"}]},
]
BESIDE = (
    '{"id": "d2", "title": " Two ", "text": "two"}\n'
    '{"_id": "d1", "text": "corpus one"}\n{"doc_id": "d4", "title": "", "text": "four"}\n'
)


def careful_load(monkeypatch: pytest.MonkeyPatch, *args: Any, **kw: Any) -> EvalSet:
    """load_evalset by the line-by-line readers (the library's careful JSONL reader, the
    tests' reference BEIR reader)."""
    return careful(monkeypatch, *args, **kw)


@pytest.mark.parametrize("reader", ["column-wise", "careful"])
def test_jsonl_texts_metadata_and_the_corpus_beside_land_in_the_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    path = jsonl(tmp_path, *TEXTS_JSONL)
    beside = write(tmp_path, "corpus.jsonl", BESIDE)
    es = load_evalset(path) if reader == "column-wise" else careful_load(monkeypatch, path)
    t = es.texts
    assert t.files == (beside,)
    assert not t.loaded  # nothing built, the corpus beside not read, before a look-up
    # hand-checked: a text of the (query, passage) wins over the corpus's for the id; the
    # first of a repeated candidate wins; a null text falls back to the corpus; a title
    # goes on its own line, stripped as a title, blank ones ignored
    assert t.get("q1", "d1") == "one"
    assert t.get("q2", "d1") == "other one"
    assert t.get("q1", "d2") == " Two \ntwo"
    assert t.title("q1", "d2") == "Two"
    assert t.get("q1", "d4") == "four"
    assert t.title("q1", "d4") is None
    assert t.get("q1", "zz") is None
    assert t.loaded
    assert dict(t.by_pair) == {("q1", "d1"): "one", ("q2", "d1"): "other one"}
    assert dict(t.metadata) == {"q1": TEXTS_JSONL[0]["metadata"]}


def test_jsonl_runs_texts_and_texts_across_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Candidates of extra runs carry texts too (the careful reader reads ``runs``); read
    column-wise in blocks of a few lines, each text stays with its own query."""
    from ragguard.calibration.data.formats import beir as _columnar_json

    runs = dict(TEXTS_JSONL[1], runs={"bm25": [{"id": "d9", "text": "nine"}, {"id": "d1"}]})
    es = load_evalset(jsonl(tmp_path, TEXTS_JSONL[0], runs))
    assert (es.texts.get("q2", "d9"), es.texts.get("q2", "d1")) == ("nine", "other one")
    monkeypatch.setattr(_columnar_json, "_BLOCK", 64)
    lines = [
        {"query_id": f"q{i}", "relevant": [f"d{i}"], "metadata": {"i": i},
         "candidates": [{"id": f"d{i}", "text": f"text {i}"}, {"id": "x", "text": f"x of {i}"}]}
        for i in range(12)
    ]  # fmt: skip
    es = load_evalset(jsonl(tmp_path, *lines, name="blocks.jsonl"))
    assert type(es.labels).__name__ == "ColumnarLabels"
    for i in range(12):
        assert es.texts.get(f"q{i}", f"d{i}") == f"text {i}"
        assert es.texts.get(f"q{i}", "x") == f"x of {i}"
        assert es.texts.metadata[f"q{i}"] == {"i": i}


def test_udcg_passage_texts_titles_and_examples(tmp_path: Path) -> None:
    examples = [
        {"example_id": "e1", "question": "q?", "passages": [
            dict(passage("doc_1", True, m=0.1), title="T", text="first one"),
            dict(passage("doc_2", False, m=0.5), text="first two"),
            passage("doc_3", False, m=0.5),
        ]},
        {"example_id": "e2", "passages": [dict(passage("doc_1", True, m=0.2), text="second one")]},
    ]  # fmt: skip
    path = udcg_file(tmp_path, examples)
    t = load_evalset(path).texts
    # UDCG files reuse doc_1 across examples: texts are kept per example
    assert (t.get("e1", "doc_1"), t.get("e2", "doc_1")) == ("T\nfirst one", "second one")
    assert (t.title("e1", "doc_1"), t.title("e2", "doc_1")) == ("T", None)
    assert t.get("e1", "doc_2") == "first two"
    assert t.get("e1", "doc_3") is None
    assert t.udcg_examples == {"e1": examples[0], "e2": examples[1]}
    write(tmp_path, "corpus.jsonl", '{"_id": "doc_3", "text": "beside"}\n')
    assert load_evalset(path).texts.get("e1", "doc_3") == "beside"


@pytest.mark.parametrize("reader", ["column-wise", "careful"])
def test_beir_corpus_texts_and_titles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    root = beir(tmp_path)
    write(
        root,
        "corpus.jsonl",
        '{"_id": "d1", "title": "Hours", "text": "Closed Sundays."}\n'
        '{"_id": "d2", "title": "  ", "text": "y"}\n{"_id": "d3"}\n{"_id": "d4", "text": null}\n',
    )
    es = load_evalset(root) if reader == "column-wise" else careful_load(monkeypatch, root)
    t = es.texts
    assert not t.loaded and t.files == ()  # the folder's own corpus, read with its ids
    assert dict(t.by_doc) == {"d1": "Hours\nClosed Sundays.", "d2": "y"}
    assert dict(t.titles_by_doc) == {"d1": "Hours"}
    assert (t.get("q1", "d1"), t.title("q2", "d1")) == ("Hours\nClosed Sundays.", "Hours")
    assert t.get("q1", "d3") is None
    assert es.queries["q1"].text == "first?"
    # no title anywhere: no titles held
    write(root, "corpus.jsonl", '{"_id": "d1", "title": "", "text": "x"}\n{"_id": "d2"}\n')
    assert dict(load_evalset(root).texts.titles_by_doc) == {}


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl-careful", "udcg", "beir"])
def test_loaded_without_texts_the_same_set_keeps_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """``texts=False``: the labels, runs and queries of every format as with texts, no
    passage text, title, metadata or UDCG example (nor the corpus beside the file); a
    look-up says to load the texts, in one line naming the eval set."""
    if fmt.startswith("jsonl"):
        records = [dict(r) for r in TEXTS_JSONL]
        if fmt == "jsonl-careful":  # graded labels: read line by line
            records[0]["relevant"] = {"d1": 2}
        path = jsonl(tmp_path, *records)
        write(tmp_path, "corpus.jsonl", BESIDE)
    elif fmt == "udcg":
        path = udcg_file(tmp_path, [{"example_id": "e1", "passages": [
            dict(passage("doc_1", True, m=0.1), title="T", text="one")]}])  # fmt: skip
    else:
        path = beir(tmp_path)
    full, bare = load_evalset(path), load_evalset(path, texts=False)
    assert dict(bare.labels) == dict(full.labels) and dict(bare.queries) == dict(full.queries)
    assert str({n: dict(r.candidates) for n, r in bare.runs.items()}) == str(
        {n: dict(r.candidates) for n, r in full.runs.items()}
    )  # (str: NaN scores compare equal)
    qid = bare.qids[0]
    doc = next(iter(full.labels[qid].grades))
    assert full.texts.get(qid, doc) is not None
    assert bare.texts.files == ()
    looks = [
        lambda t: t.get(qid, doc), lambda t: t.title(qid, doc), lambda t: t.by_pair,
        lambda t: t.titles_by_doc, lambda t: t.metadata, lambda t: t.udcg_examples,
    ]  # fmt: skip
    for look in looks:
        with pytest.raises(EvalSetError) as err:
            look(bare.texts)
        message = str(err.value)
        assert message.startswith(f"{path}: ") and "load it with texts=True" in message
        assert "\n" not in message


def test_with_texts_adds_corpus_files_and_passages_to_a_copy(tmp_path: Path) -> None:
    path = jsonl(tmp_path, *TEXTS_JSONL)
    write(tmp_path, "corpus.jsonl", BESIDE)
    first = write(tmp_path, "more/a.jsonl", '{"_id": "d2", "text": "from a"}\n{"_id": "d5", '
                  '"title": "Five", "text": "five"}\n{"_id": "d6", "text": "six"}\n')  # fmt: skip
    second = write(tmp_path, "more/b.jsonl.gz", "")
    import gzip

    second.write_bytes(gzip.compress(b'{"_id": "d5", "text": "five again"}\n'))
    es = load_evalset(path, runs=write(tmp_path, "r.trec", "q1 Q0 d2 1 1.0 r\n"))
    passages = {"d6": "six given", "d1": "not for q1"}
    more = es.with_texts(corpus=[first, second], passages=passages)
    passages["d6"] = "changed later"  # the caller's dict stays theirs
    t = more.texts
    # later sources win for a passage id: the corpus beside < a.jsonl < b.jsonl.gz <
    # passages; a text given for the (query, passage) wins over all
    assert t.get("q1", "d2") == "from a"
    assert (t.get("q1", "d5"), t.title("q1", "d5")) == ("five again", "Five")
    assert t.get("q1", "d6") == "six given"
    assert (t.get("q1", "d1"), t.get("q3", "d1")) == ("one", "not for q1")
    assert t.files == (tmp_path / "corpus.jsonl", first, second)
    # the eval set it came from is unchanged; the copy shares its data and arrays
    assert es.texts.get("q1", "d2") == " Two \ntwo" and es.texts.get("q1", "d6") is None
    assert more.labels is es.labels and more.runs == es.runs
    assert more.arrays("default") is es.arrays("default")
    assert es.with_texts() is es
    with pytest.raises(EvalSetError, match=r"missing\.jsonl: no such corpus file"):
        es.with_texts(corpus=[tmp_path / "missing.jsonl"])


def test_from_dicts_takes_passage_texts() -> None:
    passages = {"a": "alpha", "b": "beta"}
    es = EvalSet.from_dicts({"q": {"a": 1}}, {"r": {"q": {"a": 0.9, "b": 0.1}}}, passages=passages)
    passages["a"] = "changed"
    assert (es.texts.get("q", "a"), es.texts.get("q", "b")) == ("alpha", "beta")
    assert EvalSet.from_dicts({"q": {"a": 1}}).texts.get("q", "a") is None


def test_a_corpus_file_is_read_by_the_one_corpus_reader(tmp_path: Path) -> None:
    """Issue 34: a corpus file is read as a BEIR corpus.jsonl is (column-wise), with its
    id under ``_id``, ``id`` or ``doc_id``, the first of them present winning, also
    where a line names another key than the first line (an explicit null included)."""
    lines = [
        '{"id": "a", "text": "A"}',
        '{"doc_id": "b", "text": "B", "title": "Bee"}',
        '{"_id": "c", "id": "x", "text": "C"}',
        '{"id": "a", "text": "A again"}',
    ]
    corpus = write(tmp_path, "c.jsonl", "\n".join(lines) + "\n")
    es = EvalSet.from_dicts({"q": {"a": 1}}).with_texts(corpus=[corpus])
    assert dict(es.texts.by_doc) == {"a": "A again", "b": "Bee\nB", "c": "C"}
    assert dict(es.texts.titles_by_doc) == {"b": "Bee"}
    plain = write(
        tmp_path, "p.jsonl", '{"id": "a", "text": "A"}\n{"_id": null, "id": "b", "text": "B"}\n'
    )
    with pytest.raises(EvalSetError, match=r"p\.jsonl:2, field '_id': missing passage id"):
        EvalSet.from_dicts({"q": {"a": 1}}).with_texts(corpus=[plain]).texts.get("q", "a")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"\n', r"bad\.jsonl:2: malformed JSON"),
        ('{"_id": "a", "text": "x"}\n[1]\n', r"bad\.jsonl:2: each line must be a JSON object"),
        ('{"_id": "a", "text": 5}\n', r"bad\.jsonl:1, field 'text': missing or non-string"),
        ('{"_id": "a"}\n', r"bad\.jsonl:1, field 'text': missing or non-string"),
        ('{"text": "x"}\n', r"bad\.jsonl:1, field '_id': missing passage id"),
        (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "caf\xe9"}\n', r"bad\.jsonl:2: not UTF"),
    ],
)
def test_a_bad_corpus_file_names_file_and_line(
    tmp_path: Path, text: str | bytes, where: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    es = EvalSet.from_dicts({"q": {"a": 1}}).with_texts(corpus=[bad])  # read when asked
    with pytest.raises(EvalSetError, match=where):
        es.texts.get("q", "a")


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("eval.jsonl", [TEXTS_JSONL[0], {"query_id": "q2", "candidates": [{"id": "a",
         "text": 5}]}], r"eval\.jsonl:2, field 'candidates\[0\]\.text': must be a string"),
        ("eval.jsonl", [{"query_id": "q2", "runs": {"r": [{"id": "a", "text": ["x"]}]}}],
         r"eval\.jsonl:1, field 'runs\.r\[0\]\.text': must be a string or null, got list"),
        ("ex.json", [{"example_id": "e", "passages": [dict(passage("a", True), text=1)]}],
         r"ex\.json:2, field '\[0\]\.passages\[0\]\.text': a text must be a string"),
    ],
)  # fmt: skip
def test_a_text_that_is_not_a_string_is_named(
    tmp_path: Path, name: str, content: list[Any], where: str
) -> None:
    path = jsonl(tmp_path, *content, name=name) if name.endswith("l") else None
    path = path or udcg_file(tmp_path, content, name)
    fails(path, where)
