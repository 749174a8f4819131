"""Distractor rate, harm and safety bands against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragguard.calibration import UtilityRules, evaluate
from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.metrics import (
    SafetyBand,
    SafetyBands,
    distractor_harm,
    distractor_rate,
    safety_band,
)

TOL = 1e-12


def arrays_with(contexts: list[list[float]]) -> EvalArrays:
    qids = [f"q{i}" for i in range(len(contexts))]
    cands = [{f"d{j}": math.nan for j in range(len(u))} for u in contexts]
    utils = [{f"d{j}": x for j, x in enumerate(u)} for u in contexts]
    return build_arrays(qids, cands, [{} for _ in qids], score_kind=None, utilities=utils)


def test_rate_and_harm_by_hand() -> None:
    arrays = arrays_with([[1.0, -0.5, 0.0, -1.0, 0.5], [0.2, 0.3], [], [-0.2]])
    assert distractor_rate(arrays).tolist() == pytest.approx([2 / 5, 0.0, 0.0, 1.0], abs=TOL)
    assert distractor_harm(arrays).tolist() == pytest.approx([1.5, 0.0, 0.0, 0.2], abs=TOL)
    # @k: the first k passages; the rate divides by the passages actually there
    assert distractor_rate(arrays, 2).tolist() == pytest.approx([1 / 2, 0.0, 0.0, 1.0])
    assert distractor_harm(arrays, 3).tolist() == pytest.approx([0.5, 0.0, 0.0, 0.2])
    # harm is a magnitude: never -0.0
    assert math.copysign(1.0, distractor_harm(arrays)[1]) == 1.0
    # a policy cut keeps only the first passages
    cut = np.array([1, 2, 0, 0])
    assert distractor_rate(arrays, cut=cut).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_practitioner_example_from_labels() -> None:
    # relevant, partial, hard negative (rank 3), relevant, irrelevant: one distractor
    arrays = build_arrays(
        ["q"],
        [{"d1": 0.95, "d2": 0.9, "d3": 0.8, "d4": 0.75, "d5": 0.1}],
        [{"d1": 2, "d2": 1, "d4": 2}],
        rules=UtilityRules(relevant_grade=2, partial_grade=1),
    )
    assert evaluate(arrays, metrics=["distractor_rate@5", "distractor_harm@5"]) == {
        "distractor_rate@5": pytest.approx(0.2),
        "distractor_harm@5": pytest.approx(0.5),
    }


def test_safety_bands_default_and_custom() -> None:
    # the write-up's profile table: 0% SAFE, 49% RISKY, 62% DANGEROUS
    assert safety_band(0.0) is SafetyBand.SAFE
    assert safety_band(0.49) is SafetyBand.RISKY
    assert safety_band(0.62) is SafetyBand.DANGEROUS
    # boundaries: risky and dangerous are inclusive lower bounds
    assert safety_band(0.1999) is SafetyBand.SAFE
    assert safety_band(0.2) is SafetyBand.RISKY
    assert safety_band(0.5) is SafetyBand.DANGEROUS
    strict = SafetyBands(risky=0.05, dangerous=0.2)
    assert safety_band(0.1, strict) is SafetyBand.RISKY
    assert safety_band(0.25, strict) is SafetyBand.DANGEROUS
    assert safety_band(np.float64(0.01), strict) is SafetyBand.SAFE


def test_safety_band_rejects_bad_input() -> None:
    for rate in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="distractor rate"):
            safety_band(rate)
    for risky, dangerous in ((0.0, 0.5), (0.6, 0.5), (0.2, 1.5)):
        with pytest.raises(ValueError, match="safety bands"):
            SafetyBands(risky, dangerous)
