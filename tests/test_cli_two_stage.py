"""``ragguard calibrate --rerank / --rerank-run``: a folder eval set with a corpus, a
module:callable reranker, the cache across runs, friendly errors."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.cli import app
from tests.calibration.test_two_stage import make_data

runner = CliRunner()

RERANKER_MODULE = """
import hashlib

def _noise(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF - 0.5

def judge(query, texts):
    return [(3.0 if "answer" in t else -2.0) + 4.0 * _noise(t) for t in texts]

judge.score_kind = "logit"
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "cache"))
    es, texts, run = make_data()
    root = tmp_path / "data"
    (root / "runs").mkdir(parents=True)
    with (root / "evalset.jsonl").open("w") as fh:
        for qid in es.qids:
            relevant = sorted(es.labels[qid].grades)
            fh.write(json.dumps({"query_id": qid, "query": es.queries[qid].text,
                                 "relevant": relevant}) + "\n")  # fmt: skip
    with (root / "runs" / "dense.trec").open("w") as fh:
        for qid, cands in run.items():
            for rank, (doc, score) in enumerate(cands.items(), 1):
                fh.write(f"{qid} Q0 {doc} {rank} {score} dense\n")
    with (root / "corpus.jsonl").open("w") as fh:
        for doc, text in texts.items():
            fh.write(json.dumps({"_id": doc, "text": text}) + "\n")
    (tmp_path / "myjudge.py").write_text(RERANKER_MODULE)
    return root


def test_rerank_callable_end_to_end_and_cached(folder: Path, tmp_path: Path) -> None:
    args = ["calibrate", str(folder), "--rerank", "myjudge:judge", "--no-report",
            "--min-recall", "0", "--max-k", "5"]  # fmt: skip
    first = runner.invoke(app, [*args, "--out", "a.toml"])
    assert first.exit_code == 0, first.output
    text = " ".join(first.output.split())
    assert "Two stages:" in text and "320 pairs scored, 0 from the cache" in text
    assert "distractor rate: 0.750 retrieval-only, 0.000 with the reranker" in text
    assert "Brier" in text and "two-stage vs retrieval-only on udcg: better" in text
    data = tomllib.loads((tmp_path / "a.toml").read_text())
    assert data["rerank"]["enabled"] is True
    assert data["rerank"]["external"] == "myjudge:judge"
    assert data["rerank"]["probability_map"]["method"] == "platt"
    second = runner.invoke(app, [*args, "--out", "b.toml", "--objective", "utility"])
    assert second.exit_code == 0, second.output
    assert "0 pairs scored, 320 from the cache" in " ".join(second.output.split())
    # the written config runs with the named callable passed in
    import myjudge  # type: ignore[import-not-found]

    guard = ContextGuard(GuardConfig.from_file(tmp_path / "a.toml"), reranker=myjudge.judge)
    sel = guard.select("question 0", [Candidate("q00-d0", "passage q00-d0 with the answer", 0.7)])
    assert [c.id for c in sel.kept] == ["q00-d0"]


def test_rerank_errors_are_one_clear_line(folder: Path, tmp_path: Path) -> None:
    (folder / "corpus.jsonl").unlink()
    res = runner.invoke(app, ["calibrate", str(folder), "--rerank", "myjudge:judge",
                              "--no-report"])  # fmt: skip
    assert res.exit_code == 1
    assert "needs texts" in res.output and "Traceback" not in res.output
    run = tmp_path / "scores.trec"
    run.write_text("q00 Q0 q00-d0 1 2.5 judge\n")
    res = runner.invoke(app, ["calibrate", str(folder), "--rerank-run", str(run),
                              "--no-report"])  # fmt: skip
    assert res.exit_code == 1 and "--rerank-score-kind" in res.output
    res = runner.invoke(app, ["calibrate", str(folder), "--rerank", "myjudge:nope",
                              "--no-report"])  # fmt: skip
    assert res.exit_code == 1 and "no attribute" in res.output


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", "--rerank needs a cross-encoder (a local folder"),  # TS-17
        ("   ", "--rerank needs a cross-encoder (a local folder"),
        ("scorer/", "--rerank scorer/: no folder scorer/"),  # issue 21 item 12
        ("./scorer", "--rerank ./scorer: no folder ./scorer"),
        ("./scorer:fn", "--rerank ./scorer:fn: no folder ./scorer:fn"),
    ],
)
def test_a_rerank_spec_that_names_nothing_is_one_line(
    folder: Path, spec: str, expected: str
) -> None:
    res = runner.invoke(app, ["calibrate", str(folder), "--rerank", spec, "--no-report",
                              "--out", "a.toml"])  # fmt: skip
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {expected}"), res.output
    assert "Traceback" not in res.output and not Path("a.toml").exists()
