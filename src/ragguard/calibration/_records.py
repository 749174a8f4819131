"""The records of an eval set: :class:`Query`, :class:`Labels` and :class:`Run`.

They sit below every reader (:mod:`ragguard.calibration._readers`, the column-wise
readers, :mod:`ragguard.calibration._tables`) and below
:mod:`ragguard.calibration.evalset`, which builds an
:class:`~ragguard.calibration.evalset.EvalSet` of them; users import them from
:mod:`ragguard.calibration` (or :mod:`ragguard.calibration.evalset`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragguard.scores import ScoreKind

__all__ = ["Labels", "Query", "Run"]


@dataclass(frozen=True, slots=True)
class Query:
    """A query of the eval set: its id, text and reference answers."""

    id: str
    text: str | None = None
    answers: tuple[str, ...] = ()


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
