"""``ragguard calibrate --rerank / --rerank-run``: a folder eval set with a corpus, a
module:callable reranker, the cache across runs, friendly errors."""

from __future__ import annotations

import json
import re
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
    assert "Two stages (written):" in text and "320 pairs scored, 0 from the cache" in text
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


def test_every_output_names_the_setting_the_config_holds(folder: Path, tmp_path: Path) -> None:
    """The "Chosen" line named the retrieval-only setting (and so did provenance.setting,
    --json and the report) while the config held the two-stage one. Each must name what
    the config holds, read here from the config's own fields, and one line says why the
    second stage is in it."""
    args = ["calibrate", str(folder), "--rerank", "myjudge:judge", "--min-recall", "0",
            "--max-k", "5"]  # fmt: skip
    res = runner.invoke(app, [*args, "--out", "a.toml", "--report", "rep"])
    assert res.exit_code == 0, res.output
    config = GuardConfig.from_file(tmp_path / "a.toml")
    assert config.rerank.enabled
    named = config.provenance["setting"]
    depth, cap = re.match(r"rerank top-(\d+), (?:top-|max_k=)(\d+)", named).groups()  # type: ignore[union-attr]
    assert (int(depth), int(cap)) == (config.rerank.top_n, config.max_k)
    if config.rerank.min_score is not None:
        assert f"min_score={config.rerank.min_score:g}" in named
    text = " ".join(res.stdout.split())
    assert f"Chosen: run dense with {named} (score_kind similarity)" in text
    assert text.count("Second stage ") == 1 and "Second stage written: better than" in text
    assert config.provenance["second_stage"].startswith("written: better than")
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert f"**Run `dense`: {named}**" in md
    assert f"`rerank.top_n = {config.rerank.top_n}`" in md
    doc = json.loads(runner.invoke(app, [*args, "--json", "--no-report", "--out", "b.toml"]).stdout)
    assert doc["recommended"]["setting"] == named and doc["recommended"]["two_stage"]
    assert doc["recommended"]["config"]["rerank"]["top_n"] == config.rerank.top_n
    assert doc["heldout_check"]["setting"] == config.provenance["chosen_on_calibration"]
    # the reranker sees through every look-alike: SAFE, so nothing to try next
    assert "Next:" not in text and "What to try next" not in md
