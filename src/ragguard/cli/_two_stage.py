"""``ragguard calibrate``'s second-stage flags and the ``RerankSearch`` they name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from ragguard.calibration import RerankSearch
from ragguard.cli._common import option
from ragguard.cli._groups import group

CorpusOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--corpus",
        help="JSONL corpus with passage texts (_id/id, text, title) for --rerank and what "
        "a RAGAS testset's contexts are matched against; repeatable. A corpus.jsonl beside "
        "the labels is read by itself.",
    ),
]


@dataclass(frozen=True, kw_only=True)
class RerankFlags:
    """The second-stage flags, checked (``--probability-map``; ``--rerank`` or ``--rerank-run``)."""

    rerank: str | None = None
    rerank_run: Path | None = None
    rerank_score_kind: str | None = None
    corpus: list[Path] | None = None
    probability_map: str
    rerank_cache: Path | None = None

    def __post_init__(self) -> None:
        from ragguard.errors import ConfigError
        from ragguard.probability import MapMethod

        methods = [m.value for m in MapMethod]
        if self.probability_map not in methods:
            raise ConfigError(
                f"--probability-map {self.probability_map!r} is not a method; use one of "
                f"{', '.join(methods)}"
            )
        if self.rerank is not None and self.rerank_run is not None:
            raise ConfigError("give --rerank or --rerank-run, not both")


RERANK = group(
    "Second stage",
    RerankFlags,
    RerankSearch,
    rerank=option(
        str | None,
        "Calibrate a second stage too: a sentence-transformers CrossEncoder name or "
        "local path, or module:callable (a reranker(query, texts) -> scores, imported "
        "because you named it). Scores are computed once and cached.",
        "--rerank",
        metavar="SPEC",
    ),
    rerank_run=option(
        Path | None,
        "Precomputed second-stage scores (TREC run format or JSON) instead of --rerank; "
        "needs --rerank-score-kind.",
        "--rerank-run",
        metavar="FILE",
    ),
    rerank_score_kind=option(
        str | None,
        "What the second-stage scores are: logit or probability (default: what the reranker "
        "declares).",
        "--rerank-score-kind",
        metavar="KIND",
    ),
    corpus=CorpusOpt,
    probability_map=option(
        str,
        "How rerank scores become calibrated probabilities: platt or isotonic.",
        "--probability-map",
        metavar="METHOD",
    ),
    rerank_cache=option(
        Path | None,
        "Folder of the rerank score cache (default $RAGGUARD_CACHE_DIR or "
        "~/.cache/ragguard/rerank).",
        "--rerank-cache",
        metavar="FOLDER",
    ),
)


def rerank_search(flags: RerankFlags, progress: Progress) -> RerankSearch | None:
    """The second stage the flags name (``None``: none): scores read or a reranker loaded."""
    if flags.rerank is None and flags.rerank_run is None:
        return None
    from ragguard.calibration.fit.rerank_scores import read_rerank_run
    from ragguard.probability import MapMethod
    from ragguard.rerank import load_reranker

    method = MapMethod(flags.probability_map)
    if flags.rerank_run is not None:
        scores = read_rerank_run(flags.rerank_run, flags.rerank_score_kind)
        return RerankSearch(scores=scores, probability_map=method)
    assert flags.rerank is not None
    task = progress.add_task(f"reranking with {flags.rerank}", total=None)
    return RerankSearch(
        reranker=load_reranker(flags.rerank, score_kind=flags.rerank_score_kind),
        score_kind=flags.rerank_score_kind,
        probability_map=method,
        cache_dir=flags.rerank_cache if flags.rerank_cache is not None else True,
        on_query=lambda done, total: progress.update(task, completed=done, total=total),
    )
