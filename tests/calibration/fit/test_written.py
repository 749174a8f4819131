"""The score reference a calibrated config holds (``score_reference``): what a guard built
from that config reads on the calibration queries' own candidate lists, quantile for
quantile, and what a drift watch over those lists finds (nothing)."""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path

import pytest

from ragguard import Candidate, ContextGuard, DriftWarning
from ragguard.calibration import Answerability, calibrate, load_inputs
from ragguard.calibration.data.evalset import EvalSet
from ragguard.drift import Quantiles

ROOT = Path(__file__).resolve().parents[3]


def candidate_lists(es: EvalSet, run: str) -> dict[str, list[Candidate]]:
    return {
        q: [
            Candidate(d, score=None if math.isnan(s) else s)
            for d, s in es.runs[run].candidates.get(q, {}).items()
        ]
        for q in es.qids
    }


@pytest.mark.parametrize(
    ("inputs", "options"),
    [
        ("examples/notes", {}),
        (
            "examples/ramdocs/unanswerable/evalset.jsonl",
            {"answerability": Answerability(max_false_abstain=0.1)},
        ),
    ],
    ids=["notes", "ramdocs-min-evidence"],
)
def test_the_reference_is_what_the_guard_reads_on_the_calibration_queries(
    inputs: str, options: dict[str, object]
) -> None:
    es = load_inputs(ROOT / inputs)
    result = calibrate(es, **options)  # type: ignore[arg-type]
    assert ("answerability" in options) == (result.config().min_evidence is not None)
    config = result.config()
    ref = config.reference
    assert ref is not None
    guard = ContextGuard(config.model_copy(update={"monitor": True}))
    lists = candidate_lists(es, result.recommended.name)
    tops, cuts, kept = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the guard's score warnings, not under test
        for q, cands in lists.items():
            selection = guard.select(q, cands)
            # by hand: similarity scores are their own normalised scores; the cut is the
            # lowest kept one (no stage after the cut here)
            scores = [c.score for c in cands if c.score is not None]
            tops.append(max(scores) if scores else math.nan)
            cuts.append(min(c.score for c in selection.kept) if selection.kept else math.nan)
            kept.append(len(selection.kept))
    assert ref.top == Quantiles.of(tops) and ref.top.n == len(lists)
    assert ref.cut == Quantiles.of(cuts) and ref.kept == Quantiles.of(kept)
    if "answerability" in options:  # abstaining queries have no score at the cut
        assert ref.cut is not None and ref.cut.n == sum(k > 0 for k in kept) < ref.top.n
    # the calibration queries, resampled, never alarm
    rng = random.Random(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", DriftWarning)
        for _ in range(500):
            q = rng.choice(es.qids)
            guard.select(q, lists[q])
    assert not guard.drift().alarm
