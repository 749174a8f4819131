"""``ragguard synth`` on the command line: a written eval set that ``calibrate`` reads
end to end, and one line for a bad corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
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


def four_passages(path: Path) -> Path:
    texts = {
        "p1": "The Eiffel Tower in Paris was completed in 1889. It is 330 metres tall.",
        "p2": "Photosynthesis turns sunlight, water and carbon dioxide into glucose and oxygen.",
        "p3": "The Great Barrier Reef off Queensland is the largest coral reef in the world.",
        "p4": "Mount Kilimanjaro in Tanzania is the highest mountain in Africa.",
    }
    path.write_text("\n".join(json.dumps({"id": k, "text": v}) for k, v in texts.items()))
    return path


def one_line_error(args: list[str], expected: str) -> None:
    result = runner.invoke(app, ["synth", *args])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    if result.exit_code == 1:  # ours (2: click's usage error, in its box)
        errors = [line for line in result.output.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and expected in errors[0], result.output
    else:
        assert expected in result.output


def test_a_bad_backend_or_model_is_one_line(tmp_path: Path) -> None:
    corpus = str(four_passages(tmp_path / "c.jsonl"))
    out = ["--out", str(tmp_path / "e.jsonl")]
    one_line_error([corpus, *out, "--backend", "llama"], "'llama' is not one of")
    one_line_error(
        [corpus, *out, "--backend", "gguf", "--model", str(tmp_path / "none.gguf")],
        "no such GGUF file",
    )
    one_line_error([corpus, *out, "--model", "x.gguf"], "--backend and --model go together")
    one_line_error(
        [corpus, *out, "--backend", "gguf", "--model", "x.gguf", "--method", "cloze"],
        "--method builds queries without a model",
    )
    assert not (tmp_path / "e.jsonl").exists()


@pytest.mark.slow
def test_synth_with_smollm2_writes_llm_questions_and_resumes(
    tmp_path: Path, gguf_path: Path
) -> None:
    corpus, out = str(four_passages(tmp_path / "c.jsonl")), tmp_path / "e.jsonl"
    args = ["synth", corpus, "-o", str(out), "--backend", "gguf", "--model", str(gguf_path)]
    first = runner.invoke(app, [*args, "--n", "2"])  # as if interrupted after 2 passages
    assert first.exit_code == 0, first.output
    progress = out.with_name("e.jsonl.progress")
    done = [json.loads(line)["doc_id"] for line in progress.read_text().splitlines()]
    assert len(done) == 2
    second = runner.invoke(app, [*args, "--n", "3"])
    assert second.exit_code == 0, second.output
    assert "1 replies asked, 2 reused" in second.stderr
    saved = [json.loads(line)["doc_id"] for line in progress.read_text().splitlines()]
    assert saved[:2] == done and len(saved) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rejected = re.findall(r"passage '(p\d)': no usable question", second.stderr)
    assert sorted([r["metadata"]["synth"]["source"] for r in rows] + rejected) == sorted(saved)
    for r in rows:
        synth = r["metadata"]["synth"]
        assert synth["method"] == "llm" and synth["model"] == gguf_path.name
        assert synth["labels"] == "silver" and r["relevant"] == {synth["source"]: 1}


def test_synth_with_an_endpoint_asks_concurrently_and_reports_duplicates(tmp_path: Path) -> None:
    from tests.calibration.annotate.fake_server import FakeServer

    server = FakeServer()  # one JSON line for the passage about Paris, one for the others
    server.delay = 0.2
    try:
        corpus, out = str(four_passages(tmp_path / "c.jsonl")), tmp_path / "e.jsonl"
        endpoint = ["--model", "served-llm", "--base-url", server.url, "--concurrency", "4"]
        args = ["synth", corpus, "-o", str(out), "--n", "4", "--backend", "openai", *endpoint]
        result = runner.invoke(app, args)
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 4 and server.max_in_flight > 1
    assert all("Passage: " in json.dumps(r["body"]) for r in server.requests)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and {r["metadata"]["synth"]["model"] for r in rows} == {"served-llm"}
    assert len(re.findall(r"no usable question \(duplicate\)", result.stderr)) == 2


def test_annotates_scoring_options_are_not_synths(tmp_path: Path) -> None:
    # synth reuses annotate's model flags, but a scoring flag it would ignore is refused
    tiny_corpus(tmp_path / "corpus.jsonl")
    for flag, value in (("--batch-size", "4"), ("--temperature", "0.5"), ("--samples", "3")):
        result = runner.invoke(
            app, ["synth", str(tmp_path / "corpus.jsonl"), "-o", str(tmp_path / "e.jsonl"),
                  "--backend", "gguf", "--model", "m.gguf", flag, value],
        )  # fmt: skip
        assert result.exit_code == 2, (flag, result.output)
        assert f"No such option: {flag}" in result.output
        assert not (tmp_path / "e.jsonl").exists()


LANGCHAIN = "tests.calibration.retrievers:make_langchain_retriever"


def test_synth_with_a_retriever_writes_its_run_and_calibrates_alone(tmp_path: Path) -> None:
    from tests.calibration.retrievers import NOTES, make_langchain_retriever

    out = tmp_path / "eval.jsonl"
    args = ["synth", str(NOTES / "corpus.jsonl"), "-o", str(out), "--n", "20"]
    made = runner.invoke(app, [*args, "--retriever", LANGCHAIN])
    assert made.exit_code == 0, made.output
    assert "run make_langchain_retriever" in made.stderr and "similarity scores" in made.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 20
    retriever = make_langchain_retriever()
    for line in lines:
        # every query carries the retriever's own ranking, scored, under the factory's name
        cands = line["runs"]["make_langchain_retriever"]
        assert [c["id"] for c in cands] == [d.id for d in retriever.invoke(line["query"])]
        assert all(isinstance(c["score"], float) for c in cands)
    result = runner.invoke(
        app,
        ["calibrate", str(out), "--json", "--no-report", "-o", str(tmp_path / "ragguard.toml"),
         "--allow-unmet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["labels"] == "silver"
    assert report["recommended"]["run"] == "make_langchain_retriever"
    assert report["recommended"]["score_kind"] == "similarity"
    assert 'run = "make_langchain_retriever"' in (tmp_path / "ragguard.toml").read_text()


def test_a_bad_retriever_factory_is_one_line_before_any_query(tmp_path: Path) -> None:
    corpus = str(four_passages(tmp_path / "c.jsonl"))
    out = ["--out", str(tmp_path / "e.jsonl")]
    one_line_error(
        [corpus, *out, "--retriever", "no_such_module_xyz:make"],
        "cannot import module 'no_such_module_xyz'",
    )
    one_line_error(
        [corpus, *out, "--retriever", "tests.calibration.retrievers:make_list"],
        "returned a builtins.list, not a retriever",
    )
    assert not (tmp_path / "e.jsonl").exists()


def test_an_interrupt_says_the_replies_are_saved_and_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragguard.calibration.synth as package

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(package, "ask", interrupted)
    tiny_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "e.jsonl"
    result = runner.invoke(
        app, ["synth", str(tmp_path / "corpus.jsonl"), "-o", str(out), "--backend", "openai",
              "--model", "m", "--base-url", "http://127.0.0.1:9/v1"],
    )  # fmt: skip
    assert result.exit_code == 130, result.output
    assert f"every reply so far is saved in {out}.progress" in " ".join(result.stderr.split())
    assert "resume" in result.stderr and not out.exists()
