"""OpenAI-compatible endpoints that return logprobs (vLLM, llama.cpp's server, SGLang,
OpenAI): one request per pair for one token with its ``top_logprobs``; retries, redaction
and the lower-bound estimate: ``docs/guides/annotate.md``."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import queue
import random
import re
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import urlsplit

from ragguard._optional import require
from ragguard.calibration.annotate._base import Pair
from ragguard.calibration.annotate._checks import check
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    AbstentionPrompt,
    is_abstention_start,
)
from ragguard.errors import AnnotationError, EndpointError

logger = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
DEFAULT_BASE_URL = "http://localhost:8000/v1"
_RAW_SPACE = re.compile("^[\u0120\u2581]+")

_NAME = (
    r"(?<![A-Za-z0-9])(?:proxy-)?"
    r"(?:authorization|x-api-key|api[_-]?key|access[_-]?token|password)(?![A-Za-z0-9])"
)
_SECRETS = (
    (
        re.compile(
            rf"(?i)({_NAME}[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;&}}]+"
        ),
        r"\1***",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), "sk-***"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]*@"), r"\1***@"),
)
# a key this long is hidden wherever it occurs; a shorter one only where it stands alone
# (so that a key "k" does not turn every "k" into "***")
SHORT_KEY = 8


def redact(text: str, api_key: str | None = None) -> str:
    """``text`` with credentials replaced by ``***``: ``api_key``, credential fields
    (``Authorization``, ``api_key``, ``password``, ...), bearer and basic tokens, ``sk-...``
    keys and the ``user:password@`` of URLs."""
    if api_key and len(api_key) >= SHORT_KEY:
        text = text.replace(api_key, "***")
    elif api_key:
        alone = rf"(?<![\w.-]){re.escape(api_key)}(?![\w.-])"
        text = re.sub(alone, "***", text)
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class ClientOptions(TypedDict, total=False):
    """How both endpoint classes reach the server (see ``OpenAIEndpointEstimator``)."""

    base_url: str | None
    api_key: str | None
    concurrency: int
    max_retries: int
    backoff: float
    max_backoff: float
    timeout: float
    transport: Any


_Put = Callable[["tuple[int, Any] | BaseException | None"], None]


@dataclass(kw_only=True)
class _Client:
    """POSTs JSON payloads ``concurrency`` at a time, with retries, on an event loop of its
    own in a worker thread (one in the caller's thread could not run inside Jupyter)."""

    base_url: str | None = None
    api_key: str | None = None
    concurrency: int = 8
    max_retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    timeout: float = 60.0
    transport: Any = None

    def __post_init__(self) -> None:
        require("httpx", "endpoint")
        for name in ("concurrency", "max_retries", "backoff", "max_backoff", "timeout"):
            check(name, getattr(self, name))
        if self.api_key is None:
            self.api_key = os.environ.get("OPENAI_API_KEY")
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise AnnotationError(f"api_key must be a string, got {type(self.api_key).__name__}")
        origin = "" if self.base_url else " (from $OPENAI_BASE_URL)"
        url = (self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.base_url = url
        self.shown_url = redact(url, self.api_key)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise AnnotationError(
                f"base_url must be an http:// or https:// URL such as {DEFAULT_BASE_URL}, "
                f"got {self.shown_url!r}{origin}"
            )

    def error(self, model: object, message: str, path: str = "") -> EndpointError:
        """An [`EndpointError`][ragguard.EndpointError] naming the URL and the model."""
        where = f"{self.shown_url}{path} (model {model!r})"
        return EndpointError(redact(f"{where}{message}", self.api_key))

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                wait = float(retry_after)
                if math.isfinite(wait):
                    return min(self.max_backoff, max(0.0, wait))
            except ValueError:
                pass
        base = min(self.max_backoff, self.backoff * (2.0**attempt))
        return base * (0.5 + random.random() / 2)

    async def _post(self, client: Any, path: str, payload: Mapping[str, Any]) -> Any:
        httpx = require("httpx", "endpoint")
        url = f"{self.base_url}{path}"
        model = payload.get("model")
        retried = f" (after {self.max_retries} retries)"
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = await client.post(url, json=payload)
            except httpx.TransportError as exc:
                if last:
                    raise self.error(
                        model, f": {type(exc).__name__}: {exc}{retried}", path
                    ) from exc
                reason, retry_after = type(exc).__name__, None
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json()
                    except ValueError:
                        body = redact(resp.text, self.api_key)[:200]
                        raise self.error(
                            model, f" answered 200 with a body that is not JSON: {body!r}", path
                        ) from None
                transient = resp.status_code in TRANSIENT_STATUS
                if last or not transient:
                    body = redact(resp.text, self.api_key)[:300]
                    tail = retried if transient else ""
                    raise self.error(
                        model, f" answered HTTP {resp.status_code}{tail}: {body}", path
                    )
                reason, retry_after = f"HTTP {resp.status_code}", resp.headers.get("retry-after")
            delay = self._delay(attempt, retry_after)
            logger.info("%s%s: %s; retrying in %.2fs", self.shown_url, path, reason, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _produce(self, path: str, payloads: Sequence[Mapping[str, Any]], put: _Put) -> None:
        """Every request, ``concurrency`` in flight, each reply handed to ``put``; the first
        failure cancels the others and is raised."""
        httpx = require("httpx", "endpoint")
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with httpx.AsyncClient(
            headers=headers,
            timeout=self.timeout,
            transport=self.transport,
            limits=httpx.Limits(max_connections=self.concurrency),
        ) as client:
            todo = iter(range(len(payloads)))

            async def worker() -> None:  # takes the next request as it frees up
                for i in todo:
                    put((i, await self._post(client, path, payloads[i])))

            n = min(self.concurrency, len(payloads))
            tasks = [asyncio.ensure_future(worker()) for _ in range(n)]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def run(
        self, path: str, payloads: Sequence[Mapping[str, Any]]
    ) -> Generator[tuple[int, Any], None, None]:
        """``(index, JSON reply)`` per payload, as each finishes; closing the iterator early
        cancels the requests in flight and waits for them to stop."""
        if not payloads:
            return
        results: queue.Queue[tuple[int, Any] | BaseException | None] = queue.Queue()
        loop = asyncio.new_event_loop()
        # created in this thread before the loop runs: then it can be cancelled from here
        main = loop.create_task(self._produce(path, payloads, results.put))

        def work() -> None:
            try:
                loop.run_until_complete(main)
            except asyncio.CancelledError:
                pass
            except BaseException as exc:  # handed to the caller's thread
                results.put(exc)
            finally:
                results.put(None)

        worker = threading.Thread(target=work, name="ragguard-endpoint", daemon=True)
        worker.start()
        try:
            while (item := results.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            loop.call_soon_threadsafe(main.cancel)
            worker.join()
            loop.close()


class _EndpointModel:
    """What both endpoint classes share: the model's name and the client."""

    def __init__(self, model: str, model_id: str | None, client: ClientOptions) -> None:
        if not isinstance(model, str) or not model.strip():
            raise AnnotationError(f"model must be the served model's name, got {model!r}")
        unknown = sorted(set(client) - set(ClientOptions.__annotations__))
        if unknown:
            raise AnnotationError(
                f"{type(self).__name__} got unknown options {', '.join(unknown)}; known: "
                f"{', '.join(ClientOptions.__annotations__)}"
            )
        self.model = model
        self.model_id = model_id or model
        self.client = _Client(**client)

    def _settings(self) -> dict[str, object]:
        """Backend, server and model: a result from another server is not reused."""
        return {"backend": "openai", "base_url": self.client.shown_url, "model": self.model}


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


class OpenAIEndpointEstimator(_EndpointModel):
    """p(NO-RESPONSE) from an OpenAI-compatible endpoint's logprobs: the sum of
    ``exp(logprob)`` over the returned alternatives that can start ``NO-RESPONSE``.

    Args:
        model: the model name the server knows.
        api: ``"chat"`` (chat completions) or ``"completions"`` (plain prompt).
        top_logprobs: alternatives asked for (K).
        model_id: the model's name in the outputs (default ``model``).
        prompt: the abstention prompt (default: the paper's Figure 4).
        extra_body: more JSON fields for every request (e.g. vLLM's
            ``chat_template_kwargs``).
        **client: how the server is reached (``ClientOptions``): ``base_url`` (default
            ``$OPENAI_BASE_URL``, else vLLM's ``http://localhost:8000/v1``), ``api_key``
            (a bearer token; default ``$OPENAI_API_KEY``; never shown), ``concurrency``
            (8 requests in flight), ``max_retries`` (5), ``backoff`` (0.5 s, doubled each
            retry, with jitter), ``max_backoff`` (30 s), ``timeout`` (60 s per request),
            ``transport`` (an ``httpx`` async transport, for tests and proxies).

    Raises:
        AnnotationError: a setting out of range (see ``_checks.BOUNDS``), a base URL
            that is not http(s), an unknown option.
    """

    def __init__(
        self,
        model: str,
        *,
        api: Literal["chat", "completions"] = "chat",
        top_logprobs: int = 20,
        model_id: str | None = None,
        prompt: AbstentionPrompt = ABSTENTION_PROMPT,
        extra_body: Mapping[str, Any] | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        if api not in ("chat", "completions"):
            raise AnnotationError(f"api must be 'chat' or 'completions', got {api!r}")
        check("top_logprobs", top_logprobs)
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise AnnotationError(f"extra_body must be a mapping, got {type(extra_body).__name__}")
        try:
            json.dumps(dict(extra_body or {}))
        except (TypeError, ValueError) as exc:
            raise AnnotationError(f"extra_body must be JSON-serialisable: {exc}") from None
        super().__init__(model, model_id, client)
        self.api = api
        self.top_logprobs = top_logprobs
        self.prompt = prompt
        self.extra_body = dict(extra_body or {})

    def settings(self) -> Mapping[str, object]:
        """Backend, server, model, API, K, prompt hash and extra request fields."""
        return {
            **self._settings(),
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
        """p(NO-RESPONSE) from one reply (an EndpointError when it has no logprobs)."""
        top = _chat_top(reply) if self.api == "chat" else _completion_top(reply)
        if not top:
            raise self.client.error(
                self.model,
                " returned no logprobs; this backend needs a server that returns them "
                "(vLLM, llama.cpp's server, SGLang, OpenAI); for a model without logprobs "
                "use the 'chat' backend, which estimates p(NO-RESPONSE) by sampling",
            )
        seen: dict[str, float] = {}
        for token, lp in top:  # raw BPE / SentencePiece pieces mark a space U+0120 / U+2581
            seen.setdefault(_RAW_SPACE.sub(" ", token), lp)
        total = sum(
            math.exp(lp) for t, lp in seen.items() if is_abstention_start(t, self.prompt.abstention)
        )
        return min(1.0, max(0.0, total))

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        """``(index, p)`` per pair as requests finish, ``concurrency`` at a time."""
        path = "/chat/completions" if self.api == "chat" else "/completions"
        payloads = [self.payload(p) for p in pairs]
        with closing(self.client.run(path, payloads)) as replies:
            for i, reply in replies:
                yield i, self.probability(reply)


class EndpointGenerator(_EndpointModel):
    """Chat-completion text (temperature 0) from an OpenAI-compatible endpoint: a
    ``TextGenerator`` for the relevance judge.

    Args:
        model: the model name the server knows.
        max_tokens: longest reply.
        model_id: the model's name in the outputs (default ``model``).
        **client: how the server is reached, as for ``OpenAIEndpointEstimator``.
    """

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 256,
        model_id: str | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        check("max_tokens", max_tokens)
        super().__init__(model, model_id, client)
        self.max_tokens = max_tokens

    def settings(self) -> Mapping[str, object]:
        """Backend, server, model and the reply length."""
        return {**self._settings(), "max_tokens": self.max_tokens}

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
        with closing(self.client.run("/chat/completions", payloads)) as replies:
            for i, reply in replies:
                try:
                    text = reply["choices"][0]["message"]["content"]
                except (KeyError, IndexError, TypeError):
                    raise self.client.error(
                        self.model, " returned a reply without choices[0].message.content"
                    ) from None
                yield i, text if isinstance(text, str) else ""
