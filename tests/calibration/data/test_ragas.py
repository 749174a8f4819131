"""RAGAS testsets through ``load_evalset``: their reference contexts matched by text to
the ``corpus.jsonl`` beside them.

ragas is not installed here (its testset module needs langchain, datasets, openai, ...),
so tests/data/ragas/testset.jsonl and testset.csv were written by hand with the code of
ragas 0.4.3 (the PyPI wheel): ``Testset.to_list`` (ragas/testset/synthesizers/
testset_schema.py: ``eval_sample.model_dump(exclude_none=True)`` plus
``synthesizer_name``), ``RagasDataset.to_jsonl`` (ragas/dataset_schema.py: one
``json.dumps(sample, ensure_ascii=False)`` per line) and ``RagasDataset.to_csv`` (the
same file: ``csv.DictWriter``, so a list cell is the list's ``str``, ``['...']``)."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.data.evalset import ProblemKind, detect_format
from ragguard.errors import EvalSetError

DATA = Path(__file__).resolve().parents[2] / "data" / "ragas"
QRELS = {"q1": {"doc1": 1}, "q2": {"doc2": 1}, "q3": {"doc3": 1, "doc4": 1}, "q4": {"doc6": 1}}
CORPUS = [
    {"_id": "a", "text": "Hamlet was written by William Shakespeare."},
    {"_id": "b", "text": "Lima is the capital of Peru."},
]


def write_testset(tmp_path: Path, *samples: dict[str, Any] | str, corpus: Any = CORPUS) -> Path:
    """A testset.jsonl as ``to_jsonl`` writes one, with a corpus.jsonl beside it (none
    when ``corpus`` is ``None``)."""
    lines = [s if isinstance(s, str) else json.dumps(s, ensure_ascii=False) for s in samples]
    path = tmp_path / "testset.jsonl"
    path.write_text("\n".join(lines) + "\n")
    if corpus is not None:
        (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus))
    return path


def sample(query: Any = "Who wrote Hamlet?", contexts: Any = None, **more: Any) -> dict[str, Any]:
    out = {
        "user_input": query,
        "reference_contexts": [CORPUS[0]["text"]] if contexts is None else contexts,
        "reference": "Shakespeare.",
        "synthesizer_name": "single_hop_specifc_query_synthesizer",
    }
    return out | more


def one_line_error(path: Path, pattern: str, **kw: Any) -> EvalSetError:
    """The error loading ``path`` raises: one line, naming the file, matching ``pattern``."""
    with pytest.raises(EvalSetError) as info:
        load_evalset(path, **kw)
    message = str(info.value)
    assert "\n" not in message and str(path.parent) in message, message
    assert re.search(pattern, message), message
    return info.value


@pytest.mark.parametrize("name", ["testset.jsonl", "testset.csv"])
def test_the_exports_load_detected_matched_by_text_with_silver_labels(name: str) -> None:
    path = DATA / name
    assert detect_format(path) == "ragas"
    es = load_evalset(path)
    assert es.silver and not es.runs and not es.report
    # doc1's context has a line break where the corpus has a space, and the corpus
    # gives doc1 a title; q3's second context has spaces around it
    assert es.qrels() == QRELS
    first = json.loads((DATA / "testset.jsonl").read_text().splitlines()[0])
    assert es.queries["q1"].text == first["user_input"]
    assert es.queries["q1"].answers == (first["reference"],)
    assert (
        es.texts.get("q2", "doc2")
        == json.loads((DATA / "corpus.jsonl").read_text().splitlines()[1])["text"]
    )


def test_ragas_0_1_names_load_too(tmp_path: Path) -> None:
    old = {"question": "Who wrote Hamlet?", "contexts": [CORPUS[0]["text"]], "ground_truth": "S."}
    es = load_evalset(write_testset(tmp_path, old, {**old, "contexts": [CORPUS[1]["text"]]}))
    assert es.qrels() == {"q1": {"a": 1}, "q2": {"b": 1}}
    assert es.queries["q1"].answers == ("S.",)


def test_reference_context_ids_name_the_passages_without_a_corpus(tmp_path: Path) -> None:
    path = write_testset(tmp_path, sample(reference_context_ids=["p7"]), corpus=None)
    es = load_evalset(path)
    assert es.qrels() == {"q1": {"p7": 1}}
    assert es.texts.get("q1", "p7") == CORPUS[0]["text"]


def test_unmatched_contexts_are_reported_and_left_out(tmp_path: Path) -> None:
    path = write_testset(
        tmp_path,
        sample(contexts=[CORPUS[0]["text"], "A passage the corpus does not have."]),
        sample("Capital of Chile?", contexts=["Santiago is the capital of Chile."]),
        sample("Capital of Peru?", contexts=[CORPUS[1]["text"]]),
    )
    es = load_evalset(path)
    assert es.qrels() == {"q1": {"a": 1}, "q3": {"b": 1}}
    assert es.report.counts() == {ProblemKind.UNMATCHED_CONTEXT: 3}
    summary = es.report.summary()
    assert "testset.jsonl:1, field 'reference_contexts[1]'" in summary
    assert "query 'q2' is left out" in summary
    with pytest.raises(EvalSetError, match="unmatched_context"):
        load_evalset(path, strict=True)


def test_a_run_file_names_the_corpus_ids(tmp_path: Path) -> None:
    run = tmp_path / "bm25.trec"
    run.write_text("q1 Q0 a 1 7.5 bm25\nq1 Q0 b 2 3.0 bm25\n")
    es = load_evalset(write_testset(tmp_path, sample()), runs=run)
    assert es.run_dict("bm25") == {"q1": {"a": 7.5, "b": 3.0}}


def test_duplicated_corpus_texts_are_both_relevant_and_reported(tmp_path: Path) -> None:
    corpus = [*CORPUS, {"_id": "a2", "text": " Hamlet was written by  William Shakespeare.\n"}]
    es = load_evalset(write_testset(tmp_path, sample(), corpus=corpus))
    assert es.qrels() == {"q1": {"a": 1, "a2": 1}}
    assert es.report.counts() == {ProblemKind.DUPLICATE_TEXT: 1}


def test_a_1_mb_passage_loads_and_is_reported(tmp_path: Path) -> None:
    big = "word " * 209_716
    es = load_evalset(
        write_testset(tmp_path, sample(contexts=[big]), corpus=[{"_id": "big", "text": big}])
    )
    assert es.qrels() == {"q1": {"big": 1}}
    assert es.report.counts() == {ProblemKind.LONG_PASSAGE: 1}
    assert "passage 'big' has 1,048,580 characters" in es.report.summary()
    named = write_testset(tmp_path, sample(contexts=[big], reference_context_ids=["p1"]))
    assert load_evalset(named).report.counts() == {ProblemKind.LONG_PASSAGE: 1}
    table = tmp_path / "testset.csv"
    with table.open("w", newline="") as f:
        csv.writer(f).writerows([["user_input", "reference_contexts"], ["q?", str([big])]])
    one_line_error(table, r"testset.csv:2: a cell has over 131,072 characters")


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (sample(contexts="Hamlet was written"), r"'reference_contexts': must be a non-empty list"),
        (sample(contexts=[]), r"'reference_contexts': must be a non-empty list .*an empty list"),
        (sample(contexts=[None]), r"'reference_contexts\[0\]': must be a non-blank string"),
        (sample(query=None), r"'user_input': must be the query text, got None"),
        (sample(query=float("nan")), r"'user_input': must be the query text, got nan"),
        (sample(query=[{"content": "hi", "type": "human"}]), r"'user_input': a multi-turn"),
        (sample(reference_context_ids=["a", "b"]), r"has 2 ids for 1 reference contexts"),
        ('{"user_input": "x", "reference_contexts": ["y"', r"testset.jsonl:2: malformed JSON"),
    ],
)
def test_bad_samples_get_one_line_naming_file_line_and_field(
    tmp_path: Path, line: dict[str, Any] | str, pattern: str
) -> None:
    one_line_error(write_testset(tmp_path, sample(), line), pattern)


def test_bad_files_get_one_line(tmp_path: Path) -> None:
    one_line_error(
        write_testset(tmp_path, sample(), corpus=None), r"put the corpus .* as corpus.jsonl"
    )
    one_line_error(
        write_testset(tmp_path, sample(contexts=["Nothing like it."])),
        r"none of the 1 reference contexts matches a passage of .*corpus.jsonl",
    )
    empty = tmp_path / "testset.jsonl"
    empty.write_text("")
    one_line_error(empty, "no labelled queries found", format="ragas")
    empty.write_bytes(b'{"user_input": "\xff\xfe", "reference_contexts": ["\x00"]}\n')
    one_line_error(empty, "not UTF-8 text")
    write_testset(tmp_path, sample())
    (tmp_path / "corpus.jsonl").write_bytes(b"\x00\x01\xff binary\n")
    one_line_error(empty.with_name("testset.jsonl"), "corpus.jsonl:1: not UTF-8 text")


def test_bad_csv_cells_get_one_line(tmp_path: Path) -> None:
    shutil.copy(DATA / "corpus.jsonl", tmp_path)
    path = tmp_path / "testset.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["user_input", "reference_contexts", "reference"])
        out.writerow(["How tall is Everest?", "8,849 metres", "8,849 m"])
    assert detect_format(path) == "ragas"
    one_line_error(path, r"testset.csv:2, field 'reference_contexts': must be a list of strings")


def test_corpus_files_given_replace_the_corpus_beside(tmp_path: Path) -> None:
    path = write_testset(tmp_path, sample(), sample("Capital of Peru?", [CORPUS[1]["text"]]))
    elsewhere = tmp_path / "store"
    elsewhere.mkdir()
    (elsewhere / "one.jsonl").write_text(json.dumps({"id": "x1", "text": CORPUS[0]["text"]}))
    (elsewhere / "two.jsonl").write_text(json.dumps({"id": "x2", "text": CORPUS[1]["text"]}))
    es = load_evalset(path, corpus=[elsewhere / "one.jsonl", elsewhere / "two.jsonl"])
    assert es.qrels() == {"q1": {"x1": 1}, "q2": {"x2": 1}}
    (tmp_path / "corpus.jsonl").unlink()  # none beside: the files given suffice
    es = load_evalset(path, corpus=[elsewhere / "one.jsonl"])
    assert es.qrels() == {"q1": {"x1": 1}}
    assert es.report.counts() == {ProblemKind.UNMATCHED_CONTEXT: 2}  # q2's context, q2
