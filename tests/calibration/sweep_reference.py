"""A reference for the calibration sweep: a messy random eval set, and brute force over
the runtime guard (what ContextGuard.select keeps, query by query), shared by the tests
of the sweep, its cuts, its stages and its conflict handling."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np

from ragguard import Candidate, ContextGuard, GuardConfig, ScoreWarning
from ragguard.calibration import EvalSet
from ragguard.policy import PolicyParams
from tests.calibration.conftest import random_trec_data

GAMMA = 1.0 / 3.0


def messy_evalset(seed: int) -> EvalSet:
    """Random qrels and a run with tied scores, missing scores and empty lists."""
    qrels, run = random_trec_data(seed, n_queries=80, max_cands=18)
    rng = np.random.default_rng(seed + 1)
    messy: dict[str, dict[str, float | None]] = {}
    for q, cands in run.items():
        out: dict[str, float | None] = {}
        for d, s in cands.items():
            r = rng.random()
            out[d] = None if r < 0.05 else (round(s / 4096.0, 1) if r < 0.4 else s / 4096.0)
        messy[q] = out
    distractors = {q: [d for d, g in labels.items() if g <= 0][:2] for q, labels in qrels.items()}
    return EvalSet.from_dicts(qrels, {"messy": messy}, distractors=distractors)


def _guard_for(params: PolicyParams, kind: object) -> ContextGuard:
    return ContextGuard(
        GuardConfig(
            score_kind=kind,
            max_k=params.max_k,
            min_k=params.min_k,
            relative_threshold=params.relative_threshold,
            cut=params.cut,
            gap_buffer=params.gap_buffer,
            autocut_jumps=params.autocut_jumps,
            max_tokens=params.max_tokens,
            near_duplicate_threshold=params.near_duplicate_threshold,
            conflicts=params.conflicts,
            conflict_similarity=params.conflict_similarity,
        )
    )


def brute_force(
    es: EvalSet,
    run: str,
    points: tuple[PolicyParams, ...],
    qids: list[str],
    texts: Mapping[str, str] | None = None,
):
    """Per setting, the mean UDCG, recall and passages of what ContextGuard.select keeps,
    query by query, with UDCG and recall computed here from their definitions (passage
    ``texts`` for the stages after the cut)."""
    arrays = es.arrays(run)
    utility: dict[str, dict[str, float]] = {}
    for row, q in enumerate(arrays.qids):
        ids = arrays.doc_ids(row)
        utility[q] = dict(zip(ids, arrays.utility[row, : len(ids)].tolist(), strict=True))
    relevant = {q: {d for d, g in es.labels[q].grades.items() if g >= 1} for q in qids}
    cands = {
        q: [
            Candidate(d, (texts or {}).get(d, ""), None if math.isnan(s) else s)
            for d, s in es.runs[run].candidates.get(q, {}).items()
        ]
        for q in qids
    }
    out = np.zeros((len(points), 3))
    for i, p in enumerate(points):
        guard = _guard_for(p, es.runs[run].score_kind)
        udcg, recall, passages = [], [], []
        for q in qids:
            with warnings.catch_warnings():
                # the random runs are in no retriever's order: the guard's direction check
                # rightly warns on short lists that happen to run the wrong way
                warnings.simplefilter("ignore", ScoreWarning)
                kept = [c.id for c in guard.select(q, cands[q]).kept]
            u = [utility[q][d] for d in kept]
            pos = sum(max(x, 0.0) for x in u)
            neg = sum(min(x, 0.0) for x in u)
            udcg.append(1.0 / (1.0 + math.exp(-(pos + GAMMA * neg) / len(u))) if u else 0.0)
            rel = relevant[q]
            recall.append(len(rel & set(kept)) / len(rel) if rel else 0.0)
            passages.append(len(kept))
        out[i] = (np.mean(udcg), np.mean(recall), np.mean(passages))
    return out
