"""Calibrated probabilities for the rerank stage: the runtime applies the fitted map
(``ProbabilityMap``) that ``ragguard.calibration.fit.probability`` fits, to every rerank
score before any rule runs."""

from __future__ import annotations

from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import ConfigDict, Field, model_validator

from ragguard._fields import ConfigModel
from ragguard.errors import ConfigError
from ragguard.scores import Normalized, ScoreIssue, ScoreKind, normalize, not_one_of

_EPS = 1e-12


class MapMethod(StrEnum):
    """How a [`ProbabilityMap`][ragguard.ProbabilityMap] turns a score into a probability."""

    PLATT = "platt"
    """Logistic regression on the logit-scale score: ``sigmoid(a * z + b)``."""
    ISOTONIC = "isotonic"
    """Non-decreasing, piecewise linear through the breakpoints ``(x, y)``."""

    @classmethod
    def _missing_(cls, value: object) -> MapMethod:
        raise not_one_of(cls, value, "a probability map's method")


def _sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|
    return out


def to_logit(raw: ArrayLike, kind: ScoreKind | str) -> NDArray[np.float64]:
    """Scores on the logit scale: logits as they are, probabilities through ``log(p / (1 - p))``."""
    x = np.asarray(raw, dtype=np.float64)
    if ScoreKind(kind) is ScoreKind.LOGIT:
        return x
    if ScoreKind(kind) is not ScoreKind.PROBABILITY:
        raise ConfigError(f"a rerank score is a logit or a probability, not {kind!r}")
    p = np.clip(x, _EPS, 1.0 - _EPS)
    out: NDArray[np.float64] = np.log(p) - np.log1p(-p)
    return out


class ProbabilityMap(ConfigModel):
    """A fitted map from a rerank score to a calibrated p(relevant), written by
    ``ragguard calibrate --rerank`` under ``[rerank.probability_map]``. Its input is the score
    on the logit scale ``z`` (a probability ``p`` becomes ``log(p / (1 - p))``): ``platt`` is
    ``sigmoid(a z + b)`` with ``a > 0``; ``isotonic`` is piecewise linear through ``(x, y)``,
    constant beyond the ends.

    Examples:
        >>> m = ProbabilityMap(method="platt", a=2.0, b=-1.0)
        >>> [round(v, 4) for v in m.apply([0.0, 0.5], "logit").tolist()]
        [0.2689, 0.5]
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: MapMethod = Field(description="platt or isotonic.")
    a: float | None = Field(
        default=None, allow_inf_nan=False, description="Platt slope (method = platt), > 0."
    )
    b: float | None = Field(
        default=None, allow_inf_nan=False, description="Platt intercept (method = platt)."
    )
    x: list[float] | None = Field(
        default=None, description="Isotonic breakpoints on the logit scale, increasing."
    )
    y: list[float] | None = Field(
        default=None, description="Isotonic probabilities at the breakpoints, non-decreasing."
    )

    @model_validator(mode="after")
    def _complete(self) -> ProbabilityMap:
        if self.method is MapMethod.PLATT:
            if self.a is None or self.b is None or self.x is not None or self.y is not None:
                raise ValueError("a platt map has a and b (and no x, y)")
            if self.a <= 0:
                raise ValueError(
                    f"a platt map's slope a must be > 0, got {self.a!r}: a decreasing map "
                    "ranks the reranker's worst passages first; fit one with ragguard "
                    "calibrate --rerank"
                )
            return self
        if self.x is None or self.y is None or self.a is not None or self.b is not None:
            raise ValueError("an isotonic map has x and y (and no a, b)")
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        if x.size == 0 or x.shape != y.shape:
            raise ValueError("an isotonic map needs as many x as y breakpoints, at least one")
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            raise ValueError("isotonic breakpoints must be finite numbers")
        if (np.diff(x) <= 0).any():
            raise ValueError("isotonic x breakpoints must be strictly increasing")
        if (np.diff(y) < 0).any() or y[0] < 0 or y[-1] > 1:
            raise ValueError("isotonic y values must be non-decreasing probabilities in [0, 1]")
        return self

    def apply_logit(self, z: ArrayLike) -> NDArray[np.float64]:
        """Map logit-scale scores to probabilities (NaN stays NaN; +-inf go to the ends)."""
        v = np.asarray(z, dtype=np.float64)
        if self.method is MapMethod.PLATT:
            assert self.a is not None and self.b is not None
            with np.errstate(invalid="ignore"):
                return _sigmoid(self.a * v + self.b)
        assert self.x is not None and self.y is not None
        out: NDArray[np.float64] = np.interp(v, self.x, self.y)
        out[np.isnan(v)] = np.nan
        return out

    def apply(self, raw: ArrayLike, kind: ScoreKind | str) -> NDArray[np.float64]:
        """Map raw rerank scores of ``kind`` (logit or probability) to probabilities."""
        return self.apply_logit(to_logit(raw, kind))

    def describe(self) -> str:
        """One line for reports: ``platt: p = sigmoid(0.83 z - 1.9)``."""
        if self.method is MapMethod.PLATT:
            b = self.b or 0.0
            return f"platt: p = sigmoid({self.a:.4g} z {'-' if b < 0 else '+'} {abs(b):.4g})"
        return f"isotonic: {len(self.x or ())} breakpoints"


def rerank_probabilities(
    raw: ArrayLike, kind: ScoreKind | str, probability_map: ProbabilityMap | None
) -> Normalized:
    """The probabilities the rerank rules run on: ``normalize`` without a map; with one, the
    map's, keeping ``normalize``'s issues but ``logit_in_unit_interval`` (the map replaces the
    sigmoid that issue warns about)."""
    norm = normalize(raw, kind)
    if probability_map is None:
        return norm
    x = np.atleast_2d(np.asarray(raw, dtype=np.float64))  # normalize checked it is 1-D or 2-D
    mapped = probability_map.apply(np.where(norm.valid, x, 0.0), kind)
    issues: dict[ScoreIssue, int] = {
        i: n for i, n in norm.issues.items() if i is not ScoreIssue.LOGIT_IN_UNIT_INTERVAL
    }
    return Normalized(np.where(norm.valid, mapped, np.nan), norm.valid, issues)
