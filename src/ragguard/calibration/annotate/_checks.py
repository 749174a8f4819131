"""The numeric settings of the annotation backends and of ``ragguard annotate``, and their
one check: a bad value is one [`AnnotationError`][ragguard.AnnotationError] naming it (the
upper bounds stop only values that cannot be meant)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ragguard.errors import AnnotationError


@dataclass(frozen=True, slots=True)
class Bound:
    """The values a setting accepts: ``low`` (excluded when ``above``) to ``high``."""

    low: float
    high: float
    whole: bool
    above: bool = False

    def describe(self) -> str:
        """E.g. ``a whole number from 1 to 1024``, ``a number above 0, at most 86400``."""
        kind = "a whole number" if self.whole else "a number"
        low, high = _plain(self.low), _plain(self.high)
        if self.above:
            return f"{kind} above {low}, at most {high}"
        return f"{kind} from {low} to {high}"


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


BOUNDS: dict[str, Bound] = {
    "concurrency": Bound(1, 1024, whole=True),
    "max_retries": Bound(0, 100, whole=True),
    "backoff": Bound(0, 3600, whole=False),
    "max_backoff": Bound(0, 3600, whole=False),
    "timeout": Bound(0, 86400, whole=False, above=True),
    "top_logprobs": Bound(1, 1000, whole=True),
    "max_tokens": Bound(1, 1_000_000, whole=True),
    "max_new_tokens": Bound(1, 1_000_000, whole=True),
    "samples": Bound(1, 10_000, whole=True),
    "temperature": Bound(0, 10, whole=False),
    "batch_size": Bound(1, 65_536, whole=True),
    "max_length": Bound(1, 16_777_216, whole=True),
    "threads": Bound(1, 4096, whole=True),
}


def check(name: str, value: object, *, label: str | None = None) -> None:
    """Check ``value`` against ``BOUNDS[name]`` (a bool, NaN or a fraction where a whole
    number is wanted fail too); ``label`` names it in the error (the CLI's ``--flag``)."""
    bound = BOUNDS[name]
    ok = False
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        x: float = int(value)  # compared exactly, however large
        ok = True
    elif isinstance(value, numbers.Real) and not bound.whole:
        x = float(value)
        ok = math.isfinite(x)
    if ok:
        ok = (bound.low < x if bound.above else bound.low <= x) and x <= bound.high
    if not ok:
        raise AnnotationError(f"{label or name} must be {bound.describe()}, got {value!r}")
