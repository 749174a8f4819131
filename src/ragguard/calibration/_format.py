"""Numbers and intervals as calibrate prints them (console, ``--json``, report and
provenance all format through these)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

_MAX_DIGITS = 12


def format_number(value: float, digits: int = 3, *, signed: bool = False) -> str:
    """``value`` with ``digits`` decimals (and its sign when ``signed``), or ``n/a`` when
    it is NaN (a metric undefined on the queries at hand). The report and the command
    line print every metric through this."""
    if math.isnan(value):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _rounded(value: float, digits: int, rounding: str) -> Decimal:
    # the shortest repr of the float, so 0.07 rounds as 0.07 and not as 0.0700...01
    return Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits), rounding=rounding)


def format_interval(low: float, high: float, digits: int = 2, *, signed: bool = True) -> str:
    """``[low, high]`` rounded **outward** (``low`` down, ``high`` up), so the printed
    interval holds the true one, with more decimals where ``digits`` would print a bound
    that lies off 0 as 0: a printed interval excludes 0 exactly when the interval does,
    so it never contradicts the verdict read from it. ``""`` when the interval is
    undefined (NaN).

    >>> format_interval(0.003, 0.0712)
    '[+0.003, +0.08]'
    >>> format_interval(-0.0004, 0.67)
    '[-0.01, +0.67]'
    """
    if math.isnan(low) or math.isnan(high):
        return ""
    if math.isinf(low) or math.isinf(high):
        return f"[{low:+g}, {high:+g}]" if signed else f"[{low:g}, {high:g}]"

    def bound(value: float, rounding: str) -> str:
        d = digits
        r = _rounded(value, d, rounding)
        # a bound off 0 gets the decimals that show it off 0 (toward the inside)
        while value != 0 and r == 0 and d < _MAX_DIGITS:
            d += 1
            r = _rounded(value, d, rounding)
        if value != 0 and r == 0:  # smaller than every decimal shown: print it whole
            return f"{value:+.1e}" if signed else f"{value:.1e}"
        r += 0  # Decimal("-0.00") + 0 is "0.00": no negative zero
        return f"{r:+f}" if signed else f"{r:f}"

    return f"[{bound(low, ROUND_FLOOR)}, {bound(high, ROUND_CEILING)}]"


def floor_number(value: float, digits: int = 3) -> str:
    """``value`` rounded **down** to ``digits`` decimals: a certified lower bound is
    printed no higher than it is (0.8999 as 0.899, never as 0.900 next to a 0.9 target
    it misses); ``n/a`` when NaN."""
    return _directed(value, digits, ROUND_FLOOR)


def ceil_number(value: float, digits: int = 3) -> str:
    """``value`` rounded **up** to ``digits`` decimals: a certified upper bound is printed
    no lower than it is; ``n/a`` when NaN."""
    return _directed(value, digits, ROUND_CEILING)


def _directed(value: float, digits: int, rounding: str) -> str:
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return f"{value:g}"
    return f"{_rounded(value, digits, rounding) + 0:f}"


def json_number(value: float) -> float | None:
    """JSON-friendly: NaN (and infinity) as ``None``."""
    return value if math.isfinite(value) else None


def json_numbers(values: Mapping[str, float]) -> dict[str, float | None]:
    """``values`` with each number ``json_number``."""
    return {k: json_number(v) for k, v in values.items()}


def finite(value: float) -> float | str:
    """TOML-friendly: rounded to 6 significant digits; NaN as the string "nan"."""
    return float(f"{value:.6g}") if math.isfinite(value) else "nan"
