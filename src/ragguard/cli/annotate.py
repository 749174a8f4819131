"""``ragguard annotate``: measure passage utility with an LLM (the UDCG paper's method)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ragguard.calibration.annotate import Outputs
from ragguard.calibration.data.evalset import FORMATS
from ragguard.cli._common import Verbose, app, err, option, say
from ragguard.cli._groups import Flag, FlagGroup, GroupedCommand, group, grouped
from ragguard.errors import AnnotationError

ProgressFn = Callable[[str, int, int], None]


class Backend(StrEnum):
    transformers = "transformers"
    gguf = "gguf"
    openai = "openai"
    chat = "chat"


class EndpointApi(StrEnum):
    chat = "chat"
    completions = "completions"


class UnjudgedPolicy(StrEnum):
    judge = "judge"
    irrelevant = "irrelevant"
    skip = "skip"


def load_chat_model(spec: str) -> Any:
    """A LangChain chat model from ``module:attribute`` (a factory is called)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AnnotationError(
            f"--model for the chat backend is 'module:attribute' (a chat model or a factory "
            f"returning one), got {spec!r}"
        )
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`, find modules in the cwd
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AnnotationError(f"cannot import {module_name!r} for --model {spec!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise AnnotationError(f"module {module_name!r} has no attribute {attr!r}") from None
    from langchain_core.language_models import BaseChatModel

    if not isinstance(obj, BaseChatModel) and callable(obj):
        obj = obj()
    if not isinstance(obj, BaseChatModel):
        raise AnnotationError(f"{spec!r} is not a LangChain chat model (BaseChatModel)")
    return obj


def _estimator(backend: Backend, model: str, opts: dict[str, Any]) -> Any:
    from ragguard.calibration import annotate as ann

    if backend in (Backend.transformers, Backend.gguf):
        local = ("model_id", "device", "dtype", "batch_size", "max_length", "chat_template")
        kwargs = {name: opts[name] for name in local}
        if backend is Backend.transformers:
            return ann.TransformersEstimator(model, **kwargs)
        return ann.TransformersEstimator.from_gguf(
            _gguf_file(Path(model), opts["gguf_file"]), **kwargs
        )
    if backend is Backend.openai:
        return ann.OpenAIEndpointEstimator(
            model,
            api=opts["api"].value,
            top_logprobs=opts["top_logprobs"],
            model_id=opts["model_id"],
            **_client(opts),
        )
    return ann.SamplingEstimator(
        load_chat_model(model),
        n=opts["samples"],
        temperature=opts["temperature"],
        concurrency=opts["concurrency"],
        model_id=opts["model_id"],
    )


def _client(opts: dict[str, Any]) -> dict[str, Any]:
    return {k: opts[k] for k in ("base_url", "concurrency", "max_retries", "timeout")}


@contextmanager
def resumable(saved: Path, what: str) -> Iterator[None]:
    """Ctrl-C in a long model run: say what is saved in ``saved`` and exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        say(
            f"interrupted: every {what} so far is saved in {saved}; run the same command "
            "again to resume",
            err,
        )
        raise typer.Exit(130) from None


def loading(backend: Backend, model: str, threads: int | None) -> None:
    """Say which model loads; ``--threads`` sets torch's CPU threads for the local ones."""
    if threads is not None and backend in (Backend.transformers, Backend.gguf):
        from ragguard._optional import require

        require("torch", "annotate").set_num_threads(threads)
    say(f"loading {backend.value} model {model} ...", err)


def text_generator(
    backend: Backend,
    model: str,
    opts: dict[str, Any],
    *,
    model_id: str | None = None,
    max_tokens: int = 256,
) -> Any:
    """The ``TextGenerator`` of ``--backend`` / ``--model`` (the judge's, and synth's)."""
    from ragguard.calibration import annotate as ann

    if backend in (Backend.transformers, Backend.gguf):
        local = {"device": opts["device"], "dtype": opts["dtype"], "model_id": model_id}
        if backend is Backend.transformers:
            return ann.TransformersGenerator(model, max_new_tokens=max_tokens, **local)
        path = _gguf_file(Path(model), opts["gguf_file"])
        if not path.is_file():
            raise AnnotationError(f"no such GGUF file: {path}")
        return ann.TransformersGenerator(
            path.parent, gguf_file=path.name, max_new_tokens=max_tokens, **local
        )
    if backend is Backend.openai:
        return ann.EndpointGenerator(
            model, max_tokens=max_tokens, model_id=model_id, **_client(opts)
        )
    return ann.ChatGenerator(
        load_chat_model(model), concurrency=opts["concurrency"], model_id=model_id
    )


def _gguf_file(path: Path, name: str | None) -> Path:
    """``--model``'s GGUF file (a file, or in a folder ``--gguf-file`` or its one ``.gguf``)."""
    if not path.is_dir():
        return path
    files = sorted(path.glob("*.gguf"))
    if name is None and len(files) != 1:
        raise AnnotationError(f"{path} holds {len(files)} .gguf files; name one with --gguf-file")
    return path / (name or files[0].name)


@contextmanager
def progress_bar(labels: Mapping[str, str]) -> Iterator[ProgressFn]:
    """A ``progress(stage, done, total)`` drawing one bar per stage on stderr."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield progress


BackendOpt = option(
    Backend,
    "Where p(NO-RESPONSE) comes from: transformers, gguf, openai or chat.",
    metavar="BACKEND",
)
ModelOpt = option(
    str,
    "transformers: a model id or folder; gguf: a .gguf file (or a folder and "
    "--gguf-file); openai: the served model's name; chat: module:attribute of a "
    "LangChain chat model or of a factory returning one.",
    metavar="MODEL",
)
ModelIdOpt = option(
    str | None, "The model's name in the outputs (default: --model).", metavar="NAME"
)
RunOpt = option(
    list[Path] | None, "A run file (TREC run or JSON); repeat for several.", metavar="FILE"
)
EvalsetFormatOpt = option(
    str | None,
    f"{', '.join([*FORMATS][:-1])} or {[*FORMATS][-1]} (default: detected).",
    "--format",
    metavar="FORMAT",
)
CorpusOpt = option(
    list[Path] | None,
    "JSONL corpus with the passage texts (_id or id, text, title); repeatable.",
    metavar="FILE",
)
OutPathOpt = option(
    Path, "The ragguard JSONL to write (utilities per passage).", "--out", metavar="FILE"
)
UdcgOutOpt = option(Path | None, "Also write the UDCG authors' JSON format here.", metavar="FILE")
ProgressFileOpt = option(
    Path | None, "Where results are appended (default: OUT.progress).", metavar="FILE"
)
FreshOpt = option(bool, "Ignore saved results and start over.", "--fresh")
UnjudgedOpt = option(
    UnjudgedPolicy | None,
    "Passages without a label: judge (ask the judge), irrelevant or skip. "
    "Default: judge with --judge-model, else irrelevant.",
    metavar="POLICY",
)
JudgeModelOpt = option(
    str | None, "The judge (the paper's Figure 5 prompt); default: --model.", metavar="MODEL"
)
JudgeBackendOpt = option(
    Backend | None, "The judge's backend; default: --backend.", metavar="BACKEND"
)
DeviceOpt = option(str | None, "cpu, cuda, cuda:1, mps or auto.", metavar="DEVICE")
DtypeOpt = option(str | None, "float32, float16, bfloat16 or auto.", metavar="DTYPE")
BatchSizeOpt = option(int, "Pairs per forward pass.", metavar="N")
MaxLengthOpt = option(
    int | None, "Longest prompt in tokens (longer ones keep their end).", metavar="N"
)
ChatTemplateOpt = option(
    bool | None,
    "Use the tokenizer's chat template, or the plain prompt. Default: the "
    "template when there is one.",
    "--chat-template/--no-chat-template",
)
ThreadsOpt = option(
    int | None, "PyTorch CPU threads (on a busy machine 1 can beat all).", metavar="N"
)
GgufFileOpt = option(str | None, "gguf: the file's name when --model is a folder.", metavar="NAME")
BaseUrlOpt = option(
    str | None,
    "E.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL, else that). "
    "The key is $OPENAI_API_KEY.",
    metavar="URL",
)
ApiOpt = option(EndpointApi, "chat or completions.", metavar="API")
TopLogprobsOpt = option(int, "Alternatives asked for per request.", metavar="K")
ConcurrencyOpt = option(int, "Requests in flight at once (chat backend too).", metavar="N")
MaxRetriesOpt = option(int, "Retries of a failed request.", metavar="N")
TimeoutOpt = option(float, "Time allowed per request.", metavar="SECONDS")
SamplesOpt = option(int, "Answers sampled per pair.", metavar="N")
TemperatureOpt = option(float, "Sampling temperature.", metavar="T")


@dataclass(frozen=True)
class Model:
    backend: Backend
    model: str
    model_id: str | None = None


@dataclass(frozen=True)
class Inputs:
    run: list[Path] | None = None
    evalset_format: str | None = None
    corpus: list[Path] | None = None


def _relevance(
    unjudged: UnjudgedPolicy | None = None,
    judge_model: str | None = None,
    judge_backend: Backend | None = None,
) -> tuple[UnjudgedPolicy, str | None, Backend | None]:
    """The unlabelled-passage policy (default: judge with a judge model) and the judge's."""
    if unjudged is None:
        unjudged = UnjudgedPolicy.irrelevant if judge_model is None else UnjudgedPolicy.judge
    return unjudged, judge_model, judge_backend


def _checked(**opts: Any) -> dict[str, Any]:
    """The backend settings, each number checked against the library's bounds."""
    from ragguard.calibration.annotate._checks import BOUNDS, check

    for name in BOUNDS.keys() & opts.keys():
        if opts[name] is not None:
            check(name, opts[name], label="--" + name.replace("_", "-"))
    return opts


MODEL = group("Model", Model, backend=BackendOpt, model=ModelOpt, model_id=ModelIdOpt)
INPUTS = group("Inputs", Inputs, run=RunOpt, evalset_format=EvalsetFormatOpt, corpus=CorpusOpt)
OUTPUT = group(
    "Output",
    Outputs,
    out=OutPathOpt,
    udcg_out=UdcgOutOpt,
    progress_file=ProgressFileOpt,
    fresh=FreshOpt,
)
RELEVANCE = group(
    "Relevance of unlabelled passages",
    _relevance,
    unjudged=UnjudgedOpt,
    judge_model=JudgeModelOpt,
    judge_backend=JudgeBackendOpt,
)

LOCAL = FlagGroup(
    "Local models (transformers, gguf)",
    (
        Flag("device", DeviceOpt, None),
        Flag("dtype", DtypeOpt, None),
        Flag("batch_size", BatchSizeOpt, 8),
        Flag("max_length", MaxLengthOpt, None),
        Flag("chat_template", ChatTemplateOpt, None),
        Flag("threads", ThreadsOpt, None),
        Flag("gguf_file", GgufFileOpt, None),
    ),
    _checked,
)

ENDPOINT = FlagGroup(
    "Endpoints (openai, chat)",
    (
        Flag("base_url", BaseUrlOpt, None),
        Flag("api", ApiOpt, EndpointApi.chat),
        Flag("top_logprobs", TopLogprobsOpt, 20),
        Flag("concurrency", ConcurrencyOpt, 8),
        Flag("max_retries", MaxRetriesOpt, 5),
        Flag("timeout", TimeoutOpt, 60.0),
        Flag("samples", SamplesOpt, 10),
        Flag("temperature", TemperatureOpt, 1.0),
    ),
    _checked,
)

EvalsetArg = Annotated[
    Path,
    typer.Argument(
        metavar="EVALSET", help="Eval set: ragguard JSONL, TREC qrels, BEIR folder or UDCG JSON."
    ),
]


@app.command("annotate", cls=GroupedCommand)
@grouped(
    {
        "model": MODEL,
        "inputs": INPUTS,
        "output": OUTPUT,
        "relevance": RELEVANCE,
        "local": LOCAL,
        "endpoint": ENDPOINT,
    }
)
def annotate_command(
    evalset: EvalsetArg,
    model: Model,
    inputs: Inputs,
    output: Outputs,
    relevance: tuple[UnjudgedPolicy, str | None, Backend | None],
    local: dict[str, Any],
    endpoint: dict[str, Any],
    verbose: Verbose = False,
) -> None:
    """Measure each passage's utility for an LLM with a model.

    Utility u = R * (1 - p(NO-RESPONSE)). The model reads each question with one
    passage alone (the UDCG paper's prompt).

    Results are appended to OUT.progress as they come: run the same command to resume.
    """
    from ragguard.calibration.annotate import Relevance, RelevanceJudge, annotate

    opts: dict[str, Any] = {"model_id": model.model_id, **local, **endpoint}
    backend = model.backend
    policy, judge_model, judge_backend = relevance
    name = model.model
    loading(backend, name, local["threads"])
    estimator = _estimator(backend, name, opts)
    judge = None
    if policy is UnjudgedPolicy.judge:  # a local model judges with the one it measures with
        jb, jm = judge_backend or backend, judge_model or name
        same = jb is backend and jm == name and jb in (Backend.transformers, Backend.gguf)
        judge = RelevanceJudge(estimator.generator() if same else text_generator(jb, jm, opts))

    with (
        progress_bar({"judge": "judging relevance", "estimate": "p(NO-RESPONSE)"}) as progress,
        resumable(output.store_path, "result"),
    ):
        summary = annotate(
            evalset,
            estimator,
            outputs=output,
            relevance=Relevance(judge=judge, unjudged=policy.value),
            runs=list(inputs.run) if inputs.run else None,
            format=inputs.evalset_format,
            corpus=list(inputs.corpus or []),
            progress=progress,
        )
    say(
        f"annotated {summary.pairs} passages with {summary.model_id}: "
        f"{summary.computed} computed, {summary.reused} reused from {summary.progress}"
    )
    if summary.judged or summary.judge_failures:
        failed = summary.judge_failures
        note = f"; {failed} replies had no grade (left out; judged again on the next run)"
        say(f"relevance judged for {summary.judged} passages" + (note if failed else ""))
    if summary.skipped:
        say(f"skipped {summary.skipped} unlabelled passages")
    say(f"wrote {summary.out}")
    if summary.udcg_out is not None:
        say(f"wrote {summary.udcg_out}")
