"""The optional rerank stage: rerankers, their registry, and the rerank call (cache, time
budget, failure policy). See docs/guides/rerank.md; saved pipelines name rerankers, and
only code registers them (never imported from data)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import import_object
from ragguard.config import (
    DEFAULT_RERANK_MODEL,
    RERANK_SCORE_KINDS,
    RerankConfig,
    RerankFailure,
)
from ragguard.errors import ConfigError, MissingDependencyError, RerankError, RerankModelError
from ragguard.policy import PolicyResult
from ragguard.scores import ScoreIssue, ScoreKind, issue_message
from ragguard.trained import (
    TrainedReranker,
    load_pair_scorer,
    path_like,
    score_pairs,
)

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

logger = logging.getLogger(__name__)
_R = TypeVar("_R")
_V = TypeVar("_V")


@runtime_checkable
class Reranker(Protocol):
    """Anything that scores passages against a query.

    Called with the query and the passages' texts; returns one score per text, in the
    same order, higher meaning more relevant (a list, a tuple or a 1-D numpy array).
    Declare what the scores are with a ``score_kind`` attribute (``"logit"`` or
    ``"probability"``), or set ``rerank.score_kind`` in the guard's config.

    Example:
        >>> def keyword_reranker(query: str, texts: Sequence[str]) -> list[float]:
        ...     words = set(query.lower().split())
        ...     return [len(words & set(t.lower().split())) / len(words) for t in texts]
        >>> keyword_reranker.score_kind = "probability"  # type: ignore[attr-defined]
        >>> isinstance(keyword_reranker, Reranker)
        True
    """

    def __call__(self, query: str, texts: Sequence[str], /) -> Sequence[float] | NDArray[Any]: ...


def declares_kind(reranker: object) -> bool:
    """Whether a reranker has a ``score_kind`` attribute, read statically (a
    ``CrossEncoderReranker``'s property would load the model)."""
    attr = inspect.getattr_static(reranker, "score_kind", None)
    if attr is None:
        return False
    if not isinstance(attr, property):
        parse_kind(attr, f"reranker {reranker_name(reranker)!r} declares score_kind")
    return True


def parse_kind(
    value: object, what: str, allowed: Sequence[ScoreKind] = RERANK_SCORE_KINDS
) -> ScoreKind:
    """``value`` as one of the ``allowed`` score kinds, else a ``ConfigError`` naming ``what``."""
    try:
        kind: ScoreKind | None = ScoreKind(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        kind = None
    if kind is None or kind not in allowed:
        names = ", ".join(repr(k.value) for k in allowed)
        hint = " (most cross-encoders return logits)" if allowed == RERANK_SCORE_KINDS else ""
        raise ConfigError(f"{what}={value!r} is not allowed; use one of {names}{hint}")
    return kind


def reranker_name(reranker: object) -> str:
    """A short human name of a reranker, for messages and ``RerankOutcome.reranker``."""
    name = getattr(reranker, "model_name", None)
    if isinstance(name, str):
        return name
    return getattr(reranker, "__qualname__", None) or type(reranker).__qualname__


_REGISTERED: dict[str, Reranker] = {}
_REGISTRY_LOCK = threading.Lock()


def register_reranker(reranker: _R, name: str | None = None) -> _R:
    """Let saved pipelines name ``reranker``: a Haystack pipeline file or a saved
    LlamaIndex postprocessor whose guard used it is rebuilt with it, by this name.

    A pipeline file is data: ragguard never imports a reranker it names, it only looks
    the name up among the rerankers your code registered before loading. Registering
    again under a name replaces what it named. Usable as a decorator.

    Args:
        reranker: the reranker, ``(query, texts) -> scores``.
        name: the name saved pipelines use; default its import path
            (``"mypkg.rerankers.score"``, which is also what pipeline files saved by
            earlier ragguard versions hold). A lambda, a nested function or an object
            has none and needs a ``name``.

    Returns:
        ``reranker`` itself.

    Raises:
        ConfigError: ``reranker`` is not callable, or ``name`` is not given and it has no
            import path, or ``name`` is not a non-empty string.

    Example:
        >>> def score(query: str, texts: Sequence[str]) -> list[float]:
        ...     return [1.0] * len(texts)
        >>> register_reranker(score, name="mine") is score
        True
        >>> registered_reranker("mine") is score
        True
        >>> unregister_reranker("mine")
    """
    if not callable(reranker):
        raise ConfigError(
            f"register_reranker: a reranker is callable as reranker(query, texts), got "
            f"{type(reranker).__name__}"
        )
    if name is None:
        module = getattr(reranker, "__module__", None)
        qualname = getattr(reranker, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            raise ConfigError(
                f"register_reranker: {reranker_name(reranker)!r} has no import path (a "
                "lambda, a nested function or an object); give it a name: "
                "register_reranker(reranker, name='...')"
            )
        name = f"{module}.{qualname}"
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"register_reranker: name must be a non-empty string, got {name!r}")
    with _REGISTRY_LOCK:
        _REGISTERED[name] = reranker
    return reranker


def registered_reranker(name: str) -> Reranker | None:
    """The reranker registered under ``name`` (see
    [`register_reranker`][ragguard.register_reranker]), or ``None``."""
    with _REGISTRY_LOCK:
        return _REGISTERED.get(name) if isinstance(name, str) else None


def unregister_reranker(name: str) -> None:
    """Forget the reranker registered under ``name`` (nothing happens when there is none)."""
    with _REGISTRY_LOCK:
        _REGISTERED.pop(name, None)


def registered_name(reranker: object) -> str | None:
    """The name ``reranker`` itself (the same object) is registered under, or ``None``."""
    with _REGISTRY_LOCK:
        return next((n for n, r in _REGISTERED.items() if r is reranker), None)


class CrossEncoderReranker:
    """The built-in reranker: a sentence-transformers ``CrossEncoder``, loaded once on first
    use (or by [`load`][ragguard.CrossEncoderReranker.load]) and shared by every thread; calls
    into the model are serialised (fast tokenizers are not thread-safe). A folder written by
    ``ragguard train-reranker`` is scored by its trained scorer (logits).

    Args:
        model: a Hugging Face model name or a local folder. A spec that can only be a
            path (``./scorer``, ``scorer/``, ``~/models/x``: see
            ``ragguard.trained.path_like``) must exist; a local folder whose files
            name code to import is refused (``ragguard.trained.check_model_files``).
        device: torch device (``"cpu"``, ``"cuda"``, ...); ``None`` lets
            sentence-transformers pick.
        batch_size: pairs per forward pass.
        max_length: truncate pairs to this many tokens; ``None`` uses the model's limit.
        score_kind: what ``predict`` returns, when you know better than the model's
            config; ``None`` reads it from the model's activation (see
            [`score_kind`][ragguard.CrossEncoderReranker.score_kind]).
        **model_kwargs: passed to ``CrossEncoder(...)`` (e.g. ``local_files_only=True``,
            ``model_kwargs={"torch_dtype": "float16"}``).

    Raises:
        ConfigError: ``model`` is empty, ``batch_size`` is not an int >= 1 or
            ``score_kind`` is neither ``"logit"`` nor ``"probability"`` (here); the rest
            when the model loads
            ([`load`][ragguard.CrossEncoderReranker.load], which a guard calls when it is built):
        MissingDependencyError: sentence-transformers is not installed.
        RerankModelError: no such folder, the folder names code, the model cannot be
            loaded, cannot score a pair, has more than one output, or its activation says
            neither logits nor probabilities and ``score_kind`` is unset.
    """

    def __init__(
        self,
        model: str = DEFAULT_RERANK_MODEL,
        *,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int | None = None,
        score_kind: ScoreKind | str | None = None,
        **model_kwargs: Any,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"model must be a Hugging Face name or a local folder, got {model!r}")
        self.model_name = model
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._explicit_kind = None if score_kind is None else parse_kind(score_kind, "score_kind")
        self._model_kwargs = model_kwargs
        self._model: CrossEncoder | TrainedReranker | None = None
        self._kind: ScoreKind | None = self._explicit_kind
        self._load_lock = threading.Lock()
        self._predict_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: RerankConfig) -> CrossEncoderReranker:
        """The reranker that ``config`` describes (model, device, batch size, max length,
        score kind)."""
        return cls(
            config.model,
            device=config.device,
            batch_size=config.batch_size,
            max_length=config.max_length,
            score_kind=config.score_kind,
        )

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    def load(self) -> CrossEncoder | TrainedReranker:
        """Load the model and score one warm-up pair (once; later calls return it).
        Thread-safe. A [`ContextGuard`][ragguard.ContextGuard] calls it when it is built, so the
        first rerank call runs within ``rerank.timeout_ms``.

        Raises:
            MissingDependencyError: sentence-transformers is not installed.
            RerankModelError: the model cannot be loaded or used (see the class).
        """
        model = self._model
        if model is not None:
            return model
        with self._load_lock:
            if self._model is None:
                started = time.perf_counter()
                model, kind = load_pair_scorer(
                    self.model_name,
                    device=self.device,
                    max_length=self.max_length,
                    score_kind=self._explicit_kind,
                    **self._model_kwargs,
                )
                if not isinstance(model, TrainedReranker):
                    logger.info(
                        "loaded cross-encoder %r on %s in %.1f s (scores: %s)",
                        self.model_name,
                        model.device,
                        time.perf_counter() - started,
                        kind.value,
                    )
                self._model, self._kind = model, kind
            return self._model

    @property
    def score_kind(self) -> ScoreKind:
        """What the scores are: the ``score_kind`` given, else read from the model's
        activation (``Sigmoid``: probabilities; ``Identity``: logits). Loads the model."""
        if self._kind is None:
            self.load()
        assert self._kind is not None  # set by load()
        return self._kind

    def __call__(self, query: str, texts: Sequence[str], /) -> NDArray[np.float64]:
        """Score ``(query, text)`` pairs in batches of ``batch_size``."""
        model = self.load()
        if not texts:
            return np.empty(0, dtype=np.float64)
        with self._predict_lock:
            return score_pairs(model, query, texts, self.batch_size)

    def __repr__(self) -> str:
        return (
            f"CrossEncoderReranker({self.model_name!r}, device={self.device!r}, "
            f"batch_size={self.batch_size}, loaded={self.loaded})"
        )


def load_reranker(spec: str, *, score_kind: ScoreKind | str | None = None) -> Reranker:
    """The reranker ``spec`` names (as ``ragguard calibrate --rerank SPEC`` reads it):
    ``module:callable`` (imported, not called), else a cross-encoder name or local path (a
    folder written by ``ragguard train-reranker`` included). A spec that can only be a path
    must name an existing folder. The model loads on first use.

    ``spec`` is code the caller chose (``module:callable`` imports that module): never pass
    a name read from data.

    Raises:
        RerankModelError: the spec is empty, names a folder that does not exist, or the
            module or attribute cannot be imported, or is not callable.
    """
    what = (
        "a cross-encoder (a local folder, one written by ragguard train-reranker "
        "included, or a Hugging Face name) or module:callable"
    )
    if not isinstance(spec, str) or not spec.strip():
        raise RerankModelError(f"--rerank needs {what}; got {spec!r}")
    if score_kind is not None:
        parse_kind(score_kind, "score_kind")
    module_name, sep, _ = spec.partition(":")
    if Path(spec).expanduser().exists():
        return CrossEncoderReranker(spec, score_kind=score_kind)
    if path_like(spec):
        raise RerankModelError(f"--rerank {spec}: no folder {spec}")
    if not sep or "/" in module_name or "\\" in module_name:
        return CrossEncoderReranker(spec, score_kind=score_kind)
    target = import_object(spec, "--rerank", RerankModelError)
    if not callable(target):
        raise RerankModelError(
            f"--rerank {spec} is not callable; it should be a reranker(query, texts) -> scores"
        )
    return target  # type: ignore[no-any-return]


class ScoreCache(Generic[_V]):
    """A bounded, thread-safe LRU cache of a model's outputs keyed by (query, passage):
    reranker scores, or an answerer's answers."""

    def __init__(self, max_size: int) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise ConfigError(f"max_size must be an int >= 1, got {max_size!r}")
        self.max_size = max_size
        self._data: OrderedDict[tuple[str, str], _V] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, query: str, texts: Sequence[str]) -> list[_V | None]:
        """The cached output for each text, ``None`` where there is none."""
        out: list[_V | None] = []
        with self._lock:
            data = self._data
            for text in texts:
                key = (query, text)
                score = data.get(key)
                if score is not None:
                    data.move_to_end(key)
                out.append(score)
        return out

    def put_many(self, query: str, texts: Sequence[str], scores: Sequence[_V]) -> None:
        with self._lock:
            data = self._data
            for text, score in zip(texts, scores, strict=True):
                data[(query, text)] = score
                data.move_to_end((query, text))
            while len(data) > self.max_size:
                data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class TimeLimit:
    """Runs a model call within ``seconds`` (``None``: no limit) in threads of its own: a
    call past the limit raises ``TimeoutError`` and keeps running there, never in the
    caller's thread or the event loop's default executor."""

    def __init__(self, seconds: float | None, name: str) -> None:
        self.seconds = seconds
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[..., _R], /, *args: Any) -> _R:
        """``fn(*args)``, blocking (in the caller's thread when there is no limit)."""
        if self.seconds is None:
            return fn(*args)
        future = self._pool().submit(fn, *args)
        try:
            return future.result(timeout=self.seconds)
        finally:
            future.cancel()  # no-op once running; frees the slot if it never started

    async def arun(self, fn: Callable[..., _R], /, *args: Any) -> _R:
        """``fn(*args)`` awaited: the call never blocks the event loop."""
        call = asyncio.get_running_loop().run_in_executor(
            self._pool(), contextvars.copy_context().run, fn, *args
        )
        return await asyncio.wait_for(call, self.seconds)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(thread_name_prefix=self.name)
            return self._executor


@dataclass(kw_only=True, frozen=True, slots=True)
class RerankOutcome:
    """What the rerank stage did in one [`ContextGuard.select`][ragguard.ContextGuard.select] call
    (``Selection.rerank``; ``None`` there when the stage is off or the input is empty).

    Attributes:
        reranker: the model name or the reranker callable's name.
        score_kind: what the reranker returned (logit or probability); ``None`` when it
            was not called (nothing to rerank) or failed.
        positions: input positions of the reranked candidates, best retrieval score first.
        raw_scores: the reranker's outputs, along ``positions``.
        probabilities: the outputs mapped to probabilities (NaN where the output was not a
            finite number), along ``positions``. The policy ran on these.
        not_reranked: input positions of the candidates ranked by retrieval below
            ``top_n`` (retrieval order).
        n_kept_below: how many of those were kept (``beyond_top_n="keep_below"``).
        top_n: ``rerank.top_n`` for this call.
        keep_below: whether ``rerank.beyond_top_n`` was ``"keep_below"``.
        error: why the stage failed (``fail_open``); ``None`` when it did not.
        elapsed_ms: wall time of the rerank call, cache look-ups included.
        cache_hits: scores taken from the cache instead of the reranker.
        result: the policy's decision on ``probabilities`` (``None`` when the stage
            failed or nothing was reranked).
    """

    reranker: str
    score_kind: ScoreKind | None
    positions: tuple[int, ...]
    raw_scores: tuple[float, ...]
    probabilities: tuple[float, ...]
    not_reranked: tuple[int, ...]
    n_kept_below: int
    top_n: int
    keep_below: bool = False
    error: str | None = None
    elapsed_ms: float = 0.0
    cache_hits: int = 0
    result: PolicyResult | None = field(default=None, repr=False, compare=False)

    @property
    def failed(self) -> bool:
        """Whether the stage failed and the selection was made on retrieval scores."""
        return self.error is not None

    def kept_positions(self) -> list[int]:
        """Input positions of the kept candidates, best first: reranked ones by rerank
        probability, then those kept below (``keep_below``)."""
        kept: list[int] = []
        if self.result is not None:
            positions = self.positions
            kept = [positions[j] for j in self.result.kept_positions(0)]
        return kept + list(self.not_reranked[: self.n_kept_below])


_RERANK_MESSAGES: dict[ScoreIssue, str] = {
    ScoreIssue.LOGIT_IN_UNIT_INTERVAL: (
        "rerank scores were declared logits (rerank.score_kind, or the reranker's "
        "score_kind) but every one lies in [0, 1], which looks like probabilities: a sigmoid "
        "squeezes them into [0.5, 0.73] and the rerank cut keeps nearly everything. If the "
        "reranker returns probabilities, set rerank.score_kind='probability'."
    ),
    ScoreIssue.PROBABILITY_OUT_OF_RANGE: (
        "rerank scores were declared probabilities (rerank.score_kind, or the reranker's "
        "score_kind) but some lie outside [0, 1]; they were clipped into it. Cross-encoder "
        "logits look like this: if the reranker returns logits, set rerank.score_kind='logit'."
    ),
}


def rerank_issue_message(issue: ScoreIssue) -> str:
    return _RERANK_MESSAGES.get(issue) or "rerank scores: " + issue_message(issue)


@dataclass(kw_only=True, frozen=True, slots=True)
class Scored:
    """Raw scores from one rerank call, or why there are none (fail_open)."""

    raw: NDArray[np.float64] | None
    kind: ScoreKind | None
    error: str | None
    elapsed_ms: float
    cache_hits: int


class RerankStage:
    """Calls a reranker for the guard: cache, time budget, failure policy; thread-safe."""

    def __init__(self, config: RerankConfig, reranker: Reranker | None = None) -> None:
        if reranker is None and config.external is not None:
            raise ConfigError(
                f"this config's reranker is {config.external!r} (rerank.external), which "
                "ragguard never imports from a config; pass it: "
                "ContextGuard(GuardConfig.from_file(path), reranker=your_reranker)"
            )
        self.config = config
        self.reranker: Reranker = (
            reranker if reranker is not None else CrossEncoderReranker.from_config(config)
        )
        if not callable(self.reranker):
            raise ConfigError(
                f"reranker must be callable as reranker(query, texts), got "
                f"{type(self.reranker).__name__}"
            )
        self.name = reranker_name(self.reranker)
        declared = declares_kind(self.reranker)
        if config.score_kind is None and not declared:
            raise ConfigError(
                f"rerank.score_kind is not set and reranker {self.name!r} declares no "
                "score_kind: set rerank.score_kind to 'logit' (cross-encoder logits, about "
                "-10..10) or 'probability' (scores in [0, 1]), or give the reranker a "
                "score_kind attribute"
            )
        self.cache: ScoreCache[float] | None = None
        if config.cache_size:
            self.cache = ScoreCache(config.cache_size)
        seconds = None if config.timeout_ms is None else config.timeout_ms / 1000.0
        self._limit = TimeLimit(seconds, "ragguard-rerank")
        if isinstance(self.reranker, CrossEncoderReranker):
            self.reranker.load()  # now, not inside the first call's time budget

    def kind(self) -> ScoreKind:
        """``rerank.score_kind``, else the reranker's."""
        if self.config.score_kind is not None:
            return self.config.score_kind
        declared = getattr(self.reranker, "score_kind")  # noqa: B009
        return parse_kind(declared, f"reranker {self.name!r} declares score_kind")

    def score(self, query: str, texts: Sequence[str]) -> Scored:
        started = time.perf_counter()
        cached, missing = self._lookup(query, texts)
        try:
            fresh = None
            if missing:
                fresh = self._limit.run(self._call, query, [texts[i] for i in missing])
            return self._merge(query, texts, cached, missing, fresh, started)
        except Exception as exc:
            return self._failed(exc, started)

    async def ascore(self, query: str, texts: Sequence[str]) -> Scored:
        """As ``score``, in a worker thread: the model never blocks the event loop."""
        started = time.perf_counter()
        cached, missing = self._lookup(query, texts)
        try:
            fresh = None
            if missing:  # a call past the budget keeps running in the stage's own threads
                fresh = await self._limit.arun(self._call, query, [texts[i] for i in missing])
            return self._merge(query, texts, cached, missing, fresh, started)
        except Exception as exc:
            return self._failed(exc, started)

    def _lookup(self, query: str, texts: Sequence[str]) -> tuple[list[float | None], list[int]]:
        if self.cache is None:
            return [None] * len(texts), list(range(len(texts)))
        cached = self.cache.get_many(query, texts)
        return cached, [i for i, score in enumerate(cached) if score is None]

    def _call(self, query: str, texts: list[str]) -> NDArray[np.float64]:
        """The reranker's scores of ``texts``, or a ``RerankError``: one finite number per text."""
        output = self.reranker(query, texts)
        try:
            scores = np.asarray(output, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise RerankError(
                f"reranker {self.name!r} returned {type(output).__name__} that is not a list "
                f"of numbers ({exc})"
            ) from exc
        if scores.shape != (len(texts),):
            raise RerankError(
                f"reranker {self.name!r} returned scores of shape {scores.shape} for "
                f"{len(texts)} passages; it must return one score per passage"
            )
        bad = ~np.isfinite(scores)
        if bad.any():
            shown = sorted({repr(float(x)) for x in scores[bad]})
            raise RerankError(
                f"reranker {self.name!r} returned a score that is not a finite number "
                f"({', '.join(shown)}) for {int(bad.sum())} of {len(texts)} passages"
            )
        return scores

    def _merge(
        self,
        query: str,
        texts: Sequence[str],
        cached: list[float | None],
        missing: list[int],
        fresh: NDArray[np.float64] | None,
        started: float,
    ) -> Scored:
        kind = self.kind() if texts else None
        raw = np.array(cached, dtype=np.float64)
        if fresh is not None:
            raw[missing] = fresh
            if self.cache is not None:
                self.cache.put_many(query, [texts[i] for i in missing], fresh.tolist())
        elapsed = (time.perf_counter() - started) * 1000.0
        hits = len(texts) - len(missing)
        return Scored(raw=raw, kind=kind, error=None, elapsed_ms=elapsed, cache_hits=hits)

    def _failed(self, exc: Exception, started: float) -> Scored:
        if isinstance(exc, RerankModelError | MissingDependencyError | ConfigError):
            raise exc  # a model that cannot load is a configuration error: never swallowed
        if isinstance(exc, TimeoutError):
            budget = f"rerank.timeout_ms={self.config.timeout_ms:g}"
            message = f"reranker {self.name!r} ran past {budget}"
        elif isinstance(exc, RerankError):  # unusable output, already described
            message = str(exc)
        else:
            message = f"reranker {self.name!r} raised {type(exc).__name__}: {exc}"
        if self.config.on_failure is RerankFailure.FAIL_CLOSED:
            raise RerankError(
                f"rerank stage failed: {message} (rerank.on_failure='fail_closed')"
            ) from exc
        logger.debug("rerank failed, falling back to retrieval scores: %s", message, exc_info=exc)
        elapsed = (time.perf_counter() - started) * 1000.0
        return Scored(raw=None, kind=None, error=message, elapsed_ms=elapsed, cache_hits=0)

    def __repr__(self) -> str:
        return f"RerankStage({self.name!r}, top_n={self.config.top_n})"
