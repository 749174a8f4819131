"""Per-domain calibration (``Domains``): what each domain's search found against the global
config on that domain's held-out queries, when a domain falls back to the global config, and
the ``[domains.NAME]`` tables of the written TOML (each holding only what differs from the
global settings; per-domain provenance under ``provenance.domains``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragguard.calibration._format import format_number, json_number
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.select import fold_count
from ragguard.calibration.fit.statistics import Bootstrap, Comparison, compare_values, metric_values
from ragguard.calibration.fit.sweep import F64, I
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError

MIN_DOMAIN_QUERIES = next(n for n in range(1, 100) if fold_count(n) >= 2)
"""The fewest calibration queries a domain is searched on alone (4): below it the choice of
rule family cannot be cross-validated (``select.fold_count``: two folds of two queries), so
the choice would be made and judged on the same few queries; such a domain uses the
global config."""


@dataclass(frozen=True, eq=False)
class DomainCalibration:
    """One domain's calibration.

    Attributes:
        name: the domain.
        profile: its tolerance profile's name.
        queries: its labelled queries; ``calibration`` and ``heldout``: how many of them
            fall in each half of the global split.
        config: its own config (``None``: not searched, too few calibration queries).
        setting: its written setting in words (``global`` when it falls back).
        fallback: why the global config is used for it (``None``: its own is written).
        against_global: its chosen setting against the global chosen setting on its
            held-out queries (baseline: global), under its profile; ``None`` when it has
            no held-out queries or was not searched.
    """

    name: str
    profile: str
    queries: int
    calibration: int
    heldout: int
    config: GuardConfig | None = None
    setting: str = "global"
    fallback: str | None = None
    against_global: Comparison | None = field(default=None, repr=False)
    values: tuple[F64, F64] | None = field(default=None, repr=False)
    """Per-query (global, own) values of the compared metrics on its held-out queries."""

    def facts(self) -> dict[str, Any]:
        """Its profile, query counts, setting and whether it falls back, as provenance and
        ``--json`` give them."""
        return {
            "profile": self.profile,
            "queries": self.queries,
            "calibration_queries": self.calibration,
            "heldout_queries": self.heldout,
            "setting": self.setting,
            "fallback": self.fallback is not None,
        }


@dataclass(frozen=True, eq=False)
class DomainResults:
    """Every domain's calibration, and per-domain against global on the pooled held-out
    queries of the domains that write their own setting (``pooled``)."""

    by: str
    objective: str
    domains: tuple[DomainCalibration, ...]
    pooled: Comparison | None = field(default=None, repr=False)

    def verdict(self) -> str:
        """Whether per-domain beats global on held-out queries, in one line."""
        c, obj = self.pooled, self.objective
        own = [d.name for d in self.domains if d.fallback is None]
        if not own:
            return "per-domain vs global: every domain uses the global config (nothing compared)"
        if c is None or not c.n_queries or obj not in c.metrics:
            return "per-domain vs global: no held-out queries to compare on"
        verdict = c.verdict(obj)
        word = {"better": "beats", "worse": "loses to"}.get(verdict, "does not clearly beat")
        return (
            f"per-domain {word} global on {obj} {c.where()} of {len(own)} domain(s) with their "
            f"own setting: {format_number(c.baseline[obj].mean)} -> "
            f"{format_number(c.guarded[obj].mean)}, difference {c.change(obj)} ({verdict})"
        )

    def rows(self) -> list[tuple[str, ...]]:
        """The per-domain table: domain, profile, queries (calibration / held-out), setting,
        the objective on held-out for global and own, the difference with its interval, and
        the fallback (``ROW_HEADER``)."""
        obj = self.objective
        out: list[tuple[str, ...]] = []
        for d in self.domains:
            c = d.against_global
            g = own = diff = "-"
            if c is not None and c.n_queries and obj in c.metrics:
                g, own = format_number(c.baseline[obj].mean), format_number(c.guarded[obj].mean)
                diff = c.change(obj)
            out.append(
                (
                    d.name,
                    d.profile,
                    f"{d.queries} ({d.calibration}+{d.heldout})",
                    d.setting,
                    g,
                    own,
                    diff,
                    "no" if d.fallback is None else "yes",
                )
            )
        return out

    def reasons(self) -> list[str]:
        """``domain: why`` for each domain that uses the global config."""
        return [f"{d.name}: {d.fallback}" for d in self.domains if d.fallback is not None]

    def header(self) -> tuple[str, ...]:
        """The column names of ``rows``."""
        return (
            "domain",
            "profile",
            "queries",
            "setting",
            "global",
            "own",
            "own - global",
            "fallback",
        )

    def provenance(self) -> dict[str, Any]:
        """``provenance.domains``: per domain its queries, profile, setting, fallback and the
        held-out comparison with the global setting."""
        out: dict[str, Any] = {}
        for d, row in zip(self.domains, self.rows(), strict=True):
            entry: dict[str, Any] = {"by": self.by, **d.facts()}
            if d.fallback is not None:
                entry["why"] = d.fallback
            if row[6] != "-":
                entry["heldout_against_global"] = (
                    f"{self.objective} {row[4]} -> {row[5]}, difference {row[6]}"
                )
            out[d.name] = entry
        return out

    def tables(self, base: GuardConfig) -> dict[str, dict[str, Any]]:
        """``{domain: table}``: each domain's settings that differ from ``base`` (empty when
        it falls back)."""
        return {
            d.name: {}
            if d.fallback is not None or d.config is None
            else differing(base, d.config, d.name)
            for d in self.domains
        }

    def to_json(self) -> dict[str, Any]:
        """The per-domain results as ``--json`` prints them: per domain its queries, profile,
        setting, fallback (and why), and per metric compared the global and own means on its
        held-out queries with the difference ``[mean, low, high]``."""
        domains = []
        for d in self.domains:
            c = d.against_global
            heldout = {}
            if c is not None and c.n_queries:
                for m in c.metrics:
                    diff = c.difference[m]
                    heldout[m] = {
                        "global": json_number(c.baseline[m].mean),
                        "own": json_number(c.guarded[m].mean),
                        "difference": [json_number(x) for x in (diff.mean, diff.low, diff.high)],
                    }
            domains.append({"domain": d.name, **d.facts(), "why": d.fallback, "heldout": heldout})
        return {"by": self.by, "verdict": self.verdict(), "domains": domains}


def _dump(cfg: GuardConfig) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    data.pop("provenance", None)
    return data


def differing(base: GuardConfig, own: GuardConfig, name: str) -> dict[str, Any]:
    """The top-level settings of ``own`` that differ from ``base`` (a nested table: only its
    differing keys), as a ``[domains.NAME]`` table holds them.

    Raises:
        ConfigError: ``own`` leaves a setting unset (``None``) that ``base`` sets: a domain
            table can only override."""
    b, o = _dump(base), _dump(own)
    out: dict[str, Any] = {}
    for key, value in o.items():
        theirs = b.get(key)
        if value == theirs:
            continue
        if isinstance(value, dict) and isinstance(theirs, dict):
            value = {k: v for k, v in value.items() if theirs.get(k) != v}
            unset = [k for k, v in value.items() if v is None]
            if unset:
                key = f"{key}.{unset[0]}"
                value = None
        if value is None:
            raise ConfigError(
                f"domain {name!r} leaves {key} unset where the global config sets it; a "
                f"[domains.{name}] table can only override a setting"
            )
        out[key] = value
    return out


def domain_comparison(
    own: RunCalibration,
    own_runs: tuple[RunCalibration, ...],
    base: RunCalibration,
    rows: I,
    how: Bootstrap,
) -> tuple[Comparison, tuple[F64, F64]] | None:
    """A domain's chosen setting (``own``, of its search) against the global chosen setting
    (``base``) on the domain's ``rows``: the global setting is evaluated in the domain's own
    search of the same run, under the domain's profile. ``None`` when that setting is not
    among the domain's points (its grid grew otherwise)."""
    same = next((r for r in own_runs if r.name == base.name), None)
    if same is None or not rows.size:
        return None
    gp, gb = base.chosen_params, base.space.block_of(base.chosen)
    points = same.sweep.points
    j = next((i for i, p in enumerate(points) if p == gp and same.space.block_of(i) == gb), None)
    if j is None:
        return None
    metrics = tuple(m for m in own.comparison.metrics if m in base.comparison.metrics)
    theirs = metric_values(
        same.space.kernel_of(j), same.sweep.kept[j].astype(np.intp), metrics, rows
    )
    ours = metric_values(
        own.space.kernel_of(own.chosen), own.sweep.kept[own.chosen].astype(np.intp), metrics, rows
    )
    return compare_values(theirs, ours, rows, metrics, **how), (theirs, ours)


def not_clearly_better(
    own: RunCalibration,
    own_runs: tuple[RunCalibration, ...],
    base: RunCalibration,
    rows: I,
    how: Bootstrap,
    objective: str,
) -> str | None:
    """Why a domain keeps the global config although it has its own setting: on its
    calibration ``rows`` its choice is not clearly better than the global choice on the
    objective (the paired bootstrap interval of the difference does not exclude 0, as the
    held-out check decides ``better``); ``None`` when it is, or when the two cannot be
    compared. The choice was made on these queries, so a gain within their noise is no
    evidence for a setting of its own: the domain is shrunk to the global config. A domain
    that chose the global setting keeps its table (its profile, when it has its own)."""
    if own.chosen_params == base.chosen_params and own.name == base.name:
        return None  # the same setting: nothing to shrink
    compared = domain_comparison(own, own_runs, base, rows, {**how, "split": "calibration"})
    if compared is None:
        return None
    c = compared[0]
    if objective not in c.metrics or c.verdict(objective) == "better":
        return None
    return (
        f"its own setting is not clearly better than the global one on its {c.n_queries} "
        f"calibration queries ({objective} difference {c.change(objective)})"
    )


def pooled(domains: tuple[DomainCalibration, ...], how: Bootstrap) -> Comparison | None:
    """Per-domain against global on the held-out queries of the domains that write their own
    setting, pooled (each query under its domain's profile)."""
    parts = [d for d in domains if d.fallback is None and d.values is not None]
    if not parts:
        return None
    metrics = parts[0].against_global.metrics if parts[0].against_global else ()
    if any(d.against_global is None or d.against_global.metrics != metrics for d in parts):
        return None
    theirs = np.concatenate([d.values[0] for d in parts if d.values], axis=1)
    ours = np.concatenate([d.values[1] for d in parts if d.values], axis=1)
    rows = np.arange(theirs.shape[1], dtype=np.intp)
    return compare_values(theirs, ours, rows, metrics, **how)
