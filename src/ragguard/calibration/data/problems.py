"""Problems found while loading evaluation data: where, what, and what was done about it."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from ragguard.errors import EvalSetError

logger = logging.getLogger("ragguard.calibration.data.evalset")


class ProblemKind(StrEnum):
    """Problems a loader counts and reports instead of failing (``strict=False``)."""

    RUN_QUERY_WITHOUT_LABELS = "run_query_without_labels"
    """A run has candidates for a query with no labels: the query is skipped in that run."""
    LABELS_WITHOUT_RUN = "labels_without_run"
    """A labelled query has no candidates in a run: it counts with an empty list."""
    DUPLICATE_CANDIDATE = "duplicate_candidate"
    """A document appears twice in one query of a run: the first occurrence is kept."""
    DUPLICATE_LABEL = "duplicate_label"
    """A (query, document) label is repeated with the same grade: the repeat is ignored."""
    INVALID_SCORE = "invalid_score"
    """A candidate's score is missing or not finite: it is ranked after the scored ones."""
    UNKNOWN_DOCUMENT = "unknown_document"
    """A BEIR label or run names a document missing from corpus.jsonl: it is kept."""
    UNKNOWN_QUERY = "unknown_query"
    """A BEIR label names a query missing from queries.jsonl: it is kept, without text."""
    UNMATCHED_CONTEXT = "unmatched_context"
    """A RAGAS reference context matches no corpus passage by text: it is left out of the
    labels (a query none of whose contexts matches is left out)."""
    DUPLICATE_TEXT = "duplicate_text"
    """Passages of a generated eval set's corpus have the same text (whitespace aside): a
    label on one is a label on each."""
    LONG_PASSAGE = "long_passage"
    """A passage of a generated eval set has over 100,000 characters: it is kept."""


ACTIONS: dict[ProblemKind, str] = {
    ProblemKind.RUN_QUERY_WITHOUT_LABELS: "skipped",
    ProblemKind.LABELS_WITHOUT_RUN: "counted with no candidates",
    ProblemKind.DUPLICATE_CANDIDATE: "kept the first occurrence",
    ProblemKind.DUPLICATE_LABEL: "ignored the repeat",
    ProblemKind.INVALID_SCORE: "ranked after the scored candidates",
    ProblemKind.UNKNOWN_DOCUMENT: "kept",
    ProblemKind.UNKNOWN_QUERY: "kept without query text",
    ProblemKind.UNMATCHED_CONTEXT: "left out of the labels",
    ProblemKind.DUPLICATE_TEXT: "labelled alike",
    ProblemKind.LONG_PASSAGE: "kept",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem: its kind, a message, and where it is (each part ``None`` if unknown)."""

    kind: ProblemKind
    message: str
    path: str | None = None
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        return str(EvalSetError(self.message, path=self.path, line=self.line, field=self.field))


@dataclass
class LoadReport:
    """What a loader found and did (``problems``, in the order found). Nothing is
    skipped without being counted here."""

    problems: list[Problem] = field(default_factory=list)

    def counts(self) -> dict[ProblemKind, int]:
        return dict(Counter(p.kind for p in self.problems))

    @property
    def skipped(self) -> int:
        """Number of run queries skipped (they had no labels)."""
        return self.counts().get(ProblemKind.RUN_QUERY_WITHOUT_LABELS, 0)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def summary(self, examples: int = 3) -> str:
        """A few lines: each kind of problem, how many, what was done, first examples."""
        if not self.problems:
            return "no problems"
        lines = []
        for kind, n in self.counts().items():
            lines.append(f"{n} x {kind.value} ({ACTIONS[kind]})")
            shown = [p for p in self.problems if p.kind is kind][:examples]
            lines.extend(f"    {p}" for p in shown)
            if n > len(shown):
                lines.append(f"    ... and {n - len(shown)} more")
        return "\n".join(lines)


class Reporter:
    """Collects problems, or raises the first one when ``strict``."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.report = LoadReport()

    def __call__(
        self,
        kind: ProblemKind,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        if self.strict:
            raise EvalSetError(
                f"{message} ({kind.value}; strict=False counts it instead: {ACTIONS[kind]})",
                path=path,
                line=line,
                field=field,
            )
        self.report.problems.append(Problem(kind, message, path, line, field))

    def log(self, what: str) -> None:
        """Log the summary at WARNING when there were problems."""
        if self.report:
            logger.warning(
                "%d problems while loading %s (counted, not fatal):\n%s",
                len(self.report.problems),
                what,
                self.report.summary(),
            )
