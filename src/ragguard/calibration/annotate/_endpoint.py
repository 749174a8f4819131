"""OpenAI-compatible endpoints that return logprobs (vLLM, llama.cpp's server, SGLang,
OpenAI itself): how large eval sets and big models are annotated.

Each pair is one request for **one** token with its ``top_logprobs`` alternatives:

* ``api="chat"`` (default): ``POST {base_url}/chat/completions`` with the paper's
  instruction as the system message and the passage and question as the user message
  (the server applies the model's chat template), ``max_tokens=1``, ``logprobs=true``,
  ``top_logprobs=K``;
* ``api="completions"``: ``POST {base_url}/completions`` with the plain prompt (for
  base models), ``max_tokens=1``, ``logprobs=K``.

The estimate is the first-token rule of the local backends, over the tokens the server
returns: the sum of ``exp(logprob)`` over the distinct alternatives whose text, without
leading whitespace, is a non-empty prefix of ``NO-RESPONSE``. Alternatives beyond the
top ``K`` are not seen, so the estimate is a lower bound that misses at most the mass
of tokens less likely than the K-th (OpenAI allows K <= 20; vLLM's default limit is 20).

Requests run ``concurrency`` at a time. Transient failures (connection errors,
timeouts, HTTP 408, 409, 425, 429, 500, 502, 503, 504) are retried up to
``max_retries`` times with exponential backoff and jitter, honouring ``Retry-After``;
anything else, or a reply without logprobs, raises :class:`~ragguard.errors.EndpointError`
at once, naming the URL and the model. Results already handed out stay saved.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from ragguard._optional import require
from ragguard.calibration.annotate._base import Pair
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    AbstentionPrompt,
    is_abstention_start,
)
from ragguard.errors import EndpointError

__all__ = ["EndpointGenerator", "OpenAIEndpointEstimator"]

logger = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
DEFAULT_BASE_URL = "http://localhost:8000/v1"
_RAW_SPACE = re.compile("^[\u0120\u2581]+")


class _Client:
    """POSTs JSON payloads ``concurrency`` at a time, with retries; yields as they finish."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        *,
        concurrency: int,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        timeout: float,
        transport: Any = None,
    ) -> None:
        require("httpx", "endpoint")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.transport = transport

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                wait = float(retry_after)
                return min(self.max_backoff, max(0.0, wait))
            except ValueError:
                pass
        base = min(self.max_backoff, self.backoff * (2.0**attempt))
        return base * (0.5 + random.random() / 2)

    async def _post(self, client: Any, path: str, payload: Mapping[str, Any]) -> Any:
        httpx = require("httpx", "endpoint")
        url = f"{self.base_url}{path}"
        model = payload.get("model")
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = await client.post(url, json=payload)
            except httpx.TransportError as exc:
                if last:
                    raise EndpointError(
                        f"{url} (model {model!r}): {type(exc).__name__}: {exc} "
                        f"(after {self.max_retries} retries)"
                    ) from exc
                delay = self._delay(attempt, None)
                logger.info("%s: %s; retrying in %.2fs", url, type(exc).__name__, delay)
                await asyncio.sleep(delay)
                continue
            if resp.status_code == 200:
                try:
                    return resp.json()
                except ValueError:
                    raise EndpointError(
                        f"{url} (model {model!r}) answered 200 with a body that is not JSON: "
                        f"{resp.text[:200]!r}"
                    ) from None
            if resp.status_code in TRANSIENT_STATUS and not last:
                delay = self._delay(attempt, resp.headers.get("retry-after"))
                logger.info("%s: HTTP %d; retrying in %.2fs", url, resp.status_code, delay)
                await asyncio.sleep(delay)
                continue
            tail = f" (after {self.max_retries} retries)" if resp.status_code in (
                TRANSIENT_STATUS
            ) else ""  # fmt: skip
            raise EndpointError(
                f"{url} (model {model!r}) answered HTTP {resp.status_code}{tail}: {resp.text[:300]}"
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def run(self, path: str, payloads: Sequence[Mapping[str, Any]]) -> Iterator[tuple[int, Any]]:
        """``(index, JSON reply)`` per payload, as each finishes."""
        httpx = require("httpx", "endpoint")
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        loop = asyncio.new_event_loop()
        client = httpx.AsyncClient(
            headers=headers,
            timeout=self.timeout,
            transport=self.transport,
            limits=httpx.Limits(max_connections=self.concurrency),
        )

        async def one(i: int) -> tuple[int, Any]:
            return i, await self._post(client, path, payloads[i])

        pending: set[asyncio.Task[tuple[int, Any]]] = set()
        nxt = 0
        try:
            while nxt < len(payloads) or pending:
                while nxt < len(payloads) and len(pending) < self.concurrency:
                    pending.add(loop.create_task(one(nxt)))
                    nxt += 1
                done, pending = loop.run_until_complete(
                    asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                )
                failed: BaseException | None = None
                for task in done:
                    exc = task.exception()
                    if exc is not None:
                        failed = failed or exc
                    else:
                        yield task.result()
                if failed is not None:
                    raise failed
        finally:
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(client.aclose())
            loop.close()


def _chat_top(reply: Any) -> list[tuple[str, float]] | None:
    try:
        first = reply["choices"][0]["logprobs"]["content"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(first, Mapping):
        return None
    pairs = [(str(first.get("token", "")), first.get("logprob"))]
    for alt in first.get("top_logprobs") or []:
        if isinstance(alt, Mapping):
            pairs.append((str(alt.get("token", "")), alt.get("logprob")))
    return [(t, float(lp)) for t, lp in pairs if isinstance(lp, int | float)]


def _completion_top(reply: Any) -> list[tuple[str, float]] | None:
    try:
        lp = reply["choices"][0]["logprobs"]
        top = lp["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(top, Mapping):
        return None
    out = [(str(t), float(v)) for t, v in top.items() if isinstance(v, int | float)]
    tokens, logprobs = lp.get("tokens"), lp.get("token_logprobs")
    if tokens and logprobs and isinstance(logprobs[0], int | float):
        out.append((str(tokens[0]), float(logprobs[0])))
    return out


class OpenAIEndpointEstimator:
    """p(NO-RESPONSE) from an OpenAI-compatible endpoint's logprobs (see the module
    docstring).

    Args:
        model: the model name the server knows.
        base_url: e.g. ``http://localhost:8000/v1`` (vLLM's default, and the default
            here); else ``$OPENAI_BASE_URL``.
        api_key: sent as a bearer token; default ``$OPENAI_API_KEY`` (none if unset).
        api: ``"chat"`` (chat completions) or ``"completions"`` (plain prompt).
        top_logprobs: alternatives asked for (K).
        concurrency: requests in flight at once.
        max_retries: retries of a transient failure.
        backoff: first retry delay in seconds (doubled each time, with jitter).
        max_backoff: longest delay between retries.
        timeout: seconds per request.
        model_id: the model's name in the outputs (default ``model``).
        prompt: the abstention prompt (default: the paper's Figure 4).
        extra_body: more JSON fields for every request (e.g. vLLM's
            ``chat_template_kwargs``).
        transport: an ``httpx`` async transport (for tests and proxies).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api: Literal["chat", "completions"] = "chat",
        top_logprobs: int = 20,
        concurrency: int = 8,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 60.0,
        model_id: str | None = None,
        prompt: AbstentionPrompt = ABSTENTION_PROMPT,
        extra_body: Mapping[str, Any] | None = None,
        transport: Any = None,
    ) -> None:
        if api not in ("chat", "completions"):
            raise ValueError(f"api must be 'chat' or 'completions', got {api!r}")
        if top_logprobs < 1:
            raise ValueError(f"top_logprobs must be >= 1, got {top_logprobs}")
        self.model = model
        self.api = api
        self.top_logprobs = top_logprobs
        self.prompt = prompt
        self.extra_body = dict(extra_body or {})
        self._model_id = model_id or model
        self.client = _Client(
            base_url, api_key, concurrency=concurrency, max_retries=max_retries,
            backoff=backoff, max_backoff=max_backoff, timeout=timeout, transport=transport,
        )  # fmt: skip

    @property
    def model_id(self) -> str:
        """The model's name in the outputs."""
        return self._model_id

    def settings(self) -> Mapping[str, object]:
        """Backend, model, API, K, prompt hash and extra request fields."""
        return {
            "backend": "openai",
            "model": self.model,
            "api": self.api,
            "top_logprobs": self.top_logprobs,
            "prompt": self.prompt.fingerprint(),
            "extra_body": self.extra_body,
        }

    def payload(self, pair: Pair) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": 0.0}
        if self.api == "chat":
            body["messages"] = self.prompt.messages(pair.question, pair.passage)
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        else:
            body["prompt"] = self.prompt.plain(pair.question, pair.passage)
            body["logprobs"] = self.top_logprobs
        body.update(self.extra_body)
        return body

    def probability(self, reply: Any) -> float:
        """p(NO-RESPONSE) from one reply.

        Raises:
            EndpointError: the reply has no logprobs.
        """
        top = _chat_top(reply) if self.api == "chat" else _completion_top(reply)
        if not top:
            raise EndpointError(
                f"{self.client.base_url} (model {self.model!r}) returned no logprobs; this "
                "backend needs a server that returns them (vLLM, llama.cpp's server, "
                "SGLang, OpenAI); for a model without logprobs use the 'chat' backend, "
                "which estimates p(NO-RESPONSE) by sampling"
            )
        seen: dict[str, float] = {}
        for token, lp in top:
            # a server that returns raw BPE / SentencePiece pieces marks a leading space
            # with U+0120 or U+2581
            seen.setdefault(_RAW_SPACE.sub(" ", token), lp)
        total = sum(
            math.exp(lp) for t, lp in seen.items() if is_abstention_start(t, self.prompt.abstention)
        )
        return min(1.0, max(0.0, total))

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        """``(index, p)`` per pair as requests finish, ``concurrency`` at a time."""
        path = "/chat/completions" if self.api == "chat" else "/completions"
        payloads = [self.payload(p) for p in pairs]
        for i, reply in self.client.run(path, payloads):
            yield i, self.probability(reply)


class EndpointGenerator:
    """Chat-completion text from an OpenAI-compatible endpoint: a
    :class:`TextGenerator` for the relevance judge (temperature 0).

    Args:
        model: the model name the server knows.
        max_tokens: longest reply.
        **kwargs: ``base_url``, ``api_key``, ``concurrency``, ``max_retries``,
            ``backoff``, ``max_backoff``, ``timeout``, ``transport`` as for
            :class:`OpenAIEndpointEstimator`; ``model_id``.
    """

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 256,
        model_id: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 60.0,
        transport: Any = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._model_id = model_id or model
        self.client = _Client(
            base_url, api_key, concurrency=concurrency, max_retries=max_retries,
            backoff=backoff, max_backoff=max_backoff, timeout=timeout, transport=transport,
        )  # fmt: skip

    @property
    def model_id(self) -> str:
        """The model's name in the outputs."""
        return self._model_id

    def settings(self) -> Mapping[str, object]:
        """Backend, model and the reply length."""
        return {"backend": "openai", "model": self.model, "max_tokens": self.max_tokens}

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """``(index, reply text)`` per prompt as requests finish."""
        payloads = [
            {
                "model": self.model,
                "messages": [{"role": "user", "content": p}],
                "max_tokens": self.max_tokens,
                "temperature": 0.0,
            }
            for p in prompts
        ]
        for i, reply in self.client.run("/chat/completions", payloads):
            try:
                text = reply["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise EndpointError(
                    f"{self.client.base_url} (model {self.model!r}) returned a reply without "
                    "choices[0].message.content"
                ) from None
            yield i, text if isinstance(text, str) else ""
