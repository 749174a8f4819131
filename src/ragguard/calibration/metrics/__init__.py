"""Vectorised metrics over ``EvalArrays`` (one module per family, formulas in the
docstrings) and their string registry.

Metric strings: ``name``, ``name@k`` or ``name(param=value, ...)@k``, e.g. ``"ndcg@10"``,
``"udcg(gamma=0.333)@5"``, ``"f2@10"`` (F-beta with beta = 2). Names are
case-insensitive. Without ``@k`` a metric reads each query's whole candidate list.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.metrics._common import F64
from ragguard.calibration.metrics.classic import (
    average_precision,
    evidence_coverage,
    evidence_recall,
    f_beta,
    hit_rate,
    ndcg,
    ndcg_burges,
    precision,
    recall,
    reciprocal_rank,
)
from ragguard.calibration.metrics.distractor import (
    SafetyBand,
    SafetyBands,
    distractor_harm,
    distractor_rate,
    safety_band,
)
from ragguard.calibration.metrics.set_based import (
    harm,
    n_recall_4plus,
    n_recall_5,
    pct_proc,
    precision_4plus,
    proc,
    ra_nwg,
    rarity_weights,
)
from ragguard.calibration.metrics.udcg import (
    UDCGTheta,
    context_utility,
    fit_udcg_theta,
    udcg,
    udcg_dcg,
    udcg_ndcg,
    udcg_theta,
)
from ragguard.errors import ConfigError

__all__ = [
    "ALIASES",
    "METRICS",
    "MetricSpec",
    "ParsedMetric",
    "SafetyBand",
    "SafetyBands",
    "UDCGTheta",
    "average_precision",
    "compute",
    "context_utility",
    "distractor_harm",
    "distractor_rate",
    "evidence_coverage",
    "evidence_recall",
    "f_beta",
    "fit_udcg_theta",
    "harm",
    "hit_rate",
    "n_recall_4plus",
    "n_recall_5",
    "ndcg",
    "ndcg_burges",
    "parse_metric",
    "pct_proc",
    "precision",
    "precision_4plus",
    "proc",
    "ra_nwg",
    "rarity_weights",
    "recall",
    "reciprocal_rank",
    "safety_band",
    "udcg",
    "udcg_dcg",
    "udcg_ndcg",
    "udcg_theta",
]

MetricFn = Callable[..., F64]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A registered metric.

    Attributes:
        name: its registry name.
        fn: the public function ``fn(arrays, k=None, *, cut=None, **params)``.
        params: the keyword parameters it accepts besides ``cut``.
        may_be_na: whether it returns NaN (NA) for some queries.
    """

    name: str
    fn: MetricFn
    params: tuple[str, ...]
    may_be_na: bool = False

    @property
    def summary(self) -> str:
        """The first line of the function's docstring."""
        return (self.fn.__doc__ or "").strip().splitlines()[0]


def _spec(name: str, fn: MetricFn, *, may_be_na: bool = False) -> MetricSpec:
    sig = inspect.signature(fn)
    params = tuple(
        p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY and p.name != "cut"
    )
    return MetricSpec(name, fn, params, may_be_na)


METRICS: dict[str, MetricSpec] = {
    s.name: s
    for s in (
        _spec("precision", precision),
        _spec("recall", recall),
        _spec("evidence_recall", evidence_recall, may_be_na=True),
        _spec("evidence_coverage", evidence_coverage, may_be_na=True),
        _spec("hit_rate", hit_rate),
        _spec("mrr", reciprocal_rank),
        _spec("map", average_precision),
        _spec("ndcg", ndcg),
        _spec("ndcg_burges", ndcg_burges),
        _spec("f_beta", f_beta),
        _spec("udcg", udcg),
        _spec("udcg_dcg", udcg_dcg),
        _spec("udcg_ndcg", udcg_ndcg),
        _spec("utility", context_utility),
        _spec("distractor_rate", distractor_rate),
        _spec("distractor_harm", distractor_harm),
        _spec("ra_nwg", ra_nwg, may_be_na=True),
        _spec("proc", proc, may_be_na=True),
        _spec("pct_proc", pct_proc, may_be_na=True),
        _spec("n_recall_4plus", n_recall_4plus, may_be_na=True),
        _spec("n_recall_5", n_recall_5, may_be_na=True),
        _spec("precision_4plus", precision_4plus),
        _spec("harm", harm),
    )
}
"""Registry of metric names (see ``parse_metric`` for the string syntax)."""

ALIASES: dict[str, str] = {
    "p": "precision",
    "hit": "hit_rate",
    "evidence": "evidence_recall",
    "coverage": "evidence_coverage",
    "success": "hit_rate",
    "rr": "mrr",
    "recip_rank": "mrr",
    "ap": "map",
    "ndcg_exp": "ndcg_burges",
    "nudcg": "udcg_ndcg",
    "%proc": "pct_proc",
    "n_recall4+": "n_recall_4plus",
    "n_recall5": "n_recall_5",
    "precision4+": "precision_4plus",
    "harm_rate": "harm",
}
"""Other accepted names (ranx / trec_eval / write-up spellings) -> registry name."""

_SYNTAX = re.compile(
    r"^(?P<name>[a-z%][a-z0-9_%+.\-]*?)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>[0-9]+))?$"
)
_F_SHORT = re.compile(r"^f(?P<beta>[0-9]+(?:\.[0-9]+)?)$")


@dataclass(frozen=True, slots=True)
class ParsedMetric:
    """A metric string, parsed: registry ``spec``, cutoff ``k`` and parameters."""

    text: str
    spec: MetricSpec
    k: int | None
    params: dict[str, Any] = field(default_factory=dict)


def _value(text: str, metric: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"metric {metric!r}: parameter value {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"metric {metric!r}: parameter value {text!r} is not finite")
    return value


def parse_metric(text: str) -> ParsedMetric:
    """Parse ``name``, ``name@k`` or ``name(param=value, ...)@k``.

    Raises:
        ValueError: bad syntax, an unknown name (the message lists the known ones), an
            unknown parameter, or a cutoff below 1.
    """
    if not isinstance(text, str):
        raise ConfigError(f"a metric is a string such as 'ndcg@10', got {text!r}")
    m = _SYNTAX.match(text.strip().lower())
    if m is None:
        raise ConfigError(
            f"cannot parse metric {text!r}; expected 'name', 'name@k' or "
            "'name(param=value)@k', e.g. 'ndcg@10' or 'udcg(gamma=0.333)@5'"
        )
    name = m.group("name")
    params: dict[str, Any] = {}
    short = _F_SHORT.match(name)
    if short:
        name = "f_beta"
        params["beta"] = float(short.group("beta"))
    name = ALIASES.get(name, name)
    spec = METRICS.get(name)
    if spec is None:
        known = ", ".join(sorted(METRICS))
        raise ConfigError(f"unknown metric {text!r}; known metrics: {known} (and f1, f2, ...)")
    if m.group("params"):
        for part in m.group("params").split(","):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"metric {text!r}: parameters are written name=value")
            if key not in spec.params:
                allowed = ", ".join(spec.params) or "none"
                raise ConfigError(
                    f"metric {text!r}: unknown parameter {key!r} (allowed: {allowed})"
                )
            params[key] = _value(raw.strip(), text)
    k = None if m.group("k") is None else int(m.group("k"))
    if k == 0:
        raise ConfigError(f"metric {text!r}: the cutoff after '@' must be >= 1")
    return ParsedMetric(text, spec, k, params)


def compute(arrays: EvalArrays, metric: str | ParsedMetric, *, cut: ArrayLike | None = None) -> F64:
    """Per-query values of one metric string (NaN where it is NA)."""
    parsed = metric if isinstance(metric, ParsedMetric) else parse_metric(metric)
    values = parsed.spec.fn(arrays, parsed.k, cut=cut, **parsed.params)
    return np.asarray(values, dtype=np.float64)
