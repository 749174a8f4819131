"""The noise floor: ``min_score`` from unrelated passages, no labels read
(docs/guides/no-labels.md, "Floors without labels"); the bound and its assumption:
``order_statistic_floor``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ragguard.calibration._format import format_number, json_number
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.fit.answerability import floor_above
from ragguard.calibration.fit.options import NoiseFloor, needed_samples
from ragguard.calibration.fit.sweep import F64, I
from ragguard.errors import ConfigError, CorpusError, InvalidScoreError
from ragguard.scores import normalize

if TYPE_CHECKING:
    from ragguard.calibration.data.evalset import EvalSet

CHECKED_QUERIES = 10
"""Queries whose own candidates are rescored to check that the scorer is the run's."""

TOLERANCE = 0.02
"""The largest median difference between the scorer's and the run's normalised scores
that still counts as the same scale (a passage's title joined another way moves a cosine
by about 0.01; another model, or another kind of score, by far more)."""


def order_statistic_floor(scores: F64, alpha: float) -> tuple[float, int]:
    """The noise floor of unrelated ``scores``: ``floor_above`` the ``k``-th smallest,
    ``k = ceil((n + 1) * (1 - alpha))``, and ``k``.

    Each score is a calibration query drawn at random with replacement against a passage
    drawn at random from the pool (the corpus, else the other queries' candidates, never
    its own candidates or labelled passages). A new unrelated pair drawn the same way is
    exchangeable with the ``n``, so it scores above the ``k``-th smallest with probability
    at most ``(n + 1 - k) / (n + 1) <= alpha`` (the conformal order-statistic bound; ties
    only lower it). For new queries exchangeable with the calibration queries it holds up
    to the error of having sampled those queries (``benchmarks/floors.py``).

    Raises:
        ConfigError: fewer scores than the bound needs (``alpha`` is ``NoiseFloor``'s,
            checked in (0, 1) when it was built).
        InvalidScoreError: a NaN or infinite score among them.
    """
    x = np.asarray(scores, dtype=np.float64)
    bad = int((~np.isfinite(x)).sum())
    if bad:
        raise InvalidScoreError(
            f"{bad} of the {x.size} unrelated passages got a NaN or infinite score; the noise "
            "floor needs finite scores: fix the scorer or drop those passages"
        )
    n, need = int(x.size), needed_samples(alpha)
    if n < need:
        raise ConfigError(
            f"--noise-floor {alpha:g} needs at least {need} unrelated passages for its "
            f"order-statistic bound, got {n}; draw more or raise alpha"
        )
    k = math.ceil((n + 1) * (1.0 - alpha) - 1e-9)
    return floor_above(float(np.partition(x, k - 1)[k - 1])), k


@dataclass(frozen=True, eq=False)
class NoiseFloorResult:
    """The noise floor written as ``min_score``, with what it rests on."""

    alpha: float
    samples: int
    k: int
    floor: float
    pool: int
    source: str
    run: str
    written_min_score: float | None
    relevant_dropped: float | None
    relevant: int
    queries: int

    @property
    def bound(self) -> float:
        """The finite-sample bound on the share of unrelated passages admitted."""
        return (self.samples + 1 - self.k) / (self.samples + 1)

    @property
    def min_score(self) -> float:
        """What the config holds: the noise floor, or the setting's own floor when higher."""
        own = self.written_min_score
        return self.floor if own is None or own < self.floor else own

    def statement(self) -> str:
        """The floor, its guarantee and assumption, and what it costs, in words."""
        text = (
            f"min_score {self.floor:g} on the normalised score of run {self.run!r}: "
            f"an unrelated passage reaches it with probability <= {self.bound:.4g} (alpha "
            f"{self.alpha:g}; above order statistic {self.k} of {self.samples} scores of a "
            f"calibration query against a random passage of {self.pool} ({self.source}), "
            "conformal order-statistic bound, exact for these queries); for new queries it "
            "assumes them exchangeable with the calibration queries (up to the error of "
            f"sampling {self.queries} queries) and noise drawn like these passages; min_k "
            "passages are kept whatever their score"
        )
        if self.min_score != self.floor:
            text += f"; the setting's own min_score {self.min_score:g} is higher and is kept"
        if self.relevant_dropped is not None:
            text += (
                f"; it drops {format_number(self.relevant_dropped)} of the {self.relevant} "
                "labelled relevant candidates"
            )
        return text

    def provenance(self) -> dict[str, Any]:
        """The noise floor part of the config's provenance (TOML-ready)."""
        out: dict[str, Any] = {
            "alpha": self.alpha,
            "samples": self.samples,
            "queries": self.queries,
            "order_statistic": self.k,
            "floor": self.floor,
            "bound": float(f"{self.bound:.6g}"),
            "pool": self.pool,
            "source": self.source,
            "method": "conformal order statistic: the ceil((n+1)(1-alpha))-th smallest of n "
            "scores of a random calibration query against a random unrelated passage",
            "assumptions": "new queries exchangeable with the calibration queries; noise "
            "drawn like the sampled passages; no labels read",
        }
        if self.relevant_dropped is not None:
            out["relevant_dropped"] = float(f"{self.relevant_dropped:.6g}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``ragguard calibrate --json``)."""
        return {
            **self.provenance(),
            "min_score": self.min_score,
            "relevant": self.relevant,
            "relevant_dropped": None
            if self.relevant_dropped is None
            else json_number(self.relevant_dropped),
            "statement": self.statement(),
        }


def _pool(evalset: EvalSet) -> tuple[list[tuple[str | None, str]], list[str], str]:
    """Every passage a sample may draw: ``(owner query or None, passage id)`` with its
    text, and where they come from."""
    texts = evalset.texts
    docs = texts.by_doc
    if docs:
        return [(None, d) for d in docs], list(docs.values()), "corpus"
    pairs = texts.by_pair
    return [(q, d) for q, d in pairs], list(pairs.values()), "the other queries' candidates"


def check_noise_floor(evalset: EvalSet, runs: Sequence[str]) -> None:
    """Fail before any sweep when the noise floor cannot be calibrated: a run of unknown
    score kind, or fewer than two passages to draw."""
    for name in runs:
        if evalset.runs[name].score_kind is None:
            raise ConfigError(
                f"--noise-floor cannot threshold run {name!r}: its score kind is unknown; "
                "pass --score-kind"
            )
    keys, _, source = _pool(evalset)
    if len(keys) < 2:
        raise CorpusError(
            f"--noise-floor needs passages to draw at random, got {len(keys)} ({source}): pass "
            "a corpus (--corpus, or corpus.jsonl beside the eval set) or candidates with texts"
        )


def _check_scorer(option: NoiseFloor, evalset: EvalSet, arrays: EvalArrays, run: str) -> None:
    """Fail when the scorer does not give run ``run``'s scores on its own candidates."""
    gaps: list[float] = []
    for row in range(arrays.n_queries):
        if len(gaps) >= CHECKED_QUERIES * 5:
            break
        qid = arrays.qids[row]
        query = evalset.queries[qid].text
        ids = arrays.doc_ids(row)[: min(5, int(arrays.n_valid[row]))]
        got = [evalset.texts.get(qid, d) for d in ids]
        if query is None or not ids or any(t is None for t in got):
            continue
        mine = normalize(
            np.asarray(option.scorer(query, [t or "" for t in got]), dtype=np.float64),
            arrays.score_kind,
        ).values[0]
        gaps += list(np.abs(mine - arrays.scores[row, : len(ids)]))
    if not gaps:
        raise ConfigError(
            f"--noise-floor cannot check the scorer against run {run!r}: no query has texts "
            "for its candidates; pass the corpus (--corpus) that holds them"
        )
    typical = float(np.median(gaps))  # NaN (a NaN score) fails too
    if not typical <= TOLERANCE:
        raise ConfigError(
            f"the noise floor's scorer does not give run {run!r}'s scores: on {len(gaps)} of "
            f"its (query, candidate) pairs they differ by {typical:.3g} (median; allowed "
            f"{TOLERANCE:g}); score with the model the run was retrieved with"
        )


def fit_noise_floor(
    evalset: EvalSet,
    arrays: EvalArrays,
    rows: I,
    option: NoiseFloor,
    *,
    run: str,
    written_min_score: float | None,
    seed: int,
) -> NoiseFloorResult:
    """The noise floor of run ``run`` (``arrays``) from the calibration ``rows``, its
    scorer checked on the run's own scores first (``check_noise_floor`` ran before).

    Raises:
        ConfigError: the scorer does not give the run's scores.
        CorpusError: no passage to draw for some query.
        InvalidScoreError: the scorer returned a NaN or infinite score.
    """
    keys, texts, source = _pool(evalset)  # (check_noise_floor ran before the sweep)
    _check_scorer(option, evalset, arrays, run)
    rng = np.random.default_rng([seed, 36])
    drawn = rng.choice(rows, size=option.samples, replace=True)
    scores = np.empty(option.samples)
    for row in np.unique(drawn):
        at = np.flatnonzero(drawn == row)
        qid = arrays.qids[int(row)]
        own = set(arrays.doc_ids(int(row))) | set(evalset.labels[qid].grades)
        picks: list[int] = []
        for _ in range(at.size):
            for _try in range(64):  # rejection: the query's own passages are few
                i = int(rng.integers(len(keys)))
                owner, doc = keys[i]
                if owner != qid and doc not in own:
                    picks.append(i)
                    break
            else:
                raise CorpusError(
                    f"--noise-floor finds no passage unrelated to query {qid!r} in a pool of "
                    f"{len(keys)} ({source}); pass a larger corpus (--corpus)"
                )
        query = evalset.queries[qid].text or ""
        raw = np.asarray(option.scorer(query, [texts[i] for i in picks]), dtype=np.float64)
        if raw.shape != (at.size,):
            raise ConfigError(
                f"the noise floor's scorer returned {raw.size} scores for {at.size} passages"
            )
        scores[at] = normalize(raw, arrays.score_kind).values[0]
    floor, k = order_statistic_floor(scores, float(option.alpha))
    relevant = arrays.grades >= arrays.rules.relevant_grade
    relevant &= arrays.valid
    n_rel = int(relevant.sum())
    written = floor if written_min_score is None else max(floor, written_min_score)
    dropped = float((arrays.scores[relevant] < written).mean()) if n_rel else None
    return NoiseFloorResult(
        alpha=float(option.alpha),
        samples=option.samples,
        k=k,
        floor=floor,
        pool=len(keys),
        source=source,
        run=run,
        written_min_score=written_min_score,
        relevant_dropped=dropped,
        relevant=n_rel,
        queries=int(np.unique(drawn).size),
    )
