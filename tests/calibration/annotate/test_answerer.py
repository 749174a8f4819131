"""The answerer over annotate's backends (issue 38), end to end through a guard's answerer
stage: a fake OpenAI-compatible endpoint, a fake LangChain chat model, and SmolLM2-135M
through the GGUF backend (plumbing only: a 135M model is no useful answerer)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from ragguard import AnswerStage, AnswerWarning, Candidate, ContextGuard
from ragguard.calibration.annotate import (
    ANSWER_PROMPT,
    AnnotationError,
    ChatGenerator,
    EndpointGenerator,
    LLMAnswerer,
    TransformersEstimator,
    parse_answer,
)
from ragguard.calibration.annotate._answerer import MAX_WORDS, PASSAGE_CHARS
from tests.calibration.annotate.fake_server import FakeServer

QUERY = "When did the bridge open?"
PASSAGES = [
    Candidate("a", "The bridge opened in 1990 after six years of work.", 0.9),
    Candidate("b", "Opened to traffic in 1992, the bridge spans the river.", 0.8),
    Candidate("c", "The river is wide and slow here.", 0.7),
]


def guard_with(answerer: Any, **options: Any) -> ContextGuard:
    guard = ContextGuard(score_kind="similarity", relative_threshold=0.5, max_k=10)
    AnswerStage(answerer, **options).add_to(guard.stages)
    return guard


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Answer: 1990.", "1990"),
        ('"Paris"', "Paris"),
        ("**The answer is 42,800**", "42,800"),
        ("\n\n  Berlin\nbecause the passage says so", "Berlin"),
        ("$5 million", "$5 million"),
        ("Answers vary", "Answers vary"),
        ("Nonetheless 1990", "Nonetheless 1990"),
        (" ".join(map(str, range(MAX_WORDS + 5))), " ".join(map(str, range(MAX_WORDS)))),
        ("none", None),
        ("None.", None),
        ("'none'", None),
        ("Unknown", None),
        ("N/A", None),
        ("NO-RESPONSE", None),
        ("Not mentioned in the passage.", None),
        ("The passage does not say.", None),
        ("", None),
        ("  \n **  ", None),
    ],
)
def test_parse_answer(reply: str, answer: str | None) -> None:
    assert parse_answer(reply) == answer


def test_the_endpoint_answers_each_kept_passage(server: FakeServer) -> None:
    server.mode = "answer"
    generator = EndpointGenerator("answer-model", base_url=server.url, max_tokens=16)
    guard = guard_with(LLMAnswerer(generator), timeout_ms=20_000)
    expected = {0: "1990", 1: "1992", 2: None}
    assert guard.select(QUERY, PASSAGES).answers == expected
    assert len(server.requests) == 3
    body = server.requests[0]["body"]
    assert body["max_tokens"] == 16 and body["model"] == "answer-model"
    asked = {r["body"]["messages"][0]["content"] for r in server.requests}
    assert asked == {ANSWER_PROMPT.format(question=QUERY, passage=c.text) for c in PASSAGES}
    # aselect: a new query (the cache holds the first's answers)
    sel = asyncio.run(guard.aselect("When?", PASSAGES))
    assert sel.answers == expected and len(server.requests) == 6


def test_a_long_passage_is_cut_in_the_prompt(server: FakeServer) -> None:
    server.mode = "answer"
    huge = Candidate("huge", "x " * 500_000 + "opened in 1990", 0.9)  # 1 MB, the year at the end
    answerer = LLMAnswerer(EndpointGenerator("m", base_url=server.url, max_tokens=16))
    sel = guard_with(answerer).select(QUERY, [huge])
    assert sel.answers == {0: None}  # the year was past the cut
    prompt = server.requests[0]["body"]["messages"][0]["content"]
    assert len(prompt) == len(ANSWER_PROMPT.format(question=QUERY, passage="x" * PASSAGE_CHARS))


@pytest.mark.parametrize(
    ("setup", "timeout_ms", "message"),
    [
        ({"mode": "bad_request"}, 60_000, r"'m' raised EndpointError: .* answered HTTP 400"),
        ({"mode": "answer", "delay": 2.0}, 200, r"answerer 'm' ran past timeout_ms=200$"),
    ],
)
def test_an_endpoint_that_fails_fails_open(
    server: FakeServer, setup: Mapping[str, Any], timeout_ms: int, message: str
) -> None:
    for name, value in setup.items():
        setattr(server, name, value)
    generator = EndpointGenerator("m", base_url=server.url, max_tokens=16, max_retries=0)
    guard = guard_with(LLMAnswerer(generator), timeout_ms=timeout_ms)
    with pytest.warns(AnswerWarning, match=message):
        sel = guard.select(QUERY, PASSAGES)
    assert sel.answers is None and [c.id for c in sel.kept] == ["a", "b", "c"]


def test_a_langchain_chat_model_answers() -> None:
    model = FakeListChatModel(responses=["Answer: 1990.", "1992", "none"])
    answerer = LLMAnswerer(ChatGenerator(model, concurrency=1))
    assert answerer.model_name == "FakeListChatModel"
    assert guard_with(answerer).select(QUERY, PASSAGES).answers == {0: "1990", 1: "1992", 2: None}


class _Silent:
    """A text generator that replies to none of the prompts."""

    model_id = "silent"

    def settings(self) -> Mapping[str, object]:
        return {}

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        return iter(())


def test_a_missing_reply_is_no_answer() -> None:
    assert LLMAnswerer(_Silent())(QUERY, ["a", "b"]) == [None, None]


@pytest.mark.parametrize(
    ("generator", "prompt", "message"),
    [
        (lambda q: "x", ANSWER_PROMPT, r"generator must be a text generator .* got function"),
        (_Silent(), "Question: {question}", r"prompt must be a str with \{question\} and \{passa"),
        (_Silent(), 42, r"prompt must be a str .* got 42"),
        (_Silent(), "{question} {passage} {other}", r"prompt holds a field other than .*other"),
    ],
)
def test_bad_answerer_settings_are_one_clear_line(
    generator: Any, prompt: Any, message: str
) -> None:
    with pytest.raises(AnnotationError, match=message) as raised:
        LLMAnswerer(generator, prompt=prompt)
    assert "\n" not in str(raised.value)


@pytest.mark.slow  # the SmolLM2 GGUF model
def test_smollm2_answers_through_the_gguf_backend(smollm: TransformersEstimator) -> None:
    answerer = LLMAnswerer(smollm.generator(max_new_tokens=12))
    guard = guard_with(answerer, timeout_ms=None)
    sel = guard.select(QUERY, PASSAGES)
    # quality aside: one short answer (or none) per kept passage, by input position
    assert sel.answers is not None and list(sel.answers) == [0, 1, 2]
    for answer in sel.answers.values():
        assert answer is None or (answer and len(answer.split()) <= MAX_WORDS)
    json.dumps(sel.answers)  # plain data
    again = asyncio.run(guard.aselect(QUERY, PASSAGES))  # from the cache
    assert again.answers == sel.answers
