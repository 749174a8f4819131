"""Black-box chat models (any LangChain chat model): p(NO-RESPONSE) as the share of ``n``
sampled answers that abstain (the paper's Appendix D); the temperature is set on a copy
of the model when it has that field."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ragguard._optional import require
from ragguard.calibration.annotate._base import Pair
from ragguard.calibration.annotate._checks import check
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    AbstentionPrompt,
    is_abstention,
)

logger = logging.getLogger(__name__)


def _text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return str(content)


class _ChatModel:
    """The chat model copied at ``temperature``, its name and the calls in flight."""

    def __init__(
        self,
        chat_model: Any,
        *,
        temperature: float = 0.0,
        concurrency: int = 4,
        model_id: str | None = None,
    ) -> None:
        require("langchain_core", "langchain")
        check("temperature", temperature)
        check("concurrency", concurrency)
        self.chat_model = chat_model
        if "temperature" in getattr(type(chat_model), "model_fields", {}):
            self.chat_model = chat_model.model_copy(update={"temperature": temperature})
        else:
            name = type(chat_model).__name__
            logger.warning("%s has no 'temperature' field; it samples at its own setting", name)
        self.temperature = temperature
        self.concurrency = concurrency
        names = (getattr(chat_model, a, None) for a in ("model_name", "model", "model_id"))
        found = next((n for n in names if isinstance(n, str) and n), type(chat_model).__name__)
        self.model_id = model_id or found


class ChatGenerator(_ChatModel):
    """Replies from a LangChain chat model: a ``TextGenerator`` for the judge.

    Args:
        chat_model: any LangChain chat model; copied at ``temperature`` when it has
            that field.
        temperature: 0 by default (a judge should be deterministic).
        concurrency: calls in flight at once.
        model_id: the model's name in the outputs (default: its ``model_name``,
            ``model`` or ``model_id``, else its class name).
    """

    def settings(self) -> Mapping[str, object]:
        """Backend, model and temperature."""
        return {"backend": "chat", "model": self.model_id, "temperature": self.temperature}

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """``(index, reply)`` per prompt, ``concurrency`` prompts per batch."""
        for start in range(0, len(prompts), self.concurrency):
            chunk = prompts[start : start + self.concurrency]
            replies = self.chat_model.batch(
                [[("user", p)] for p in chunk], config={"max_concurrency": self.concurrency}
            )
            for k, reply in enumerate(replies):
                yield start + k, _text(reply)


class SamplingEstimator(_ChatModel):
    """p(NO-RESPONSE) as the share of ``n`` sampled answers that abstain.

    Args:
        chat_model: any LangChain chat model (``BaseChatModel``).
        n: answers sampled per pair.
        temperature: sampling temperature (set on a copy of the model when it has that
            field; else it samples at its own, with a warning).
        concurrency: calls in flight at once (LangChain's ``max_concurrency``).
        model_id: the model's name in the outputs (default: the model's own).
        prompt: the abstention prompt (default: the paper's Figure 4).
        is_abstention: decides whether one answer abstains.
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        n: int = 10,
        temperature: float = 1.0,
        concurrency: int = 4,
        model_id: str | None = None,
        prompt: AbstentionPrompt = ABSTENTION_PROMPT,
        is_abstention: Callable[[str], bool] = is_abstention,
    ) -> None:
        check("samples", n, label="n")
        super().__init__(
            chat_model, temperature=temperature, concurrency=concurrency, model_id=model_id
        )
        self.n = n
        self.prompt = prompt
        self.is_abstention = is_abstention

    def settings(self) -> Mapping[str, object]:
        """Backend, model, n, temperature and the prompt's hash."""
        return {
            "backend": "chat",
            "model": self.model_id,
            "n": self.n,
            "temperature": self.temperature,
            "prompt": self.prompt.fingerprint(),
        }

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        """``(index, abstentions / n)`` per pair; a few pairs' samples per batch."""
        per_batch = max(1, self.concurrency // self.n)
        for start in range(0, len(pairs), per_batch):
            chunk = list(range(start, min(start + per_batch, len(pairs))))
            inputs = []
            for i in chunk:
                msgs = self.prompt.messages(pairs[i].question, pairs[i].passage)
                inputs.extend([[(m["role"], m["content"]) for m in msgs]] * self.n)
            replies = self.chat_model.batch(inputs, config={"max_concurrency": self.concurrency})
            for k, i in enumerate(chunk):
                answers = replies[k * self.n : (k + 1) * self.n]
                hits = sum(1 for a in answers if self.is_abstention(_text(a)))
                yield i, hits / self.n
