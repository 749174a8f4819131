"""Fine-tuning the neural candidates with sentence-transformers' trainers (bi-encoder:
MultipleNegativesRankingLoss over triplets; cross-encoders: BinaryCrossEntropyLoss, soft
targets), an optional pre-training phase, then early stopping on validation AUC."""

from __future__ import annotations

import importlib
import itertools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import require
from ragguard.calibration.train.options import Training
from ragguard.errors import EvalSetError, MissingDependencyError
from ragguard.trained import load_cross_encoder, load_encoder

NEGATIVES_PER_POSITIVE = 4
PATIENCE = 2
Say = Callable[[str], None]


@dataclass(frozen=True)
class TextPair:
    """A training pair as texts: ``group`` keys the query (pairs of one query share it),
    ``target`` in [0, 1], ``kind`` where it came from (``relevant`` marks positives)."""

    group: str
    query: str
    text: str
    target: float
    kind: str


@dataclass(frozen=True)
class Validation:
    """The validation queries as texts and how to grade per-query scores: ``score``
    returns the selection AUC (NaN when it cannot be computed)."""

    queries: Sequence[str]
    texts: Sequence[Sequence[str]]
    score: Callable[[list[NDArray[np.float64]]], float]
    metric: str


@dataclass(frozen=True, kw_only=True)
class FineTuning(Training):
    """``Training`` with the seed: the settings shared by the neural candidates."""

    seed: int


def _st(name: str) -> Any:
    """A sentence-transformers submodule by its v6 path, else its older one."""
    try:
        return importlib.import_module(f"sentence_transformers.sentence_transformer.{name}")
    except ImportError:
        return importlib.import_module(f"sentence_transformers.{name}")


def _evaluator(validation: Validation, scores_of: Callable[[Any], list[Any]], say: Say) -> Any:
    """A sentence-transformers evaluator reporting the validation AUC as ``auc``."""
    evaluation = _st("evaluation")

    class AUC(evaluation.SentenceEvaluator):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.primary_metric = "auc"
            self.greater_is_better = True

        def __call__(
            self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            value = validation.score([np.asarray(s, dtype=np.float64) for s in scores_of(model)])
            say(f"  step {steps}: validation {validation.metric} {value:.3f}")
            return {"auc": 0.0 if math.isnan(value) else float(value)}

    return AUC()


def _split(flat: NDArray[np.float64], texts: Sequence[Sequence[str]]) -> list[NDArray[np.float64]]:
    bounds = np.cumsum([0, *(len(t) for t in texts)])
    return [flat[a:b] for a, b in itertools.pairwise(bounds)]


def bi_encoder_scores(model: Any, validation: Validation) -> list[NDArray[np.float64]]:
    """Per validation query, the cosine of each of its passages (one encode per side)."""

    def encode(texts: list[str]) -> NDArray[np.float64]:
        out = model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float64)

    q = encode(list(validation.queries))
    d = encode([t for texts in validation.texts for t in texts])
    owner = np.repeat(np.arange(len(validation.texts)), [len(t) for t in validation.texts])
    return _split(np.einsum("ij,ij->i", d, q[owner]), validation.texts)


def cross_encoder_scores(model: Any, validation: Validation) -> list[NDArray[np.float64]]:
    """Per validation query, a cross-encoder's score of each of its passages."""
    flat = [
        (q, t) for q, texts in zip(validation.queries, validation.texts, strict=True) for t in texts
    ]
    s = model.predict(flat, batch_size=32, show_progress_bar=False, convert_to_numpy=True)
    return _split(np.asarray(s, dtype=np.float64).reshape(-1), validation.texts)


def _args(cls: Any, out: Path, total: int, s: FineTuning, *, evaluate: bool, **extra: Any) -> Any:
    every = max(1, total // 5)
    steps: dict[str, Any] = (
        {
            "eval_strategy": "steps",
            "eval_steps": every,
            "save_strategy": "steps",
            "save_steps": every,
            "save_total_limit": 2,
            "save_only_model": True,
            "load_best_model_at_end": True,
            "metric_for_best_model": "eval_auc",
            "greater_is_better": True,
        }
        if evaluate
        else {"eval_strategy": "no", "save_strategy": "no"}
    )
    return cls(
        output_dir=str(out),
        num_train_epochs=s.epochs,
        max_steps=total,
        per_device_train_batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        warmup_steps=max(0, total // 10),
        seed=s.seed,
        data_seed=s.seed,
        logging_steps=every,
        report_to="none",
        disable_tqdm=not s.show_progress_bar,
        use_cpu=s.device == "cpu",
        dataloader_pin_memory=s.device != "cpu" and require("torch", "train").cuda.is_available(),
        **steps,
        **extra,
    )


def _quiet(trainer: Any, s: FineTuning, say: Say) -> None:
    """The trainer's log dicts become ``say`` lines: it prints them to stdout (through its
    printer, or ``tqdm.write`` with a bar), and a library never prints."""
    transformers = require("transformers", "train")
    trainer.remove_callback(transformers.PrinterCallback)
    trainer.remove_callback(transformers.ProgressCallback)
    if s.show_progress_bar:

        class Bar(transformers.ProgressCallback):  # type: ignore[misc,name-defined]
            def on_log(self, *args: Any, **kwargs: Any) -> None:
                pass  # the bar only: the log dicts come as say lines

        trainer.add_callback(Bar())

    class Lines(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            loss = (logs or {}).get("loss")
            if isinstance(loss, int | float) and state.is_world_process_zero:
                say(f"  step {state.global_step}: training loss {loss:.4f}")

    trainer.add_callback(Lines())


def _steps(n_rows: int, s: FineTuning) -> int:
    return min(s.max_steps, max(1, math.ceil(n_rows / s.batch_size)) * s.epochs) if n_rows else 0


def _run(
    what: str,
    make_trainer: Callable[..., Any],
    args_cls: Any,
    data: dict[str, list[Any]],
    pretrain: dict[str, list[Any]] | None,
    evaluator: Any,
    work: Path,
    s: FineTuning,
    say: Say,
    **extra: Any,
) -> str:
    """An optional pre-training phase, then training with early stopping; the note."""
    datasets = require("datasets", "train")
    transformers = require("transformers", "train")
    os.environ.setdefault("WANDB_DISABLED", "true")

    def train(rows: dict[str, list[Any]], steps: int, folder: str, **kw: Any) -> Any:
        args = _args(args_cls, work / folder, steps, s, evaluate="evaluator" in kw, **extra)
        trainer = make_trainer(args=args, train_dataset=datasets.Dataset.from_dict(rows), **kw)
        _quiet(trainer, s, say)
        trainer.train()
        return trainer.state

    notes = []
    first = next(iter(pretrain.values())) if pretrain else []
    if pretrain and first:
        n = _steps(len(first), s)
        say(f"pre-training the {what}: {len(first)} rows, {n} steps of {s.batch_size}")
        notes.append(f"{train(pretrain, n, 'pretrain').global_step} pre-training steps")
    rows = len(next(iter(data.values())))
    total = _steps(rows, s)
    if total == 0:
        notes.append("0 steps (max_steps=0): the starting model, untrained")
        return "; ".join(notes)
    say(
        f"fine-tuning the {what}: {rows} rows, at most {total} steps of {s.batch_size}, "
        f"max length {s.max_length}, validation every {max(1, total // 5)} steps"
    )
    stop = transformers.EarlyStoppingCallback(early_stopping_patience=PATIENCE)
    state = train(data, total, "checkpoints", evaluator=evaluator, callbacks=[stop])
    best = state.best_metric
    notes.append(
        f"{state.global_step} steps; best validation AUC {'n/a' if best is None else f'{best:.3f}'}"
    )
    return "; ".join(notes)


def _triplets(pairs: Sequence[TextPair]) -> dict[str, list[Any]]:
    by_group: dict[str, list[TextPair]] = {}
    for p in pairs:
        by_group.setdefault(p.group, []).append(p)
    out: dict[str, list[Any]] = {"anchor": [], "positive": [], "negative": []}
    for items in by_group.values():
        pos = [p for p in items if p.kind == "relevant"]
        neg = [p for p in items if p.kind != "relevant"][:NEGATIVES_PER_POSITIVE]
        for p in pos:
            for n in neg:
                out["anchor"].append(p.query)
                out["positive"].append(p.text)
                out["negative"].append(n.text)
    return out


def fine_tune_bi_encoder(
    base: str,
    out: Path,
    pairs: Sequence[TextPair],
    validation: Validation,
    settings: FineTuning,
    pretrain: Sequence[TextPair],
    say: Say,
) -> tuple[Path, str]:
    """Fine-tune the SentenceTransformer ``base`` on triplets (each positive with at most
    ``NEGATIVES_PER_POSITIVE`` negatives of its query) into ``out``; the folder, a note."""
    st = require("sentence_transformers", "train")
    losses, training_args = _st("losses"), _st("training_args")
    data = _triplets(pairs)
    if not data["anchor"]:
        raise EvalSetError("no (query, relevant, negative) triplet to fine-tune a bi-encoder on")
    require("transformers", "train").set_seed(settings.seed)
    model = load_encoder(base, settings.device)
    model.max_seq_length = settings.max_length

    def trainer(**kw: Any) -> Any:
        return st.SentenceTransformerTrainer(
            model=model, loss=losses.MultipleNegativesRankingLoss(model), **kw
        )

    note = _run(
        "bi-encoder",
        trainer,
        st.SentenceTransformerTrainingArguments,
        data,
        _triplets(pretrain) if pretrain else None,
        _evaluator(validation, lambda m: bi_encoder_scores(m, validation), say),
        out.parent / "bi-encoder-work",
        settings,
        say,
        batch_sampler=training_args.BatchSamplers.NO_DUPLICATES,
    )
    model.save(str(out))
    return out, note


def _pairs(pairs: Sequence[TextPair]) -> dict[str, list[Any]]:
    return {
        "query": [p.query for p in pairs],
        "passage": [p.text for p in pairs],
        "label": [float(p.target) for p in pairs],
    }


def fine_tune_cross_encoder(
    start: str,
    out: Path,
    pairs: Sequence[TextPair],
    validation: Validation,
    settings: FineTuning,
    pretrain: Sequence[TextPair],
    say: Say,
    *,
    new_head: bool,
) -> tuple[Path, str]:
    """Fine-tune the cross-encoder ``start`` (with ``new_head``, a new one from the
    SentenceTransformer ``start``) on every pair, the positives weighted by negatives /
    positives, into ``out`` with the ``Identity`` activation (logits); the folder, a note."""
    st = require("sentence_transformers", "train")
    ce = getattr(st, "cross_encoder", None)
    if ce is None or not hasattr(ce, "CrossEncoderTrainer"):
        raise MissingDependencyError(
            "fine-tuning a cross-encoder needs sentence-transformers >= 4 (its "
            'CrossEncoderTrainer); pip install -U "sentence-transformers>=4"'
        )
    import torch

    n_pos = sum(p.target for p in pairs)
    n_neg = sum(1.0 - p.target for p in pairs)
    if n_pos <= 0 or n_neg <= 0:
        raise EvalSetError("fine-tuning a cross-encoder needs positive and negative pairs")
    require("transformers", "train").set_seed(settings.seed)  # the new head's draw
    model = load_cross_encoder(
        start,
        settings.device,
        num_labels=1 if new_head else None,
        max_length=settings.max_length,
    )
    losses = importlib.import_module("sentence_transformers.cross_encoder.losses")

    def trainer(**kw: Any) -> Any:
        loss = losses.BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(n_neg / n_pos))
        return ce.CrossEncoderTrainer(model=model, loss=loss, **kw)

    what = "new cross-encoder (bi-encoder weights, new head)" if new_head else "cross-encoder"
    note = _run(
        what,
        trainer,
        ce.CrossEncoderTrainingArguments,
        _pairs(pairs),
        _pairs(pretrain) if pretrain else None,
        _evaluator(validation, lambda m: cross_encoder_scores(m, validation), say),
        out.parent / (out.name + "-work"),
        settings,
        say,
    )
    model.activation_fn = torch.nn.Identity()
    model.save(str(out))
    return out, note
