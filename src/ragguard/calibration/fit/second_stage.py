r"""The second search's space: retrieval depth x rerank cut x ``max_k``, as one decision.

Given a retrieval run and second-stage scores (``ragguard.calibration.fit.rerank_scores``),
``rerank_space``

1. fits a map from the rerank score to p(relevant) (Platt or isotonic,
   ``ragguard.calibration.fit.probability``) on the **calibration** queries' reranked
   candidates (relevant: grade >= ``rules.relevant_grade``), and measures the raw and
   the mapped probabilities' Brier score and reliability on the **held-out** queries
   (``FittedRerank``);
2. for every ``top_n`` of the grid, builds the list the guard's rerank stage would
   build: the first ``top_n`` valid candidates by retrieval score (ties in run order, as
   ``ragguard.policy.rank`` breaks them), their rerank scores mapped to
   probabilities by ``ragguard.probability.rerank_probabilities`` (the runtime's
   own function), ranked by probability;
3. sweeps the rerank cuts on those probabilities with the runtime policy: relative
   threshold, minimum calibrated probability (``rerank.min_score``), gap and autocut,
   and the expected-utility rule with the profile's distractor penalty, each at every
   ``max_k``: one block of a ``SearchSpace`` per
   ``top_n``.

The search that runs over the retrieval settings then runs over this space
(``ragguard.calibration.fit.search.search``): it chooses a rule family by
cross-validation with the one-standard-error rule and its best ``top_n`` x cut x
``max_k`` on the calibration queries (with a recall guarantee: the smallest reranked
top-k certified by Learn-then-Test instead, see below); checks the choice on the
**held-out** queries, with paired bootstrap intervals, against the retrieval-only
choice and plain top-k; and refits the family on **all** queries (the map is not
refitted: the cut's meaning is tied to it). When the choice is **worse** on the
objective than either (the interval of the difference excludes 0), the search's
``fallback`` says so and the config leaves the stage off; otherwise the config holds
it (a no-clear-difference included), unless it misses a constraint the retrieval-only
setting meets or, with a guarantee, keeps a larger certified context:
[`CalibrationResult.written_setting`][ragguard.calibration.CalibrationResult.written_setting]
decides and says why.

**Guarantee.** The map is fitted on the calibration queries, so a cut on mapped
probabilities is not fixed before those queries are read; the reranked **order** is
(for a monotone map). A recall guarantee therefore tests, per ``top_n``, the reranked
top-k from the largest cap down (one fixed sequence per ``top_n``, Bonferroni across
them: the space's ``paths``), with evidence recall counted against every retrieved
candidate, so a shallow ``top_n`` cannot hide the evidence it never sends to the
reranker.

**Failed calls.** A query whose rerank call failed (the reranker raised, returned the
wrong number of scores or a NaN / infinite one: ``RerankScores.failed``), or that lacks a usable
score for a candidate among the ``top_n`` a setting sends to the reranker (a
precomputed run without that row), is what a failed call is at runtime. The config
leaves ``rerank.on_failure`` at ``fail_open``, so the guard then selects on retrieval
scores with the guard-level settings the config holds (the point's cap, floor,
threshold and cut; the rerank floor and the expected-utility rule read rerank
probabilities and do not apply); the sweep cuts that query so, at that ``top_n``, and
``FittedRerank.failures`` says how many and why. Queries with no rerank score at
all in a precomputed run are an error (they name no failed call).

**Utilities.** A candidate's utility comes from the retrieval run (the profile's rules:
a look-alike that retrieval ranks high is a hard negative) and stays with the candidate
when the reranker reorders it, so the retrieval-only and the two-stage settings are
scored on the same utilities, and pushing a distractor down helps only by keeping it out
of the context.

The config's ``[rerank]`` table (``FittedRerank.table``) is set so that
``ContextGuard(GuardConfig.from_file(p), reranker=...)`` does what was measured: the
guard-level ``max_k``, ``min_k``, ``cut`` and ``relative_threshold`` are the chosen
point's (the rerank policy is the guard's own with the rerank fields in place; on a
fail-open fallback the same settings apply to retrieval scores).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
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
    """The lists the rerank stage hands the policy at ``top_n``: each row's first
    ``min(top_n, sizes[r])`` candidates (``arrays``' ranked order), ranked by their
    probabilities ``probs`` (column ``j``: the row's ``j``-th candidate) as the runtime
    policy ranks them. A ``failed`` query's row is its retrieval list instead (every
    candidate, in retrieval order), which the guard selects from when the call fails.
    Its stand-in scores only keep that order: its cuts come from the retrieval kernel
    (``rerank_space``)."""
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
    ranked = Ranking.of(raw, present, ScoreKind.PROBABILITY, rrf_k=60).ranked()
    perm = np.where(present, ranked.order, -1)
    ordered = np.take_along_axis(raw, np.maximum(perm, 0), axis=1)
    return arrays.reordered(perm, scores=ordered, score_kind=ScoreKind.PROBABILITY)


def _fail_open(params: PolicyParams, kind: ScoreKind | None) -> PolicyParams:
    """What the guard runs on retrieval scores when a rerank call fails, under the config
    a two-stage point writes: the same cap,
    floor, threshold, cut and stages; no rerank floor or expected-utility rule (they read
    rerank probabilities); no score rule at all on an unscored run."""
    return replace(params, min_score=None, expected_utility=None, score_rules=kind is not None)


def _failed_calls(
    run: str,
    scores: RerankScores,
    qids: Sequence[str],
    lists: Sequence[list[str]],
    raw: Sequence[F64],
    depth: int,
) -> Callable[[int], NDArray[np.bool_]]:
    """Check that the scores cover the run, and return ``top_n -> (Q,) failed``: a query
    fails at ``top_n`` when a candidate among its first ``top_n`` has no finite score (a
    failed call leaves none).

    Raises:
        RerankError: every call failed.
        EvalSetError: no candidate has a score, or some queries have none at all and no
            failed call explains it.
    """
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

    def failed_at(top_n: int) -> NDArray[np.bool_]:
        out: NDArray[np.bool_] = first_bad < np.minimum(top_n, sizes)
        return out

    return failed_at


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
    """The second search's space over run ``run`` (retrieval depth x rerank cut x
    ``max_k``, see the module docstring), built on its ``FittedRerank``, with the stages
    after the cut of ``plan`` (token budget, near-duplicates) applied to every setting
    when given, as the runtime guard applies them after the rerank cut (and each
    setting tried under every conflict setting they sweep).

    ``plan`` holds the fit's profile, metrics, calibration and held-out queries and
    guarantee; ``retrieval_kernel`` is the run's retrieval sweep kernel (its arrays
    are the run's; a failed call's query is cut on it). ``caps`` is the retrieval grid
    (its caps and floor); ``option`` the rerank cuts and depths and the probability map.

    Raises:
        EvalSetError: no reranked candidate has a score; precomputed scores have no row
            for some queries; the calibration queries' reranked candidates are all
            relevant or all not, or their scores do not rise with relevance (the map
            would be decreasing or flat).
        RerankError: every rerank call failed.
    """
    profile, rules, stages = plan.profile, plan.utility_rules, plan.stages
    metrics, reported = plan.metrics, plan.reported
    calibration_rows, heldout_rows = plan.calibration_rows, plan.heldout_rows
    grid, max_k = option.grid, caps.max_k
    arrays = retrieval_kernel.arrays
    depth_all = int(arrays.n_valid.max()) if arrays.n_queries else 0
    tops = sorted({min(n, depth_all) for n in grid.top_n if depth_all} or {1})
    depth = max(tops)
    lists = [
        arrays.doc_ids(row)[: int(arrays.n_valid[row])][:depth] for row in range(arrays.n_queries)
    ]
    raw = [
        np.array([scores.get(q, d) for d in docs])
        for q, docs in zip(arrays.qids, lists, strict=True)
    ]
    failed_at = _failed_calls(run, scores, arrays.qids, lists, raw, depth)

    # the queries swept as a failed call, per top_n (see the module docstring)
    failed = {n: failed_at(n) for n in tops}
    failed_qids = {n: tuple(arrays.qids[r] for r in np.flatnonzero(b)) for n, b in failed.items()}
    failures = _failure_note(scores, arrays.qids, lists, raw, failed)
    if failures is not None:
        logger.warning("%s", failures)

    # 1. the probability map, on the calibration queries' reranked candidates
    relevant_grade = rules.relevant_grade
    grades = [
        np.array([evalset.labels[q].grades.get(d, 0) >= relevant_grade for d in docs], dtype=float)
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
    wanted = tuple(dict.fromkeys([*metrics, *reported, EVIDENCE, PASSAGES]))
    kernels: list[SweepKernel] = []
    results: list[SweepResult] = []
    settings = grid.points(max_k, caps.min_k, profile)
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
        if stages is None:
            kernel = SweepKernel(reranked, wanted, width)
        else:
            kernel = stages.kernel(reranked, wanted, width)
        kernels.append(kernel)
        cuts = None
        if fallback_cuts is not None and bad.any():
            own = kernel.cuts(settings)
            cuts = own.astype(np.promote_types(own.dtype, fallback_cuts.dtype))
            cuts[:, bad] = fallback_cuts[:, bad]
        results.append(sweep(kernel, settings, wanted, rows=calibration_rows, cuts=cuts))
    n_settings = len(settings)

    paths = None
    if plan.target is not None:

        def top_k_path(pts: Sequence[PolicyParams]) -> dict[str, list[int]]:
            path = [j for j, s_ in enumerate(pts) if s_.relative_threshold == 0]
            path = [j for j in path if not pts[j].uses_scores]
            return {"top-k": sorted(path, key=lambda j: -pts[j].max_k)}

        # per top_n (and per conflict setting swept), the reranked top-k, largest first
        per = top_k_path(settings) if stages is None else stages.paths(settings, top_k_path)
        paths = {
            f"rerank top-{n}, {name}": [t * n_settings + j for j in path]
            for t, n in enumerate(tops)
            for name, path in per.items()
            if path
        }

    # the probabilities' calibration, on the queries the choice is checked on
    rows, _ = checked_rows(calibration_rows, heldout_rows)
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
