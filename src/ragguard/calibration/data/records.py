"""The records of an eval set (``Query``, ``Labels``, ``Run``) and the grade rule, below
every reader; users import them from ``ragguard.calibration``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragguard.scores import ScoreKind


@dataclass(frozen=True, slots=True)
class Query:
    """A query: its id, text, reference answers, the relevant passages it needs
    (``None``: not stated, one; see ``evidence_coverage``) and its domain (``None``: none
    stated; what ``calibrate --by domain`` groups by)."""

    id: str
    text: str | None = None
    answers: tuple[str, ...] = ()
    needs: int | None = None
    domain: str | None = None


def domain_problem(value: object) -> str | None:
    """Why ``value`` cannot name a domain (``None`` when it can): the one rule for the
    JSONL field, a ``domains.tsv`` line and a ``metadata`` key."""
    if not isinstance(value, str):
        return f"a domain name must be a string, got {type(value).__name__} {value!r}"
    if not value.strip():
        return f"a domain name must not be empty, got {value!r}; name the domain or drop the field"
    return None


@dataclass(frozen=True, slots=True)
class Labels:
    """The labels of one query: grades (0 for judged not relevant and known distractors),
    known distractors, given utilities in [-1, 1], abstention probabilities in [0, 1], and
    the stated number of relevant documents."""

    grades: Mapping[str, int] = field(default_factory=dict)
    distractors: frozenset[str] = frozenset()
    utilities: Mapping[str, float] = field(default_factory=dict)
    no_response: Mapping[str, float] = field(default_factory=dict)
    n_relevant: int | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One retrieval run: per query, candidate id -> raw score (NaN: none) in the run's
    order; ``score_kind`` ``None`` when it has none (its order is the ranking)."""

    name: str
    candidates: Mapping[str, Mapping[str, float]]
    score_kind: ScoreKind | None = ScoreKind.SIMILARITY
    source: str | None = None


MIN_GRADE, MAX_GRADE = 1, 5
"""Grades of relevant documents; 0 is judged not relevant. TREC and BEIR qrels use the
same scale, plus DISTRACTOR_GRADE for a known distractor (JSONL lists those under
``distractors``)."""
DISTRACTOR_GRADE = -1
"""A qrels grade of -1 marks a known distractor: judged not relevant (grade 0) and listed
in ``Labels.distractors``. Grades below -1 (the TREC Web tracks' -2 for junk) are read
as judged not relevant."""


def bad_grade(grade: Any) -> bool:
    """Whether a number cannot be a qrels grade: the one rule for files, tables and
    dicts. A grade is a whole number up to MAX_GRADE; a whole float (``1.0``, in a typed
    table column) is one, ``2.5``, ``7`` and NaN are not."""
    if isinstance(grade, int):
        return grade > MAX_GRADE
    value = float(grade)
    return not (value <= MAX_GRADE and value.is_integer())


def grade_error(grade: Any, qid: str, doc: str) -> str:
    value = grade if isinstance(grade, int) else float(grade)
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return (
        f"must be an integer up to {MAX_GRADE} (1-{MAX_GRADE} relevant, 0 not relevant, "
        f"{DISTRACTOR_GRADE} a known distractor), got {text} (query {qid!r}, document {doc!r})"
    )
