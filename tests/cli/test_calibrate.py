"""``ragguard calibrate``, ``evaluate``, ``compare``, ``profiles`` and ``config show``
through typer's CliRunner, on examples/notes."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from typer.testing import CliRunner

from ragguard import Candidate, ContextGuard
from ragguard._optional import install_hint
from ragguard.calibration import (
    Check,
    EvalSet,
    Search,
    Split,
    Stages,
    calibrate,
    evaluate,
    load_inputs,
)
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.calibration.metrics import compute, safety_band
from ragguard.cli import app
from ragguard.errors import ConfigError, EvalSetError, RetrieverError
from tests.calibration.notes_beir import notes_as_beir
from tests.cli.checks import error_line, invoke
from tests.faults import (
    LiveStaging,
    killed_staging_folder,
    replace_fails,
    replace_interrupted,
)

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "notes"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])  # tests.* factories


def flat(text: str) -> str:
    """Output with rich's line wrapping undone (CliRunner's terminal is 80 columns)."""
    return " ".join(text.split())


# --------------------------------------------------------------------------- calibrate


RAMDOCS = ROOT / "examples" / "ramdocs" / "evalset.jsonl"


def _config_lines(path: Path) -> list[str]:
    """The config's lines but its header and creation time (they differ run to run)."""
    return [
        line
        for line in path.read_text().splitlines()
        if not line.startswith("#") and not line.startswith("created")
    ]


def test_calibrate_reads_no_ragguard_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAGGUARD_MIN_EVIDENCE=0.99 and RAGGUARD_CONFLICTS=drop in the shell (issue 41,
    CQ-33, CQ-34): the config is the one written without them, and stderr names them."""
    for name in [k for k in os.environ if k.upper().startswith("RAGGUARD_")]:
        monkeypatch.delenv(name)
    clean = invoke("calibrate", RAMDOCS, "--no-report", "--out", "clean.toml")
    assert clean.exit_code == 0, clean.output
    monkeypatch.setenv("RAGGUARD_MIN_EVIDENCE", "0.99")
    monkeypatch.setenv("RAGGUARD_CONFLICTS", "drop")
    res = invoke("calibrate", RAMDOCS, "--no-report", "--out", "cfg.toml")
    assert res.exit_code == 0, res.output
    assert _config_lines(tmp_path / "cfg.toml") == _config_lines(tmp_path / "clean.toml")
    raw = tomllib.loads((tmp_path / "cfg.toml").read_text())
    assert "min_evidence" not in raw and raw["conflicts"] == "off"
    warned = flat(res.stderr)
    assert "warning: RAGGUARD_CONFLICTS, RAGGUARD_MIN_EVIDENCE not read: " in warned, warned


@pytest.mark.parametrize("command", ["calibrate", "train-reranker"])
def test_a_negative_seed_is_a_usage_error_naming_it(command: str, tmp_path: Path) -> None:
    """``--seed -1`` (issue 41, CQ-37): click's usage error naming --seed, not numpy's
    ValueError in a traceback (train-reranker: before any training)."""
    res = invoke(command, RAMDOCS, "--seed", "-1", "--out", "out")
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert isinstance(res.exception, SystemExit), res.exception
    assert "Invalid value for '--seed'" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_calibrate_notes_writes_a_config_that_round_trips_and_a_report(tmp_path: Path) -> None:
    result = invoke("calibrate", NOTES)
    assert result.exit_code == 0, result.output
    toml, report = tmp_path / "ragguard.toml", tmp_path / "ragguard-report"
    assert toml.is_file()
    assert {p.name for p in report.iterdir()} == {"report.html", "report.md", "plots"}
    assert len(list((report / "plots").glob("*.png"))) == 4
    out = flat(result.stdout)
    assert "Chosen: run dense-minilm with max_k=4, t=0.80 (score_kind similarity)" in out
    assert "Why: max_k=4, t=0.80 has the highest mean udcg" in out
    assert "subject to evidence_coverage>=0.9" in out and "15 held out (seed 0)" in out
    # what the default constraint costs: top-1 scores more on the calibration queries
    # without it, and no worse than the choice on the held-out ones
    assert (
        "Constraint cost: mean udcg on the calibration queries 0.624 (max_k=4, t=0.80) "
        "with evidence_coverage>=0.9, 0.654 (top-1, also the best plain top-k) without; "
        "on the 15 held-out queries the choice against top-1: -0.012 [-0.070, +0.045], "
        "no clear difference"
    ) in out
    assert "Config ragguard.toml" in out and "ContextGuard.from_file" in out
    assert "Report ragguard-report/report.html" in out
    assert "Traceback" not in result.output

    # the same calibration through the API, and the guard loaded from the file keeps,
    # query by query, what the sweep measured for the chosen setting
    es = load_inputs(NOTES)
    api = calibrate(es, constraints=["evidence_coverage>=0.9"])
    r = api.recommended
    guard = ContextGuard.from_file(toml)
    assert guard.config.policy_params() == r.written_params
    for q, n in zip(api.header.qids, r.written_kept.tolist(), strict=True):
        cands = [Candidate(d, score=s) for d, s in es.runs[r.name].candidates[q].items()]
        assert len(guard.select(q, cands).kept) == n
    prov = guard.config.provenance
    assert prov["data_sha256"] == data_fingerprint(es)
    assert prov["objective"] == "udcg" and prov["profile"] == "support"
    assert prov["run"] == "dense-minilm" and prov["constraints"] == ["evidence_coverage>=0.9"]
    assert set(prov["metrics"]) >= {"udcg", "recall", "distractor_rate", "passages"}
    assert prov["created"].endswith("Z")


def test_calibrate_options(tmp_path: Path) -> None:
    result = invoke(
        "calibrate", NOTES, "--run", NOTES / "runs" / "bm25.trec", "--objective", "utility",
        "--min-recall", "0", "--constraint", "distractor_rate<=0.5", "--max-k", "6",
        "--holdout", "0", "--profile", "medical", "--out", "cfg/guard.toml", "--no-report",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "runs bm25, profile medical" in out and "subject to distractor_rate<=0.5" in out
    assert "in-sample check (no hold-out)" in out
    assert not (tmp_path / "ragguard-report").exists()
    cfg = ContextGuard.from_file(tmp_path / "cfg" / "guard.toml").config
    assert cfg.profile == "medical" and cfg.max_k <= 6
    assert cfg.provenance["objective"] == "utility"
    assert cfg.provenance["queries"]["heldout"] == 0


@pytest.mark.parametrize(
    ("extra", "options"),
    [
        ([], {}),
        (["--max-tokens", "300"], {"stages": Stages(max_tokens=300)}),
        (["--near-duplicate-threshold", "0.8"], {"stages": Stages(near_duplicate_threshold=0.8)}),
        (["--conflicts", "off,drop"], {"stages": Stages(conflicts=["off", "drop"])}),
    ],
)
def test_calibrate_leaves_passage_texts_out_unless_a_stage_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], options: dict[str, object]
) -> None:
    """A BEIR folder (its corpus.jsonl holds every passage text) is loaded without texts
    when the calibration reads none, with them when a stage after the cut does; the
    config is the one calibrated with the texts loaded."""
    from ragguard.calibration.data import inputs

    folder = notes_as_beir(tmp_path, distractors=True)
    loaded: list[EvalSet] = []
    real = inputs.load_evalset

    def keep(*args: object, **kw: object) -> EvalSet:
        es = real(*args, **kw)  # type: ignore[arg-type]
        loaded.append(es)
        return es

    monkeypatch.setattr(inputs, "load_evalset", keep)
    result = invoke("calibrate", folder, "--no-report", *extra)
    assert result.exit_code == 0, result.output
    (es,) = loaded
    doc = "log-2024-03-02-deadlift"
    if options:
        assert (es.texts.get("q01", doc) or "").startswith("Training log 2024-03-02\n")
    else:
        with pytest.raises(EvalSetError, match="without its passage texts"):
            es.texts.get("q01", doc)
    api = calibrate(
        real(folder, runs=sorted((folder / "runs").iterdir())),
        constraints=["evidence_coverage>=0.9"],
        **options,  # type: ignore[arg-type]
    )
    written = ContextGuard.from_file(tmp_path / "ragguard.toml").config
    expected = api.config()
    assert written.model_dump(exclude={"provenance"}) == expected.model_dump(exclude={"provenance"})
    assert written.provenance["data_sha256"] == expected.provenance["data_sha256"]


def test_calibrate_with_a_live_langchain_retriever(tmp_path: Path) -> None:
    result = invoke(
        "calibrate", NOTES, "--retriever", "tests.calibration.retrievers:make_langchain_retriever",
        "--no-report",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "runs make_langchain_retriever," in flat(result.stdout)
    assert "retrieving with tests.calibration.retrievers" in flat(result.stderr)
    cfg = ContextGuard.from_file(tmp_path / "ragguard.toml").config
    assert cfg.provenance["run"] == "make_langchain_retriever"
    assert cfg.score_kind == "similarity"


def _bad_jsonl(tmp_path: Path) -> Path:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"query_id": "q1", "relevant": ["a"]}\n{"query_id": "q2", "relevant": 7}\n')
    return p


def _one_query(tmp_path: Path) -> Path:
    p = tmp_path / "one.jsonl"
    p.write_text('{"query_id": "q1", "relevant": ["a"], "candidates": [{"id": "a", "score": 1}]}\n')
    return p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["calibrate", "missing-folder"], "missing-folder: no such file or folder"),
        (["calibrate", NOTES, "--run", "nope.trec"], "nope.trec: run file not found"),
        (["calibrate", "{bad}"], "bad.jsonl:2, field 'relevant'"),
        (["calibrate", NOTES, "--retriever", "no_such_module_xyz:make"],
         "cannot import module 'no_such_module_xyz'"),
        (["calibrate", NOTES, "--retriever", "tests.calibration.retrievers:make_list"],
         "returned a builtins.list, not a retriever"),
        (["calibrate", NOTES, "--retriever", "tests.calibration.retrievers:make_failing"],
         "make_failing() raised RuntimeError: the vector index is not built yet"),
        (["calibrate", NOTES, "--retriever", "tests.calibration.retrievers:NOT_CALLABLE"],
         "is not callable"),
        (["calibrate", "{one}"], "no queries left to calibrate on: 1 labelled queries, 1 held out"),
        (["calibrate", NOTES, "--constraint", "recall>0.5"], "cannot parse constraint"),
        (["calibrate", NOTES, "--objective", "bogus"], "unknown metric 'bogus'"),
        (["calibrate", NOTES, "--profile", "bogus"], "unknown profile 'bogus'"),
        (["evaluate", NOTES, "--metrics", "ndcg@0"], "the cutoff after '@' must be >= 1"),
        (["compare", NOTES / "evalset.jsonl"], "no runs to evaluate"),
        (["config", "show", "missing.toml"], "config file not found: missing.toml"),
        (["profiles", "show", "bogus"], "unknown profile 'bogus'"),
    ],
)  # fmt: skip
def test_errors_print_one_line_and_exit_1(tmp_path: Path, args: list[object], message: str) -> None:
    paths = {"{bad}": str(_bad_jsonl(tmp_path)), "{one}": str(_one_query(tmp_path))}
    result = invoke(*(paths.get(str(a), str(a)) for a in args))
    assert result.exit_code == 1, result.output
    # progress lines may come first (a live retriever); the error is one line, the last
    err = flat(result.stderr.split("error: ", 1)[1])
    assert result.stderr.count("error: ") == 1 and message in err
    assert "Traceback" not in result.output
    assert not (tmp_path / "ragguard.toml").exists()


def test_a_csv_file_is_refused_naming_no_option_the_command_lacks(tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("query_id,doc_id,relevance\nq1,d1,1\n")
    for command in ("calibrate", "evaluate"):
        result = invoke(command, labels)
        error_line(result)
        err = flat(result.stderr)
        assert "cannot detect the format" in err and "eval sets are JSONL" in err
        assert "format=" not in err and "--format" not in err  # neither command has one


def test_verbose_shows_the_exception(tmp_path: Path) -> None:
    result = invoke("calibrate", "missing-folder", "--verbose")
    assert result.exit_code == 1
    assert isinstance(result.exception, EvalSetError)
    result = invoke(
        "calibrate", NOTES, "-v", "--retriever", "tests.calibration.retrievers:make_list"
    )
    assert isinstance(result.exception, RetrieverError)


def test_calibrate_without_matplotlib_notes_the_missing_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = invoke("calibrate", NOTES, "--report", "rep")
    assert result.exit_code == 0, result.output
    assert install_hint("report") in flat(result.stderr)
    assert "(also report.md)" in flat(result.stdout)
    assert install_hint("report") in (tmp_path / "rep" / "report.md").read_text()
    assert not (tmp_path / "rep" / "plots").exists()


# --------------------------------------------------------------------------- evaluate, compare


def test_evaluate_prints_traditional_next_to_distraction_aware() -> None:
    result = invoke("evaluate", NOTES)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "traditional" in out and "distraction-aware" in out
    assert out.index("ndcg@10") < out.index("udcg@10") < out.index("distractor_rate@10")
    es = load_inputs(NOTES)
    expected = evaluate(es, "bm25", metrics=["ndcg@10", "udcg@10"])
    row = next(line for line in out.splitlines() if "ndcg@10" in line and "udcg" not in line)
    assert f"{expected['ndcg@10']:.3f}" in row


def test_evaluate_json_and_metric_list() -> None:
    result = invoke(
        "evaluate", NOTES, "--run", NOTES / "runs" / "dense-minilm.trec",
        "--metrics", "recall@5,ra_nwg(alpha=0, cap3=0.5)@5", "-m", "udcg", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    names = ["recall@5", "ra_nwg(alpha=0, cap3=0.5)@5", "udcg"]
    expected = evaluate(load_inputs(NOTES), "dense-minilm", metrics=names)
    assert list(got) == ["dense-minilm"]
    for n in names:
        assert got["dense-minilm"][n] == pytest.approx(expected[n])


def test_compare_shows_that_the_highest_recall_run_is_not_the_safest() -> None:
    result = invoke("compare", NOTES, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    es = load_inputs(NOTES)
    for run, means in rows.items():
        exp = evaluate(es, run, metrics=["recall@5", "distractor_rate@5", "udcg@5"])
        assert means["recall@5"] == pytest.approx(exp["recall@5"])
        assert means["safety_band"] == safety_band(exp["distractor_rate@5"]).value
    table = invoke("compare", NOTES)
    out = flat(table.stdout)
    assert "safety band" in out and "RISKY" in out
    assert "The highest-recall profile (bm25) is not the safest" in out


# --------------------------------------------------------------------------- profiles, config


def test_profiles_list_and_show(tmp_path: Path) -> None:
    listed = invoke("profiles")
    assert listed.exit_code == 0
    for name in ("medical", "legal", "support", "creative", "code"):
        assert name in listed.stdout
    assert invoke("profiles", "list").stdout == listed.stdout
    shown = invoke("profiles", "show", "creative", "--json")
    data = json.loads(shown.stdout)
    assert data["distractor_score_ratio"] == 0.9 and data["max_k"] == 8
    (tmp_path / "c.toml").write_text('[profiles.onco]\nbase = "medical"\nmax_k = 2\n')
    custom = invoke("profiles", "show", "onco", "--config", "c.toml", "--json")
    assert json.loads(custom.stdout)["max_k"] == 2
    assert "onco" in invoke("profiles", "--config", "c.toml").stdout


def test_config_show_names_the_layer_of_every_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke("calibrate", NOTES, "--no-report").exit_code == 0
    monkeypatch.setenv("RAGGUARD_MIN_K", "2")
    result = invoke("config", "show", "--json")  # ./ragguard.toml by default
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    values = data["values"]
    assert values["max_k"] == {"value": 4, "source": "file ragguard.toml"}
    assert values["min_k"] == {"value": 2, "source": "environment RAGGUARD_MIN_K"}
    assert values["min_score"] == {"value": None, "source": "default"}
    assert data["provenance"]["run"] == "dense-minilm"
    table = invoke("config", "show", "ragguard.toml")
    out = flat(table.stdout)
    assert "environment RAGGUARD_MIN_K" in out and "provenance" in out
    assert "constraints evidence_coverage>=0.9 (met)" in out


def test_config_show_without_a_file_uses_profile_defaults() -> None:
    result = invoke("config", "show", "--json")
    data = json.loads(result.stdout)
    assert data["file"] is None
    assert data["values"]["max_k"] == {"value": 5, "source": "profile support"}
    assert not math.isnan(data["values"]["relative_threshold"]["value"])


# --------------------------------------------------------------------------- failed writes


def leftovers(root: Path) -> list[Path]:
    """Temporary files or folders anywhere under ``root``."""
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or ".ragguard-" in p.name]


def test_out_naming_a_folder_fails_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    line = error_line(invoke("calibrate", NOTES, "--out", "configs"))
    assert "configs is a folder" in line and "configs/ragguard.toml" in line
    assert not (tmp_path / "ragguard-report").exists()
    assert list((tmp_path / "configs").iterdir()) == [] and leftovers(tmp_path) == []


def test_report_naming_a_file_fails_and_writes_no_config(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("an older report")
    line = error_line(invoke("calibrate", NOTES, "--report", "report.html"))
    assert "report.html is a file" in line
    assert not (tmp_path / "ragguard.toml").exists()
    assert (tmp_path / "report.html").read_text() == "an older report"
    assert leftovers(tmp_path) == []


def test_out_under_a_file_and_colliding_outputs_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    line = error_line(invoke("calibrate", NOTES, "--out", "notes.txt/guard.toml"))
    assert "notes.txt is a file, not a folder" in line
    line = error_line(invoke("calibrate", NOTES, "--out", "rep/report.md", "--report", "rep"))
    assert "collide" in line
    assert not (tmp_path / "ragguard.toml").exists() and leftovers(tmp_path) == []


def test_a_failed_report_write_leaves_no_config_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up while the report is written: one line, exit 1, the config
    from an earlier run untouched, nothing temporary left."""
    (tmp_path / "ragguard.toml").write_text("# an earlier config\n")
    replace_fails(monkeypatch, lambda dst: dst.name == "report.html", errno.ENOSPC)
    line = error_line(invoke("calibrate", NOTES))
    assert line == f"error: ragguard-report/report.html: {os.strerror(errno.ENOSPC)}"
    assert (tmp_path / "ragguard.toml").read_text() == "# an earlier config\n"
    assert not (tmp_path / "ragguard-report" / "report.html").exists()
    assert leftovers(tmp_path) == []


def test_a_failed_config_write_leaves_the_old_config_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ragguard.toml").write_text("# an earlier config\n")
    config = tmp_path / "ragguard.toml"
    replace_fails(monkeypatch, lambda dst: dst.resolve() == config, errno.EACCES)
    line = error_line(invoke("calibrate", NOTES, "--no-report"))
    assert line == f"error: ragguard.toml: {os.strerror(errno.EACCES)}"
    assert (tmp_path / "ragguard.toml").read_text() == "# an earlier config\n"
    assert leftovers(tmp_path) == []


def test_ctrl_c_during_a_write_leaves_the_old_config_and_no_staging_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ragguard.toml").write_text("# an earlier config\n")
    replace_interrupted(monkeypatch, lambda dst: dst.name == "report.html")
    result = invoke("calibrate", NOTES)
    assert result.exit_code != 0 and not (tmp_path / "ragguard-report" / "report.html").exists()
    assert (tmp_path / "ragguard.toml").read_text() == "# an earlier config\n"
    assert leftovers(tmp_path) == []
    replace_interrupted(monkeypatch, lambda dst: dst.name == "ragguard.toml")
    result = invoke("calibrate", NOTES, "--no-report")
    assert result.exit_code != 0
    assert (tmp_path / "ragguard.toml").read_text() == "# an earlier config\n"
    assert leftovers(tmp_path) == []


def test_a_staging_folder_left_by_a_killed_run_is_removed_by_the_next_run(
    tmp_path: Path,
) -> None:
    """``kill -9`` during a write leaves a staging folder; the next run in that folder
    removes it, and only it: not a live process's, not another machine's, not a
    folder named otherwise."""
    killed = killed_staging_folder(tmp_path)
    (tmp_path / "ragguard-report").mkdir()
    report_killed = killed_staging_folder(tmp_path / "ragguard-report")
    pid = killed.name.split("-")[1]
    other_host = tmp_path / f".ragguard-{pid}-00000000-abcdefgh.tmp"
    mine = [other_host, tmp_path / ".ragguard-notes", tmp_path / f".ragguard-{pid}.tmp"]
    for folder in mine:
        folder.mkdir()
    with LiveStaging(tmp_path) as live:
        result = invoke("calibrate", NOTES)
        assert result.exit_code == 0, result.output
        assert live.path.is_dir() and (live.path / "half-written").is_file()
    assert not killed.exists() and not report_killed.exists()
    assert all(folder.is_dir() for folder in mine)


def test_out_naming_an_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """calibrate would write its TOML over the eval set (or a run file) it reads."""
    evalset = tmp_path / "evalset.jsonl"
    evalset.write_bytes((NOTES / "evalset.jsonl").read_bytes())
    run = tmp_path / "bm25.trec"
    run.write_bytes((NOTES / "runs" / "bm25.trec").read_bytes())
    line = error_line(invoke("calibrate", evalset, "--run", run, "--out", evalset))
    assert "--out" in line and "input" in line and "evalset.jsonl" in line
    line = error_line(invoke("calibrate", evalset, "--run", run, "--out", run, "--no-report"))
    assert "--out" in line and "bm25.trec" in line
    # a folder eval set: the files it holds are inputs too
    line = error_line(invoke("calibrate", NOTES, "--out", NOTES / "evalset.jsonl"))
    assert "evalset.jsonl" in line and "input" in line
    assert evalset.read_bytes() == (NOTES / "evalset.jsonl").read_bytes()
    assert run.read_bytes() == (NOTES / "runs" / "bm25.trec").read_bytes()
    assert not (tmp_path / "ragguard-report").exists()


def test_run_document_ids_that_match_no_label_are_an_error(tmp_path: Path) -> None:
    """The run's query ids match the labels, its document ids come from another scheme
    (chunk ids against document ids): calibrating on it would recommend a config from
    all-zero metrics."""
    es = load_inputs(NOTES)
    run = es.runs["bm25"]
    pairs = [(q, s) for q, cands in run.candidates.items() for s in cands.values()]
    lines = [f"{q} Q0 chunk-{i:03d} {i + 1} {score} bm25" for i, (q, score) in enumerate(pairs)]
    (tmp_path / "chunks.trec").write_text("\n".join(lines) + "\n")
    line = error_line(
        invoke("calibrate", NOTES / "evalset.jsonl", "--run", "chunks.trec", "--no-report")
    )
    assert "chunks.trec" in line and "run 'chunks'" in line
    assert "'chunk-000', 'chunk-001', 'chunk-002', ..." in line  # a few from the run ...
    first_labelled = sorted(es.labels[es.qids[0]].grades)[0]
    assert repr(first_labelled) in line  # ... and from the labels
    assert not (tmp_path / "ragguard.toml").exists()
    with pytest.raises(EvalSetError, match="no document matches"):
        calibrate(load_inputs(NOTES / "evalset.jsonl", [tmp_path / "chunks.trec"]))


# --------------------------------------------------------------------------- small truths


def test_loading_problems_are_printed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a terminal: no logging configured (pytest's capture handlers set aside)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    run = (NOTES / "runs" / "bm25.trec").read_text()
    (tmp_path / "bm25.trec").write_text(run + "q-unlabelled Q0 some-doc 1 3.5 bm25\n")
    result = invoke("calibrate", NOTES, "--run", "bm25.trec", "--no-report")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("run_query_without_labels") == 1
    assert result.stderr.count("problems while loading") == 1
    assert "'q-unlabelled', which has no labels" in flat(result.stderr)


def test_command_output_fits_80_columns(tmp_path: Path) -> None:
    assert invoke("calibrate", NOTES).exit_code == 0
    for args in (["calibrate", NOTES, "--no-report", "--out", "b.toml"], ["evaluate", NOTES],
                 ["compare", NOTES], ["profiles"], ["profiles", "show", "medical"],
                 ["config", "show"]):  # fmt: skip
        result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        for line in result.output.splitlines():
            assert len(line) <= 80, (args, line)
        assert "…" not in result.output, args  # nothing cut short


def test_config_show_lists_the_rerank_table_field_by_field(tmp_path: Path) -> None:
    result = invoke("config", "show")
    rows = {cells[0]: cells[1:] for cells in map(str.split, result.stdout.splitlines()) if cells}
    assert rows["rerank.enabled"] == ["False", "default"]
    assert rows["rerank.on_failure"] == ["fail_open", "default"]


def test_calibrate_prints_the_passages_verdict(tmp_path: Path) -> None:
    result = invoke("calibrate", NOTES, "--no-report")
    row = next(line for line in result.stdout.splitlines() if line.startswith("passages "))
    api = calibrate(load_inputs(NOTES), constraints=["evidence_coverage>=0.9"])
    expected = api.recommended.comparison.difference["passages"].mean
    assert row.split()[-1] == ("fewer" if expected < 0 else "more" if expected > 0 else "same")


def test_bad_parameters_are_typed_errors() -> None:
    es = load_inputs(NOTES)
    with pytest.raises(ConfigError, match="holdout"):
        calibrate(es, split=Split(holdout=1.5))
    with pytest.raises(ConfigError, match=r"evidence_recall is a share.*got 2.0"):
        calibrate(es, constraints=["evidence_recall>=2.0"])
    with pytest.raises(ConfigError, match="level"):
        calibrate(es, check=Check(level=1.0))
    with pytest.raises(EvalSetError, match="no run named 'bogus'"):
        calibrate(es, runs=["bogus"])


# --------------------------------------------------------------------------- issue 21


def lines_of(result: Result) -> str:
    """stdout with rich's wrapping undone and shell continuations joined."""
    return flat(result.stdout.replace(" \\\n", " "))


def test_an_explicit_max_k_is_a_cap_never_exceeded(tmp_path: Path) -> None:
    """--max-k 1 with the default evidence-coverage floor 0.9, which no top-1 reaches: the
    caps must not grow past the cap given (they grew, and max_k = 12 was written); the
    unmet floor exits 1 naming the reachable value under that cap."""
    es = load_inputs(NOTES)
    run = calibrate(
        es, constraints=["evidence_coverage>=0.9"], search=Search(max_k=1)
    ).recommended.name
    reach = evaluate(es, run, metrics=["evidence_coverage@1"])["evidence_coverage@1"]
    line = error_line(invoke("calibrate", NOTES, "--max-k", "1", "--no-report"))
    assert f"the best reachable evidence_coverage is {reach:.3f} (top-1, caps up to 1," in line
    assert not (tmp_path / "ragguard.toml").exists()
    result = invoke("calibrate", NOTES, "--max-k", "1", "--no-report", "--allow-unmet")
    assert result.exit_code == 0, result.output
    cfg = ContextGuard.from_file(tmp_path / "ragguard.toml").config
    assert cfg.max_k == 1 and cfg.provenance["constraints_met"] is False
    # the library alike: a max_k given is a cap; without one the default grid grows
    capped = calibrate(
        es,
        constraints=["evidence_recall>=0.95"],
        search=Search(max_k=3),
        check=Check(n_bootstrap=50),
    )
    assert max(p.max_k for r in capped.runs for p in r.sweep.points) == 3
    assert capped.unmet() and "caps up to 3" in capped.unmet()[0]
    grown = calibrate(es, constraints=["evidence_recall>=0.95"], check=Check(n_bootstrap=50))
    assert max(p.max_k for p in grown.recommended.sweep.points) > 10


def _held_out_evidence_recall(es: object, config_path: Path, run: str) -> float:
    """Mean evidence recall of the guard the config builds on the held-out queries,
    query by query through ContextGuard.select (queries without evidence left out)."""
    from ragguard.calibration import EvalSet
    from ragguard.calibration.fit.statistics import split_queries

    assert isinstance(es, EvalSet)
    guard = ContextGuard.from_file(config_path)
    _, held = split_queries(len(es.qids), 0.3, 0)
    values = []
    for row in held.tolist():
        q = es.qids[row]
        cands = es.runs[run].candidates[q]
        relevant = {d for d, g in es.labels[q].grades.items() if g >= 1} & set(cands)
        if not relevant:
            continue
        kept = guard.select(q, [Candidate(d, score=s) for d, s in cands.items()]).kept
        values.append(len(relevant & {c.id for c in kept}) / len(relevant))
    return sum(values) / len(values)


def test_a_guarantee_is_the_objective_and_the_setting_written_is_the_one_checked(
    tmp_path: Path,
) -> None:
    """--guarantee 'recall>=0.9': the objective line stated "maximise udcg subject to
    evidence_recall>=0.8", the why said "no setting is certified" next to "Guarantee:
    top-9 ... certified", and the held-out table tested top-20, not the top-9 written."""
    args = ["calibrate", NOTES, "--guarantee", "recall>=0.9", "--confidence", "0.95"]
    result = invoke(*args, "--no-report")
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    cfg = ContextGuard.from_file(tmp_path / "ragguard.toml").config
    written = cfg.provenance["setting"]
    objective = out.split("objective: ", 1)[1].split("; 36 queries to choose on", 1)[0]
    assert "mean evidence recall on new queries is >= 0.9 with 95% confidence" in objective
    assert "maximise" not in objective and "evidence_recall>=0.8" not in objective
    assert f"Chosen: run {cfg.provenance['run']} with {written} (" in out
    assert f"Guarantee: {written}: mean evidence recall >= 0.9" in out
    assert not re.search(r"no (?:[\w-]+ )?setting is certified", out)
    for contradiction in ("not met", "stands in", "The guarded setting is worse"):
        assert contradiction not in out
    # the held-out check tests the written setting, on queries it was not certified on
    assert f"held-out check of {written}: 15 queries never used to choose" in out
    doc = json.loads(invoke(*args, "--json", "--no-report", "--out", "j.toml").stdout)
    assert doc["heldout_check"]["setting"] == doc["recommended"]["setting"] == written
    g = doc["recommended"]["guarantee"]
    assert (
        g["met"]
        and g["certified_on_queries"] == cfg.provenance["guarantee"]["queries_with_evidence"]
    )
    measured = _held_out_evidence_recall(
        load_inputs(NOTES), tmp_path / "j.toml", doc["recommended"]["run"]
    )
    assert g["heldout_recall"] == pytest.approx(measured)
    assert f"reaches mean evidence recall {measured:.3f} on the 15 held-out queries" in out


def test_a_guarantee_nothing_certifies_is_not_met_and_nothing_says_otherwise(
    tmp_path: Path,
) -> None:
    """bm25 alone: keeping all 20 candidates has evidence recall 1 on every calibration
    query with evidence, and Hoeffding's bound at loss 0, (delta / 2 paths)^(1/n), is
    what can be guaranteed: below 0.9 on these queries."""
    from ragguard.calibration.fit.statistics import split_queries

    es = load_inputs(NOTES)
    cal, _ = split_queries(len(es.qids), 0.3, 0)
    run = es.runs["bm25"]
    n = sum(
        1
        for q in (es.qids[i] for i in cal.tolist())
        if {d for d, g in es.labels[q].grades.items() if g >= 1} & set(run.candidates[q])
    )
    reachable = math.floor((0.05 / 2) ** (1 / n) * 1000) / 1000
    assert reachable < 0.9
    result = invoke("calibrate", NOTES, "--run", NOTES / "runs" / "bm25.trec", "--guarantee",
                    "recall>=0.9", "--no-report")  # fmt: skip
    line = error_line(result)
    assert (
        f"on {n} calibration queries with evidence; the most that can be guaranteed is "
        f"{reachable:.3f} (top-20)" in line
    )
    assert "--holdout 0" in line
    out = flat(result.stdout)
    assert "Guarantee:" not in out and "certified lower bound" not in out
    assert not (tmp_path / "ragguard.toml").exists()


_ROW = re.compile(
    r"^(?P<metric>[a-z_]+)\s+\S+\s+\S+\s+\S+\s+\[(?P<low>[^,\]]+),\s*(?P<high>[^\]]+)\]\s+"
    r"(?P<verdict>.+?)\s*$"
)


def _agrees(low: str, high: str, verdict: str) -> bool:
    excludes_zero = float(low) > 0 or float(high) < 0
    return excludes_zero == (verdict in ("better", "worse"))


def test_printed_intervals_agree_with_their_verdicts_in_one_wording(tmp_path: Path) -> None:
    """ "[+0.00, +0.07] better" next to "[+0.00, +0.67] within noise": a rounded interval
    must exclude 0 exactly when its verdict says better or worse, and the console, the
    report and --json say "no clear difference" alike."""
    result = invoke("calibrate", NOTES, "--report", "rep")
    assert result.exit_code == 0, result.output
    rows = [m for line in result.stdout.splitlines() if (m := _ROW.match(line))]
    assert len(rows) == 10
    for m in rows:
        if m["metric"] != "passages":
            assert _agrees(m["low"], m["high"], m["verdict"]), m.group(0)
    assert "no clear difference" in result.stdout and "within noise" not in result.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Baseline vs guarded", 1)[1].split("\n## ", 1)[0]
    checked = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("metric", "passages") and "[" in cells[3]:
            low, high = cells[3].split("[", 1)[1].rstrip("]").split(", ")
            assert _agrees(low, high, cells[4]), line
            checked += 1
    assert checked == 9 and "within noise" not in md
    doc = json.loads(invoke("calibrate", NOTES, "--json", "--no-report", "--out", "j.toml").stdout)
    verdicts = {v["verdict"] for v in doc["heldout_check"]["metrics"].values()}
    assert verdicts <= {"better", "worse", "no clear difference", "fewer", "more", "same"}


def test_progress_shows_real_counts_on_stderr() -> None:
    """The sweep's progress line always ended as "0/?"; it counts the sweeps, on stderr."""
    result = invoke("calibrate", NOTES, "--no-report")
    assert result.exit_code == 0, result.output
    assert "sweeping settings" in result.stderr and "2/2" in result.stderr
    assert "/?" not in result.stderr
    assert "sweeping" not in result.stdout


def test_a_risky_result_says_what_to_try_next_with_the_commands(tmp_path: Path) -> None:
    """The headline's figures are the written setting's (max_k=2 refitted on all queries),
    not those of the setting the held-out check tests (max_k=3: 0.544, DANGEROUS)."""
    es = load_inputs(NOTES)
    api = calibrate(es, constraints=["evidence_recall>=0.8"])
    r = api.recommended
    held = api.header.heldout_rows
    tested = float(np.nanmean(compute(r.arrays, "distractor_rate", cut=r.chosen_kept)[held]))
    rate = float(np.nanmean(compute(r.arrays, "distractor_rate", cut=r.written_kept)[held]))
    assert safety_band(tested).value == "DANGEROUS"  # the setting the held-out check tests
    assert safety_band(rate).value == "RISKY"  # the setting written
    result = invoke("calibrate", NOTES, "--report", "rep", "--min-recall", "0.8")
    assert result.exit_code == 0, result.output
    out = lines_of(result)
    assert (
        f"Next: the written setting (max_k=2, autocut@1) is RISKY: mean distractor rate "
        f"{rate:.3f} on the 15 held-out queries (RISKY from 0.2; its refit on all 51 "
        "queries saw them)" in out
    )
    assert f"{tested:.3f} on the" not in out and "DANGEROUS:" not in out
    for command in (
        f"ragguard calibrate {NOTES} --min-recall 0.8 --rerank CROSS_ENCODER",
        f"ragguard annotate {NOTES / 'evalset.jsonl'} --run {NOTES / 'runs' / r.name}.trec",
    ):
        assert command in out
    # 51 queries cannot validate a trained reranker: said, with no command that would fail
    assert "train-reranker" in out and "ragguard train-reranker" not in out
    assert "more labelled queries" in out
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    steps = md.split("## What to try next", 1)[1]
    assert "is RISKY" in steps
    assert f"`ragguard calibrate {NOTES} --min-recall 0.8 --rerank CROSS_ENCODER`" in steps


# --------------------------------------------------------------------------- option groups


CALIBRATE_GROUPS = {
    "Inputs": ["--run", "--retriever", "--score-kind"],
    "Utilities": ["--profile", "--profiles", "--relevant-grade", "--partial-grade", "--by"],
    "Objective": ["--objective", "--min-recall", "--evidence-needed", "--constraint", "--guarantee",
                  "--confidence", "--max-false-abstain", "--noise-floor", "--noise-scorer"],
    "Settings swept": ["--max-k", "--max-tokens", "--token-counter",
                       "--near-duplicate-threshold", "--conflicts", "--conflict-similarity",
                       "--conflict-detectors", "--conflict-answer-similarity"],
    "Held-out check": ["--holdout", "--seed", "--folds", "--on-worse"],
    "Second stage": ["--rerank", "--rerank-run", "--rerank-score-kind", "--corpus",
                     "--probability-map", "--rerank-cache"],
    "Output": ["--out", "--report", "--no-report", "--allow-unmet", "--json"],
    "Options": ["--verbose", "--help"],
}  # fmt: skip


def _help_sections(text: str) -> dict[str, list[str]]:
    """Each ``Title:`` section of a help text -> the flags its entries start with."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  -"):
            flags = re.findall(r"(--[a-z][a-z-]*)", line.split("  ")[1])
            current.append(flags[-1] if flags else "")
    return sections


def test_calibrate_help_lists_every_flag_under_its_group() -> None:
    from typer.main import get_command

    result = runner.invoke(app, ["calibrate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    sections = _help_sections(result.stdout)
    assert {k: v for k, v in sections.items() if k != "Arguments"} == CALIBRATE_GROUPS
    # every flag typer knows is listed, once (the groups add none and drop none)
    command = get_command(app).commands["calibrate"]  # type: ignore[attr-defined]
    known = sorted(
        ["--help", *(max(p.opts, key=len) for p in command.params if p.opts[0].startswith("-"))]
    )
    listed = sorted(f for flags in CALIBRATE_GROUPS.values() for f in flags)
    assert known == listed


def test_a_bad_value_of_a_group_is_one_line_before_the_eval_set_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.jsonl"  # never read: the options fail first
    for args, says in [
        (["--guarantee", "recall>=2"], "the guaranteed recall must lie in (0, 1), got 2"),
        (["--conflicts", "off,,drop"], "--conflicts takes comma-separated values"),
        (["--conflict-detectors", "answers"], "--conflict-detectors sets the levels"),
        (
            ["--conflicts", "drop", "--conflict-detectors", "similar"],
            "--conflict-detectors: unknown conflict detector 'similar'",
        ),
        (
            ["--conflicts", "drop", "--conflict-answer-similarity", "nan"],
            "--conflict-answer-similarity: a conflict answer similarity must be",
        ),
        (
            ["--conflicts", "drop", "--conflict-answer-similarity", "0.2"],
            "swept with the answers detector",
        ),
        (["--max-false-abstain", "1.5"], "--max-false-abstain (max_false_abstain) must be"),
        (["--constraint", "udcg>>1"], "udcg>>1"),
        (["--rerank", "x:y", "--rerank-run", "r.trec"], "give --rerank or --rerank-run, not both"),
    ]:
        res = runner.invoke(app, ["calibrate", str(missing), *args, "--no-report"])
        assert res.exit_code == 1, (args, res.output)
        line = error_line(res)
        assert says in line and str(missing) not in line, (args, line)
        assert "Traceback" not in res.output


@pytest.mark.slow  # about 8 s: a sweep of 250 RAMDocs questions
def test_calibrate_sweeps_the_answers_detector_and_writes_it_when_it_wins(tmp_path: Path) -> None:
    """RAMDocs: the detectors swept with --conflicts; the report's detection table has a
    row per detector, and the config holds the detector of the setting it writes."""
    out = tmp_path / "guard.toml"
    result = invoke(
        "calibrate", str(ROOT / "examples/ramdocs/evalset.jsonl"), "--out", str(out),
        "--report", str(tmp_path / "report"), "--max-k", "5",
        "--conflicts", "off,drop", "--conflict-detectors", "near-copy,answers",
        "--conflict-answer-similarity", "0.4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    section = md[md.index("# Conflicting passages") :]
    assert "| conflicts=drop@answers 0.4 |" in section
    assert any(x.startswith("| answers 0.4") for x in section.splitlines())
    cfg = ContextGuard.from_file(out).config
    if "@answers" in cfg.provenance["setting"]:
        assert cfg.conflict_detector.value == "answers" and cfg.conflict_answer_similarity == 0.4
    else:  # near-copies, or conflicts off: the defaults
        assert cfg.conflict_detector.value == "near-copy"
