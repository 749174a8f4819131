"""The second search's space: retrieval depth x rerank cut x ``max_k``, as one decision, on the
lists the guard's rerank stage builds (map fitted on the calibration queries; a failed call cut
on retrieval scores, as ``fail_open`` does); docs/guides/rerank.md says how it is chosen."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.arrays import EvalArrays, Ranking
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.options import RerankSearch
from ragguard.calibration.fit.plan import FitPlan
from ragguard.calibration.fit.probability import (
    brier_score,
    fit_probability_map,
    reliability,
)
from ragguard.calibration.fit.rerank_scores import RerankScores
from ragguard.calibration.fit.risk import EVIDENCE
from ragguard.calibration.fit.space import FittedRerank, SearchSpace
from ragguard.calibration.fit.statistics import checked_rows
from ragguard.calibration.fit.sweep import (
    F64,
    PASSAGES,
    I,
    SweepGrid,
    SweepKernel,
    SweepResult,
    sweep,
)
from ragguard.errors import EvalSetError, RerankError
from ragguard.policy import PolicyParams
from ragguard.probability import rerank_probabilities, to_logit
from ragguard.scores import ScoreKind, normalize

logger = logging.getLogger(__name__)


def _reranked_arrays(
    arrays: EvalArrays, probs: F64, sizes: I, top_n: int, failed: NDArray[np.bool_]
) -> EvalArrays:
    """The lists the rerank stage hands the policy at ``top_n``: each row's first ``min(top_n,
    sizes[r])`` candidates (``arrays``' ranked order), ranked by their probabilities ``probs``
    (column ``j``: the row's ``j``-th candidate) as the runtime policy ranks them."""
    q = arrays.n_queries
    depth = probs.shape[1]
    m = np.where(failed, arrays.n_present, np.minimum(sizes, top_n))
    width = int(m.max()) if q else 0
    cols = np.arange(width)[None, :]
    present = cols < m[:, None]
    raw = np.full((q, width), np.nan)  # the list's scores, in retrieval order
    w = min(width, depth)
    raw[:, :w] = probs[:, :w]
    if failed.any():
        n = arrays.n_present[failed, None]
        stand_in = 1.0 - cols / (n + 1)
        raw[failed] = np.where(cols < arrays.n_valid[failed, None], stand_in, np.nan)
    raw[~present] = np.nan
    ranked = Ranking.of(raw, present, ScoreKind.PROBABILITY, rrf_k=60)
    perm = np.where(present, ranked.order, -1)
    ordered = np.take_along_axis(raw, np.maximum(perm, 0), axis=1)
    return arrays.reordered(perm, scores=ordered, score_kind=ScoreKind.PROBABILITY)


def _fail_open(params: PolicyParams, kind: ScoreKind | None) -> PolicyParams:
    """What the guard runs on retrieval scores when a rerank call fails: the point's guard-level
    settings, without the rules that read rerank probabilities (none at all on an unscored run)."""
    return replace(params, min_score=None, expected_utility=None, score_rules=kind is not None)


def _failed_calls(
    run: str,
    scores: RerankScores,
    qids: Sequence[str],
    lists: Sequence[list[str]],
    raw: Sequence[F64],
    tops: Sequence[int],
) -> dict[int, NDArray[np.bool_]]:
    """Check that the scores cover the run, and return ``top_n -> (Q,) failed``: a query fails at
    ``top_n`` when a candidate among its first ``top_n`` has no finite score (a failed call leaves
    none)."""
    depth = max(tops)
    if not any(np.isfinite(r).any() for r in raw):
        note = scores.failure_note()
        if note is not None:
            raise RerankError(
                f"the reranker failed: {note}; no candidate of run {run!r} has a score"
            )
        raise EvalSetError(
            f"no candidate of run {run!r} has a rerank score from {scores.name!r}; do the "
            "query and passage ids of the rerank scores match the run's?"
        )
    absent = [
        q
        for q, docs in zip(qids, lists, strict=True)
        if docs and q not in scores.scores and q not in scores.failed
    ]
    if absent:
        n = sum(1 for docs in lists if docs)
        raise EvalSetError(
            f"{scores.source} has no score for {len(absent)} of {n} queries of run {run!r} "
            f"(e.g. {', '.join(absent[:3])}); score their candidates (the first {depth} by "
            "retrieval score), or leave those queries out of the eval set"
        )
    first_bad = np.array(
        [int(np.argmin(np.isfinite(r))) if not np.isfinite(r).all() else r.size for r in raw],
        dtype=np.intp,
    )
    sizes = np.array([len(docs) for docs in lists], dtype=np.intp)
    return {n: first_bad < np.minimum(n, sizes) for n in tops}


def _failure_note(
    scores: RerankScores,
    qids: Sequence[str],
    lists: Sequence[list[str]],
    raw: Sequence[F64],
    failed: Mapping[int, NDArray[np.bool_]],
) -> str | None:
    """One line on the queries swept as failed calls: the failed calls, and the queries
    without a usable score for a candidate the reranker would be sent, per ``top_n``."""
    parts = [note] if (note := scores.failure_note()) is not None else []
    called = np.array([q in scores.failed for q in qids], dtype=np.bool_)
    unscored = {n: int((bad & ~called).sum()) for n, bad in failed.items()}
    if any(unscored.values()):
        r = int(np.flatnonzero(failed[max(failed)] & ~called)[0])
        at = int(np.argmin(np.isfinite(raw[r])))
        counts = ", ".join(f"{k} at top-{n}" for n, k in unscored.items())
        parts.append(
            f"queries without a usable rerank score for a candidate the reranker would be "
            f"sent: {counts} (e.g. {qids[r]}/{lists[r][at]}, retrieval rank {at + 1})"
        )
    if not parts:
        return None
    return (
        "; ".join(parts) + "; those queries are swept as the guard selects when a rerank "
        "call fails (rerank.on_failure='fail_open': on retrieval scores)"
    )


def _top_k_path(pts: Sequence[PolicyParams]) -> dict[str, list[int]]:
    path = [j for j, p in enumerate(pts) if p.relative_threshold == 0 and not p.uses_scores]
    return {"top-k": sorted(path, key=lambda j: -pts[j].max_k)}


def _guarantee_paths(
    plan: FitPlan, settings: Sequence[PolicyParams], tops: Sequence[int]
) -> dict[str, list[int]]:
    """Per ``top_n`` (and conflict setting swept), the reranked top-k, largest first."""
    stages, n = plan.stages, len(settings)
    per = _top_k_path(settings) if stages is None else stages.paths(settings, _top_k_path)
    return {
        f"rerank top-{top}, {name}": [t * n + j for j in path]
        for t, top in enumerate(tops)
        for name, path in per.items()
        if path
    }


def rerank_space(
    evalset: EvalSet,
    run: str,
    scores: RerankScores,
    *,
    plan: FitPlan,
    retrieval_kernel: SweepKernel,
    caps: SweepGrid,
    option: RerankSearch,
) -> SearchSpace:
    """The second search's space over run ``run``: retrieval depth x rerank cut x ``max_k``, with
    ``plan``'s stages after the cut on every setting, as the guard runs them after reranking."""
    stages, calibration_rows, max_k = plan.stages, plan.calibration_rows, caps.max_k
    arrays = retrieval_kernel.arrays
    depth_all = int(arrays.n_valid.max()) if arrays.n_queries else 0
    tops = sorted({min(n, depth_all) for n in option.grid.top_n if depth_all} or {1})
    depth = max(tops)
    lists = [
        arrays.doc_ids(row)[: int(arrays.n_valid[row])][:depth] for row in range(arrays.n_queries)
    ]
    raw = [
        np.array([scores.get(q, d) for d in docs])
        for q, docs in zip(arrays.qids, lists, strict=True)
    ]
    failed = _failed_calls(run, scores, arrays.qids, lists, raw, tops)  # per top_n
    failed_qids = {n: tuple(arrays.qids[r] for r in np.flatnonzero(b)) for n, b in failed.items()}
    failures = _failure_note(scores, arrays.qids, lists, raw, failed)
    if failures is not None:
        logger.warning("%s", failures)

    # 1. the probability map, on the calibration queries' reranked candidates
    relevant = plan.utility_rules.relevant_grade
    grades = [
        np.array([evalset.labels[q].grades.get(d, 0) >= relevant for d in docs], dtype=float)
        for q, docs in zip(arrays.qids, lists, strict=True)
    ]

    def pairs(rows: I) -> tuple[F64, F64]:
        zs = [to_logit(raw[r], scores.score_kind) for r in rows.tolist()]
        ys = [grades[r] for r in rows.tolist()]
        if not zs:
            return np.empty(0), np.empty(0)
        return np.concatenate(zs), np.concatenate(ys)

    z_fit, y_fit = pairs(calibration_rows)
    n_fit = int(np.isfinite(z_fit).sum())
    try:
        pmap = fit_probability_map(z_fit, y_fit, option.probability_map)
    except EvalSetError as exc:
        raise EvalSetError(
            f"cannot fit the rerank probability map on the {n_fit} scored pairs of the "
            f"calibration queries: {exc}"
        ) from None

    # 2.-3. per top_n: the reranked lists, swept with the runtime policy
    # (Q, depth): row r's first len(lists[r]) candidates' probabilities, NaN after
    sizes = np.array([len(docs) for docs in lists], dtype=np.intp)
    probs = np.full((arrays.n_queries, depth), np.nan)
    for row, r in enumerate(raw):
        if len(r):
            probs[row, : len(r)] = rerank_probabilities(r, scores.score_kind, pmap).values[0]
    wanted = tuple(dict.fromkeys([*plan.metrics, *plan.reported, EVIDENCE, PASSAGES]))
    kernels: list[SweepKernel] = []
    results: list[SweepResult] = []
    settings = option.grid.points(max_k, caps.min_k, plan.profile)
    if stages is not None:  # (under each conflict setting swept)
        settings = list(stages.points(settings))
    # a failed call's query: the guard-level setting on retrieval scores, as the guard
    fallback_cuts = None
    if any(b.any() for b in failed.values()):
        fallback_cuts = retrieval_kernel.cuts([_fail_open(s, arrays.score_kind) for s in settings])
    for n in tops:
        bad = failed[n]
        reranked = _reranked_arrays(arrays, probs, sizes, n, bad)
        width = max(max_k)
        kernel = (
            SweepKernel(reranked, wanted, width)
            if stages is None
            else stages.kernel(reranked, wanted, width)
        )
        kernels.append(kernel)
        cuts = None
        if fallback_cuts is not None and bad.any():
            own = kernel.cuts(settings)
            cuts = own.astype(np.promote_types(own.dtype, fallback_cuts.dtype))
            cuts[:, bad] = fallback_cuts[:, bad]
        results.append(sweep(kernel, settings, wanted, rows=calibration_rows, cuts=cuts))
    paths = None if plan.target is None else _guarantee_paths(plan, settings, tops)

    # the probabilities' calibration, on the queries the choice is checked on
    rows, _ = checked_rows(calibration_rows, plan.heldout_rows)
    z_held, y_held = pairs(rows)
    raw_held = np.concatenate([raw[r] for r in rows.tolist()]) if rows.size else np.empty(0)
    p_raw = normalize(raw_held, scores.score_kind).values[0] if raw_held.size else raw_held
    p_map = pmap.apply_logit(z_held)
    stage = FittedRerank(
        scores=scores,
        probability_map=pmap,
        n_pairs_fit=n_fit,
        reliability_raw=reliability(p_raw, y_held),
        reliability_mapped=reliability(p_map, y_held),
        brier_raw=brier_score(p_raw, y_held),
        brier_mapped=brier_score(p_map, y_held),
        failed=failed_qids,
        failures=failures,
    )
    source = evalset.runs[run].source
    blocks, kerns = tuple(results), tuple(kernels)
    return SearchSpace(run, source, arrays, blocks, kerns, tuple(tops), paths=paths, stage=stage)
