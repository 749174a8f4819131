"""What every backend implements: an abstention estimator, and a text generator for the
relevance judge."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Pair:
    """One question with one passage: what the model reads for one estimate."""

    question: str
    passage: str


@runtime_checkable
class AbstentionEstimator(Protocol):
    """Estimates p(NO-RESPONSE | question, passage) for (question, passage) pairs.

    ``estimate`` yields ``(index into pairs, probability)`` as results are computed, in
    any order, so the caller can save each one at once (an interrupted run keeps every
    result it was handed). ``model_id`` names the model in the output files;
    ``settings()`` holds everything that changes the results (backend, model, prompt,
    options), so a re-run reuses saved results only when they match.
    """

    @property
    def model_id(self) -> str:
        """The model's name in the output files."""

    def settings(self) -> Mapping[str, object]:
        """What changes the results: JSON-serialisable values."""

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        """``(index, p)`` for every pair, as each is computed."""


@runtime_checkable
class TextGenerator(Protocol):
    """Answers prompts with text (greedy or near it): the relevance judge's model."""

    @property
    def model_id(self) -> str:
        """The model's name in the output files."""

    def settings(self) -> Mapping[str, object]:
        """What changes the replies: JSON-serialisable values."""

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """``(index, reply)`` for every prompt, as each is computed."""
