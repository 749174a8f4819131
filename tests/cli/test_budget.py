"""``ragguard calibrate --max-tokens / --near-duplicate-threshold / --json`` and
``ragguard config schema`` through typer's CliRunner, on examples/notes."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.calibration import Stages, calibrate, load_inputs
from tests.cli.checks import invoke
from tests.faults import block_network

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "notes"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_calibrate_json_with_a_budget_is_one_document_and_the_config_keeps_it(
    tmp_path: Path,
) -> None:
    result = invoke(
        "calibrate", NOTES, "--max-tokens", 120, "--near-duplicate-threshold", 0.9,
        "--token-counter", "chars:4", "--json", "--min-recall", 0.8,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # stdout holds the JSON document and nothing else
    rec = doc["recommended"]
    assert rec["config"]["max_tokens"] == 120 and rec["config"]["token_counter"] == "chars:4"
    assert rec["config"]["near_duplicate_threshold"] == 0.9
    assert "max_tokens=120" in rec["setting"]
    assert doc["config_path"] == "ragguard.toml"
    assert doc["report"]["html"].endswith("report.html")
    assert doc["queries"] == {"total": 51, "calibration": 36, "heldout": 15, "unanswerable": 0}
    check = doc["heldout_check"]
    assert check["split"] == "held-out" and check["queries"] == 15
    assert set(check["metrics"]) >= {"udcg", "recall", "passages"}
    assert check["metrics"]["udcg"]["verdict"] in ("better", "worse", "no clear difference")

    # the same calibration through the API: the CLI's choice, and the guard from the file
    # keeps what the sweep measured (texts from examples/notes/corpus.jsonl)
    es = load_inputs(NOTES)
    api = calibrate(
        es,
        constraints=["evidence_recall>=0.8"],
        stages=Stages(max_tokens=120, near_duplicate_threshold=0.9),
    )
    r = api.recommended
    # the config holds the choice refitted on all queries; its means are over all queries
    assert r.full is not None
    assert rec["run"] == r.name and rec["metrics"]["udcg"] == pytest.approx(
        r.full.mean(r.written, "udcg")
    )
    assert rec["calibration_choice"]["metrics"]["udcg"] == pytest.approx(
        r.sweep.mean(r.chosen, "udcg")
    )
    guard = ContextGuard.from_file(tmp_path / "ragguard.toml")
    assert guard.config.policy_params() == r.written_params
    text = es.texts.get
    for q, n in zip(api.header.qids, r.written_kept.tolist(), strict=True):
        cands = [
            Candidate(d, text(q, d) or "", s) for d, s in es.runs[r.name].candidates[q].items()
        ]
        kept = guard.select(q, cands).kept
        assert len(kept) == n
        assert sum(math.ceil(len(c.text) / 4) for c in kept) <= 120


def test_calibrate_json_without_a_report() -> None:
    result = invoke("calibrate", NOTES, "--json", "--no-report", "--holdout", 0)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["report"] is None and doc["heldout_check"]["split"] == "all queries (in-sample)"
    assert doc["objective"] == "udcg" and doc["constraints"] == ["evidence_coverage>=0.9"]
    assert {r["run"] for r in doc["runs"]} == {"bm25", "dense-minilm"}


def test_calibrate_budget_without_texts_is_one_line(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        '{"query_id": "q1", "relevant": ["a"], "candidates": [{"id": "a", "score": 1}, '
        '{"id": "b", "score": 0.5}]}\n'
        '{"query_id": "q2", "relevant": ["b"], "candidates": [{"id": "b", "score": 1}]}\n'
    )
    result = invoke("calibrate", labels, "--max-tokens", 10, "--holdout", 0, "--no-report")
    assert result.exit_code == 1
    assert "have none (e.g. passage 'a' of query 'q1')" in " ".join(result.stderr.split())


def test_calibrate_with_a_tiktoken_encoding_it_cannot_fetch_is_one_line_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TB-16: the line was urllib3's "HTTPSConnectionPool(...): Max retries exceeded"
    registry = pytest.importorskip("tiktoken.registry")
    monkeypatch.delitem(registry.ENCODINGS, "cl100k_base", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    block_network(monkeypatch)
    result = invoke(
        "calibrate", NOTES, "--max-tokens", 200, "--token-counter", "tiktoken:cl100k_base",
        "--no-report",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error")]  # one line
    assert line.startswith("error: token_counter 'tiktoken:cl100k_base': ")
    assert "TIKTOKEN_CACHE_DIR" in line and "run once with network access" in line
    assert not (tmp_path / "ragguard.toml").exists()


def test_config_schema_validates_saved_configs(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    result = invoke("config", "schema")
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    saved = GuardConfig(
        max_k=4, max_tokens=800, token_counter="chars:3.5", near_duplicate_threshold=0.85,
        cut="gap", rerank={"enabled": True, "top_n": 10},
        profiles={"mine": {"base": "medical", "max_k": 3}},
    ).save(tmp_path / "ragguard.toml")  # fmt: skip
    validator.validate(tomllib.loads(saved.read_text()))
    bad = {"max_k": 0, "max_tokens": -1, "cut": "sometimes", "bogus": 1}
    problems = {e.message for e in validator.iter_errors(bad)}
    assert len(problems) == 4
    assert "Additional properties are not allowed ('bogus' was unexpected)" in problems
    # --out writes the same schema to a file
    assert invoke("config", "schema", "--out", "s/schema.json").exit_code == 0
    assert json.loads((tmp_path / "s" / "schema.json").read_text()) == schema


def test_calibrate_sweeps_conflict_settings_and_every_output_names_the_choice(
    tmp_path: Path,
) -> None:
    result = invoke(
        "calibrate", NOTES, "--conflicts", "off,keep_first,drop", "--conflict-similarity",
        "0.3,0.7", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rec = doc["recommended"]
    es = load_inputs(NOTES)
    api = calibrate(
        es,
        constraints=["evidence_coverage>=0.9"],
        stages=Stages(conflicts=["off", "keep_first", "drop"], conflict_similarities=[0.3, 0.7]),
    )
    r = api.recommended
    w = r.written_params
    assert rec["run"] == r.name and rec["setting"] == api.written_setting().setting
    assert rec["config"]["conflicts"] == w.conflicts.value
    assert rec["config"]["conflict_similarity"] == w.conflict_similarity
    data = tomllib.loads((tmp_path / "ragguard.toml").read_text())
    assert data["provenance"]["conflicts_swept"] == [
        "conflicts off", "conflicts=keep_first@0.7", "conflicts=keep_first@0.3",
        "conflicts=drop@0.7", "conflicts=drop@0.3",
    ]  # fmt: skip
    report = (tmp_path / "ragguard-report" / "report.md").read_text()
    assert "# Conflicting passages" in report and "`prefer` is not swept" in report
    # the guard from the file keeps what the sweep measured for the written setting
    guard = ContextGuard.from_file(tmp_path / "ragguard.toml")
    assert guard.config.policy_params() == w
    text = es.texts.get
    measured = r.kernel.values(r.written_kept, ["passages"])[0]
    for q, n in zip(api.header.qids, measured.tolist(), strict=True):
        cands = [
            Candidate(d, text(q, d) or "", s) for d, s in es.runs[r.name].candidates[q].items()
        ]
        assert len(guard.select(q, cands).kept) == n


def test_calibrate_help_says_prefer_is_not_swept() -> None:
    result = invoke("calibrate", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())  # (rich's help panels)
    assert "--conflicts" in text and "--conflict-similarity" in text
    assert "prefer is not swept" in text


def test_the_console_names_the_conflict_settings_swept_and_the_one_written() -> None:
    result = invoke(
        "calibrate", NOTES, "--conflicts", "drop,off", "--no-report", "--out", "c.toml"
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    data = tomllib.loads(Path("c.toml").read_text())
    held = "conflicts off" if data["conflicts"] == "off" else "conflicts=drop@0.5"
    assert (
        f"Conflict stage: swept conflicts off, conflicts=drop@0.5; the config holds {held}." in text
    )
