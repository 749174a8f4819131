"""Second-stage scores for calibration: a reranker called once per (model, query, passage)
through the runtime's own rerank stage, cached in one SQLite file per model (keyed by
``sha256(query \\0 text)``), or precomputed scores read from a run file."""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ragguard.calibration.data.evalset import EvalSet
from ragguard.config import RerankConfig, RerankFailure
from ragguard.errors import (
    ConfigError,
    EvalSetError,
    RerankError,
    RerankModelError,
    ScoreCacheError,
)
from ragguard.rerank import (
    CrossEncoderReranker,
    Reranker,
    RerankStage,
    declares_kind,
    reranker_name,
)
from ragguard.scores import ScoreKind

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
Progress = Callable[[int, int], None]

CACHE_LOCK_TIMEOUT_S = 30.0
"""Seconds a calibration waits for a cache file another process has locked (a second
calibration writing it) before [`ScoreCacheError`][ragguard.ScoreCacheError]."""


@dataclass(frozen=True, eq=False)
class RerankScores:
    """Raw second-stage scores of (query, passage) pairs.

    Attributes:
        name: the reranker's human name (model name, callable name, run file stem).
        score_kind: logit or probability.
        scores: query id -> {passage id: raw score} (NaN where the reranker gave none).
        identity: what identifies the model (``model_identity``); for a run file,
            its path and sha256.
        cache_key: the hash of ``identity`` naming the cache file (``None`` for a run
            file).
        model: the cross-encoder name or path, when the reranker is one.
        external: ``module:callable`` of a callable reranker, or ``run:PATH`` for
            precomputed scores: recorded in the config, never imported from it.
        n_computed: pairs the reranker scored in this call (0 on a warm cache).
        n_cached: pairs read from the cache.
        failed: query id -> the error of its failed rerank call (the runtime stage's
            check failed; nothing of it is cached); such a query has no scores.
        n_calls: rerank calls made (queries with a pair not in the cache).

    Raises:
        EvalSetError: the scores are declared probabilities but some finite one lies
            outside [0, 1] (logits, most likely): never clipped.
    """

    name: str
    score_kind: ScoreKind
    scores: Mapping[str, Mapping[str, float]] = field(repr=False)
    identity: str = ""
    cache_key: str | None = None
    model: str | None = None
    external: str | None = None
    n_computed: int = 0
    n_cached: int = 0
    failed: Mapping[str, str] = field(default_factory=dict)
    n_calls: int = 0

    def __post_init__(self) -> None:
        try:
            kind = ScoreKind(self.score_kind)
        except ValueError:
            known = ", ".join(k.value for k in ScoreKind)
            raise ConfigError(
                f"RerankScores score_kind must be one of {known}, got {self.score_kind!r}"
            ) from None
        object.__setattr__(self, "score_kind", kind)
        if kind is not ScoreKind.PROBABILITY:
            return
        outside = [
            (q, d, v)
            for q, docs in self.scores.items()
            for d, v in docs.items()
            if math.isfinite(v) and not 0.0 <= v <= 1.0
        ]
        if outside:
            q, d, v = outside[0]
            n = sum(len(docs) for docs in self.scores.values())
            raise EvalSetError(
                f"the scores of {self.source} are declared probabilities but "
                f"{len(outside)} of {n} lie outside [0, 1] (e.g. {v:g} for {q}/{d}); if "
                "they are logits say so, --rerank-score-kind logit (probabilities are never "
                "clipped)"
            )

    @property
    def source(self) -> str:
        """Where the scores come from, for messages: ``rerank run PATH`` or ``reranker
        module:callable`` (or the model name)."""
        if self.external is not None and self.external.startswith("run:"):
            return f"rerank run {self.external.removeprefix('run:')}"
        return f"reranker {self.external or self.model or self.name}"

    def get(self, qid: str, doc: str) -> float:
        """The raw score of ``doc`` for ``qid``; NaN when there is none."""
        return self.scores.get(qid, {}).get(doc, math.nan)

    def failure_note(self) -> str | None:
        """``3 of 40 rerank calls failed (first: ...)``, or ``None`` when none did."""
        if not self.failed:
            return None
        first = next(iter(self.failed.values()))
        return f"{len(self.failed)} of {self.n_calls} rerank calls failed (first: {first})"


# --------------------------------------------------------------------------- rerankers


def _callable_spec(reranker: object) -> str:
    """``module:name`` of a callable reranker: a function's or class's own name, or for an instance
    the module attribute that holds it (``examples.rerankers:minilm``), else its class."""
    module = getattr(reranker, "__module__", None) or type(reranker).__module__
    if not (inspect.isfunction(reranker) or inspect.isclass(reranker)):
        held = sys.modules.get(module)
        for name, value in vars(held).items() if held is not None else ():
            if value is reranker:
                return f"{module}:{name}"
    qual = getattr(reranker, "__qualname__", None) or type(reranker).__qualname__
    return f"{module}:{qual}"


def model_identity(reranker: object) -> str:
    """What identifies a reranker's scores for the cache: a cross-encoder's name, ``max_length``,
    kind and local files' sizes and times; a callable's ``module:qualname``, source hash and
    ``cache_key`` attribute."""
    if isinstance(reranker, CrossEncoderReranker):
        parts = [f"cross-encoder:{reranker.model_name}", f"max_length={reranker.max_length}"]
        explicit = getattr(reranker, "_explicit_kind", None)
        parts.append(f"kind={explicit}")
        folder = Path(reranker.model_name)
        if folder.is_dir():
            for f in sorted(p for p in folder.rglob("*") if p.is_file()):
                st = f.stat()
                parts.append(f"{f.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}")
        return "\n".join(parts)
    parts = [f"callable:{_callable_spec(reranker)}"]
    target = reranker if inspect.isfunction(reranker) else type(reranker)
    try:
        source = inspect.getsourcefile(target)
    except TypeError:
        source = None
    if source and Path(source).is_file():
        parts.append("source-sha256:" + hashlib.sha256(Path(source).read_bytes()).hexdigest())
    key = getattr(reranker, "cache_key", None)
    if key is not None:
        parts.append(f"cache_key={key}")
    return "\n".join(parts)


def _kind_of(reranker: Reranker, score_kind: ScoreKind | str | None) -> ScoreKind:
    if score_kind is not None:
        kind = ScoreKind(score_kind)
    elif declares_kind(reranker):
        kind = ScoreKind(getattr(reranker, "score_kind"))  # noqa: B009
    else:
        raise RerankModelError(
            f"reranker {reranker_name(reranker)!r} declares no score_kind: pass "
            "rerank_score_kind='logit' or 'probability' (--rerank-score-kind)"
        )
    if kind not in (ScoreKind.LOGIT, ScoreKind.PROBABILITY):
        raise RerankModelError(f"a reranker returns 'logit' or 'probability', not {kind.value!r}")
    return kind


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    """``$RAGGUARD_CACHE_DIR``, else ``~/.cache/ragguard/rerank``."""
    env = os.environ.get("RAGGUARD_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ragguard" / "rerank"


class _DiskCache:
    """(query, text) -> raw score in one SQLite file per model."""

    def __init__(self, folder: Path, key: str, identity: str) -> None:
        self.folder = folder
        self.path = folder / f"{key}.sqlite"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._folder_error(exc.strerror or str(exc)) from exc
        self._existed = self.path.exists()
        with self._errors():
            self._db = sqlite3.connect(self.path, timeout=CACHE_LOCK_TIMEOUT_S)
        with self._errors():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (identity TEXT)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS scores (pair BLOB PRIMARY KEY, score REAL)"
            )
            if self._db.execute("SELECT count(*) FROM meta").fetchone()[0] == 0:
                self._db.execute("INSERT INTO meta VALUES (?)", (identity,))
            self._db.commit()
        self._existed = True

    def _folder_error(self, reason: str) -> ScoreCacheError:
        return ScoreCacheError(
            f"cannot write the rerank score cache in folder {self.folder} ({reason}); give "
            "--rerank-cache a folder you can write"
        )

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as one [`ScoreCacheError`][ragguard.ScoreCacheError] line."""
        try:
            yield
        except sqlite3.Error as exc:
            reason = str(exc) or type(exc).__name__
            if "locked" in reason or "busy" in reason:
                raise ScoreCacheError(
                    f"the rerank score cache {self.path} stayed locked by another process "
                    f"for {CACHE_LOCK_TIMEOUT_S:g} s ({reason}); wait for it to finish, or "
                    "give --rerank-cache another folder"
                ) from exc
            if not self._existed:
                raise self._folder_error(reason) from exc
            raise ScoreCacheError(
                f"the rerank score cache {self.path} cannot be used ({reason}); delete it "
                "or give --rerank-cache another folder"
            ) from exc

    @staticmethod
    def pair_key(query: str, text: str) -> bytes:
        return hashlib.sha256(f"{query}\0{text}".encode()).digest()[:16]

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        """The cached scores of ``keys`` that are finite numbers; any other value (text,
        NULL, infinity) is left out, so the pair is scored again."""
        out: dict[bytes, float] = {}
        with self._errors():
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT pair, score FROM scores WHERE pair IN ({marks})",
                    list(chunk),
                )
                for pair, score in rows:
                    if isinstance(score, int | float) and math.isfinite(score):
                        out[bytes(pair)] = float(score)
        return out

    def put_many(self, items: Sequence[tuple[bytes, float]]) -> None:
        """Store scores of a call that succeeded (finite numbers, checked by the stage)."""
        with self._errors():
            self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?)", items)
            self._db.commit()

    def close(self) -> None:
        self._db.close()


# --------------------------------------------------------------------------- scoring


def score_candidates(
    evalset: EvalSet,
    reranker: Reranker,
    pairs: Mapping[str, Sequence[str]],
    *,
    score_kind: ScoreKind | str | None = None,
    cache_dir: PathLike | bool | None = True,
    on_query: Progress | None = None,
) -> RerankScores:
    """Score every ``(query id, passage id)`` of ``pairs`` with ``reranker``, each pair at most once
    across calls (the disk cache)."""
    kind = _kind_of(reranker, score_kind)
    lookup = evalset.texts.get
    missing: list[str] = []
    work: list[tuple[str, str, list[str], list[str]]] = []
    for qid, docs in pairs.items():
        query = evalset.queries[qid].text if qid in evalset.queries else None
        if not query:
            missing.append(f"query {qid} (no query text)")
            continue
        got = [(d, lookup(qid, d)) for d in docs]
        missing += [f"{qid}/{d}" for d, t in got if t is None]
        work.append((qid, query, [d for d, _ in got], [t or "" for _, t in got]))
    if missing:
        raise EvalSetError(
            f"the reranker needs texts, but {len(missing)} are missing (e.g. "
            f"{', '.join(missing[:3])}); give passage texts in the eval set (candidates' "
            "'text'), a corpus.jsonl beside it or --corpus FILE (JSONL: _id/id, text), or "
            "precomputed scores with --rerank-run",
            path=evalset.source,
        )
    identity = model_identity(reranker)
    key = hashlib.sha256(identity.encode()).hexdigest()[:20]
    folder = default_cache_dir() if cache_dir is True else cache_dir or None
    cache = _DiskCache(Path(folder), key, identity) if folder else None
    scores: dict[str, dict[str, float]] = {}
    failed: dict[str, str] = {}
    computed = cached = calls = 0
    name = reranker_name(reranker)
    stage: RerankStage | None = None  # built for the first call: a warm cache loads no model
    try:
        for done, (qid, query, docs, doc_texts) in enumerate(work, 1):
            keys = [_DiskCache.pair_key(query, t) for t in doc_texts]
            have = cache.get_many(keys) if cache is not None else {}
            unique: dict[bytes, str] = {k: t for k, t in zip(keys, doc_texts, strict=True)}
            todo = [k for k in unique if k not in have]
            fresh: dict[bytes, float] = {}
            if todo:
                if stage is None:  # the runtime's own: a call fails exactly as in the guard
                    fail_open = RerankFailure.FAIL_OPEN
                    config = RerankConfig(enabled=True, score_kind=kind, on_failure=fail_open)
                    stage = RerankStage(config, reranker)
                calls += 1
                call = stage.score(query, [unique[k] for k in todo])
                if call.raw is None:  # the call failed as it would in the guard
                    failed[qid] = call.error or f"reranker {name!r} failed"
                else:
                    fresh = dict(zip(todo, call.raw.tolist(), strict=True))
                    if cache is not None:
                        cache.put_many(list(fresh.items()))
            computed += len(fresh)
            if qid not in failed:
                cached += sum(1 for k in keys if k in have)
                merged = {**have, **fresh}
                scores[qid] = {d: merged[k] for d, k in zip(docs, keys, strict=True)}
            if on_query is not None:
                on_query(done, len(work))
    finally:
        if cache is not None:
            cache.close()
    model = reranker.model_name if isinstance(reranker, CrossEncoderReranker) else None
    external = None if model is not None else _callable_spec(reranker)
    out = RerankScores(
        name, kind, scores, identity, key, model, external, computed, cached, failed, calls
    )
    if failed and not any(scores.values()):
        raise RerankError(
            f"the reranker failed: {out.failure_note()} and no query has a rerank score; fix "
            "the reranker, then calibrate again"
        )
    logger.info("rerank scores: %d computed, %d from the cache (%s)", computed, cached, name)
    return out


def read_rerank_run(path: PathLike, score_kind: ScoreKind | str | None) -> RerankScores:
    """Precomputed second-stage scores from a run file (TREC run format or JSON)."""
    from ragguard.calibration.data.formats.trec import read_run
    from ragguard.calibration.data.problems import ProblemKind, Reporter

    p = Path(path)
    if score_kind is None:
        raise EvalSetError(
            "say what the precomputed rerank scores are: --rerank-score-kind logit (raw "
            "cross-encoder outputs) or probability (scores in [0, 1])",
            path=str(p),
        )
    kind = ScoreKind(score_kind)
    if kind not in (ScoreKind.LOGIT, ScoreKind.PROBABILITY):
        raise EvalSetError(f"rerank scores are 'logit' or 'probability', not {kind.value!r}")
    if not p.is_file():
        raise EvalSetError("rerank run file not found", path=str(p))
    rep = Reporter(False)
    cands, _ = read_run(p, rep)
    if rep.report:
        what = {  # (one, several)
            ProblemKind.INVALID_SCORE: (
                "score that is not a finite number",
                "scores that are not finite numbers",
            ),
            ProblemKind.DUPLICATE_CANDIDATE: (
                "repeated row (the first kept)",
                "repeated rows (the first kept)",
            ),
        }
        parts = [
            f"{n} {what[kind][n > 1] if kind in what else kind.value}"
            for kind, n in rep.report.counts().items()
        ]
        first = rep.report.problems[0]
        where = f"line {first.line}: " if first.line is not None else ""
        logger.warning(
            "rerank run %s: %s (e.g. %s%s); a candidate without a usable score fails its "
            "query's rerank call at every top_n that reaches it",
            p,
            ", ".join(parts),
            where,
            first.message,
        )
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    scores = {q: dict(c) for q, c in cands.items()}
    return RerankScores(p.stem, kind, scores, f"run:{p}:{digest}", None, None, f"run:{p}")
