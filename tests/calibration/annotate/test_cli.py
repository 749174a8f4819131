"""``ragguard annotate`` through typer's CliRunner, on every backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from ragguard.calibration import evaluate, load_evalset
from ragguard.calibration.annotate import TransformersEstimator
from ragguard.cli import app
from tests.calibration.annotate.fake_server import FakeServer

runner = CliRunner()

FAKE_CHAT = """
from langchain_core.language_models.fake_chat_models import FakeListChatModel


def make():
    return FakeListChatModel(responses=["NO-RESPONSE", "Paris is the capital."])


judge = FakeListChatModel(responses=['{"motivation": "m", "grade": "A"}'])
"""


@pytest.fixture
def evalset(tmp_path: Path) -> Path:
    rows = [
        {
            "query_id": "q1",
            "query": "What is the capital of France?",
            "answers": ["Paris"],
            "relevant": ["paris"],
            "candidates": [
                {"id": "paris", "score": 0.9, "text": "Paris is the capital of France."},
                {"id": "lyon", "score": 0.5, "text": "Lyon is a city in France."},
            ],
        },
        {
            "query_id": "q2",
            "query": "Who wrote Hamlet?",
            "relevant": [],
            "not_relevant": ["banana"],
            "candidates": [{"id": "banana", "score": 0.2, "text": "Bananas are yellow."}],
        },
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_chat_backend_writes_both_formats_and_resumes(
    evalset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fakechat.py").write_text(FAKE_CHAT)
    args = ["annotate", str(evalset), "--backend", "chat", "--model", "fakechat:make",
            "--samples", "2", "--concurrency", "1", "--out", "u.jsonl",
            "--udcg-out", "u.json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "annotated 3 passages with FakeListChatModel: 3 computed, 0 reused" in result.stdout
    assert "p(NO-RESPONSE)" in result.stderr  # the progress bar
    es = load_evalset(tmp_path / "u.jsonl")
    assert dict(es.labels["q1"].utilities) == {"paris": 0.5, "lyon": -0.5}
    udcg = evaluate(load_evalset(tmp_path / "u.json"), metrics=["udcg"], per_query=True)["udcg"]
    assert udcg == pytest.approx(evaluate(es, metrics=["udcg"], per_query=True)["udcg"])
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 computed, 3 reused" in again.stdout


def test_chat_judge_marks_unlabelled_passages(
    evalset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fakechat.py").write_text(FAKE_CHAT)
    rows = [json.loads(line) for line in evalset.read_text().splitlines()]
    del rows[0]["relevant"]
    evalset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(
        app,
        ["annotate", str(evalset), "--backend", "chat", "--model", "fakechat:make",
         "--samples", "2", "--concurrency", "1", "--judge-model", "fakechat:judge",
         "--out", "u.jsonl"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "relevance judged for 2 passages" in result.stdout
    row = json.loads((tmp_path / "u.jsonl").read_text().splitlines()[0])
    assert row["metadata"]["annotate"]["relevance"] == {"paris": "judge", "lyon": "judge"}
    assert row["metadata"]["annotate"]["judge_model"] == "FakeListChatModel"


def _openai(evalset: Path, url: str, out: Path, *more: str) -> list[str]:
    """``ragguard annotate``'s arguments for the openai backend at ``url``."""
    return ["annotate", str(evalset), "--backend", "openai", "--model", "served",
            "--base-url", url, "--out", str(out), *more]  # fmt: skip


def test_openai_backend(evalset: Path, tmp_path: Path, server: FakeServer) -> None:
    out = tmp_path / "u.jsonl"
    result = runner.invoke(app, _openai(evalset, server.url, out))
    assert result.exit_code == 0, result.output
    es = load_evalset(out)
    assert dict(es.labels["q1"].no_response) == pytest.approx({"paris": 0.25, "lyon": 0.75})
    assert json.loads(out.read_text().splitlines()[0])["metadata"]["annotate"]["model"] == "served"


def test_openai_backend_without_logprobs_fails_in_one_line(
    evalset: Path, tmp_path: Path, server: FakeServer
) -> None:
    server.mode = "no_logprobs"
    result = runner.invoke(app, _openai(evalset, server.url, tmp_path / "u.jsonl"))
    assert result.exit_code == 1
    assert "error:" in result.stderr and "returned no logprobs" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # loads the SmolLM2 GGUF file
def test_gguf_backend(
    smollm: TransformersEstimator,
    gguf_path: Path,
    udcg_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's GGUF path, with the model loaded once for the session (conftest)."""
    asked: list[Any] = []

    def from_gguf(path: Path, **kwargs: Any) -> TransformersEstimator:
        asked.append((Path(path), kwargs))
        return smollm

    monkeypatch.setattr(TransformersEstimator, "from_gguf", staticmethod(from_gguf))
    out = tmp_path / "u.jsonl"
    threads = torch.get_num_threads()
    try:
        result = runner.invoke(
            app,
            ["annotate", str(udcg_dir / "sample_dataset.json"), "--backend", "gguf",
             "--model", str(gguf_path.parent), "--batch-size", "2", "--threads", "1",
             "--out", str(out)],
        )  # fmt: skip
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    assert asked[0][0] == gguf_path and asked[0][1]["batch_size"] == 2
    assert "annotated 15 passages with SmolLM2-135M-Instruct.Q4_1.gguf" in result.stdout
    assert load_evalset(out).labels["example_1"].no_response.keys() == {
        "doc_1", "doc_2", "doc_3", "doc_4", "doc_5"
    }  # fmt: skip


def test_errors_are_one_line(evalset: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in evalset.read_text().splitlines()]
    for c in rows[0]["candidates"]:
        del c["text"]
    evalset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["annotate", str(evalset), "--out", str(tmp_path / "u.jsonl")]
    result = runner.invoke(app, [*base, "--backend", "chat", "--model", "nope"])
    assert result.exit_code == 1 and "module:attribute" in result.stderr
    result = runner.invoke(app, [*base, "--backend", "openai", "--model", "m"])
    assert result.exit_code == 1
    assert "2 candidates have no passage text" in result.stderr and "--corpus" in result.stderr


def test_an_interrupt_says_how_to_resume(
    evalset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragguard.calibration.annotate as package

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(package, "annotate", interrupted)
    out = tmp_path / "u.jsonl"
    result = runner.invoke(
        app, ["annotate", str(evalset), "--backend", "openai", "--model", "m", "--out", str(out)]
    )
    assert result.exit_code == 130
    assert f"saved in {out}.progress" in result.stderr and "resume" in result.stderr


# issue 11, items 9 and 10


def _own_lines(text: str) -> list[str]:
    """The help's lines but those of --verbose and --help, which every command shares
    (ragguard.cli._common and typer)."""
    return [line for line in text.splitlines() if "--verbose" not in line and "--help" not in line]


def test_help_reads_cleanly_at_80_columns() -> None:
    result = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "--no-no-chat-template" not in text
    assert "--chat-template" in text and "--no-chat-template" in text
    assert "--no-fresh" not in text  # a flag that only turns something on
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # no option name or help cut short
    assert [line for line in _own_lines(text) if "<bool>" in line] == []
    # plain help (no rich panels): every backend's options are still listed
    for option in ("--judge", "--gguf-file", "--base-url", "--samples"):
        assert option in text, option


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "0"),
        ("--timeout", "-5"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--concurrency", "0"),
        ("--concurrency", "100000"),
        ("--max-retries", "-1"),
        ("--top-logprobs", "0"),
        ("--samples", "0"),
        ("--temperature", "-1"),
        ("--batch-size", "0"),
        ("--max-length", "0"),
        ("--threads", "0"),
    ],
)
def test_numeric_options_are_checked_in_one_line(
    evalset: Path, tmp_path: Path, option: str, value: str
) -> None:
    url, out = "http://127.0.0.1:9/v1", tmp_path / "u.jsonl"
    result = runner.invoke(app, _openai(evalset, url, out, "--max-retries", "0", option, value))
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {option} must be a")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "u.jsonl.progress").exists()


def test_the_api_key_never_reaches_the_terminal(
    evalset: Path, tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-live-4f9a8b7c6d5e4f3a2b1c"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server.mode = "echo_auth"
    result = runner.invoke(app, _openai(evalset, server.url, tmp_path / "u.jsonl"))
    assert server.requests[0]["auth"] == f"Bearer {key}"
    assert result.exit_code == 1 and "HTTP 401" in result.stderr
    assert key not in result.output and "4f9a8b7c" not in result.output


def test_chat_template_flags(evalset: Path, tmp_path: Path) -> None:
    from tests.calibration.annotate.tiny_llm import build_tiny_llm

    chat, plain = tmp_path / "chat", tmp_path / "plain"
    build_tiny_llm(chat, chat=True)
    build_tiny_llm(plain, chat=False)
    base = ["annotate", str(evalset), "--backend", "transformers", "--out"]
    settings = {}
    for flag in ("--chat-template", "--no-chat-template"):
        out = tmp_path / f"{flag}.jsonl"
        result = runner.invoke(app, [*base, str(out), "--model", str(chat), flag])
        assert result.exit_code == 0, result.output
        row = json.loads(out.read_text().splitlines()[0])
        settings[flag] = row["metadata"]["annotate"]["settings"]["chat_template"]
    assert settings == {"--chat-template": True, "--no-chat-template": False}
    result = runner.invoke(
        app, [*base, str(tmp_path / "u.jsonl"), "--model", str(plain), "--chat-template"]
    )
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: chat_template=True (--chat-template), but the tokenizer has no chat template"
    )


def test_help_lists_the_options_under_their_groups() -> None:
    text = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "80"}).stdout
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and line[0] != " "]
    assert titles == [
        "Arguments", "Model", "Inputs", "Output", "Relevance of unlabelled passages",
        "Local models (transformers, gguf)", "Endpoints (openai, chat)", "Options",
    ]  # fmt: skip
    section = text.split("Endpoints (openai, chat):")[1].split("Options:")[0]
    for option in ("--base-url", "--api", "--top-logprobs", "--samples", "--temperature"):
        assert option in section, option
