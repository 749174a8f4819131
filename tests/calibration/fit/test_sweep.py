"""The calibration sweep and calibrate(): equal to the runtime guard query by query,
equal to evaluate() under the policy's cut, reproducible splits, honest intervals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard
from ragguard.calibration import (
    Check,
    Constraint,
    EvalSet,
    Split,
    SweepGrid,
    calibrate,
    evaluate,
    load_evalset,
    load_inputs,
)
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.calibration.fit.statistics import compare, split_queries
from ragguard.calibration.fit.sweep import (
    PASSAGES,
    SweepKernel,
    SweepResult,
    choose,
    describe_point,
    optimal_k,
    sweep,
)
from ragguard.calibration.metrics import METRICS
from ragguard.errors import EvalSetError
from ragguard.policy import CutRule, PolicyParams, cut_ranked
from ragguard.profiles import ProfileSpec, resolve_profile
from tests.calibration.conftest import random_trec_data
from tests.calibration.notes_beir import NOTES
from tests.calibration.sweep_reference import brute_force, messy_evalset


@pytest.fixture(scope="module")
def notes() -> EvalSet:
    return load_inputs(NOTES)


def brute_choice(values: np.ndarray, min_recall: float) -> int:
    """Best UDCG with recall >= floor; ties to fewer passages, then grid order."""
    feasible = [i for i in range(len(values)) if values[i, 1] >= min_recall]
    best = max(values[i, 0] for i in feasible)
    tied = [i for i in feasible if values[i, 0] >= best - 1e-12]
    fewest = min(values[i, 2] for i in tied)
    return min(i for i in tied if values[i, 2] <= fewest + 1e-12)


@pytest.mark.parametrize("run", ["bm25", "dense-minilm"])
def test_chosen_point_equals_brute_force_over_the_runtime_guard(notes: EvalSet, run: str) -> None:
    # folds=0: no cross-validation, the grid's best point (what brute force finds)
    result = calibrate(
        notes, constraints=["recall>=0.8"], runs=[run], split=Split(holdout=0.3, seed=0, folds=0)
    )
    r = result.recommended
    qids = [result.header.qids[i] for i in result.header.calibration_rows]
    values = brute_force(notes, run, r.sweep.points, qids)
    # every setting: the sweep's means are what the guard does, query by query
    np.testing.assert_allclose(r.sweep.column("udcg"), values[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.sweep.column("recall"), values[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.sweep.column(PASSAGES), values[:, 2], rtol=0, atol=1e-12)
    assert r.chosen == brute_choice(values, 0.8)
    assert r.feasible
    # and the choice is not a degenerate one on this data
    assert r.chosen_params.relative_threshold > 0


def test_sweep_equals_the_guard_on_ties_missing_scores_and_empty_lists() -> None:
    es = messy_evalset(3)
    grid = SweepGrid(max_k=(1, 2, 4, 7), thresholds=(0.0, 0.3, 0.75, 0.95))
    result = sweep(es.arrays("messy"), grid, ["udcg", "recall"])
    values = brute_force(es, "messy", result.points, list(es.qids))
    np.testing.assert_allclose(result.column("udcg"), values[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column("recall"), values[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column(PASSAGES), values[:, 2], rtol=0, atol=1e-12)


def test_sweep_means_equal_evaluate_under_the_policy_cut() -> None:
    es = messy_evalset(7)
    arrays = es.arrays("messy")
    metrics = [*METRICS, "udcg@3", "ndcg@5", "f2", "udcg(gamma=0.5)"]
    extra = [PolicyParams(max_k=k, relative_threshold=0.5, keep_invalid=True) for k in (2, 5)]
    points = (*SweepGrid.up_to(6).points(), *extra)
    result = sweep(arrays, points, metrics)
    ranked = arrays.ranked()
    for i, p in enumerate(points):  # settings sharing a policy call keep what their own would
        assert (result.kept[i] == cut_ranked(ranked, p).n_kept).all(), describe_point(p)
    for i in [*range(0, len(points), 9), len(points) - 1]:
        cut = cut_ranked(ranked, points[i]).n_kept
        expected = evaluate(arrays, metrics=metrics, cut=cut)
        got = result.point_means(i)
        for m in metrics:
            assert got[m] == pytest.approx(expected[m], abs=1e-12, nan_ok=True), (i, m)


@pytest.mark.parametrize("k", [None, 3])
def test_a_cut_equals_truncating_the_run(k: int | None) -> None:
    """Every metric with a per-query cut c equals the metric of the run truncated to its
    first c ranked candidates (PROC and %PROC excepted: their pool is the whole list)."""
    es = messy_evalset(9)
    arrays = es.arrays("messy")
    rng = np.random.default_rng(0)
    cut = rng.integers(0, arrays.n_present + 1).astype(np.intp)
    cut[:5] = [0, 1, 2, 30, 0]  # 30: longer than any list
    truncated = {}
    for row, q in enumerate(arrays.qids):
        ids = arrays.doc_ids(row)[: cut[row]]
        raw = arrays.raw[row, : len(ids)].tolist()
        truncated[q] = {d: None if math.isnan(x) else x for d, x in zip(ids, raw, strict=True)}
    short = EvalSet.from_dicts(
        {q: dict(es.labels[q].grades) for q in es.qids},
        {"t": truncated},
        distractors={q: sorted(es.labels[q].distractors) for q in es.qids},
    ).arrays("t")
    for name in METRICS:
        if name in ("proc", "pct_proc", "evidence_recall", "evidence_coverage"):
            continue  # their pool is the whole candidate list, not the kept prefix
        text = name if k is None else f"{name}@{k}"
        got = evaluate(arrays, metrics=text, per_query=True, cut=cut)[text]
        expected = evaluate(short, metrics=text, per_query=True)[text]
        for q in es.qids:
            assert got[q] == pytest.approx(expected[q], abs=1e-12, nan_ok=True), (text, q)


def test_rows_restrict_the_means_not_the_cuts() -> None:
    arrays = messy_evalset(5).arrays("messy")
    rows = np.arange(0, arrays.n_queries, 3)
    part = sweep(arrays, SweepGrid.up_to(3), ["udcg"], rows=rows)
    full = sweep(arrays, SweepGrid.up_to(3), ["udcg"])
    assert (part.kept == full.kept).all()
    kernel = SweepKernel(arrays, ["udcg", PASSAGES], 3)
    assert np.array_equal(full.restricted(kernel, rows).means, part.means)
    for i in (0, 5, 17):
        per = evaluate(arrays, metrics="udcg", per_query=True, cut=full.kept[i])["udcg"]
        expected = np.mean([per[arrays.qids[r]] for r in rows])
        assert part.mean(i, "udcg") == pytest.approx(expected, abs=1e-12)


def test_grid_points_and_labels() -> None:
    grid = SweepGrid()
    points = grid.points()
    assert len(points) == 10 * 20 + 10 * 4
    assert points[0] == PolicyParams(max_k=1, min_k=1)
    assert describe_point(points[0]) == "top-1"
    assert describe_point(PolicyParams(max_k=5, relative_threshold=0.7)) == "max_k=5, t=0.70"
    assert describe_point(PolicyParams(max_k=5, cut=CutRule.GAP, gap_buffer=1)) == "max_k=5, gap+1"
    for bad in ({"max_k": ()}, {"max_k": (3, 2)}, {"thresholds": (0.5, 1.5)}, {"min_k": 2}):
        with pytest.raises(ValueError):
            SweepGrid(**bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- choosing


def _result(means: list[list[float]], metrics: tuple[str, ...]) -> SweepResult:
    points = tuple(PolicyParams(max_k=i + 1) for i in range(len(means)))
    return SweepResult(
        points, metrics, np.array(means), np.arange(1), np.zeros((len(means), 1), np.int32)
    )


def test_choose_ties_constraints_and_fallback() -> None:
    cols = ("udcg", "recall", "distractor_rate", PASSAGES)
    res = _result(
        [
            [0.70, 0.60, 0.10, 1.0],  # best udcg, low recall
            [0.65, 0.85, 0.30, 3.0],  # tied for best feasible, more passages
            [0.65, 0.90, 0.20, 2.0],  # tied, fewer passages: wins
            [0.50, 0.95, 0.40, 5.0],
        ],
        cols,
    )
    assert choose(res, "udcg") == (0, True)
    assert choose(res, "udcg", [Constraint.parse("recall>=0.8")]) == (2, True)
    assert choose(res, "distractor_rate") == (0, True)  # minimised
    cons = [Constraint.parse("recall>=0.8"), Constraint.parse("distractor_rate<=0.25")]
    assert choose(res, "udcg", cons) == (2, True)
    # nothing meets recall >= 0.99: the least violation (0.95) is chosen, flagged
    assert choose(res, "udcg", [Constraint.parse("recall>=0.99")]) == (3, False)
    assert choose(res, "udcg", among=[1, 3]) == (1, True)


def test_constraint_syntax() -> None:
    c = Constraint.parse(" recall >= 0.8 ")
    assert (c.metric, c.op, c.bound, str(c)) == ("recall", ">=", 0.8, "recall>=0.8")
    assert str(Constraint.parse("distractor_rate<=0.2")) == "distractor_rate<=0.2"
    for bad in ("recall > 0.8", "recall>=x", "nonsense>=1", "recall"):
        with pytest.raises(ValueError):
            Constraint.parse(bad)


# --------------------------------------------------------------------------- optimal k


def test_optimal_k_by_hand() -> None:
    es = EvalSet.from_dicts(
        {"q1": {"b": 1, "c": 1}, "q2": {}, "q3": {"a": 1}, "q4": {"a": 1}},
        {
            "r": {
                "q1": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6},
                "q2": {"a": 0.9, "b": 0.8},
                "q3": {"a": 0.9, "b": 0.8},
                "q4": {"a": None, "b": 0.5},
            }
        },
        utilities={
            "q1": {"a": -1.0, "b": 1.0, "c": 1.0, "d": -0.5},  # cum 0,-1,0,1,0.5 -> 3
            "q2": {"a": -0.5, "b": -0.5},  # every prefix harms -> 0
            "q3": {"a": 1.0, "b": 0.0},  # cum 0,1,1: the smallest peak -> 1
            "q4": {"a": 1.0, "b": -1.0},  # 'a' has no score: never kept -> 0
        },
    )
    opt = optimal_k(es.arrays("r"), max_k=5)
    assert opt.k.tolist() == [3, 0, 1, 0]
    assert opt.utility.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert opt.distribution() == {0: 2, 1: 1, 3: 1}
    assert opt.counts.size == 6


# --------------------------------------------------------------------------- split, bootstrap


def test_split_is_reproducible_by_seed() -> None:
    a_cal, a_held = split_queries(51, 0.3, seed=0)
    b_cal, b_held = split_queries(51, 0.3, seed=0)
    assert (a_cal == b_cal).all() and (a_held == b_held).all()
    assert a_held.size == 15 and a_cal.size == 36
    assert set(a_cal.tolist()) | set(a_held.tolist()) == set(range(51))
    assert not set(a_cal.tolist()) & set(a_held.tolist())
    c_cal, _ = split_queries(51, 0.3, seed=1)
    assert (c_cal != a_cal).any()
    cal, held = split_queries(10, 0.0, seed=0)
    assert cal.tolist() == list(range(10)) and held.size == 0
    assert split_queries(10, 0.01, seed=0)[1].size == 1  # at least one held out
    with pytest.raises(EvalSetError, match="no queries left"):
        split_queries(1, 0.3, seed=0)
    with pytest.raises(ValueError, match="holdout"):
        split_queries(10, 1.0, seed=0)


def test_calibrate_is_reproducible_and_the_seed_matters(notes: EvalSet) -> None:
    a = calibrate(
        notes,
        constraints=["evidence_recall>=0.8"],
        split=Split(seed=3),
        check=Check(n_bootstrap=300),
    )
    b = calibrate(
        notes,
        constraints=["evidence_recall>=0.8"],
        split=Split(seed=3),
        check=Check(n_bootstrap=300),
    )
    assert (a.header.heldout_rows == b.header.heldout_rows).all()
    for ra, rb in zip(a.runs, b.runs, strict=True):
        assert ra.chosen == rb.chosen and ra.baseline == rb.baseline
        assert ra.comparison.difference == rb.comparison.difference
    c = calibrate(
        notes,
        constraints=["evidence_recall>=0.8"],
        split=Split(seed=4),
        check=Check(n_bootstrap=300),
    )
    assert set(c.header.heldout_rows.tolist()) != set(a.header.heldout_rows.tolist())


def test_comparison_means_intervals_and_verdicts(notes: EvalSet) -> None:
    arrays = notes.arrays("dense-minilm")
    kernel = SweepKernel(arrays, ["udcg", "distractor_rate", PASSAGES], 10)
    rows = np.arange(arrays.n_queries)
    top3 = kernel.cut(PolicyParams(max_k=3))
    guarded = kernel.cut(PolicyParams(max_k=4, relative_threshold=0.85))
    metrics = ["udcg", "distractor_rate"]
    same = compare(kernel, top3, top3, rows, metrics, split="x", n_bootstrap=200, seed=0)
    assert same.difference["udcg"].as_dict() == {"mean": 0.0, "low": 0.0, "high": 0.0}
    assert same.verdict("udcg") == "no clear difference"
    c = compare(kernel, top3, guarded, rows, metrics, split="x", n_bootstrap=500, seed=0)
    per = evaluate(arrays, metrics=metrics, per_query=True, cut=guarded)
    assert c.guarded["udcg"].mean == pytest.approx(np.mean(list(per["udcg"].values())))
    for m in metrics:
        iv = c.difference[m]
        assert iv.low <= iv.mean <= iv.high
    # on all 51 notes queries, the threshold clearly lowers the distractor rate
    assert c.verdict("distractor_rate") == "better"
    assert c.verdict("udcg") == "better"


# --------------------------------------------------------------------------- config


def test_config_round_trips_into_a_guard_that_keeps_what_was_measured(
    notes: EvalSet, tmp_path: Path
) -> None:
    result = calibrate(notes, objective="udcg", constraints=["evidence_recall>=0.8"])
    path = result.save_config(tmp_path / "ragguard.toml")
    guard = ContextGuard.from_file(path)
    r = result.recommended
    assert guard.config.policy_params() == r.written_params
    assert guard.config.score_kind is r.score_kind
    kept = []
    for q in result.header.qids:
        cands = [Candidate(d, score=s) for d, s in notes.runs[r.name].candidates[q].items()]
        kept.append(len(guard.select(q, cands).kept))
    assert kept == r.written_kept.tolist()
    prov = guard.config.provenance
    assert prov["data_sha256"] == data_fingerprint(notes)
    assert prov["profile"] == "support" and prov["objective"] == "udcg"
    assert prov["constraints"] == ["evidence_recall>=0.8"] and prov["constraints_met"] is True
    assert prov["run"] == r.name and prov["setting"] == describe_point(r.written_params)
    assert r.full is not None
    assert prov["metrics"]["udcg"] == pytest.approx(r.full.mean(r.written, "udcg"), rel=1e-5)
    assert prov["queries"] == {"total": 51, "calibration": 36, "heldout": 15, "unanswerable": 0}
    assert set(prov["files"]) == {str(NOTES / "evalset.jsonl"), *(
        str(NOTES / "runs" / f) for f in ("bm25.trec", "dense-minilm.trec")
    )}  # fmt: skip


def test_custom_profile_is_written_with_the_config(notes: EvalSet, tmp_path: Path) -> None:
    strict = resolve_profile(
        "notes-strict", {"notes-strict": ProfileSpec(base="medical", distractor_top_ranks=5)}
    )
    result = calibrate(notes, profile=strict, runs=["bm25"], split=Split(holdout=0))
    guard = ContextGuard.from_file(result.save_config(tmp_path / "c.toml"))
    assert guard.profile == strict
    assert result.recommended.comparison.split == "all queries (in-sample)"


def test_run_without_scores_sweeps_plain_top_k_only() -> None:
    qrels, run = random_trec_data(11, n_queries=30)
    es = EvalSet.from_dicts(qrels, {"ranked": {q: dict.fromkeys(c) for q, c in run.items()}})
    assert es.runs["ranked"].score_kind is None
    result = calibrate(es, split=Split(holdout=0), check=Check(n_bootstrap=50))
    r = result.recommended
    assert all(not p.uses_scores for p in r.sweep.points)
    assert len(r.sweep.points) == 10
    assert result.config().score_kind is None


def test_no_queries_left_and_bad_arguments(notes: EvalSet) -> None:
    es = EvalSet.from_dicts({"q1": {"a": 1}, "q2": {"b": 1}}, {"r": {"x1": {"a": 0.5}}})
    with pytest.raises(EvalSetError, match="no queries left: run 'r' has no candidates"):
        calibrate(es, split=Split(holdout=0))
    with pytest.raises(EvalSetError, match="no runs"):
        calibrate(EvalSet.from_dicts({"q1": {"a": 1}}))
    with pytest.raises(ValueError, match="no run named"):
        calibrate(notes, runs=["nope"])
    with pytest.raises(ValueError, match="unknown metric"):
        calibrate(notes, objective="nonsense")
    with pytest.raises(ValueError, match=r"bound must be in \[0, 1\], got 1.5"):
        calibrate(notes, constraints=["evidence_recall>=1.5"])
    with pytest.raises(ValueError, match="baseline_k"):
        calibrate(notes, check=Check(baseline_k=50))


def test_baseline_k_fixes_the_baseline(notes: EvalSet) -> None:
    result = calibrate(notes, runs=["bm25"], check=Check(n_bootstrap=100, baseline_k=5))
    assert result.recommended.baseline_params == PolicyParams(max_k=5)


def test_data_fingerprint_depends_on_content_not_files(tmp_path: Path) -> None:
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}}
    run = {"q1": {"a": 0.9, "b": 0.4}, "q2": {"c": 0.7, "a": 0.1}}
    from_dicts = EvalSet.from_dicts(qrels, {"run": run})
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\nq1 0 b 0\nq2 0 c 2\n")
    (tmp_path / "run.trec").write_text(
        "q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.4 x\nq2 Q0 c 1 0.7 x\nq2 Q0 a 2 0.1 x\n"
    )
    from_files = load_evalset(tmp_path / "qrels.txt", runs=tmp_path / "run.trec")
    assert data_fingerprint(from_dicts) == data_fingerprint(from_files)
    changed = EvalSet.from_dicts({**qrels, "q2": {"c": 1}}, {"run": run})
    assert data_fingerprint(changed) != data_fingerprint(from_dicts)
