"""``ragguard calibrate`` on the eval sets people generate: a LlamaIndex
``EmbeddingQAFinetuneDataset`` (the real export of tests/data/llamaindex) and a RAGAS
testset (tests/data/ragas, its corpus.jsonl beside it), each with a run file."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from ragguard.cli import app
from tests.cli.checks import error_line

DATA = Path(__file__).resolve().parents[1] / "data"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def invoke(*args: object) -> Result:
    return runner.invoke(app, [str(a) for a in args])


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
