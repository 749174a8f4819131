"""Where calibration data comes from: a file, a folder (labels, runs in ``runs/``), run
files, or a live retriever from a ``"module:function"`` factory: docs/guides/calibrate.md
("Eval sets", "A live retriever")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragguard._optional import import_object
from ragguard.calibration.data.evalset import EvalSet, as_score_kind, load_evalset
from ragguard.calibration.data.formats.beir import LABEL_FILES
from ragguard.calibration.data.records import Run
from ragguard.calibration.data.texts import PathLike
from ragguard.errors import EvalSetError, RetrieverError
from ragguard.scores import ScoreKind

logger = logging.getLogger(__name__)

_RUN_SUFFIXES = tuple(
    s + gz for s in (".trec", ".run", ".txt", ".json", ".tsv") for gz in ("", ".gz")
)


def load_inputs(
    path: PathLike,
    runs: Sequence[PathLike] = (),
    *,
    folder_runs_too: bool = True,
    score_kind: ScoreKind | str | None = ScoreKind.SIMILARITY,
    strict: bool = False,
    texts: bool = True,
    corpus: Sequence[PathLike] = (),
) -> EvalSet:
    """Load an eval set from a file or a folder (its labels, one of ``LABEL_FILES`` or a
    BEIR layout, and its runs in ``runs/``).

    Args:
        path: a labels file (any format [`load_evalset`][ragguard.calibration.load_evalset] reads)
            or a folder.
        runs: run files to load with it; for a folder, they replace ``runs/``.
        folder_runs_too: load a folder's ``runs/`` when ``runs`` is empty (False when a
            live retriever will provide the run).
        score_kind: what the run files' scores are.
        strict: raise on the first reported loading problem.
        texts: keep the passage texts the data carries.
        corpus: corpus files a RAGAS testset's contexts are matched against.

    Raises:
        EvalSetError: no such path, a folder without labels, malformed data."""
    p = Path(path)
    if not p.exists():
        raise EvalSetError("no such file or folder", path=str(p))
    for r in runs:
        if not Path(r).is_file():
            raise EvalSetError("run file not found", path=str(r))
    run_paths: list[PathLike] = list(runs)
    fmt = None
    if p.is_dir():
        labels = next((p / n for n in LABEL_FILES if (p / n).is_file()), None)
        if labels is None and not ((p / "queries.jsonl").is_file() and (p / "qrels").is_dir()):
            raise EvalSetError(
                f"this folder holds no eval set: expected one of {', '.join(LABEL_FILES)} "
                "(with run files in runs/) or a BEIR layout (queries.jsonl, qrels/)",
                path=str(p),
            )
        if not run_paths and folder_runs_too and (p / "runs").is_dir():
            found = (f for f in (p / "runs").iterdir() if f.is_file())
            run_paths.extend(sorted(f for f in found if f.name.lower().endswith(_RUN_SUFFIXES)))
        if labels is None:
            labels, fmt = p, "beir"
        elif labels.name.startswith("qrels"):
            fmt = "trec"
        p, corpus = labels, ()  # a folder: the corpus beside its labels
    return load_evalset(
        p,
        format=fmt,
        runs=run_paths or None,
        score_kind=score_kind,
        strict=strict,
        texts=texts,
        corpus=corpus,
    )


def add_run(evalset: EvalSet, run: Run, *, only: bool = False) -> EvalSet:
    """A new eval set with ``run`` added (or, with ``only``, as its only run)."""
    if not only and run.name in evalset.runs:
        raise EvalSetError(f"two runs are named {run.name!r}")
    runs = {run.name: run} if only else {**evalset.runs, run.name: run}
    return EvalSet(
        evalset.queries,
        evalset.labels,
        runs,
        report=evalset.report,
        source=evalset.source,
        texts=evalset.texts,
        silver=evalset.silver,
    )


def load_factory(spec: str) -> Any:
    """Import ``module:function`` (the current directory first), call it with no
    arguments and return its result.

    Raises:
        RetrieverError: bad syntax, not found, not callable, or it raises."""
    target = import_object(spec)
    if not callable(target):
        raise RetrieverError(
            f"{spec} is not callable; it should be a function returning a retriever"
        )
    try:
        return target()
    except Exception as exc:
        raise RetrieverError(f"{spec}() raised {type(exc).__name__}: {exc}") from exc


Hits = list[tuple[str, float | None]]
# (many queries with a progress callback -> hits or the error of each, the score kind
# the source declares)
Searcher = tuple[
    Callable[[Sequence[str], Callable[[int], None]], "list[Hits | Exception]"],
    ScoreKind | None,
]


def _langchain_searcher(retriever: Any, concurrency: int) -> Searcher | None:
    lc = sys.modules.get("langchain_core.retrievers")
    if lc is None or not isinstance(retriever, lc.BaseRetriever):
        return None
    from ragguard.adapters._common import METADATA_KEY
    from ragguard.adapters.langchain import (
        DEFAULT_SCORE_KEYS,
        Translator,
        scored_twin,
        store_score_kind,
    )

    twin = scored_twin(retriever)
    kind: ScoreKind | None = None
    source = retriever
    if twin is not None:
        relevance = twin.search_type == "similarity_score_threshold"
        kind = store_score_kind(twin.vectorstore, relevance=relevance)
        source = twin
    translator = Translator(DEFAULT_SCORE_KEYS, METADATA_KEY)

    def hits_of(docs: list[Any]) -> Hits:
        candidates, _ = translator.candidates(docs)
        hits: Hits = []
        for doc, cand in zip(docs, candidates, strict=True):
            doc_id = doc.id or doc.metadata.get("id")
            if not doc_id:
                raise RetrieverError(
                    "the retriever returned a document without an id (Document.id or "
                    "metadata['id']); calibration matches documents to labels by id"
                )
            hits.append((str(doc_id), cand.score))
        return hits

    def search_many(queries: Sequence[str], done: Callable[[int], None]) -> list[Hits | Exception]:
        # Runnable.batch_as_completed runs up to max_concurrency queries at once (a
        # thread pool, or the retriever's own batching) and yields each result as it
        # finishes, so the progress bar moves per query; results keep the query order
        out: list[Hits | Exception] = [[] for _ in queries]
        finished = source.batch_as_completed(
            list(queries), config={"max_concurrency": concurrency}, return_exceptions=True
        )
        for n, (k, docs) in enumerate(finished, start=1):
            out[k] = docs if isinstance(docs, Exception) else hits_of(docs)
            done(n)
        return out

    return search_many, kind


def _llamaindex_searcher(retriever: Any, concurrency: int) -> Searcher | None:
    li = sys.modules.get("llama_index.core.base.base_retriever")
    if li is None or not isinstance(retriever, li.BaseRetriever):
        return None

    async def gather(queries: Sequence[str], done: Callable[[int], None]) -> list[Hits | Exception]:
        # aretrieve for every query, at most ``concurrency`` at a time; the progress bar
        # moves as each one finishes (in any order), the results keep the query order
        gate = asyncio.Semaphore(concurrency)
        out: list[Hits | Exception] = [[] for _ in queries]
        finished = 0

        async def one(k: int, query: str) -> None:
            nonlocal finished
            async with gate:
                try:
                    nodes = await retriever.aretrieve(query)
                    out[k] = [(n.node.node_id, n.score) for n in nodes]
                except Exception as exc:
                    out[k] = exc
            finished += 1
            done(finished)

        await asyncio.gather(*(one(k, q) for k, q in enumerate(queries)))
        return out

    def search_many(queries: Sequence[str], done: Callable[[int], None]) -> list[Hits | Exception]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(gather(queries, done))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # in a running loop (a notebook)
            return pool.submit(lambda: asyncio.run(gather(queries, done))).result()

    return search_many, None


def retrieve_run(
    evalset: EvalSet,
    retriever: Any,
    *,
    name: str = "retriever",
    score_kind: ScoreKind | str | None = None,
    on_query: Callable[[int, int], None] | None = None,
    max_concurrency: int = 8,
) -> Run:
    """The run of ``retriever`` (LangChain or LlamaIndex) on every labelled query, through
    the framework's own concurrency (at most ``max_concurrency`` in flight); the same run as
    calling it query after query. ``score_kind`` default: what the vector store tells, else
    ``similarity``; ``on_query(done, total)`` as queries finish.

    Raises:
        RetrieverError: not a supported retriever, a query without text, a document
            without an id, the retriever raising.
        EvalSetError: ``score_kind`` is not a score kind."""
    requested = as_score_kind(score_kind, f"run {name!r}")
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or (max_concurrency < 1)
    ):
        raise RetrieverError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    found = _langchain_searcher(retriever, max_concurrency) or _llamaindex_searcher(
        retriever, max_concurrency
    )
    if found is None:
        raise RetrieverError(
            f"the factory returned a {type(retriever).__module__}.{type(retriever).__qualname__}"
            ", not a retriever; return a LangChain retriever (langchain_core.retrievers."
            "BaseRetriever, extra 'langchain') or a LlamaIndex one (llama_index.core."
            "retrievers.BaseRetriever, extra 'llamaindex')"
        )
    search_many, store_kind = found
    missing = [q for q in evalset.qids if not evalset.queries[q].text]
    if missing:
        raise RetrieverError(
            f"{len(missing)} labelled queries have no text (e.g. {missing[0]!r}); a live "
            "retriever needs the query text ('query' in the JSONL eval set)"
        )
    total = len(evalset.qids)
    candidates: dict[str, dict[str, float]] = {}
    any_score = False
    repeats = 0
    qids = evalset.qids

    def done(n: int) -> None:
        if on_query is not None:
            on_query(n, total)

    try:
        results = search_many([evalset.queries[q].text or "" for q in qids], done)
    except RetrieverError:
        raise
    except Exception as exc:  # the framework's batch machinery itself failed
        raise RetrieverError(f"the retriever failed: {type(exc).__name__}: {exc}") from exc
    for qid, hits in zip(qids, results, strict=True):
        if isinstance(hits, RetrieverError):
            raise hits
        if isinstance(hits, Exception):
            raise RetrieverError(
                f"the retriever failed on query {qid!r}: {type(hits).__name__}: {hits}"
            ) from hits
        cands: dict[str, float] = {}
        for doc_id, score in hits:
            if doc_id in cands:
                repeats += 1
                continue
            ok = score is not None and math.isfinite(score)
            any_score = any_score or ok
            cands[doc_id] = float(score) if ok and score is not None else math.nan
        candidates[qid] = cands
    if repeats:
        logger.warning("the retriever returned %d repeated documents; kept the first", repeats)
    if not any_score:
        logger.warning("the retriever returned no scores: only plain top-k can be calibrated")
        return Run(name, candidates, None, None)
    return Run(name, candidates, requested or store_kind or ScoreKind.SIMILARITY, None)
