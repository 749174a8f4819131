"""Fine-tune a SentenceTransformer bi-encoder on (query, relevant, hard negative)
triplets with MultipleNegativesRankingLoss, stopping early on validation AUC.

Triplets: each relevant passage of a training query with each of its negatives, hard
ones first (labelled distractors, judged not relevant, same-query candidates, then
random), at most ``4`` negatives per positive; the other passages of a batch are more
negatives (in-batch). The validation AUC (relevant vs distractor where validation has
distractors, else relevant vs other) is measured every ``eval_steps`` and the best
checkpoint is kept; training stops after two evaluations without a gain. Defaults
(``max_length=128``, ``batch_size=16``, at most ``max_steps=200`` steps) finish in a few
minutes for all-MiniLM-L6-v2 on 2 CPU cores.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragguard._optional import require
from ragguard.errors import EvalSetError
from ragguard.trained import load_encoder

__all__ = ["fine_tune_bi_encoder"]

NEGATIVES_PER_POSITIVE = 4


def _st(name: str) -> Any:
    """A sentence-transformers submodule by its v6 path, else its older one."""
    import importlib

    try:
        return importlib.import_module(f"sentence_transformers.sentence_transformer.{name}")
    except ImportError:
        return importlib.import_module(f"sentence_transformers.{name}")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _triplets(
    pairs: Sequence[Any], query: Callable[[str], str], text: Callable[[str, str], str]
) -> dict[str, list[str]]:
    by_query: dict[str, list[Any]] = {}
    for p in pairs:
        by_query.setdefault(p.qid, []).append(p)
    anchors: list[str] = []
    positives: list[str] = []
    negatives: list[str] = []
    for qid, items in by_query.items():
        pos = [p for p in items if p.kind == "relevant"]
        neg = [p for p in items if p.kind != "relevant"][:NEGATIVES_PER_POSITIVE]
        for p in pos:
            for n in neg:
                anchors.append(query(qid))
                positives.append(text(qid, p.doc))
                negatives.append(text(qid, n.doc))
    return {"anchor": anchors, "positive": positives, "negative": negatives}


def fine_tune_bi_encoder(
    base: str,
    out: Path,
    pairs: Sequence[Any],
    val: Sequence[Any],
    query: Callable[[str], str],
    text: Callable[[str, str], str],
    *,
    seed: int,
    epochs: int,
    max_steps: int,
    batch_size: int,
    max_length: int,
    learning_rate: float,
    device: str | None,
    show_progress_bar: bool,
    say: Callable[[str], None],
) -> tuple[Path, str]:
    """Fine-tune ``base`` and save the best checkpoint to ``out``; returns the folder and
    a note (steps run, best validation AUC).

    Raises:
        MissingDependencyError: sentence-transformers or datasets is missing.
        EvalSetError: no triplet can be formed.
    """
    st = require("sentence_transformers", "train")
    evaluation, losses, training_args = _st("evaluation"), _st("losses"), _st("training_args")
    datasets = require("datasets", "train")
    transformers = require("transformers", "train")
    from ragguard.calibration.train import _aucs

    data = _triplets(pairs, query, text)
    if not data["anchor"]:
        raise EvalSetError("no (query, relevant, negative) triplet to fine-tune a bi-encoder on")
    model = load_encoder(base, device)
    model.max_seq_length = max_length
    train_set = datasets.Dataset.from_dict(data)
    use_distractors = any(v.distractors for v in val)
    metric = "auc_distractor" if use_distractors else "auc_other"

    class AUC(evaluation.SentenceEvaluator):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.primary_metric = "auc"
            self.greater_is_better = True

        def __call__(
            self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            scores = []
            for v in val:
                q = np.asarray(model.encode([query(v.qid)], normalize_embeddings=True))[0]
                d = np.asarray(
                    model.encode([text(v.qid, x) for x in v.docs], normalize_embeddings=True)
                )
                scores.append(d @ q)
            dis, oth = _aucs(val, scores)
            value = dis if metric == "auc_distractor" else oth
            return {"auc": 0.0 if math.isnan(value) else float(value)}

    steps_per_epoch = max(1, math.ceil(len(train_set) / batch_size))
    total = min(max_steps, steps_per_epoch * epochs)
    eval_steps = max(1, total // 5)
    os.environ.setdefault("WANDB_DISABLED", "true")
    args = st.SentenceTransformerTrainingArguments(
        output_dir=str(out.parent / "checkpoints"),
        num_train_epochs=epochs,
        max_steps=total,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_steps=max(0, total // 10),
        seed=seed,
        data_seed=seed,
        eval_strategy="steps",
        eval_steps=eval_steps,
        save_strategy="steps",
        save_steps=eval_steps,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_auc",
        greater_is_better=True,
        logging_steps=eval_steps,
        report_to="none",
        disable_tqdm=not show_progress_bar,
        use_cpu=device == "cpu",
        dataloader_pin_memory=device != "cpu" and _has_cuda(),
        batch_sampler=training_args.BatchSamplers.NO_DUPLICATES,
    )
    say(
        f"fine-tuning the bi-encoder: {len(train_set)} triplets, {total} steps of "
        f"{batch_size}, max length {max_length}, validation every {eval_steps} steps"
    )
    trainer = st.SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=train_set,
        loss=losses.MultipleNegativesRankingLoss(model),
        evaluator=AUC(),
        callbacks=[transformers.EarlyStoppingCallback(early_stopping_patience=2)],
    )
    trainer.train()
    model.save(str(out))
    best = trainer.state.best_metric
    note = f"{trainer.state.global_step} steps; best validation {metric} {best}"
    return out, note
