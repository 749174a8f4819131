"""The records of an eval set (``Query``, ``Labels``, ``Run``) and the grade rule, below
every reader; users import them from ``ragguard.calibration``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragguard.scores import ScoreKind


@dataclass(frozen=True, slots=True)
class Query:
    """A query of the eval set: its id, text, reference answers and the relevant
    passages it needs to be answered (``None``: not stated, one; see
    [`evidence_coverage`][ragguard.calibration.metrics.evidence_coverage])."""

    id: str
    text: str | None = None
    answers: tuple[str, ...] = ()
    needs: int | None = None


@dataclass(frozen=True, slots=True)
class Labels:
    """The labels of one query.

    Attributes:
        grades: judged documents -> grade (0 for judged not relevant and for known
            distractors).
        distractors: known distractors.
        utilities: documents -> utility given in the data, in [-1, 1].
        no_response: documents -> abstention probability, in [0, 1].
        n_relevant: stated number of relevant documents, or ``None``.
    """

    grades: Mapping[str, int] = field(default_factory=dict)
    distractors: frozenset[str] = frozenset()
    utilities: Mapping[str, float] = field(default_factory=dict)
    no_response: Mapping[str, float] = field(default_factory=dict)
    n_relevant: int | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One retrieval run: per query, candidate id -> raw score, in the run's order.

    Attributes:
        name: the run's name (a retrieval profile, a model, a file stem).
        candidates: query id -> {document id: raw score}; NaN for a missing score.
        score_kind: what the scores are; ``None`` when the run has none (its order is
            the ranking).
        source: the file it came from, if any.
    """

    name: str
    candidates: Mapping[str, Mapping[str, float]]
    score_kind: ScoreKind | None = ScoreKind.SIMILARITY
    source: str | None = None


# --------------------------------------------------------------------------- grades

MIN_GRADE, MAX_GRADE = 1, 5
"""Grades of relevant documents; 0 is judged not relevant. TREC and BEIR qrels use the
same scale, plus DISTRACTOR_GRADE for a known distractor (JSONL lists those under
``distractors``)."""
DISTRACTOR_GRADE = -1
"""A qrels grade of -1 marks a known distractor: judged not relevant (grade 0) and listed
in ``Labels.distractors``. Grades below -1 (the TREC Web tracks' -2 for junk) are read
as judged not relevant."""


def bad_grade(grade: Any) -> bool:
    """Whether a number cannot be a qrels grade: the one rule for grades read from files,
    tables and dicts. A grade is a whole number up to MAX_GRADE (1-5 relevant, 0 judged
    not relevant, DISTRACTOR_GRADE a known distractor, below it judged not relevant); a
    whole float (``1.0``, as a typed table column holds it) is one, ``2.5``, ``7`` and
    NaN are not. (In a text file a grade is read with ``int``, so ``1.0`` is not an
    integer there.)"""
    if isinstance(grade, int):
        return grade > MAX_GRADE
    value = float(grade)
    return not (value <= MAX_GRADE and value.is_integer())


def grade_error(grade: Any, qid: str, doc: str) -> str:
    """The message for a grade ``bad_grade`` rejects, naming the query and document."""
    value = grade if isinstance(grade, int) else float(grade)
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return (
        f"must be an integer up to {MAX_GRADE} (1-{MAX_GRADE} relevant, 0 not relevant, "
        f"{DISTRACTOR_GRADE} a known distractor), got {text} (query {qid!r}, document {doc!r})"
    )
