"""``ragguard synth`` on the command line: a written eval set that ``calibrate`` reads
end to end, and one line for a bad corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from ragguard.cli import app

runner = CliRunner()

WORDS = [f"topic{letter}" for letter in "abcdefghijklmnopqrst"]


def tiny_corpus(path: Path) -> dict[str, str]:
    """Forty passages, each of twelve words drawn from a fixed vocabulary."""
    texts = {
        f"d{i:02d}": " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] + f"{i % 7}" for j in range(12))
        for i in range(40)
    }
    path.write_text("\n".join(json.dumps({"id": k, "text": v}) for k, v in texts.items()))
    return texts


def overlap_run(evalset: Path, texts: dict[str, str], out: Path) -> None:
    """A TREC run: every passage scored by the words it shares with the query."""
    with out.open("w") as fh:
        for line in evalset.read_text().splitlines():
            row = json.loads(line)
            words = set(row["query"].split())
            scored = sorted(
                ((len(words & set(re.findall(r"\w+", t))), d) for d, t in texts.items()),
                key=lambda x: (-x[0], x[1]),
            )[:10]
            for rank, (s, d) in enumerate(scored, start=1):
                fh.write(f"{row['query_id']} Q0 {d} {rank} {s + 0.01 * (10 - rank)} overlap\n")


def test_synth_then_calibrate_end_to_end(tmp_path: Path) -> None:
    texts = tiny_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "eval.jsonl"
    made = runner.invoke(
        app, ["synth", str(tmp_path / "corpus.jsonl"), "--out", str(out), "--n", "30"]
    )
    assert made.exit_code == 0, made.output
    assert "30 queries from 40 passages" in made.stderr
    again = tmp_path / "again.jsonl"
    runner.invoke(app, ["synth", str(tmp_path / "corpus.jsonl"), "-o", str(again), "--n", "30"])
    assert again.read_bytes() == out.read_bytes()
    overlap_run(out, texts, tmp_path / "overlap.trec")
    result = runner.invoke(
        app,
        ["calibrate", str(out), "--run", str(tmp_path / "overlap.trec"), "--json", "--no-report",
         "-o", str(tmp_path / "ragguard.toml"), "--allow-unmet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ragguard.toml").is_file()
    # synth's labels are generated: calibrate reads them as silver and says so
    assert json.loads(result.stdout)["labels"] == "silver"
    assert 'labels = "silver"' in (tmp_path / "ragguard.toml").read_text()


def test_bad_corpus_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "a", "text": "only one passage"}))
    result = runner.invoke(
        app, ["synth", str(tmp_path / "c.jsonl"), "-o", str(tmp_path / "e.jsonl")]
    )
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'c.jsonl'}: the corpus has one passage; synth needs at least 2 "
        "(the others are what a retriever must rank below it)"
    ]
    assert "Traceback" not in result.output and not (tmp_path / "e.jsonl").exists()
