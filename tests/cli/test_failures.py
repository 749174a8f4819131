"""Every command, every failure a user's files or machine can cause: one line.

Issue 21, item 3: a damaged, locked or unwritable score cache, a token counter that
cannot be loaded offline, a tampered model card, a truncated or corrupt input file.
Each command that can meet a case is driven with it through the real CLI; each must
exit 1 with exactly one ``error:`` line on stderr (the last line), no traceback, the
file or option named, and nothing written."""

from __future__ import annotations

import contextlib
import gzip
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragguard.calibration.fit import rerank_scores
from ragguard.cli import app
from tests.calibration.two_stage_data import write_folder
from tests.cli.checks import error_line
from tests.faults import block_network
from tests.trained_folders import TAMPERED, trained_folder

runner = CliRunner()


@dataclass
class Setup:
    """What a case needs: the scratch folder, the eval set folder, pytest's patcher."""

    tmp: Path
    data: Path
    monkeypatch: pytest.MonkeyPatch
    stack: contextlib.ExitStack


# A case: builds what it needs and returns (arguments placed after the command's
# eval set, text the error line must contain).
Case = Callable[[Setup], tuple[list[str], str]]


def _filled_cache(s: Setup) -> Path:
    """A score cache filled by one successful two-stage calibration; its file."""
    cache = s.tmp / "cache"
    res = runner.invoke(
        app,
        ["calibrate", str(s.data), "--rerank", "myjudge:judge", "--rerank-cache", str(cache),
         "--no-report", "--out", str(s.tmp / "warm.toml"), "--min-recall", "0"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (path,) = cache.glob("*.sqlite")
    return path


def _rerank(cache: Path) -> list[str]:
    return ["--rerank", "myjudge:judge", "--rerank-cache", str(cache)]


def cache_garbage(s: Setup) -> tuple[list[str], str]:
    path = _filled_cache(s)
    path.write_text("not a database\n")
    return _rerank(path.parent), str(path)


def cache_truncated(s: Setup) -> tuple[list[str], str]:
    path = _filled_cache(s)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return _rerank(path.parent), str(path)


def cache_locked(s: Setup) -> tuple[list[str], str]:
    path = _filled_cache(s)
    s.monkeypatch.setattr(rerank_scores, "CACHE_LOCK_TIMEOUT_S", 0.2)
    other = s.stack.enter_context(contextlib.closing(sqlite3.connect(path)))
    other.execute("BEGIN EXCLUSIVE")  # another calibration is writing
    s.stack.callback(other.rollback)
    return _rerank(path.parent), str(path)


def cache_unwritable(s: Setup) -> tuple[list[str], str]:
    blocker = s.tmp / "a-file"
    blocker.write_text("in the way\n")  # the cache folder cannot be created under a file
    return _rerank(blocker / "cache"), "--rerank-cache"


def tiktoken_offline(s: Setup) -> tuple[list[str], str]:
    registry = pytest.importorskip("tiktoken.registry")
    s.monkeypatch.delitem(registry.ENCODINGS, "cl100k_base", raising=False)
    s.monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(s.tmp / "empty-tiktoken-cache"))
    block_network(s.monkeypatch)
    return ["--max-tokens", "200", "--token-counter", "tiktoken:cl100k_base"], "TIKTOKEN_CACHE_DIR"


def hf_tokenizer_missing(s: Setup) -> tuple[list[str], str]:
    s.monkeypatch.setenv("HF_HOME", str(s.tmp / "empty-hf-home"))
    s.monkeypatch.setenv("HF_HUB_CACHE", str(s.tmp / "empty-hf-home" / "hub"))
    block_network(s.monkeypatch)
    spec = "hf:some-org/not-a-cached-tokenizer"
    return ["--max-tokens", "200", "--token-counter", spec], "local Hugging Face cache"


def _tampered(index: int) -> Case:
    def case(s: Setup) -> tuple[list[str], str]:
        _, card, lexical, _ = TAMPERED[index]
        return [str(trained_folder(s.tmp / "scorer", card, lexical))], "scorer"

    return case


def truncated_gzip_run(s: Setup) -> tuple[list[str], str]:
    run = s.data / "runs" / "dense.trec"
    packed = gzip.compress(run.read_bytes())
    run.unlink()
    (s.data / "runs" / "dense.trec.gz").write_bytes(packed[: len(packed) // 2])
    return [], "dense.trec.gz"


def corrupt_evalset(s: Setup) -> tuple[list[str], str]:
    (s.data / "evalset.jsonl").write_bytes(b'{"query_id": "q00", "query": "\xff\xfe broken\n')
    return [], "evalset.jsonl"


def noise_floor_without_scorer(s: Setup) -> tuple[list[str], str]:
    # (every query of the folder having a relevant document is no failure any more: its
    # queries are taken as in scope, issue 36)
    return ["--noise-floor", "0.05"], "pass --noise-scorer, the embedding model the run"


def false_abstain_out_of_range(s: Setup) -> tuple[list[str], str]:
    return ["--max-false-abstain", "1.5"], "--max-false-abstain (max_false_abstain) must be"


def conflicts_prefer(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "off,prefer"], "--conflicts: conflicts='prefer'"


def conflicts_unknown(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "drop,newest"], "--conflicts: unknown conflicts mode 'newest'"


def conflicts_empty_item(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "off,,drop"], "--conflicts"


def conflict_similarity_zero(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "drop", "--conflict-similarity", "0.5,0"], "--conflict-similarity"


def conflict_similarity_above_one(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "drop", "--conflict-similarity", "1.5"], "--conflict-similarity"


def conflict_similarity_nan(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "drop", "--conflict-similarity", "nan"], "--conflict-similarity"


def conflict_similarity_not_a_number(s: Setup) -> tuple[list[str], str]:
    return ["--conflicts", "drop", "--conflict-similarity", "half"], "'half' is not a number"


def conflict_similarity_alone(s: Setup) -> tuple[list[str], str]:
    return ["--conflict-similarity", "0.5"], "pass --conflicts too"


def conflicts_without_texts(s: Setup) -> tuple[list[str], str]:
    (s.data / "corpus.jsonl").unlink()
    return ["--conflicts", "off,drop"], "have none"


def conflicts_with_empty_texts(s: Setup) -> tuple[list[str], str]:
    lines = (s.data / "corpus.jsonl").read_text().splitlines()
    blank = [line.split('"text"')[0] + '"text": ""}' for line in lines]
    (s.data / "corpus.jsonl").write_text("\n".join(blank) + "\n")
    return ["--conflicts", "off,drop"], "texts are empty"


CARD_NO_KIND = _tampered(next(i for i, t in enumerate(TAMPERED) if t[0] == "TR-04 no kind"))
CARD_WRONG_TYPE = _tampered(next(i for i, t in enumerate(TAMPERED) if t[0] == "coef a string"))
CARD_COEF_COUNT = _tampered(
    next(i for i, t in enumerate(TAMPERED) if t[0] == "TR-10 2 coefficients")
)

# (command and its options before the case's, the case): every command that can meet
# the case. Tampered cards reach calibrate through --rerank DIR, train-reranker through
# --base DIR and annotate through --model DIR.
MATRIX: list[tuple[str, list[str], Case]] = [
    *[("calibrate", [], case) for case in (
        cache_garbage, cache_truncated, cache_locked, cache_unwritable, tiktoken_offline,
        hf_tokenizer_missing, truncated_gzip_run, corrupt_evalset, noise_floor_without_scorer,
        false_abstain_out_of_range, conflicts_prefer,
        conflicts_unknown, conflicts_empty_item, conflict_similarity_zero,
        conflict_similarity_above_one, conflict_similarity_nan, conflict_similarity_not_a_number,
        conflict_similarity_alone, conflicts_without_texts, conflicts_with_empty_texts,
    )],
    *[("calibrate", ["--rerank"], card) for card in (
        CARD_NO_KIND, CARD_WRONG_TYPE, CARD_COEF_COUNT,
    )],
    *[("train-reranker", ["--out", "trained", "--base"], card) for card in (
        CARD_NO_KIND, CARD_WRONG_TYPE, CARD_COEF_COUNT,
    )],
    *[("annotate", ["--backend", "transformers", "--out", "a.jsonl", "--model"], card)
      for card in (CARD_NO_KIND, CARD_COEF_COUNT)],
    *[(command, options, case)
      for command, options in (("evaluate", []), ("compare", []),
                               ("train-reranker", ["--out", "trained"]))
      for case in (truncated_gzip_run, corrupt_evalset)],
]  # fmt: skip


def _name(case: Case) -> str:
    return next((n for n, c in globals().items() if c is case and n.isupper()), case.__name__)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with contextlib.ExitStack() as stack:
        yield Setup(tmp_path, write_folder(tmp_path), monkeypatch, stack)


@pytest.mark.parametrize(
    ("command", "options", "case"),
    MATRIX,
    ids=[f"{cmd}-{_name(case).lower().replace('_', '-')}" for cmd, _, case in MATRIX],
)
def test_every_failure_is_one_typed_line(
    setup: Setup, command: str, options: list[str], case: Case
) -> None:
    before = {p for p in setup.tmp.rglob("*")}
    extra, named = case(setup)
    made = {p for p in setup.tmp.rglob("*")} - before
    args = [command, str(setup.data), *options, *extra]
    if command == "calibrate":
        args += ["--no-report", "--out", "written.toml", "--min-recall", "0"]
    line = error_line(runner.invoke(app, args))
    assert named in line, line
    # nothing written: no config, no trained folder, no annotations, no staging folder
    after = {p for p in setup.tmp.rglob("*")} - before - made
    written = {p for p in after if "default-cache" not in p.parts and p.suffix != ".sqlite"}
    assert not written, sorted(map(str, written))
