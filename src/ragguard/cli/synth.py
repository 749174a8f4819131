"""``ragguard synth``: an eval set of questions made from the user's own passages."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from ragguard.cli._common import Verbose, app, err, option, say
from ragguard.cli._groups import FlagGroup, GroupedCommand, group, grouped
from ragguard.cli.annotate import (
    ENDPOINT,
    LOCAL,
    Backend,
    FreshOpt,
    ModelIdOpt,
    ModelOpt,
    ProgressFileOpt,
    loading,
    progress_bar,
    resumable,
    text_generator,
)
from ragguard.errors import ConfigError

QUESTION_TOKENS = 64  # the longest reply asked of a model: a question, not an essay


@dataclass(frozen=True)
class Writer:
    backend: Backend | None = None
    model: str | None = None
    model_id: str | None = None
    progress_file: Path | None = None
    fresh: bool = False


WRITER = group(
    "Model (optional; as ragguard annotate takes it)",
    Writer,
    backend=option(
        Backend | None,
        "The LLM that writes one question per passage: transformers, gguf, openai or "
        "chat. Default: none (queries built from the passage's words, --method).",
        metavar="BACKEND",
    ),
    model=ModelOpt,
    model_id=ModelIdOpt,
    progress_file=ProgressFileOpt,
    fresh=FreshOpt,
)


def _only(g: FlagGroup[Any], *names: str) -> FlagGroup[Any]:
    """``g`` with only the flags synth reads, so it shows none it would ignore."""
    return replace(g, flags=tuple(f for f in g.flags if f.name in names))


@app.command(cls=GroupedCommand)
@grouped(
    {
        "writer": WRITER,
        "local": _only(LOCAL, "device", "dtype", "threads", "gguf_file"),
        "endpoint": _only(ENDPOINT, "base_url", "concurrency", "max_retries", "timeout"),
    }
)
def synth(
    corpus: Annotated[
        Path,
        typer.Argument(
            help="A JSONL corpus (BEIR corpus.jsonl, or lines of {id, text}), a BEIR "
            "folder, or a folder of .txt / .md files (split into passages)."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="The eval set to write (JSONL).")
    ],
    writer: Writer,
    local: dict[str, Any],
    endpoint: dict[str, Any],
    n: Annotated[
        int, typer.Option("--n", help="Queries to make (fewer if the corpus runs out).")
    ] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Which passages are sampled.")] = 0,
    method: Annotated[
        str | None,
        typer.Option(
            "--method", help="Without a model, how a query is built: keyphrases or cloze."
        ),
    ] = None,
    retriever: Annotated[
        str | None,
        typer.Option(
            "--retriever",
            metavar="MODULE:FUNCTION",
            help="module:function returning a LangChain or LlamaIndex retriever (as "
            "calibrate takes it): its candidates for every query are written as the run, so "
            "`ragguard calibrate OUT` needs no --run or --retriever.",
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Questions made from your passages: each sampled passage gives one query,
    labelled relevant to it (silver labels: other passages that also answer it count as
    not relevant). Without a model the query is built from the passage's own words,
    deterministic for a seed; with --backend/--model an LLM writes it, its replies
    appended to OUT.progress as they come (run the same command to resume). With
    --retriever, each query's candidates are written too (else `calibrate --retriever`
    retrieves them live)."""
    from ragguard.calibration._output import check_not_input, check_output_path
    from ragguard.calibration.synth import ask, read_corpus, synthesize, write_evalset

    if (writer.backend is None) != (writer.model is None):
        raise ConfigError(
            "synth: --backend and --model go together (an LLM writes the questions); "
            "give both, or neither for queries built without a model"
        )
    if writer.backend is not None and method is not None:
        raise ConfigError(
            "synth: --method builds queries without a model; drop it, or drop --backend/--model"
        )
    target = check_output_path(out, folder=False, what="--out", example="eval.jsonl")
    check_not_input(target, [corpus], what="--out")
    read = read_corpus(corpus)
    if retriever is not None:
        from ragguard.calibration.data.inputs import load_factory

        instance = load_factory(retriever)  # a bad factory fails before any query is made
    where = {"seed": seed, "n": n, "corpus": corpus.name, "split": read.split}
    if writer.backend is None or writer.model is None:
        how = method or "keyphrases"
        queries = synthesize(read, n=n, seed=seed, method=how)
        provenance: dict[str, Any] = {"method": how, **where}
    else:
        progress_file = writer.progress_file or Path(f"{target}.progress")
        check_not_input(progress_file, [corpus], what="--progress-file")
        opts = {**local, **endpoint}
        name = writer.model
        loading(writer.backend, name, local["threads"])
        gen = text_generator(
            writer.backend, name, opts, model_id=writer.model_id, max_tokens=QUESTION_TOKENS
        )
        with (
            progress_bar({"ask": "writing questions"}) as progress,
            resumable(progress_file, "reply"),
        ):
            asked = ask(
                read,
                gen,
                progress_file=progress_file,
                n=n,
                seed=seed,
                fresh=writer.fresh,
                progress=progress,
            )
        for r in asked.rejected:
            say(
                f"passage {r.source!r}: no usable question ({r.reason}): {r.reply.strip()[:80]!r}",
                err,
            )
        if not asked.queries:
            raise ConfigError(
                f"synth: the model gave no usable question for any of the {len(asked.rejected)} "
                "passages asked (see above): try a larger model"
            )
        queries, how = asked.queries, f"llm {gen.model_id}"
        provenance = {"method": "llm", **where, "model": gen.model_id}
        provenance["settings"] = dict(gen.settings())
        say(
            f"{asked.computed} replies asked, {asked.reused} reused from {progress_file}; "
            f"{len(asked.rejected)} passages rejected",
            err,
        )
    run = None
    if retriever is not None:
        from ragguard.calibration import EvalSet
        from ragguard.cli._data import live_run

        labelled = EvalSet.from_dicts(
            {q.query_id: {q.source: 1} for q in queries},
            queries={q.query_id: q.query for q in queries},
        )
        run = live_run(labelled, retriever, instance, score_kind=None)
    write_evalset(queries, target, provenance, run)
    say(
        f"{target}: {len(queries)} queries from {len(read.passages)} passages "
        f"({how}, seed {seed}; silver labels: each query's source passage)",
        err,
    )
    if run is not None:
        kind = run.score_kind.value if run.score_kind else None
        hint = f"; calibrate with --score-kind {kind}" if kind not in ("similarity", None) else ""
        say(
            f"{target}: run {run.name}, the retriever's candidates for every query "
            f"({kind or 'no'} scores{hint})",
            err,
        )
