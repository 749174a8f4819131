"""Options and loading shared by the commands that read an eval set."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ragguard.cli._common import err
from ragguard.profiles import Profile, ProfileSpec, resolve_profile
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.calibration import EvalSet
    from ragguard.calibration.data.records import Run


def compact_table(title: str | None = None) -> Table:
    """A table that fits 80 columns: a rule under the header, one space between columns."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))


EvalSetArg = Annotated[
    Path,
    typer.Argument(
        metavar="EVALSET",
        help="The eval set: a JSONL, TREC qrels or UDCG JSON file, a BEIR folder, a RAGAS "
        "testset (JSONL or CSV, its corpus.jsonl beside it) or LlamaIndex "
        "EmbeddingQAFinetuneDataset JSON, or a folder holding evalset.jsonl and its runs in "
        "runs/ (like examples/notes).",
    ),
]
RunOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--run",
        "-r",
        metavar="FILE",
        help="A run file (TREC run format or JSON {query: {doc: score}}), named by its file "
        "stem; repeat for several. For a folder EVALSET these replace its runs/.",
    ),
]
ProfileOpt = Annotated[
    str,
    typer.Option(
        "--profile",
        "-p",
        metavar="NAME",
        help="Tolerance profile whose rules turn labels into utilities: medical, legal, "
        "support, creative, code (see `ragguard profiles`) or one from --profiles.",
    ),
]
ProfilesOpt = Annotated[
    Path | None,
    typer.Option(
        "--profiles",
        metavar="FILE",
        help="A TOML file whose [profiles.NAME] tables define custom profiles (your "
        "ragguard.toml); --profile can then name one.",
    ),
]


def profile_for_cli(name: str, profiles: Path | None) -> Profile:
    """The built-in profile ``name``, or a custom one of ``--profiles FILE``."""
    from ragguard.config import GuardConfig, load_toml

    custom: dict[str, ProfileSpec] = {}
    if profiles is not None:
        table = load_toml(profiles).get("profiles", {})
        custom = dict(GuardConfig.without_environment(profiles=table).profiles)
    return resolve_profile(name, custom)


ScoreKindOpt = Annotated[
    ScoreKind | None,
    typer.Option(
        "--score-kind",
        help="What the run scores are. Default: similarity (BM25, cosine); for calibrate "
        "--retriever, what its vector store tells, else similarity.",
    ),
]


def load_evalset_for_cli(
    path: Path,
    runs: list[Path] | None,
    *,
    score_kind: ScoreKind | None,
    retriever: str | None = None,
    texts: bool = True,
    corpus: list[Path] | None = None,
) -> EvalSet:
    """The eval set and its runs (a live retriever's too); without ``texts``, no passage
    text kept; ``corpus``: what a RAGAS testset's contexts are matched against."""
    from ragguard.calibration.data.inputs import add_run, load_factory, load_inputs

    evalset = load_inputs(
        path,
        runs or (),
        folder_runs_too=retriever is None,
        score_kind=score_kind or ScoreKind.SIMILARITY,
        texts=texts,
        corpus=corpus or (),
    )
    if retriever is not None:
        run = live_run(evalset, retriever, load_factory(retriever), score_kind=score_kind)
        evalset = add_run(evalset, run)
    return evalset


def live_run(evalset: EvalSet, spec: str, instance: object, *, score_kind: ScoreKind | None) -> Run:
    """The run of ``--retriever spec`` (``instance``) over every query, with a progress bar."""
    from ragguard.calibration.data.inputs import retrieve_run

    name = spec.rpartition(":")[2] or "retriever"
    with progress_bars() as progress:
        task = progress.add_task(f"retrieving with {spec}", total=len(evalset.qids))
        return retrieve_run(
            evalset,
            instance,
            name=name,
            score_kind=score_kind,
            on_query=lambda done, _total: progress.update(task, completed=done),
        )


class CountColumn(ProgressColumn):
    """``done/total``, or nothing while the total is unknown (never ``0/?``)."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text(f"{int(task.completed)}/{int(task.total)}", style="progress.download")


def progress_bars() -> Progress:
    """The progress bars of retrieval, rerank scoring and the sweeps (stderr)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        CountColumn(),
        TimeElapsedColumn(),
        console=err,
    )
