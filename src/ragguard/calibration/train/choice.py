"""How ``train-reranker`` chooses: pair AUCs on the validation queries, the paired
bootstrap of a candidate's gain over the base, and the rule that writes a candidate only
when that gain is shown (``choose``; ``docs/guides/train-reranker.md``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.fit.statistics import (
    MIN_VALIDATION_QUERIES,
    Interval,
    bootstrap_means,
    queries_needed,
)
from ragguard.calibration.train.pairs import ValidationQuery
from ragguard.errors import EvalSetError

F64 = NDArray[np.float64]
LEVEL = 0.95  # of the paired bootstrap interval of a candidate's AUC gain over the base
N_BOOTSTRAP = 2000  # resamples of the validation queries behind it


def _ordered(pos: F64, neg: F64) -> tuple[float, int]:
    """(pairs in the right order, ties counting half; pairs) of one group."""
    if not (len(pos) and len(neg)):
        return 0.0, 0
    diff = pos[:, None] - neg[None, :]
    return float((diff > 0).sum()) + 0.5 * float((diff == 0).sum()), int(diff.size)


def pair_auc(groups: Sequence[tuple[F64, F64]]) -> float:
    """The share of a group's (positive, negative) pairs in the right order; NaN without."""
    counts = [_ordered(pos, neg) for pos, neg in groups]
    right = sum(r for r, _ in counts)
    total = sum(t for _, t in counts)
    return right / total if total else math.nan


def auc_difference(
    base: Sequence[tuple[F64, F64]],
    candidate: Sequence[tuple[F64, F64]],
    *,
    n_bootstrap: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Interval:
    """``pair_auc(candidate) - pair_auc(base)`` with the percentile interval of a paired
    bootstrap over the groups (``default_rng([seed, 4])``); a resample without a pair
    counts 0. Raises ValueError when the groups of the two scorers differ."""
    if len(base) != len(candidate) or any(
        len(bp) != len(cp) or len(bn) != len(cn)
        for (bp, bn), (cp, cn) in zip(base, candidate, strict=True)
    ):
        raise ValueError("auc_difference compares two scorers on the same groups")
    rows = [(*_ordered(*b), _ordered(*c)[0]) for b, c in zip(base, candidate, strict=True)]
    sample = np.array(rows, dtype=np.float64).reshape(-1, 3)  # base right, pairs, cand right
    total = sample[:, 1].sum()
    if total == 0:
        return Interval(math.nan, math.nan, math.nan)
    point = float((sample[:, 2].sum() - sample[:, 0].sum()) / total)
    boot = bootstrap_means(sample, n_bootstrap, np.random.default_rng([seed, 4]))
    pairs = boot[:, 1]
    diff = np.divide(boot[:, 2] - boot[:, 0], pairs, out=np.zeros_like(pairs), where=pairs > 0)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(diff, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high))


@dataclass
class Candidate:
    """A scorer compared on validation queries.

    Attributes:
        name: ``base``, a signal (``cosine``, ``bm25``, ...) or a trained kind.
        role: ``base``, ``input`` (a single signal, for comparison) or ``trained``.
        auc_distractor: relevant vs labelled distractor (NaN without distractors).
        auc_other: relevant vs the other candidates.
        seconds: training time.
        eligible: whether it beats the base (see ``choose``).
        note: anything worth saying (what the base is, steps run).
        gain: of a trained candidate, its selection AUC minus the base's, with the
            paired bootstrap interval (``auc_difference``).
    """

    name: str
    role: str
    auc_distractor: float = math.nan
    auc_other: float = math.nan
    seconds: float = 0.0
    eligible: bool = False
    note: str = ""
    gain: Interval | None = None


def choose(candidates: Sequence[Candidate], metric: str) -> Candidate | None:
    """Of the trained candidates that beat the base (the first) by ``metric`` with their
    ``gain`` interval above 0 and the other AUC not lower (their ``eligible``), the best."""
    other = _other(metric)
    for c in candidates:
        c.eligible = c.role == "trained" and _eligible(c, candidates[0], metric, other)
    eligible = [c for c in candidates if c.eligible]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (getattr(c, metric), getattr(c, other)))


def _other(metric: str) -> str:
    return "auc_other" if metric == "auc_distractor" else "auc_distractor"


def _eligible(c: Candidate, base: Candidate, metric: str, other: str) -> bool:
    mine, theirs = getattr(c, metric), getattr(base, metric)
    if math.isnan(mine) or not mine > theirs or not _shown(c.gain):
        return False
    o_mine, o_theirs = getattr(c, other), getattr(base, other)
    return math.isnan(o_theirs) or (not math.isnan(o_mine) and o_mine >= o_theirs)


def _shown(gain: Interval | None) -> bool:
    return gain is not None and gain.low > 0  # NaN compares False


def why(cands: Sequence[Candidate], chosen: Candidate | None, metric: str, where: str) -> str:
    """One line: the written candidate and its gain, or why nothing was written."""
    base, other = cands[0], _other(metric)
    pct = f"{LEVEL:.0%}"

    def gain(c: Candidate) -> str:
        g = c.gain
        assert g is not None
        return (
            f"{metric} {fmt_auc(getattr(c, metric))} vs the base's "
            f"{fmt_auc(getattr(base, metric))}, "
            f"gain {g.mean:+.3f}, {pct} interval {g.low:+.3f} to {g.high:+.3f} over {where}"
        )

    if chosen is not None:
        return f"{chosen.name} beat the base: {gain(chosen)}"
    trained = [c for c in cands if c.role == "trained"]
    ahead = [c for c in trained if getattr(c, metric) > getattr(base, metric)]
    if not ahead:
        return f"no trained candidate beat the base on validation {metric}"
    best = max(ahead, key=lambda c: getattr(c, metric))
    if not _shown(best.gain):
        return (
            f"{best.name} beat the base on validation but not clearly ({gain(best)}: the "
            "interval reaches 0)"
        )
    return (
        f"{best.name} beat the base on validation {metric} but its {other} is lower "
        f"({fmt_auc(getattr(best, other))} vs {fmt_auc(getattr(base, other))})"
    )


def _parts(v: ValidationQuery, s: F64) -> tuple[F64, F64, F64]:
    a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
    return s[:a], s[a:b], s[b:]


def aucs(val: Sequence[ValidationQuery], scores: Sequence[F64]) -> tuple[float, float]:
    parts = [_parts(v, s) for v, s in zip(val, scores, strict=True)]
    return pair_auc([(r, d) for r, d, _ in parts]), pair_auc([(r, o) for r, _, o in parts])


class Judge:
    """Scores a candidate on validation: both AUCs, and its gain over the base."""

    def __init__(
        self,
        val: Sequence[ValidationQuery],
        usable: Sequence[int],
        metric: str,
        base_scores: Sequence[F64],
        seed: int,
    ) -> None:
        self.val, self.usable, self.metric, self.seed = val, usable, metric, seed
        self.base = self.groups(base_scores)

    def where(self) -> str:
        """E.g. ``34 validation queries, 3 with a labelled distractor``."""
        with_pairs = sum(1 for pos, neg in self.base if len(pos) and len(neg))
        what = "labelled distractor" if self.metric == "auc_distractor" else "other candidate"
        some = f", {with_pairs} with a {what}" if with_pairs < len(self.base) else ""
        return f"{len(self.base)} validation queries{some}"

    def groups(self, scores: Sequence[F64]) -> list[tuple[F64, F64]]:
        """Per usable query: the scores of its relevant passages and of its negatives."""
        pick = 1 if self.metric == "auc_distractor" else 2
        return [(p[0], p[pick]) for p in (_parts(self.val[i], scores[i]) for i in self.usable)]

    def candidate(
        self, name: str, scores: Sequence[F64], seconds: float, note: str = ""
    ) -> Candidate:
        d, o = aucs(self.val, scores)
        gain = auc_difference(self.base, self.groups(scores), seed=self.seed)
        return Candidate(name, "trained", d, o, seconds, note=note, gain=gain)


def check_validation(
    val: Sequence[ValidationQuery],
    n_validation: int,
    n_queries: int,
    holdout: float,
    validation: float,
) -> list[int]:
    """The positions in ``val`` of the usable queries (a relevant and a non-relevant
    candidate); an EvalSetError when fewer than ``MIN_VALIDATION_QUERIES``."""
    if not val:
        raise EvalSetError("no validation query has a relevant passage with a text")
    usable = [i for i, v in enumerate(val) if v.distractors or v.others]
    if not usable:
        raise EvalSetError(
            f"validation queries have no non-relevant candidate: each of the {len(val)} "
            "with a relevant passage lists only relevant passages, so no candidate can be "
            "compared with the base; label distractors or passages not relevant "
            "('distractors', 'not_relevant') or give runs with more candidates"
        )
    if len(usable) < MIN_VALIDATION_QUERIES:
        more = queries_needed(n_queries, len(usable), holdout, validation)
        raise EvalSetError(
            f"validation has {len(usable)} usable queries (a relevant and a non-relevant "
            f"candidate each; {n_validation} validation queries in all), too few to show a "
            f"win over the base: label at least {more} more queries with both to reach "
            f"{MIN_VALIDATION_QUERIES} (validation takes {validation:g} of the queries not "
            f"held out), or raise --validation"
        )
    return usable


def fmt_auc(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"
