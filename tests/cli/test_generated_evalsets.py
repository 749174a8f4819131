"""``ragguard calibrate`` on the eval sets people generate: a LlamaIndex
``EmbeddingQAFinetuneDataset`` (the real export of tests/data/llamaindex) and a RAGAS
testset (tests/data/ragas, its corpus.jsonl beside it), each with a run file."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.cli.checks import error_line, invoke

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def run_file(path: Path, relevant: dict[str, str], docs: list[str]) -> Path:
    """A dense run: each query's relevant passage first, then the others."""
    lines = []
    for qid, doc in relevant.items():
        ranked = [doc, *(d for d in docs if d != doc)]
        lines += [f"{qid} Q0 {d} {r} {0.9 - 0.1 * r:.2f} dense" for r, d in enumerate(ranked, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kind", ["llamaindex", "ragas"])
def test_calibrate_reads_a_generated_set_and_writes_a_config(tmp_path: Path, kind: str) -> None:
    if kind == "llamaindex":
        evalset = DATA / "llamaindex" / "qa_dataset.json"
        relevant = {"q-eiffel": "node-1", "q-everest": "node-2", "q-amazon": "node-3"}
        docs = [f"node-{i}" for i in range(1, 7)]
    else:
        shutil.copytree(DATA / "ragas", tmp_path / "ragas")
        evalset = tmp_path / "ragas" / "testset.jsonl"
        relevant = {"q1": "doc1", "q2": "doc2", "q3": "doc3", "q4": "doc6"}
        docs = [f"doc{i}" for i in range(1, 7)]
    run = run_file(tmp_path / "dense.trec", relevant, docs)
    result = invoke("calibrate", evalset, "--run", run, "--no-report", "--out", "cfg.toml")
    assert result.exit_code == 0, result.output
    assert "4 queries" in result.stdout or "4 \nqueries" in result.stdout, result.stdout
    assert tomllib.loads(Path("cfg.toml").read_text())  # a config was written


def test_calibrate_refuses_a_bad_generated_set_in_one_line(tmp_path: Path) -> None:
    shutil.copy(DATA / "ragas" / "testset.jsonl", tmp_path)  # without its corpus.jsonl
    line = error_line(invoke("calibrate", "testset.jsonl", "--no-report"))
    assert "testset.jsonl" in line and "as corpus.jsonl" in line, line
    Path("qa.json").write_text('{"queries": {"q1": "Who?"}, "corpus": {"n1": "Him."}, ')
    line = error_line(invoke("calibrate", "qa.json", "--no-report"))
    assert "qa.json:1" in line and "malformed JSON" in line, line


def calibrate_with_report(tmp_path: Path, evalset: Path, run: Path, name: str) -> tuple[str, str]:
    """Calibrate ``evalset`` on ``run`` with a report: the console (whitespace runs as
    one space) and the report's Markdown; ``name`` names the outputs."""
    result = invoke(
        "calibrate", evalset, "--run", run, "--report", f"{name}-report", "--out", f"{name}.toml"
    )
    assert result.exit_code == 0, result.output
    report = (tmp_path / f"{name}-report" / "report.md").read_text(encoding="utf-8")
    return " ".join(result.stdout.split()), report


def test_calibrate_on_silver_labels_says_so_in_every_output(tmp_path: Path) -> None:
    shutil.copytree(DATA / "ragas", tmp_path / "ragas")
    relevant = {"q1": "doc1", "q2": "doc2", "q3": "doc3", "q4": "doc6"}
    run = run_file(tmp_path / "dense.trec", relevant, [f"doc{i}" for i in range(1, 7)])
    console, report = calibrate_with_report(tmp_path, tmp_path / "ragas/testset.jsonl", run, "s")
    # one console line: what silver labels cannot see, what the default floor means
    assert "Silver labels: generated: other passages that answer a question count as " in console
    assert "evidence_coverage>=0.9 means the source passage kept for 90% of the queries" in console
    # one report paragraph, with --min-recall and q3's two source passages (RAGAS multi-hop)
    (para,) = [p for p in report.split("\n\n") if p.startswith("**Silver labels.**")]
    para = " ".join(para.split())
    assert "distractor figures are therefore pessimistic" in para
    assert "`--min-recall X` asks the same as `evidence_coverage>=X`" in para
    assert "1 of the 4 queries has several relevant passages" in para
    assert tomllib.loads(Path("s.toml").read_text())["provenance"]["labels"] == "silver"
    out = invoke("calibrate", "ragas/testset.jsonl", "--run", run, "--no-report", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["labels"] == "silver"


def test_calibrate_on_judged_labels_says_nothing_of_silver(tmp_path: Path) -> None:
    # the RAGAS testset's own labels, as a judged JSONL eval set
    relevant = {"q1": "doc1", "q2": "doc2", "q3": "doc3", "q4": "doc6"}
    lines = [json.dumps({"query_id": q, "relevant": [d]}) for q, d in relevant.items()]
    (tmp_path / "judged.jsonl").write_text("\n".join(lines) + "\n")
    run = run_file(tmp_path / "dense.trec", relevant, [f"doc{i}" for i in range(1, 7)])
    console, report = calibrate_with_report(tmp_path, tmp_path / "judged.jsonl", run, "j")
    assert "silver" not in console.lower() and "silver" not in report.lower()
    assert "labels" not in tomllib.loads(Path("j.toml").read_text())["provenance"]
    out = invoke("calibrate", "judged.jsonl", "--run", run, "--no-report", "--json")
    assert out.exit_code == 0, out.output
    assert "labels" not in json.loads(out.stdout)


def test_calibrate_matches_ragas_contexts_against_the_corpus_given(tmp_path: Path) -> None:
    # the testset alone, its corpus elsewhere under another name
    shutil.copy(DATA / "ragas" / "testset.jsonl", tmp_path)
    (tmp_path / "store").mkdir()
    shutil.copy(DATA / "ragas" / "corpus.jsonl", tmp_path / "store" / "passages.jsonl")
    relevant = {"q1": "doc1", "q2": "doc2", "q3": "doc3", "q4": "doc6"}
    run = run_file(tmp_path / "dense.trec", relevant, [f"doc{i}" for i in range(1, 7)])
    args = ("calibrate", "testset.jsonl", "--run", run, "--no-report", "--json")
    out = invoke(*args, "--corpus", "store/passages.jsonl")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["queries"]["total"] == 4
    line = error_line(invoke(*args, "--corpus", "store/missing.jsonl"))
    assert "store/missing.jsonl" in line and "no such corpus file" in line, line
