"""The sweep's large-data paths give the answers of the plain ones: metric tables
recomputed chunk by chunk (``lazy``), per-group sums for cross-validation, and the
bootstrap's counted resamples."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import Check, EvalSet, calibrate, evaluate, load_inputs
from ragguard.calibration.fit.statistics import bootstrap_means
from ragguard.calibration.fit.sweep import (
    PASSAGES,
    GroupedMeans,
    SweepGrid,
    SweepKernel,
    sweep,
)

sweep_module = importlib.import_module("ragguard.calibration.fit.sweep")
NOTES = Path(__file__).resolve().parents[3] / "examples" / "notes"
METRICS = ("udcg", "evidence_recall", "precision", "recall", "ndcg@5", "distractor_rate", PASSAGES)


@pytest.fixture(scope="module")
def notes() -> EvalSet:
    return load_inputs(NOTES)


def _lazy(monkeypatch: pytest.MonkeyPatch, cells: int = 7 * 11) -> None:
    """Tables recomputed when read, in chunks of a few rows (several chunks per set,
    prefix sums in pieces of them); the policy's cuts in chunks too."""
    monkeypatch.setattr(sweep_module, "TABLE_BUDGET", 0)
    monkeypatch.setattr(sweep_module, "CHUNK_CELLS", cells)
    monkeypatch.setattr(sweep_module, "ROW_CELLS", cells // 2)
    monkeypatch.setattr(sweep_module, "PREFIX_CELLS", 3 * 11)


def test_lazy_tables_give_the_same_sweep_values_and_tables(
    notes: EvalSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays = notes.arrays("dense-minilm")
    points = SweepGrid().points()
    rows = np.arange(0, arrays.n_queries, 3)
    eager = SweepKernel(arrays, METRICS, 10)
    whole = sweep(eager, points, METRICS[:-1], rows=rows)
    _lazy(monkeypatch)
    lazy = SweepKernel(arrays, METRICS, 10)
    assert lazy.lazy and not eager.lazy
    chunked = sweep(lazy, points, METRICS[:-1], rows=rows)
    assert (chunked.kept == whole.kept).all()
    np.testing.assert_allclose(chunked.means, whole.means, rtol=1e-12, atol=1e-12)
    kept = whole.kept[37].astype(np.intp)
    np.testing.assert_allclose(lazy.values(kept), eager.values(kept), rtol=1e-12)
    np.testing.assert_allclose(lazy.table("udcg"), eager.table("udcg"), rtol=1e-12)
    # and the table is what evaluate() gives at each context size
    for c in (0, 1, 4, 10):
        cut = np.full(arrays.n_queries, c)
        per = evaluate(arrays, metrics=["udcg"], per_query=True, cut=cut)["udcg"]
        np.testing.assert_allclose(lazy.table("udcg")[:, c], list(per.values()), rtol=1e-12)


def test_group_sums_answer_unions_and_leave_other_rows_to_direct_means(
    notes: EvalSet,
) -> None:
    arrays = notes.arrays("bm25")
    kernel = SweepKernel(arrays, METRICS, 10)
    result = sweep(kernel, SweepGrid(), METRICS[:-1])
    q = arrays.n_queries
    groups = np.array_split(np.random.default_rng(1).permutation(q), 4)
    grouped = GroupedMeans(kernel, result.kept, groups)
    union = np.sort(np.concatenate([groups[0], groups[2]]))
    fast = grouped.means(union)
    assert fast is not None
    # the reference: each setting's mean by evaluate() over the same queries
    for point in (0, 55, len(result.points) - 1):
        per = evaluate(arrays, metrics=list(METRICS[:-1]), per_query=True,
                       cut=result.kept[point])  # fmt: skip
        for j, m in enumerate(METRICS[:-1]):
            v = np.array(list(per[m].values()))[union]
            expected = np.nanmean(v) if np.isfinite(v).any() else np.nan
            np.testing.assert_allclose(fast[point, j], expected, rtol=1e-12)
    assert grouped.means(union[:-1]) is None  # not a union: aggregated directly
    assert grouped.means(np.concatenate([union, union[:1]])) is None  # a repeated row
    with_groups = SweepGrid().points()
    res = sweep(kernel, with_groups, METRICS[:-1], rows=union, groups=groups)
    np.testing.assert_allclose(res.means, fast, rtol=1e-12)
    partial = res.restricted(kernel, union[:-1])
    direct = result.restricted(kernel, union[:-1])
    np.testing.assert_allclose(partial.means, direct.means, rtol=1e-12)


def test_calibrate_chooses_the_same_with_lazy_tables(
    notes: EvalSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = calibrate(notes, constraints=["evidence_recall>=0.8"], check=Check(n_bootstrap=200))
    _lazy(monkeypatch, cells=20 * 11)
    b = calibrate(notes, constraints=["evidence_recall>=0.8"], check=Check(n_bootstrap=200))
    for ra, rb in zip(a.runs, b.runs, strict=True):
        assert (ra.chosen, ra.written, ra.baseline) == (rb.chosen, rb.written, rb.baseline)
        np.testing.assert_allclose(ra.full.means, rb.full.means, rtol=1e-12, atol=1e-12)
        assert ra.comparison.difference == rb.comparison.difference


def test_bootstrap_means_are_resamples_with_replacement() -> None:
    rng = np.random.default_rng(0)
    sample = np.column_stack([rng.normal(2.0, 1.0, 400), rng.random(400)])
    sample[::7, 1] = np.nan  # an NA metric: skipped per resample
    boot = bootstrap_means(sample, 4000, np.random.default_rng(5))
    assert boot.shape == (4000, 2)
    # a classic bootstrap's mean of means is the sample mean and its spread the
    # standard error s / sqrt(n)
    for j in range(2):
        col = sample[:, j][~np.isnan(sample[:, j])]
        se = col.std(ddof=1) / np.sqrt(col.size)
        assert abs(boot[:, j].mean() - col.mean()) < 4 * se / np.sqrt(4000) + 1e-3 * se
        assert boot[:, j].std() == pytest.approx(se, rel=0.06)
    # one resample is a draw of n rows with replacement: weights sum to n
    again = bootstrap_means(np.ones((50, 1)), 3, np.random.default_rng(1))
    assert np.allclose(again, 1.0)


@pytest.mark.parametrize("lazy", [False, True])
def test_values_of_several_settings_and_some_metrics_equal_evaluate(
    notes: EvalSet, monkeypatch: pytest.MonkeyPatch, lazy: bool
) -> None:
    if lazy:
        _lazy(monkeypatch)
    arrays = notes.arrays("bm25")
    kernel = SweepKernel(arrays, METRICS, 10)
    assert kernel.lazy is lazy
    result = sweep(kernel, SweepGrid(), METRICS[:-1])
    picked = [3, 40, 41, 200]
    wanted = ["ndcg@5", PASSAGES, "evidence_recall"]
    got = kernel.values(result.kept[picked], wanted)  # (settings, metrics, queries)
    assert got.shape == (len(picked), len(wanted), arrays.n_queries)
    for s, point in enumerate(picked):
        cut = result.kept[point].astype(np.intp)
        per = evaluate(arrays, metrics=wanted[::2], per_query=True, cut=cut)
        for j, m in ((0, "ndcg@5"), (2, "evidence_recall")):
            np.testing.assert_allclose(got[s, j], list(per[m].values()), rtol=1e-12)
        np.testing.assert_array_equal(got[s, 1], np.minimum(cut, arrays.n_present))
        np.testing.assert_array_equal(kernel.values(cut, wanted), got[s])


def test_optimal_k_in_chunks_equals_the_argmax_of_each_row(
    notes: EvalSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays = notes.arrays("dense-minilm")
    monkeypatch.setattr(sweep_module, "ROW_CELLS", 3 * arrays.shape[1])  # 3 rows a chunk
    rows = np.array([5, 0, 17, 17, 50])
    opt = sweep_module.optimal_k(arrays, 8)
    sub = sweep_module.optimal_k(arrays, 8, rows=rows)
    for row in range(arrays.n_queries):
        # the reference: cumulative utility of each scored prefix, its first maximum
        u = arrays.utility[row, : min(8, int(arrays.n_valid[row]))].tolist()
        cum = [0.0]
        for x in u:
            cum.append(cum[-1] + x)
        assert opt.k[row] == cum.index(max(cum)), row
        assert opt.utility[row] == pytest.approx(max(cum), abs=1e-12)
    assert sub.k.tolist() == opt.k[rows].tolist()
    assert sub.counts.sum() == rows.size
