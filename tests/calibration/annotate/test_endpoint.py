"""The OpenAI-compatible endpoint backend against small servers started on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.annotate import (
    ABSTENTION_PROMPT,
    AnnotationError,
    EndpointError,
    EndpointGenerator,
    OpenAIEndpointEstimator,
    Outputs,
    Pair,
    Relevance,
    RelevanceJudge,
    annotate,
)
from tests.calibration.annotate.fake_server import FakeServer

PAIRS = [
    Pair("What is the capital of France?", "Paris is the capital of France."),
    Pair("What is the capital of France?", "Berlin is the capital of Germany."),
    Pair("What is the capital of France?", "Lyon is a city in France."),
]


def test_chat_logprobs_give_the_abstention_mass(server: FakeServer) -> None:
    est = OpenAIEndpointEstimator("served-model", base_url=server.url, api_key="k", concurrency=2)
    got = dict(est.estimate(PAIRS))
    assert got == pytest.approx({0: 0.25, 1: 0.75, 2: 0.75})
    (first,) = [r for r in server.requests if "Paris" in json.dumps(r["body"])]
    body = first["body"]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer k"
    assert body["model"] == "served-model" and body["max_tokens"] == 1
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["messages"] == ABSTENTION_PROMPT.messages(PAIRS[0].question, PAIRS[0].passage)


def test_completions_api(server: FakeServer) -> None:
    est = OpenAIEndpointEstimator("base-model", base_url=server.url, api="completions")
    assert dict(est.estimate(PAIRS[:2])) == pytest.approx({0: 0.25, 1: 0.75})
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/completions"
    assert body["prompt"].endswith("Answer:") and body["logprobs"] == 20


def test_an_endpoint_without_logprobs_is_a_clear_error(server: FakeServer) -> None:
    server.mode = "no_logprobs"
    est = OpenAIEndpointEstimator("m", base_url=server.url)
    with pytest.raises(EndpointError, match=r"returned no logprobs.*'chat' backend"):
        list(est.estimate(PAIRS[:1]))


def test_transient_errors_are_retried_with_backoff(server: FakeServer) -> None:
    server.fail_first = 2
    est = OpenAIEndpointEstimator("m", base_url=server.url, concurrency=1, backoff=0.01)
    assert dict(est.estimate(PAIRS[:1])) == pytest.approx({0: 0.25})
    assert len(server.requests) == 3


def test_retries_run_out(server: FakeServer) -> None:
    server.fail_first = 10
    est = OpenAIEndpointEstimator("m", base_url=server.url, max_retries=2, backoff=0.01)
    with pytest.raises(EndpointError, match=r"HTTP 503 \(after 2 retries\).*overloaded"):
        list(est.estimate(PAIRS[:1]))
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server: FakeServer) -> None:
    server.mode = "bad_request"
    est = OpenAIEndpointEstimator("nope", base_url=server.url, backoff=0.01)
    with pytest.raises(EndpointError, match=r"HTTP 400.*does not exist"):
        list(est.estimate(PAIRS[:1]))
    assert len(server.requests) == 1


def test_connection_errors_are_retried_then_reported() -> None:
    est = OpenAIEndpointEstimator(
        "m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.01, timeout=2
    )
    with pytest.raises(EndpointError, match=r"ConnectError.*after 1 retries"):
        list(est.estimate(PAIRS[:1]))


def test_concurrency_is_limited(server: FakeServer) -> None:
    server.delay = 0.05
    pairs = PAIRS * 4
    est = OpenAIEndpointEstimator("m", base_url=server.url, concurrency=3)
    assert len(dict(est.estimate(pairs))) == len(pairs)
    assert server.max_in_flight == 3


def _evalset(tmp_path: Path) -> Path:
    rows = [
        {
            "query_id": f"q{i}",
            "query": "What is the capital of France?",
            "answers": ["Paris"],
            "relevant": ["a"],
            "candidates": [
                {"id": "a", "text": "Paris is the capital of France."},
                {"id": "b", "text": "Berlin is the capital of Germany."},
                {"id": "c", "text": "Lyon is a city in France."},
            ],
        }
        for i in range(4)
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_interrupted_endpoint_run_resumes(server: FakeServer, tmp_path: Path) -> None:
    evalset, out = _evalset(tmp_path), tmp_path / "u.jsonl"
    server.delay = 0.02
    est = OpenAIEndpointEstimator("m", base_url=server.url, concurrency=2)
    seen: list[int] = []

    def stop_after_five(stage: str, done: int, total: int) -> None:
        seen.append(done)
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        annotate(evalset, est, outputs=Outputs(out=out), progress=stop_after_five)
    # A request the interrupted run had sent may reach the server after the run stopped
    # (cancelling on the client cannot unsend it), so the resumed run's requests are told
    # apart by their key, not by counting before and after. The key is no part of what
    # a saved result is reused for (server and model are).
    resumed = OpenAIEndpointEstimator(
        "m", base_url=server.url, concurrency=2, api_key="resumed-run"
    )
    summary = annotate(evalset, resumed, outputs=Outputs(out=out))
    assert (summary.computed, summary.reused) == (7, 5)
    assert sum(r["auth"] == "Bearer resumed-run" for r in server.requests) == 7
    es = load_evalset(out)
    assert dict(es.labels["q0"].utilities) == pytest.approx({"a": 0.75, "b": -0.25, "c": -0.25})


def test_endpoint_judge(server: FakeServer, tmp_path: Path) -> None:
    rows = [
        {
            "query_id": "q",
            "query": "What is the capital of France?",
            "answers": ["Paris"],
            "candidates": [
                {"id": "a", "text": "Paris is the capital of France."},
                {"id": "b", "text": "Berlin is the capital of Germany."},
            ],
        }
    ]
    evalset = tmp_path / "eval.jsonl"
    evalset.write_text(json.dumps(rows[0]) + "\n")
    judge = RelevanceJudge(EndpointGenerator("judge", base_url=server.url))
    est = OpenAIEndpointEstimator("m", base_url=server.url)
    annotate(
        evalset, est, outputs=Outputs(out=tmp_path / "u.jsonl"), relevance=Relevance(judge=judge)
    )
    row = json.loads((tmp_path / "u.jsonl").read_text())
    assert row["relevant"] == {"a": 1} and row["not_relevant"] == ["b"]
    assert row["metadata"]["annotate"]["relevance"] == {"a": "judge", "b": "judge"}
    asked = [r["body"] for r in server.requests if r["body"]["max_tokens"] > 1]
    assert len(asked) == 2 and "Acceptable answers list: ['Paris']" in json.dumps(asked)


# issue 11, item 9: safe to run anywhere


async def test_annotate_works_inside_a_running_event_loop(
    server: FakeServer, tmp_path: Path
) -> None:
    """From a coroutine (a Jupyter cell, an async app) the synchronous entry point must
    not try to run a private loop in this thread, which fails while one is running."""
    asyncio.get_running_loop()  # the test really runs inside a loop
    evalset = _evalset(tmp_path)
    del_labels = [json.loads(line) for line in evalset.read_text().splitlines()]
    for row in del_labels:
        del row["relevant"]
    evalset.write_text("".join(json.dumps(r) + "\n" for r in del_labels))
    est = OpenAIEndpointEstimator("m", base_url=server.url, concurrency=2)
    judge = RelevanceJudge(EndpointGenerator("judge", base_url=server.url))
    summary = annotate(
        evalset, est, outputs=Outputs(out=tmp_path / "u.jsonl"), relevance=Relevance(judge=judge)
    )
    assert (summary.pairs, summary.computed, summary.judged) == (12, 12, 12)
    es = load_evalset(tmp_path / "u.jsonl")
    assert dict(es.labels["q3"].utilities) == pytest.approx({"a": 0.75, "b": -0.25, "c": -0.25})


KEY = "sk-test-0123456789abcdefXYZ"


def test_error_replies_never_show_the_key(server: FakeServer) -> None:
    server.mode = "echo_auth"
    est = OpenAIEndpointEstimator("m", base_url=server.url, api_key=KEY)
    with pytest.raises(EndpointError) as info:
        list(est.estimate(PAIRS[:1]))
    message = str(info.value)
    assert server.requests[0]["auth"] == f"Bearer {KEY}"  # the key was sent, and echoed
    assert "HTTP 401" in message and "invalid key ***" in message
    assert KEY not in message and "0123456789" not in message
    assert '"Authorization": "***"' in message and '"api_key": "***"' in message


def test_a_short_key_is_hidden_without_garbling_the_message(server: FakeServer) -> None:
    server.mode = "echo_auth"
    est = EndpointGenerator("model-k", base_url=server.url, api_key="k")
    with pytest.raises(EndpointError) as info:
        list(est.generate(["hello"]))
    message = str(info.value)
    assert "invalid key ***" in message and '"api_key": "***"' in message
    assert "(model 'model-k')" in message and "invalid key" in message


def test_credentials_in_the_url_are_hidden(tmp_path: Path) -> None:
    url = "http://user:s3cret-pass@127.0.0.1:9/v1"
    est = OpenAIEndpointEstimator("m", base_url=url, max_retries=0, timeout=2)
    with pytest.raises(EndpointError, match=r"ConnectError") as info:
        list(est.estimate(PAIRS[:1]))
    assert "s3cret" not in str(info.value) and "http://***@127.0.0.1:9/v1" in str(info.value)
    assert "s3cret" not in json.dumps(est.settings())  # written to the output files


@pytest.mark.parametrize(
    ("cls", "kwargs", "name"),
    [
        (OpenAIEndpointEstimator, {"timeout": 0}, "timeout"),
        (OpenAIEndpointEstimator, {"timeout": -1.0}, "timeout"),
        (OpenAIEndpointEstimator, {"timeout": math.nan}, "timeout"),
        (OpenAIEndpointEstimator, {"timeout": math.inf}, "timeout"),
        (OpenAIEndpointEstimator, {"timeout": 1e9}, "timeout"),
        (OpenAIEndpointEstimator, {"concurrency": 0}, "concurrency"),
        (OpenAIEndpointEstimator, {"concurrency": 2.5}, "concurrency"),
        (OpenAIEndpointEstimator, {"concurrency": True}, "concurrency"),
        (OpenAIEndpointEstimator, {"concurrency": 10**6}, "concurrency"),
        (OpenAIEndpointEstimator, {"max_retries": -1}, "max_retries"),
        (OpenAIEndpointEstimator, {"max_retries": 10**9}, "max_retries"),
        (OpenAIEndpointEstimator, {"backoff": -0.5}, "backoff"),
        (OpenAIEndpointEstimator, {"top_logprobs": 0}, "top_logprobs"),
        (OpenAIEndpointEstimator, {"api": "responses"}, "api"),
        (OpenAIEndpointEstimator, {"base_url": "localhost:8000/v1"}, "base_url"),
        (OpenAIEndpointEstimator, {"concurency": 3}, "unknown options concurency"),
        (EndpointGenerator, {"max_tokens": 0}, "max_tokens"),
        (EndpointGenerator, {"timeout": "60"}, "timeout"),
    ],
)
def test_bad_settings_are_named_at_construction(
    cls: Any, kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(AnnotationError, match=name):
        cls("m", **kwargs)


def test_results_from_another_server_are_not_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same model name served elsewhere (another quantisation, another version) is
    another annotator: resuming the file against server B computes everything again."""
    evalset, out = _evalset(tmp_path), tmp_path / "u.jsonl"
    a, b = FakeServer(), FakeServer()
    try:
        first = annotate(
            evalset, OpenAIEndpointEstimator("m", base_url=a.url), outputs=Outputs(out=out)
        )
        assert (first.computed, first.reused) == (12, 0)
        with caplog.at_level(logging.WARNING):
            second = annotate(
                evalset, OpenAIEndpointEstimator("m", base_url=b.url), outputs=Outputs(out=out)
            )
        assert (second.computed, second.reused) == (12, 0)
        assert len(b.requests) == 12
        assert "made with other settings" in caplog.text and "12 of these pairs" in caplog.text
        settings = json.loads(out.read_text().splitlines()[0])["metadata"]["annotate"]["settings"]
        assert settings["base_url"] == b.url
        # and against A again, A's saved results are still there to reuse
        third = annotate(
            evalset, OpenAIEndpointEstimator("m", base_url=a.url), outputs=Outputs(out=out)
        )
        assert (third.computed, third.reused) == (0, 12)
    finally:
        a.close()
        b.close()
