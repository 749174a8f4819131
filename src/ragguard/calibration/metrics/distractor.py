r"""Distractor statistics of the context: how much of it harms, and how badly.

A **distractor** is a passage with negative utility :math:`u_i < 0` (a known
distractor, a hard negative under the profile's rules, or an irrelevant passage the LLM
does not abstain on; see ``ragguard.calibration.data.utility``). The context of a query is
its first :math:`m = \min(k, n)` ranked candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike

from ragguard._fields import is_real
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics._common import F64, divide, window
from ragguard.errors import ConfigError


def distractor_rate(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Share of the context's passages that are distractors.

    .. math:: \mathrm{DR}@k = \frac{1}{m}\sum_{i=1}^{m} [u_i < 0],\quad m = \min(k, n)

    Edge cases: divides by the passages actually in the context, not by k (a short
    clean list is not diluted by empty slots); an empty context scores 0.
    """
    w = window(arrays, k, cut)
    bad = (w.take(arrays.utility) < 0).sum(axis=1, dtype=np.float64)
    return divide(bad, w.length.astype(np.float64))


def distractor_harm(
    arrays: EvalArrays, k: int | None = None, *, cut: ArrayLike | None = None
) -> F64:
    r"""Total distractor harm in the context: the magnitude of its negative utility.

    .. math:: \mathrm{Harm}_u@k = -\sum_{i=1}^{m} \min(u_i, 0)

    No position discount (the LLM reads every passage). Edge cases: 0 for a context
    without distractors or an empty one; at most m.
    """
    w = window(arrays, k, cut)
    u = w.take(arrays.utility)
    out: F64 = -np.minimum(u, 0.0).sum(axis=1) + 0.0  # + 0.0 turns -0.0 into 0.0
    return out


class SafetyBand(StrEnum):
    """How risky a context is, by its distractor rate (see ``SafetyBands``)."""

    SAFE = "SAFE"
    RISKY = "RISKY"
    DANGEROUS = "DANGEROUS"


@dataclass(frozen=True, slots=True)
class SafetyBands:
    """Distractor-rate thresholds: ``rate < risky`` is SAFE, ``risky <= rate <
    dangerous`` RISKY, ``rate >= dangerous`` DANGEROUS. The defaults reproduce the
    practitioner write-up's table (SAFE at 0%, RISKY at 49%, DANGEROUS at 62%)."""

    risky: float = 0.2
    dangerous: float = 0.5

    def __post_init__(self) -> None:
        numbers = is_real(self.risky) and is_real(self.dangerous)
        if not (numbers and 0.0 < self.risky <= self.dangerous <= 1.0):
            raise ConfigError(
                "safety bands need 0 < risky <= dangerous <= 1, got "
                f"risky={self.risky!r}, dangerous={self.dangerous!r}"
            )


def safety_band(distractor_rate: float, bands: SafetyBands | None = None) -> SafetyBand:
    """The safety band of a distractor rate (typically the mean over queries).

    Raises:
        ValueError: the rate is not a number in [0, 1].
    """
    bands = bands or SafetyBands()
    rate = float(distractor_rate)
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ConfigError(f"a distractor rate lies in [0, 1], got {distractor_rate!r}")
    if rate >= bands.dangerous:
        return SafetyBand.DANGEROUS
    if rate >= bands.risky:
        return SafetyBand.RISKY
    return SafetyBand.SAFE
