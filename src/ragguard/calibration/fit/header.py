"""How every output introduces a calibration (``Header``):
the eval set, the profile, the objective and constraints, the split, where the data
came from, and what silver labels mean for the figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.risk import EVIDENCE
from ragguard.calibration.fit.sweep import (
    COVERAGE,
    DEFAULT_MIN_COVERAGE,
    Constraint,
    I,
    SweepGrid,
    lower_is_better,
)
from ragguard.profiles import Profile

SMALL_SET = 50
"""Fewer labelled queries than this get a warning with the held-out interval's width."""


@dataclass(frozen=True, eq=False)
class Header:
    """The calibration as every output introduces it (``ResultView.header``): the eval set, the
    profile, the objective and constraints, the split, and where the data came from."""

    evalset: EvalSet = field(repr=False)
    profile: Profile
    objective: str
    constraints: tuple[Constraint, ...]
    runs: tuple[str, ...]
    qids: tuple[str, ...]
    calibration_rows: I = field(repr=False)
    heldout_rows: I = field(repr=False)
    holdout: float
    seed: int
    created: datetime
    data_sha256: str
    target: float | None
    confidence: float
    on_worse: str
    caps_fixed: bool
    grid: SweepGrid

    def objective_text(self, constraints: bool = True) -> str:
        """The objective in words: ``maximise mean udcg subject to evidence_coverage>=0.9``, or the
        guarantee that replaces it (without ``subject to`` when not ``constraints``)."""
        cons = " and ".join(str(c) for c in self.constraints) if constraints else ""
        if self.target is not None:
            text = (
                f"the smallest context whose mean evidence recall on new queries is >= "
                f"{self.target:g} with {self.confidence:.0%} confidence (Learn-then-Test; "
                f"{self.objective} reported, not optimised)"
            )
            return text + (f", subject to {cons}" if cons else "")
        goal = "minimise" if lower_is_better(self.objective) else "maximise"
        return f"{goal} mean {self.objective}" + (f" subject to {cons}" if cons else "")

    def query_counts(self) -> dict[str, int]:
        """The queries in all, to choose on, held out, and unanswerable."""
        return {
            "total": len(self.qids),
            "calibration": int(self.calibration_rows.size),
            "heldout": int(self.heldout_rows.size),
            "unanswerable": len(self.evalset.unanswerable),
        }

    @property
    def evidence(self) -> str:
        """The evidence metric each run's line shows: the coverage the constraints ask
        for (the default floor), else evidence recall."""
        asked = (c.metric for c in self.constraints if c.metric.startswith(COVERAGE))
        return next(asked, EVIDENCE)

    @property
    def silver(self) -> bool:
        """Whether the labels were generated, not judged (``EvalSet.silver``);
        ``silver_note`` says what that means for the figures."""
        return self.evalset.silver

    def silver_note(self, full: bool = False) -> str:
        """What silver labels cannot see and what the evidence constraints mean under
        them (empty for judged labels): the console's line, or with ``full`` the report's
        paragraph (``--min-recall`` too, and the queries with several relevant passages)."""
        if not self.silver:
            return ""
        reads = [
            (c, f"the source passage kept for {c.bound:.0%} of the queries")
            for c in self.constraints
            if c.metric in (COVERAGE, EVIDENCE) and c.op == ">="
        ]
        if not full:
            return (
                "generated: other passages that answer a question count as not relevant, so "
                "evidence recall, precision and distractor figures are pessimistic"
                + "".join(f"; {c} means {r}" for c, r in reads)
            )
        default = Constraint(COVERAGE, ">=", DEFAULT_MIN_COVERAGE)
        several = sum(
            sum(g >= 1 for g in self.evalset.labels[q].grades.values()) > 1 for q in self.qids
        )
        return (
            "The labels were generated, not judged: each question's source passages are its "
            "only relevant ones, and passages that also answer it count as not relevant. "
            "Evidence recall, precision and the distractor figures are therefore pessimistic, "
            "and the choice leans to short contexts. "
            + "".join(
                f"`{c}` here means: {r}"
                + (
                    " (the default floor, the right one for silver labels). "
                    if c == default
                    else ". "
                )
                for c, r in reads
            )
            + "With one source passage, a query's evidence recall is its coverage (0 or 1), "
            "so `--min-recall X` asks the same as `evidence_coverage>=X`."
            + (
                f" {several} of the {len(self.qids)} queries "
                f"{'has' if several == 1 else 'have'} several relevant passages "
                "(a multi-hop sample, or passages with the same text): coverage counts such a "
                "query covered when one of them is kept (`--evidence-needed N` asks for N), "
                "evidence recall by the share kept."
                if several
                else ""
            )
        )
