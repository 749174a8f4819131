"""The answerer stage: each kept passage's short answer to the query, from a model your
code passes in (``answerer(query, texts) -> list[str | None]``, sync or async), batched,
cached, time-limited and failing open (docs/guides/conflicts.md, "An answerer for those
with a model"); the conflicts stage reads the answers."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
from collections.abc import Awaitable, Sequence
from numbers import Real
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ragguard.errors import AnswerWarning, ConfigError, MissingDependencyError
from ragguard.rerank import ScoreCache, TimeLimit, reranker_name
from ragguard.select_stages import Cut
from ragguard.selecting import CallStage, Stage, State, Warn

logger = logging.getLogger(__name__)


@runtime_checkable
class Answerer(Protocol):
    """Anything that reads passages for a query's short answer.

    Called with the query and the passages' texts; returns one short answer per text, in
    the same order: a str, or ``None`` where the passage gives none. An ``async def``
    answerer is awaited by [`aselect`][ragguard.ContextGuard.aselect] (and run to its end
    in a worker thread by ``select``). ``ragguard.calibration.annotate.LLMAnswerer`` is
    one over an OpenAI-compatible endpoint, transformers, a GGUF file or a LangChain chat
    model.

    Example:
        >>> import re
        >>> def years(query: str, texts: Sequence[str]) -> list[str | None]:
        ...     found = [re.search(r"\\b1[89]\\d\\d\\b|\\b20\\d\\d\\b", t) for t in texts]
        ...     return [m.group() if m else None for m in found]
        >>> years("When did it open?", ["It opened in 1990.", "A fine building."])
        ['1990', None]
        >>> isinstance(years, Answerer)
        True
    """

    def __call__(
        self, query: str, texts: Sequence[str], /
    ) -> Sequence[str | None] | Awaitable[Sequence[str | None]]: ...


class _Asked(NamedTuple):
    """One call's request: the kept positions, the answers known without asking (empty
    passages, the cache's), and the positions, texts and cache keys to ask about."""

    query: str
    kept: list[int]
    known: dict[int, str | None]
    todo: list[int]
    texts: list[str]
    keys: list[str]


def _key(text: str) -> str:
    """A passage's cache key: its digest (a cache of long passages stays small)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class _Unusable(Exception):
    """The answerer's output cannot be read (already described)."""


class AnswerStage(CallStage):
    """Asks ``answerer`` for the short answer of each passage the cut kept, before the
    conflicts stage reads them; the answers are ``Selection.answers``. An empty passage
    is not asked about (its answer is ``None``). A call that raises, runs past
    ``timeout_ms`` or returns something else than one str or ``None`` per passage fails
    open: the selection goes on without answers (``Selection.answers`` is ``None``) and
    the reason is in ``Selection.warnings`` (an
    [`AnswerWarning`][ragguard.AnswerWarning]).

    Join a guard with [`add_to`][ragguard.AnswerStage.add_to]:
    ``AnswerStage(my_answerer).add_to(guard.stages)``.

    Args:
        answerer: the [`Answerer`][ragguard.Answerer], ``(query, texts) -> answers``;
            your code passes it (no config names one).
        timeout_ms: the time limit of the stage in one ``select()`` call, every batch
            together; ``None`` waits as long as it takes.
        batch_size: passages per answerer call.
        cache_size: (query, passage) answers remembered (least recently used dropped
            first); 0 turns the cache off.

    Raises:
        ConfigError: ``answerer`` is not callable, ``timeout_ms`` is not a number > 0
            (or ``None``), ``batch_size`` is not an int >= 1, or ``cache_size`` is not an
            int >= 0.
    """

    __slots__ = ("answerer", "batch_size", "cache", "is_async", "limit", "name")

    def __init__(
        self,
        answerer: Answerer,
        *,
        timeout_ms: float | None = 10_000,
        batch_size: int = 8,
        cache_size: int = 1024,
    ) -> None:
        if not callable(answerer):
            raise ConfigError(
                f"answerer must be callable as answerer(query, texts) -> list[str | None], "
                f"got {type(answerer).__name__}"
            )
        if timeout_ms is not None and not (
            isinstance(timeout_ms, Real)
            and not isinstance(timeout_ms, bool)
            and math.isfinite(timeout_ms)
            and timeout_ms > 0
        ):
            raise ConfigError(
                f"timeout_ms must be a number of milliseconds > 0, or None for no limit; "
                f"got {timeout_ms!r}"
            )
        for name, value, least in (("batch_size", batch_size, 1), ("cache_size", cache_size, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name} must be an int >= {least}, got {value!r}")
        self.answerer = answerer
        self.name = reranker_name(answerer)
        call = getattr(answerer, "__call__", None)  # noqa: B004 - an object's async __call__
        self.is_async = inspect.iscoroutinefunction(answerer) or inspect.iscoroutinefunction(call)
        self.batch_size = batch_size
        # a None answer is cached as "" (an empty answer reads as None)
        self.cache: ScoreCache[str] | None = ScoreCache(cache_size) if cache_size else None
        seconds = None if timeout_ms is None else timeout_ms / 1000.0
        self.limit = TimeLimit(seconds, "ragguard-answer")

    def add_to(self, stages: list[Stage]) -> None:
        """Put this stage into a guard's ``stages`` right after the cut (so the conflicts
        stage reads its answers): ``AnswerStage(answerer).add_to(guard.stages)``.

        Raises:
            ConfigError: ``stages`` has no cut stage, or already holds an answerer stage.
        """
        if any(isinstance(stage, AnswerStage) for stage in stages):
            raise ConfigError(
                "these stages already hold an answerer stage; remove it first "
                "(guard.stages.remove(old)) to put another in"
            )
        at = next((k for k, stage in enumerate(stages) if isinstance(stage, Cut)), None)
        if at is None:
            raise ConfigError(
                "AnswerStage.add_to needs a guard's stages, which hold the cut "
                "(ragguard.select_stages.Cut): pass guard.stages"
            )
        stages.insert(at + 1, self)

    def request(self, s: State, /) -> _Asked | None:
        if not s.kept:
            return None
        kept, cands = list(s.kept), s.candidates
        keys = [_key(cands[i].text) for i in kept]
        cached = [None] * len(kept) if self.cache is None else self.cache.get_many(s.query, keys)
        known: dict[int, str | None] = {}
        todo: list[int] = []  # indices into kept
        for k, (i, hit) in enumerate(zip(kept, cached, strict=True)):
            if hit is not None or not cands[i].text.strip():
                known[i] = hit or None
            else:
                todo.append(k)
        at = [kept[k] for k in todo]
        texts = [cands[i].text for i in at]
        return _Asked(s.query, kept, known, at, texts, [keys[k] for k in todo])

    def call(self, request: _Asked, /) -> dict[int, str | None] | str:
        """The answers by input position, or why there are none."""
        if not request.texts:  # every answer known
            return self._merged(request, [])
        try:
            got = self.limit.run(self._answer, request.query, request.texts)
        except Exception as exc:
            return self._failed(exc)
        return self._merged(request, got)

    async def acall(self, request: _Asked, /) -> dict[int, str | None] | str:
        if not request.texts:
            return self._merged(request, [])
        try:
            if self.is_async:
                got = await asyncio.wait_for(
                    self._aanswer(request.query, request.texts), self.limit.seconds
                )
            else:
                got = await self.limit.arun(self._answer, request.query, request.texts)
        except Exception as exc:
            return self._failed(exc)
        return self._merged(request, got)

    def apply(self, s: State, response: dict[int, str | None] | str, /) -> None:
        if isinstance(response, str):
            message = f"answerer stage failed, selected without answers: {response}"
            s.warnings.append(Warn(None, message, AnswerWarning))
        else:
            s.answers = response

    def _answer(self, query: str, texts: list[str]) -> list[str | None]:
        """Every text's answer, a batch at a time (an async answerer on a loop of its own)."""
        if self.is_async:
            return asyncio.run(self._aanswer(query, texts))
        out: list[str | None] = []
        for batch in self._batches(texts):
            out += self._checked(batch, self.answerer(query, batch))
        return out

    async def _aanswer(self, query: str, texts: list[str]) -> list[str | None]:
        batches = self._batches(texts)
        got = await asyncio.gather(*(self.answerer(query, b) for b in batches))  # type: ignore[arg-type]
        return [a for b, g in zip(batches, got, strict=True) for a in self._checked(b, g)]

    def _batches(self, texts: list[str]) -> list[list[str]]:
        n = self.batch_size
        return [texts[k : k + n] for k in range(0, len(texts), n)]

    def _checked(self, texts: list[str], output: Any) -> list[str | None]:
        """``output`` as one answer per text (stripped; empty: ``None``)."""
        if inspect.iscoroutine(output):
            output.close()  # never awaited: say so once, here
            raise _Unusable(
                f"answerer {self.name!r} returned a coroutine from a plain call; declare "
                "it with async def (or an async __call__) to have it awaited"
            )
        if isinstance(output, str | bytes) or not isinstance(output, Sequence):
            raise _Unusable(
                f"answerer {self.name!r} returned {type(output).__name__}, not a list of "
                "answers (a str or None per passage)"
            )
        if len(output) != len(texts):
            raise _Unusable(
                f"answerer {self.name!r} returned {len(output)} answers for {len(texts)} "
                "passages; it must return one per passage"
            )
        answers: list[str | None] = []
        for k, answer in enumerate(output):
            if answer is not None and not isinstance(answer, str):
                raise _Unusable(
                    f"answerer {self.name!r} returned {type(answer).__name__} "
                    f"{str(answer)[:40]!r} for passage {k + 1} of {len(texts)}; it must "
                    "return a str or None per passage"
                )
            answers.append((answer or "").strip() or None)
        return answers

    def _merged(self, request: _Asked, got: list[str | None]) -> dict[int, str | None]:
        """The answers by input position, in kept order; the new ones cached."""
        if self.cache is not None:
            self.cache.put_many(request.query, request.keys, [a or "" for a in got])
        fresh = dict(zip(request.todo, got, strict=True))
        return {i: request.known[i] if i in request.known else fresh[i] for i in request.kept}

    def _failed(self, exc: Exception) -> str:
        if isinstance(exc, MissingDependencyError | ConfigError):
            raise exc  # a backend that cannot run is a configuration error: never swallowed
        if isinstance(exc, TimeoutError) and self.limit.seconds is not None:
            message = f"answerer {self.name!r} ran past timeout_ms={self.limit.seconds * 1000:g}"
        elif isinstance(exc, _Unusable):
            message = str(exc)
        else:
            message = f"answerer {self.name!r} raised {type(exc).__name__}: {exc}"
        logger.debug("answerer failed, going on without answers: %s", message, exc_info=exc)
        return message

    def __repr__(self) -> str:
        return f"AnswerStage({self.name!r}, batch_size={self.batch_size})"
