"""``ragguard synth``: an eval set of questions made from the user's own passages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragguard.cli._common import Verbose, app, err, friendly_errors

__all__ = ["synth"]


@app.command()
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
    n: Annotated[
        int, typer.Option("--n", help="Queries to make (fewer if the corpus runs out).")
    ] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Which passages are sampled.")] = 0,
    method: Annotated[
        str, typer.Option("--method", help="How a query is built: keyphrases or cloze.")
    ] = "keyphrases",
    verbose: Verbose = False,
) -> None:
    """Questions made from your passages, without a model: each sampled passage gives one
    query built from its own words, labelled relevant to it (silver labels: other passages
    that also answer it count as not relevant). Deterministic for a seed."""
    with friendly_errors(verbose):
        from ragguard.calibration._output import check_not_input, check_output_path
        from ragguard.calibration.synth import read_corpus, synthesize, write_evalset

        target = check_output_path(out, folder=False, what="--out", example="eval.jsonl")
        check_not_input(target, [corpus], what="--out")
        read = read_corpus(corpus)
        queries = synthesize(read, n=n, seed=seed, method=method)
        provenance = {
            "method": method,
            "seed": seed,
            "n": n,
            "corpus": corpus.name,
            "split": read.split,
        }
        write_evalset(queries, target, provenance)
        err.print(
            f"{target}: {len(queries)} queries from {len(read.passages)} passages "
            f"({method}, seed {seed}; silver labels: each query's source passage)",
            highlight=False,
            soft_wrap=True,
        )
