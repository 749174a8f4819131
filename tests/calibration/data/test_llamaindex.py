"""LlamaIndex ``EmbeddingQAFinetuneDataset`` JSON files through ``load_evalset``.

tests/data/llamaindex/qa_dataset.json was written by the real
``EmbeddingQAFinetuneDataset(...).save_json(path)`` of llama-index-finetuning 0.4.2
(llama_index/finetuning/embeddings/common.py; the class left llama_index.core, whose
0.14 installed here no longer has it); ``test_a_live_export_loads`` writes one afresh
where that package is installed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.data.evalset import ProblemKind, detect_format
from ragguard.errors import EvalSetError

DATASET = Path(__file__).resolve().parents[2] / "data" / "llamaindex" / "qa_dataset.json"

QUERIES = {"q1": "Who wrote Hamlet?", "q2": "What is the capital of Peru?"}
CORPUS = {"n1": "Hamlet was written by William Shakespeare.", "n2": "Lima is Peru's capital."}
RELEVANT = {"q1": ["n1"], "q2": ["n2"]}


def dataset(tmp_path: Path, **fields: Any) -> Path:
    """A dataset laid out as ``save_json`` writes one (indent 4), ``fields`` replacing
    (or, ``None``, removing) its parts."""
    data: dict[str, Any] = {
        "queries": QUERIES,
        "corpus": CORPUS,
        "relevant_docs": RELEVANT,
        "mode": "text",
    }
    data.update(fields)
    path = tmp_path / "qa.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}, indent=4))
    return path


def one_line_error(path: Path, pattern: str, **kw: Any) -> EvalSetError:
    """The error loading ``path`` raises: one line, naming the file, matching ``pattern``."""
    with pytest.raises(EvalSetError) as info:
        load_evalset(path, **kw)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    assert re.search(pattern, message), message
    return info.value


def test_the_real_export_loads_detected_with_silver_labels() -> None:
    assert detect_format(DATASET) == "llamaindex"
    es = load_evalset(DATASET)
    saved = json.loads(DATASET.read_text())
    assert es.silver and not es.runs and not es.report
    assert es.qids == tuple(saved["queries"])
    assert es.qrels() == {q: dict.fromkeys(d, 1) for q, d in saved["relevant_docs"].items()}
    assert {q: es.queries[q].text for q in es.qids} == saved["queries"]
    assert es.texts.by_doc == saved["corpus"]
    assert es.unanswerable == ()


def test_a_live_export_loads(tmp_path: Path) -> None:
    common = pytest.importorskip("llama_index.finetuning.embeddings.common")
    path = tmp_path / "live.json"
    common.EmbeddingQAFinetuneDataset(
        queries=QUERIES, corpus=CORPUS, relevant_docs=RELEVANT
    ).save_json(str(path))
    assert load_evalset(path).qrels() == {"q1": {"n1": 1}, "q2": {"n2": 1}}


def test_a_run_file_loads_with_it_and_unknown_nodes_are_reported(tmp_path: Path) -> None:
    run = tmp_path / "dense.trec"
    run.write_text("q1 Q0 n1 1 0.9 d\nq1 Q0 n2 2 0.4 d\nq2 Q0 n9 1 0.8 d\n")
    es = load_evalset(dataset(tmp_path), runs=run)
    assert es.run_dict("dense") == {"q1": {"n1": 0.9, "n2": 0.4}, "q2": {"n9": 0.8}}
    assert es.report.counts() == {ProblemKind.UNKNOWN_DOCUMENT: 1}


def test_nodes_with_the_same_text_are_labelled_alike_and_reported(tmp_path: Path) -> None:
    corpus = {
        **CORPUS,
        "n3": "  Hamlet was written by\nWilliam Shakespeare. ",
        "n4": "x" * 1_048_576,
    }
    es = load_evalset(dataset(tmp_path, corpus=corpus))
    assert es.qrels() == {"q1": {"n1": 1, "n3": 1}, "q2": {"n2": 1}}
    counts = es.report.counts()
    assert counts == {ProblemKind.DUPLICATE_TEXT: 1, ProblemKind.LONG_PASSAGE: 1}
    assert "'n1', 'n3'" in es.report.summary()
    assert "1,048,576 characters" in es.report.summary()


@pytest.mark.parametrize(
    ("fields", "pattern"),
    [
        ({"queries": ["Who wrote Hamlet?"]}, r"field 'queries': must be an object \{id: text\}"),
        ({"queries": {}}, r"field 'queries': is empty"),
        ({"corpus": None}, r"field 'corpus': must be an object \{id: text\}, got NoneType"),
        ({"relevant_docs": [["n1"]]}, r"field 'relevant_docs': must be an object"),
        (
            {"relevant_docs": {"q1": ["n1"], "q2": ["n7"]}},
            r"'relevant_docs.q2\[0\]': node 'n7' is not in corpus",
        ),
        ({"relevant_docs": {"q1": ["n1"]}}, r"query 'q2' has no relevant_docs entry"),
        (
            {"relevant_docs": {**RELEVANT, "q9": ["n1"]}},
            r"'relevant_docs.q9': query 'q9' is not in queries",
        ),
        (
            {"relevant_docs": {"q1": "n1", "q2": ["n2"]}},
            r"'relevant_docs.q1': must be a list of ids",
        ),
        ({"relevant_docs": {"q1": [], "q2": ["n2"]}}, r"'relevant_docs.q1': lists no node"),
        ({"queries": {"q1": None, "q2": "x"}}, r"'queries.q1': must be a string, got NoneType"),
        (
            {"corpus": {"n1": float("nan"), "n2": "y"}},
            r"'corpus.n1': must be a string, got float nan",
        ),
        ({"corpus": {"n1": " \n", "n2": "y"}}, r"'corpus.n1': must not be blank"),
        ({"mode": "image"}, r"field 'mode': only mode 'text' is read"),
    ],
)
def test_bad_datasets_get_one_line_naming_file_and_field(
    tmp_path: Path, fields: dict[str, Any], pattern: str
) -> None:
    one_line_error(dataset(tmp_path, **fields), pattern)


def test_empty_truncated_and_binary_files_get_one_line(tmp_path: Path) -> None:
    path = tmp_path / "qa.json"
    path.write_text("")
    one_line_error(path, "the file is empty")
    one_line_error(path, "the file is empty", format="llamaindex")
    path.write_text(dataset(tmp_path).read_text()[:-40])
    one_line_error(path, r"qa.json:15: malformed JSON: Unterminated string")
    path.write_bytes(b'{"queries": {"q1": "\xff\xfe\x00"}}')
    one_line_error(path, "not UTF-8 text")
    path.write_text('["not", "a dataset"]')
    one_line_error(path, "a LlamaIndex dataset is a JSON object", format="llamaindex")
