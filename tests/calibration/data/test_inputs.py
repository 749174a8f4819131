"""Where calibration data comes from: folders, run files, retriever factories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import Check, EvalSet, Split, calibrate, load_inputs
from ragguard.calibration.data.inputs import add_run, load_factory, retrieve_run
from ragguard.errors import EvalSetError, RetrieverError
from ragguard.scores import ScoreKind
from tests.calibration import retrievers
from tests.calibration.data.line_reader import use_line_reader
from tests.calibration.notes_beir import NOTES, notes_as_beir


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_folder_with_evalset_and_runs_is_an_eval_set() -> None:
    es = load_inputs(NOTES)
    assert list(es.runs) == ["bm25", "dense-minilm"]
    assert len(es.qids) == 51
    assert es.runs["bm25"].source == str(NOTES / "runs" / "bm25.trec")
    only = load_inputs(NOTES, [NOTES / "runs" / "bm25.trec"])
    assert list(only.runs) == ["bm25"]
    assert list(load_inputs(NOTES, folder_runs_too=False).runs) == []


def test_folder_variants(tmp_path: Path) -> None:
    trec = tmp_path / "trec"
    (trec / "runs").mkdir(parents=True)
    (trec / "qrels.txt").write_text("q1 0 a 1\nq2 0 b 1\n")
    (trec / "runs" / "mine.run").write_text("q1 Q0 a 1 2.0 x\nq2 Q0 c 1 1.0 x\n")
    (trec / "runs" / "notes.md").write_text("not a run")
    es = load_inputs(trec)
    assert list(es.runs) == ["mine"] and es.qids == ("q1", "q2")

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "runs").mkdir()
    (beir / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "what?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\n")
    (beir / "runs" / "bm25.json").write_text(json.dumps({"q1": {"a": 3.0, "b": 1.0}}))
    es = load_inputs(beir)
    assert list(es.runs) == ["bm25"] and es.queries["q1"].text == "what?"


def test_folder_and_path_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalSetError, match="no such file or folder"):
        load_inputs(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalSetError, match=r"holds no eval set: expected one of evalset\.jsonl"):
        load_inputs(tmp_path / "empty")
    with pytest.raises(EvalSetError, match="run file not found"):
        load_inputs(NOTES, [tmp_path / "nope.trec"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "evalset.jsonl").write_text('{"query_id": "q1", "relevant": ["a"]}\n{"query_id": \n')
    with pytest.raises(EvalSetError, match=r"evalset\.jsonl:2"):
        load_inputs(bad)


@pytest.mark.parametrize("depth", [None, 2])  # 2: fewer run lines than corpus documents
@pytest.mark.parametrize("columnar", ["1", "0"])
def test_examples_notes_as_a_beir_folder_loads_without_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columnar: str, depth: int | None
) -> None:
    """CR-33: every run document of examples/notes is in its corpus, and many are
    retrieved for several queries: no problem is reported, strict loading accepts it,
    and the labels are the JSONL eval set's."""
    if columnar == "0":
        use_line_reader(monkeypatch)
    folder = notes_as_beir(tmp_path, depth)
    es = load_inputs(folder, strict=True)
    assert not es.report.problems
    assert list(es.runs) == ["bm25", "dense-minilm"] and len(es.qids) == 51
    if columnar == "1":  # the column-wise readers really read it
        assert type(es.labels).__name__ == "ColumnarLabels"
        assert type(es.runs["bm25"].candidates).__name__ == "ColumnarCandidates"
    jsonl = load_inputs(NOTES)
    assert es.qids == jsonl.qids
    assert {q: dict(es.labels[q].grades) for q in es.qids} == {
        q: dict(jsonl.labels[q].grades) for q in jsonl.qids
    }


@pytest.mark.parametrize("columnar", ["1", "0"])
def test_examples_notes_as_a_beir_folder_with_known_distractors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columnar: str
) -> None:
    """The distractors of examples/notes as -1 grades and in distractors.tsv: the
    labels, known distractors and arrays are the JSONL eval set's, read column-wise."""
    if columnar == "0":
        use_line_reader(monkeypatch)
    es = load_inputs(notes_as_beir(tmp_path, distractors=True), strict=True)
    jsonl = load_inputs(NOTES)
    assert es.qids == jsonl.qids
    assert {q: es.labels[q] for q in es.qids} == {q: jsonl.labels[q] for q in jsonl.qids}
    assert sum(len(es.labels[q].distractors) for q in es.qids) > 20
    for run in ("bm25", "dense-minilm"):
        a, b = es.arrays(run), jsonl.arrays(run)
        np.testing.assert_array_equal(a.distractor, b.distractor)
        np.testing.assert_array_equal(a.utility, b.utility)


def test_add_run_refuses_a_second_run_of_the_same_name() -> None:
    es = load_inputs(NOTES)
    with pytest.raises(EvalSetError, match="two runs are named 'bm25'"):
        add_run(es, es.runs["bm25"])
    assert list(add_run(es, es.runs["bm25"], only=True).runs) == ["bm25"]


# --------------------------------------------------------------------------- factories


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)


def test_factory_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _module(tmp_path, monkeypatch, "rg_fac_ok", "def make():\n    return {'built': True}\n")
    assert load_factory("rg_fac_ok:make") == {"built": True}


@pytest.mark.parametrize(
    ("spec", "source", "message"),
    [
        ("no_colon", "", r"expects 'module:function'"),
        ("rg_fac_missing_xyz:make", None, r"import module 'rg_fac_missing_xyz'.*ModuleNotFound"),
        ("rg_fac_boom:make", "raise ValueError('bad config')\n", r"ValueError: bad config"),
        ("rg_fac_attr:make", "x = 1\n", r"has no attribute 'make'"),
        ("rg_fac_value:make", "make = 3\n", r"is not callable"),
        ("rg_fac_raises:make", "def make():\n    raise OSError('index missing')\n",
         r"rg_fac_raises:make\(\) raised OSError: index missing"),
    ],
)  # fmt: skip
def test_factory_errors_say_what_went_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str, source: str | None, message: str
) -> None:
    if source is not None and ":" in spec:
        _module(tmp_path, monkeypatch, spec.split(":")[0], source)
    with pytest.raises(RetrieverError, match=message):
        load_factory(spec)


# --------------------------------------------------------------------------- live retrieval


def test_live_langchain_retriever_gives_a_scored_run_that_calibrates() -> None:
    es = load_inputs(NOTES, folder_runs_too=False)
    calls: list[tuple[int, int]] = []
    retriever = load_factory("tests.calibration.retrievers:make_langchain_retriever")
    run = retrieve_run(es, retriever, name="keywords", on_query=lambda d, t: calls.append((d, t)))
    assert calls[0] == (1, 51) and calls[-1] == (51, 51) and len(calls) == 51
    assert run.score_kind is ScoreKind.SIMILARITY  # InMemoryVectorStore: cosine similarity
    assert all(len(c) == 10 for c in run.candidates.values())
    # the ids and scores are the store's own
    store = retriever.vectorstore
    text = es.queries["q01"].text
    expected = {d.id: s for d, s in store.similarity_search_with_score(text, k=10)}
    assert run.candidates["q01"] == pytest.approx(expected)
    result = calibrate(add_run(es, run), split=Split(holdout=0), check=Check(n_bootstrap=50))
    assert result.recommended.name == "keywords"


def test_live_llamaindex_retriever() -> None:
    es = load_inputs(NOTES, folder_runs_too=False)
    run = retrieve_run(es, retrievers.make_llamaindex_retriever(), name="li")
    assert run.score_kind is ScoreKind.SIMILARITY
    lc = retrieve_run(es, retrievers.make_langchain_retriever(), name="lc")
    # same embeddings, same cosine: the same candidates in the same order
    assert list(run.candidates["q05"]) == list(lc.candidates["q05"])
    assert retrieve_run(es, retrievers.make_llamaindex_retriever(), score_kind="probability")


def test_live_retrieval_errors() -> None:
    es = load_inputs(NOTES, folder_runs_too=False)
    with pytest.raises(RetrieverError, match=r"returned a builtins\.list, not a retriever"):
        retrieve_run(es, retrievers.make_list())
    with pytest.raises(RetrieverError, match="without an id"):
        retrieve_run(es, retrievers.make_retriever_without_ids())
    no_text = EvalSet.from_dicts({"q1": {"a": 1}, "q2": {"b": 1}}, queries={"q1": "what?"})
    with pytest.raises(RetrieverError, match=r"1 labelled queries have no text \(e\.g\. 'q2'\)"):
        retrieve_run(no_text, retrievers.make_langchain_retriever())
    with pytest.raises(RetrieverError, match="failed on query 'q01': ConnectionError: down"):
        retrieve_run(es, retrievers.make_broken_retriever())
