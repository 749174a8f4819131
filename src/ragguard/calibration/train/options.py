"""The option objects of ``RerankerTrainer``: the negatives of each training query, and
how each neural candidate trains."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragguard._fields import is_real
from ragguard.errors import ConfigError

#: The kinds of candidate a fit can train and write.
WRITABLE = ("fusion", "bi-encoder", "cross-encoder", "new-cross-encoder")


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Negatives:
    """The negatives of each training query (and of each pre-training question).

    Attributes:
        same_query: unlabelled candidates of the query.
        same_title: passages sharing a title with a relevant one.
        random: passages of other queries.
        pretrain: negatives per pre-training question.
    """

    same_query: int = 4
    same_title: int = 2
    random: int = 2
    pretrain: int = 3

    def __post_init__(self) -> None:
        for name, value in (
            ("same_query_negatives", self.same_query),
            ("same_title_negatives", self.same_title),
            ("random_negatives", self.random),
            ("pretrain_negatives", self.pretrain),
        ):
            _int_at_least(name, value, 0)


@dataclass(frozen=True, kw_only=True)
class Training:
    """How each neural candidate trains: at most ``epochs`` epochs and ``max_steps`` steps
    (``0`` trains nothing) of ``batch_size`` pairs at ``max_length`` tokens. The
    defaults finish the default candidates in minutes on 2 CPU cores for a few hundred
    queries.

    Attributes:
        epochs: passes over the pairs.
        max_steps: the most steps.
        batch_size: pairs (or triplets) per step.
        max_length: tokens per text (bi-encoder) or per pair (cross-encoder).
        learning_rate: the optimiser's learning rate.
        device: torch device for the models (``cpu``, ``cuda``); ``None`` picks one.
        show_progress_bar: show the trainer's progress bar.
    """

    epochs: int = 1
    max_steps: int = 200
    batch_size: int = 16
    max_length: int = 128
    learning_rate: float = 2e-5
    device: str | None = None
    show_progress_bar: bool = False

    def __post_init__(self) -> None:
        for name, value, low in (
            ("max_steps", self.max_steps, 0),
            ("epochs", self.epochs, 1),
            ("batch_size", self.batch_size, 1),
            ("max_length", self.max_length, 8),
        ):
            _int_at_least(name, value, low)
        if not (is_real(self.learning_rate) and 0.0 < self.learning_rate < math.inf):
            raise ConfigError(f"learning_rate must be a number > 0, got {self.learning_rate!r}")


def check_kinds(kinds: Sequence[str] | None, base_kind: str) -> tuple[str, ...]:
    if kinds is None:
        return ("fusion", "cross-encoder" if base_kind == "cross-encoder" else "bi-encoder")
    unknown = [k for k in kinds if k not in WRITABLE]
    if unknown or not kinds:
        raise ConfigError(f"kinds must be among {', '.join(WRITABLE)}, got {list(kinds)!r}")
    if "cross-encoder" in kinds and base_kind != "cross-encoder":
        raise ConfigError(
            "kind cross-encoder fine-tunes a cross-encoder given as base (--base FOLDER); "
            "this base is a bi-encoder (for a cross-encoder from its weights: "
            "new-cross-encoder)"
        )
    return tuple(dict.fromkeys(kinds))
