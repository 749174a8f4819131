"""The sampling estimator for black-box chat models, against fake LangChain chat models."""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from ragguard.calibration import load_evalset
from ragguard.calibration.annotate import (
    AnnotationError,
    ChatGenerator,
    Outputs,
    Pair,
    Relevance,
    RelevanceJudge,
    SamplingEstimator,
    annotate,
)


class RateChatModel(BaseChatModel):
    """Abstains at the rate written in the passage (``[abstain 30%]``), exactly: of every
    10 calls about one passage, the first ``rate * 10`` (in call order) abstain."""

    temperature: float = 0.0
    _calls: dict[str, int] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _temperatures: list[float] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "rate-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        text = str(messages[-1].content)
        found = re.search(r"\[abstain (\d+)%\]", text)
        rate = int(found.group(1)) / 100 if found else 0.0
        with self._lock:
            n = self._calls.get(text, 0)
            self._calls[text] = n + 1
            self._temperatures.append(self.temperature)
        answer = "NO-RESPONSE" if (n % 10) < round(rate * 10) else "Paris"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])


PAIRS = [
    Pair("What is the capital of France?", "[abstain 30%] Lyon is in France."),
    Pair("What is the capital of France?", "[abstain 0%] Paris is the capital."),
    Pair("What is the capital of France?", "[abstain 100%] Bananas."),
    Pair("What is the capital of France?", "[abstain 70%] Berlin is in Germany."),
]


@pytest.mark.parametrize("concurrency", [1, 4, 25])
def test_known_abstention_rates_are_recovered(concurrency: int) -> None:
    model = RateChatModel()
    est = SamplingEstimator(model, n=10, temperature=0.9, concurrency=concurrency)
    assert dict(est.estimate(PAIRS)) == {0: 0.3, 1: 0.0, 2: 1.0, 3: 0.7}
    sampler = est.chat_model
    assert sampler is not model and model.temperature == 0.0  # the user's model is untouched
    assert sampler._temperatures == [0.9] * 40
    assert est.settings() == {
        "backend": "chat",
        "model": "RateChatModel",
        "n": 10,
        "temperature": 0.9,
        "prompt": est.prompt.fingerprint(),
    }


def test_the_prompt_is_the_papers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[BaseMessage]] = []
    model = RateChatModel()
    original = RateChatModel._generate

    def spy(self: RateChatModel, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
        seen.append(messages)
        return original(self, messages, *a, **k)

    monkeypatch.setattr(RateChatModel, "_generate", spy)
    list(SamplingEstimator(model, n=1).estimate(PAIRS[:1]))
    system, user = seen[0]
    assert system.type == "system" and "respond with NO-RESPONSE" in str(system.content)
    assert user.type == "human" and str(user.content).endswith("Question:\n" + PAIRS[0].question
                                                               + "\n\nAnswer:")  # fmt: skip


def test_model_without_temperature_warns_and_counts_variants(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replies = ["NO-RESPONSE", "Paris", "no response", "I don't know"]
    model = FakeListChatModel(responses=replies)
    with caplog.at_level(logging.WARNING):
        est = SamplingEstimator(model, n=4, temperature=1.0, concurrency=1)
    assert "has no 'temperature' field" in caplog.text
    assert dict(est.estimate(PAIRS[:2])) == {0: 0.5, 1: 0.5}


def test_chat_judge_and_annotate_end_to_end(tmp_path: Path) -> None:
    row = {
        "query_id": "q",
        "query": "What is the capital of France?",
        "answers": ["Paris"],
        "candidates": [
            {"id": "lyon", "text": "[abstain 30%] Lyon is in France."},
            {"id": "paris", "text": "[abstain 0%] Paris is the capital."},
        ],
    }
    evalset = tmp_path / "eval.jsonl"
    evalset.write_text(json.dumps(row) + "\n")
    judge_model = FakeListChatModel(
        responses=['{"motivation": "no", "grade": "B"}', '{"motivation": "yes", "grade": "A"}']
    )
    annotate(
        evalset,
        SamplingEstimator(RateChatModel(), n=10),
        outputs=Outputs(out=tmp_path / "u.jsonl"),
        relevance=Relevance(judge=RelevanceJudge(ChatGenerator(judge_model, concurrency=1))),
    )
    es = load_evalset(tmp_path / "u.jsonl")
    assert dict(es.labels["q"].utilities) == pytest.approx({"lyon": -0.7, "paris": 1.0})
    assert dict(es.labels["q"].grades) == {"lyon": 0, "paris": 1}


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda m: SamplingEstimator(m, n=0), "n must be"),
        (lambda m: SamplingEstimator(m, n=10**9), "n must be"),
        (lambda m: SamplingEstimator(m, temperature=-0.1), "temperature"),
        (lambda m: SamplingEstimator(m, temperature=float("nan")), "temperature"),
        (lambda m: SamplingEstimator(m, concurrency=0), "concurrency"),
        (lambda m: ChatGenerator(m, concurrency=0), "concurrency"),
        (lambda m: ChatGenerator(m, temperature=float("inf")), "temperature"),
    ],
)
def test_bad_settings_are_annotation_errors(make: Any, name: str) -> None:
    """Issue 11: a typed error naming the setting; ChatGenerator(concurrency=0) used to
    fail only later, inside range(), with a bare ValueError."""
    with pytest.raises(AnnotationError, match=name):
        make(RateChatModel())
