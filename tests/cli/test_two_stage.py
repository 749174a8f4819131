"""``ragguard calibrate --rerank / --rerank-run``: a folder eval set with a corpus, a
module:callable reranker, the cache across runs, friendly errors."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.cli import app
from tests.calibration.two_stage_data import write_folder

runner = CliRunner()


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "cache"))
    return write_folder(tmp_path)


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


BROKEN_MODULE = """
import math

from myjudge import judge

def somenan(query, texts):  # the call for 'question 3' and 'question 7' has a NaN
    out = judge(query, texts)
    if query in ("question 3", "question 7"):
        out[0] = math.nan
    return out

somenan.score_kind = "logit"

def allnan(query, texts):
    return [math.nan] * len(texts)

allnan.score_kind = "logit"
"""


def one_error_line(result: Result) -> str:
    """The error a failed command printed: exit code 1, one line on stderr, no
    traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.rstrip().splitlines()
    assert lines[-1].startswith("error: ") and result.stderr.count("error:") == 1, result.stderr
    return lines[-1]


def calibrate_args(folder: Path, *more: str) -> list[str]:
    return ["calibrate", str(folder), *more, "--no-report", "--min-recall", "0", "--max-k", "5"]


def test_a_damaged_score_cache_is_one_line(folder: Path, tmp_path: Path) -> None:
    """Audit TS-34: the cache file overwritten with text."""
    args = calibrate_args(folder, "--rerank", "myjudge:judge", "--rerank-cache", "C")
    assert runner.invoke(app, [*args, "--out", "a.toml"]).exit_code == 0
    (path,) = (tmp_path / "C").glob("*.sqlite")
    path.write_text("not a database\n")
    line = one_error_line(runner.invoke(app, [*args, "--out", "b.toml"]))
    assert path.name in line and "delete it or give --rerank-cache another folder" in line
    assert not (tmp_path / "b.toml").exists()


def test_failed_rerank_calls_are_counted_or_an_error(folder: Path, tmp_path: Path) -> None:
    """Audit TS-08 and TS-07: some NaN is a counted fail-open, all NaN an error that
    says the reranker failed."""
    (tmp_path / "broken.py").write_text(BROKEN_MODULE)
    res = runner.invoke(app, [*calibrate_args(folder, "--rerank", "broken:somenan")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "2 of 40 rerank calls failed" in said and "not a finite number (nan)" in said
    line = one_error_line(runner.invoke(app, calibrate_args(folder, "--rerank", "broken:allnan")))
    assert "40 of 40 rerank calls failed" in line and "not a finite number (nan)" in line
    assert "match" not in line


def test_a_probability_map_typo_names_the_option_and_the_methods(folder: Path) -> None:
    """Audit TS-18."""
    line = one_error_line(
        runner.invoke(
            app,
            calibrate_args(folder, "--rerank", "myjudge:judge", "--probability-map", "sigmoid"),
        )
    )
    assert "--probability-map" in line and "'sigmoid'" in line
    assert "platt" in line and "isotonic" in line


def _scores_file(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


def test_rerank_run_problems_are_one_line_each(folder: Path, tmp_path: Path) -> None:
    """Audit TS-25 (queries without rows: an error naming them), TS-31 (NaN scores:
    a counted warning) and TS-27 (logits declared probabilities: an error)."""
    rows = (folder / "runs" / "dense.trec").read_text().splitlines()
    half = _scores_file(tmp_path / "half.trec", [r for r in rows if int(r[1:3]) < 20])
    line = one_error_line(
        runner.invoke(
            app,
            calibrate_args(folder, "--rerank-run", str(half), "--rerank-score-kind", "probability"),
        )
    )
    assert "20 of 40 queries" in line and "q20, q21, q22" in line
    logits = _scores_file(
        tmp_path / "logits.trec",
        [" ".join([*r.split()[:4], str(8 * float(r.split()[4]) - 3), "judge"]) for r in rows],
    )
    line = one_error_line(
        runner.invoke(
            app,
            calibrate_args(
                folder, "--rerank-run", str(logits), "--rerank-score-kind", "probability"
            ),
        )
    )
    assert "outside [0, 1]" in line and "--rerank-score-kind logit" in line
    nan = _scores_file(
        tmp_path / "nan.trec",
        [" ".join([*r.split()[:4], "nan", "judge"]) if r.startswith("q07") else r for r in rows],
    )
    res = runner.invoke(
        app, calibrate_args(folder, "--rerank-run", str(nan), "--rerank-score-kind", "probability")
    )
    assert res.exit_code == 0, res.output
    warning = [line for line in res.stderr.splitlines() if "not finite numbers" in line]
    assert len(warning) == 1 and "8 scores that are not finite numbers" in warning[0]


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
    # the second stage's own lines: its setting, its choice and the map, alike everywhere
    rerank = config.provenance["rerank"]
    assert doc["rerank"]["setting"] == rerank["setting"] == named and doc["rerank"]["written"]
    choice, pmap = rerank["chosen_on_calibration"], rerank["probability_map"]
    assert doc["rerank"]["vs_retrieval"]["setting"] == choice
    assert f"Two stages (written): {choice} chosen on the calibration queries" in text
    assert f"probability map: {pmap}" in text and f"p(relevant) by {pmap}, fitted on" in md
    assert f"refitted on all queries: **{named}**" in md
    # the reranker sees through every look-alike: SAFE, so nothing to try next
    assert "Next:" not in text and "What to try next" not in md


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


def test_a_calibration_that_needs_texts_reads_each_file_once(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reranker and the token budget both read passage texts: the eval-set file is
    parsed once (its bytes hashed once for the config's provenance, its first line read
    once to detect its format), the corpus
    beside it and a --corpus file read once each, whoever asks for texts first."""
    import builtins
    import io
    import os
    from collections import Counter

    pa = pytest.importorskip("pyarrow")
    extra = folder.parent / "extra.jsonl"  # a --corpus file: read once too
    extra.write_text('{"_id": "q00-d0", "text": "passage q00-d0 with the answer, again"}\n')
    opened: Counter[Path] = Counter()
    real_open, real_stream = builtins.open, pa.input_stream

    def counting_open(file: object, *args: object, **kw: object) -> object:
        if isinstance(file, str | os.PathLike):
            opened[Path(file).resolve()] += 1
        return real_open(file, *args, **kw)  # type: ignore[call-overload]

    def counting_stream(source: object, *args: object, **kw: object) -> object:
        opened[Path(str(source)).resolve()] += 1
        return real_stream(source, *args, **kw)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)  # pathlib.Path.open
    monkeypatch.setattr(pa, "input_stream", counting_stream)
    res = runner.invoke(app, ["calibrate", str(folder), "--rerank", "myjudge:judge",
                              "--max-tokens", "40", "--near-duplicate-threshold", "0.9",
                              "--no-report", "--min-recall", "0", "--max-k", "5",
                              "--corpus", str(extra), "--out", "a.toml"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Two stages" in res.output  # the reranker read the texts
    # parsed once, hashed once, and its first line read once by format detection (a
    # RAGAS testset is a .jsonl file too, told apart by its fields)
    assert opened[(folder / "evalset.jsonl").resolve()] == 3
    assert opened[(folder / "corpus.jsonl").resolve()] == 1
    assert opened[extra.resolve()] == 1


def test_a_bad_corpus_file_is_one_line_naming_file_and_line(folder: Path, tmp_path: Path) -> None:
    bad = tmp_path / "more.jsonl"
    bad.write_bytes(b'{"_id": "x", "text": "ok"}\n{"_id": "y", "text": "caf\xe9"}\n')
    args = ["calibrate", str(folder), "--max-tokens", "40", "--no-report", "--corpus", str(bad)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    assert f"{bad}:2: not UTF-8 text" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, [*args[:-1], str(tmp_path / "none.jsonl")])
    assert res.exit_code == 1 and "none.jsonl" in res.output and "Traceback" not in res.output
