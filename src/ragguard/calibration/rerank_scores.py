"""Second-stage scores for calibration: a reranker run once per (model, query, passage),
cached on disk, or precomputed scores read from a run file.

Two-stage calibration (:mod:`ragguard.calibration.pipeline`) needs the rerank score of
every candidate a setting may send to the reranker: the first ``top_n`` by retrieval
score of each labelled query, for the largest ``top_n`` of the grid, over every run.
They come from

* a **reranker** (:class:`~ragguard.rerank.Reranker`: a
  :class:`~ragguard.rerank.CrossEncoderReranker` or any ``(query, texts) -> scores``
  callable), called once per query with the texts not yet cached; the texts come from
  the eval set (candidates' ``text`` in ragguard's JSONL, UDCG passages), the folder's
  ``corpus.jsonl``, a BEIR ``corpus.jsonl``, ``corpus=`` files or ``passages=``;
* or a **run file** of precomputed scores (TREC run format or JSON, as for retrieval
  runs), from a hosted reranker, an LLM judge or ``ragguard annotate``; its
  ``score_kind`` must be given.

**The cache.** Scores are stored in a SQLite file per model under ``cache_dir`` (default
``$RAGGUARD_CACHE_DIR`` or ``~/.cache/ragguard/rerank``), keyed by
``sha256(query \\0 passage text)``; the file's name is the model's cache key, a hash of
its identity: for a cross-encoder its name, its ``max_length`` and declared kind and, for
a local folder, the size and modification time of each file in it; for a callable its
``module:qualname``, the sha256 of its source file and its ``cache_key`` attribute if it
has one (set one to invalidate the cache when behaviour changes without a code change).
A second calibration with other options therefore calls no model.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragguard.calibration.evalset import EvalSet, detect_format
from ragguard.errors import EvalSetError, RerankModelError
from ragguard.rerank import CrossEncoderReranker, Reranker, declares_kind, reranker_name
from ragguard.scores import ScoreKind
from ragguard.trained import path_like

if TYPE_CHECKING:
    from ragguard.calibration.annotate._texts import Texts

__all__ = [
    "RerankScores",
    "default_cache_dir",
    "load_reranker",
    "model_identity",
    "passage_sources",
    "passage_texts",
    "read_rerank_run",
    "score_candidates",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
Progress = Callable[[int, int], None]


@dataclass(frozen=True, eq=False)
class RerankScores:
    """Raw second-stage scores of (query, passage) pairs.

    Attributes:
        name: the reranker's human name (model name, callable name, run file stem).
        score_kind: logit or probability.
        scores: query id -> {passage id: raw score} (NaN where the reranker gave none).
        identity: what identifies the model (see the module docstring); for a run file,
            its path and sha256.
        cache_key: the hash of ``identity`` naming the cache file (``None`` for a run
            file).
        model: the cross-encoder name or path, when the reranker is one.
        external: ``module:callable`` of a callable reranker, or ``run:PATH`` for
            precomputed scores: recorded in the config, never imported from it.
        n_computed: pairs the reranker scored in this call (0 on a warm cache).
        n_cached: pairs read from the cache.
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

    def get(self, qid: str, doc: str) -> float:
        """The raw score of ``doc`` for ``qid``; NaN when there is none."""
        return self.scores.get(qid, {}).get(doc, math.nan)


# --------------------------------------------------------------------------- rerankers


def load_reranker(spec: str, *, score_kind: ScoreKind | str | None = None) -> Reranker:
    """The reranker a ``--rerank`` SPEC names: ``module:callable`` (imported, not
    called: the object is the reranker), else a cross-encoder name or local path (a
    folder written by ``ragguard train-reranker`` included: it loads as its trained
    scorer, see :mod:`ragguard.trained`). A spec that can only be a path (it starts with
    ``.``, ``~`` or ``/``, ends with ``/``, ...: :func:`ragguard.trained.path_like`)
    must name an existing folder. The model itself loads on first use.

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
    module_name, sep, _ = spec.partition(":")
    if Path(spec).expanduser().exists():
        return CrossEncoderReranker(spec, score_kind=score_kind)
    if path_like(spec):
        raise RerankModelError(f"--rerank {spec}: no folder {spec}")
    if not sep or "/" in module_name or "\\" in module_name:
        return CrossEncoderReranker(spec, score_kind=score_kind)
    from ragguard.calibration.inputs import import_object

    target = import_object(spec, "--rerank", RerankModelError)
    if not callable(target):
        raise RerankModelError(
            f"--rerank {spec} is not callable; it should be a reranker(query, texts) -> scores"
        )
    return target  # type: ignore[no-any-return]


def _callable_spec(reranker: object) -> str:
    """``module:name`` of a callable reranker: a function's or class's own name, or for
    an instance the module attribute that holds it (``examples.rerankers:minilm``), else
    its class."""
    module = getattr(reranker, "__module__", None) or type(reranker).__module__
    if not (inspect.isfunction(reranker) or inspect.isclass(reranker)):
        held = sys.modules.get(module)
        for name, value in vars(held).items() if held is not None else ():
            if value is reranker:
                return f"{module}:{name}"
    qual = getattr(reranker, "__qualname__", None) or type(reranker).__qualname__
    return f"{module}:{qual}"


def model_identity(reranker: object) -> str:
    """What identifies a reranker's scores for the cache (see the module docstring)."""
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


# --------------------------------------------------------------------------- texts


def passage_texts(
    evalset: EvalSet,
    *,
    corpus: Sequence[PathLike] = (),
    passages: Mapping[str, str] | None = None,
) -> Callable[[str, str], str | None]:
    """A look-up ``(query id, passage id) -> text or None`` over every source of texts
    (see the module docstring): the eval-set file, ``corpus.jsonl`` beside it, ``corpus``
    files and ``passages``."""
    return passage_sources(evalset, corpus=corpus, passages=passages).get


def passage_sources(
    evalset: EvalSet,
    *,
    corpus: Sequence[PathLike] = (),
    passages: Mapping[str, str] | None = None,
) -> Texts:
    """The passage texts of :func:`passage_texts` with the titles the sources carry
    (``Texts.get(qid, doc)``, ``Texts.title(qid, doc)``)."""
    from ragguard.calibration.annotate._texts import Texts, read_corpus, read_texts

    texts = Texts()
    src = evalset.source
    if src and Path(src).exists():
        texts = read_texts(src, detect_format(src), corpus)
        beside = Path(src).parent / "corpus.jsonl"
        if Path(src).is_file() and beside.is_file():
            read_corpus(beside, texts.by_doc, texts.titles_by_doc)
    else:
        for c in corpus:
            read_corpus(c, texts.by_doc, texts.titles_by_doc)
    if passages:
        texts.by_doc.update({str(k): v for k, v in passages.items()})
    return texts


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    """``$RAGGUARD_CACHE_DIR``, else ``~/.cache/ragguard/rerank``."""
    env = os.environ.get("RAGGUARD_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ragguard" / "rerank"


class _DiskCache:
    """(query, text) -> raw score in one SQLite file per model."""

    def __init__(self, folder: Path, key: str, identity: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{key}.sqlite"
        self._db = sqlite3.connect(self.path)
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (identity TEXT)")
        self._db.execute("CREATE TABLE IF NOT EXISTS scores (pair BLOB PRIMARY KEY, score REAL)")
        if self._db.execute("SELECT count(*) FROM meta").fetchone()[0] == 0:
            self._db.execute("INSERT INTO meta VALUES (?)", (identity,))
        self._db.commit()

    @staticmethod
    def pair_key(query: str, text: str) -> bytes:
        return hashlib.sha256(f"{query}\0{text}".encode()).digest()[:16]

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        out: dict[bytes, float] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT pair, score FROM scores WHERE pair IN ({marks})",
                list(chunk),
            )
            for pair, score in rows:
                out[bytes(pair)] = math.nan if score is None else float(score)
        return out

    def put_many(self, items: Sequence[tuple[bytes, float]]) -> None:
        rows = [(k, None if not math.isfinite(v) else v) for k, v in items]
        self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?)", rows)
        self._db.commit()

    def close(self) -> None:
        self._db.close()


# --------------------------------------------------------------------------- scoring


def score_candidates(
    evalset: EvalSet,
    reranker: Reranker,
    pairs: Mapping[str, Sequence[str]],
    *,
    texts: Callable[[str, str], str | None] | None = None,
    score_kind: ScoreKind | str | None = None,
    cache_dir: PathLike | bool | None = True,
    on_query: Progress | None = None,
) -> RerankScores:
    """Score every ``(query id, passage id)`` of ``pairs`` with ``reranker``, each pair
    at most once across calls (the disk cache).

    Args:
        evalset: supplies query texts (and passage texts, unless ``texts`` is given).
        reranker: the second stage.
        pairs: query id -> passage ids to score.
        texts: ``(query id, passage id) -> text``; default :func:`passage_texts`.
        score_kind: what the reranker returns, when it does not declare it.
        cache_dir: the cache folder; ``True`` for :func:`default_cache_dir`, ``None`` or
            ``False`` for no cache.
        on_query: called with (queries done, queries in all) after each query.

    Raises:
        EvalSetError: a query or passage text is missing.
        RerankModelError: the reranker cannot be loaded, fails, or returns the wrong
            number of scores.
    """
    kind = _kind_of(reranker, score_kind)
    lookup = texts or passage_texts(evalset)
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
    computed = cached = 0
    name = reranker_name(reranker)
    try:
        for done, (qid, query, docs, doc_texts) in enumerate(work, 1):
            keys = [_DiskCache.pair_key(query, t) for t in doc_texts]
            have = cache.get_many(keys) if cache is not None else {}
            todo = sorted({i for i, k in enumerate(keys) if k not in have})
            fresh: dict[bytes, float] = {}
            if todo:
                unique: dict[bytes, str] = {keys[i]: doc_texts[i] for i in todo}
                out = _call(reranker, name, query, list(unique.values()))
                fresh = dict(zip(unique, out.tolist(), strict=True))
                if cache is not None:
                    cache.put_many(list(fresh.items()))
            computed += len(fresh)
            cached += len(keys) - len(todo)
            merged = {**have, **fresh}
            scores[qid] = {d: merged[k] for d, k in zip(docs, keys, strict=True)}
            if on_query is not None:
                on_query(done, len(work))
    finally:
        if cache is not None:
            cache.close()
    model = reranker.model_name if isinstance(reranker, CrossEncoderReranker) else None
    external = None if model is not None else _callable_spec(reranker)
    logger.info("rerank scores: %d computed, %d from the cache (%s)", computed, cached, name)
    return RerankScores(
        name, kind, scores, identity, key, model, external, n_computed=computed, n_cached=cached
    )


def _call(reranker: Reranker, name: str, query: str, texts: list[str]) -> np.ndarray:
    try:
        out = np.asarray(reranker(query, texts), dtype=np.float64)
    except (RerankModelError, EvalSetError):
        raise
    except Exception as exc:
        raise RerankModelError(f"reranker {name!r} raised {type(exc).__name__}: {exc}") from exc
    if out.shape != (len(texts),):
        raise RerankModelError(
            f"reranker {name!r} returned scores of shape {out.shape} for {len(texts)} "
            "passages; it must return one score per passage"
        )
    return out


def read_rerank_run(path: PathLike, score_kind: ScoreKind | str | None) -> RerankScores:
    """Precomputed second-stage scores from a run file (TREC run format or JSON).

    Raises:
        EvalSetError: the file is missing or malformed, or ``score_kind`` is not given.
    """
    from ragguard.calibration._problems import Reporter
    from ragguard.calibration._readers import read_run

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
    cands, _ = read_run(p, Reporter(False))
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    scores = {q: dict(c) for q, c in cands.items()}
    return RerankScores(
        p.stem, kind, scores, f"run:{p}:{digest}", None, None, f"run:{p}", n_cached=0
    )
