"""The sweep's per-query cuts: stored small (``uint8`` up to 255 candidates, wider past
it), summed once per distinct cut vector, and read by every consumer without unsigned
wrap-around."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import Check, EvalSet, Guarantee, calibrate, load_inputs
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.fit.sweep import (
    PASSAGES,
    GroupedMeans,
    SweepGrid,
    SweepKernel,
    cut_dtype,
    distinct_rows,
    sweep,
)
from ragguard.calibration.metrics import compute
from ragguard.policy import PolicyParams, cut_ranked
from tests.calibration.notes_beir import NOTES
from tests.calibration.sweep_reference import messy_evalset

sweep_module = importlib.import_module("ragguard.calibration.fit.sweep")


def long_lists(n_queries: int, depth: int, seed: int) -> EvalSet:
    """Runs of up to ``depth`` scored candidates (some lists shorter), 1-5 relevant each."""
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for i in range(n_queries):
        n = depth if i % 3 else int(rng.integers(1, depth))
        scores = np.sort(rng.random(n))[::-1]
        run[f"q{i}"] = {f"d{j}": float(s) for j, s in enumerate(scores)}
        rel = rng.choice(depth, size=int(rng.integers(1, 6)), replace=False)
        qrels[f"q{i}"] = {f"d{j}": 1 for j in rel.tolist()}
    return EvalSet.from_dicts(qrels, {"run": run})


def test_cut_dtype_is_the_smallest_that_holds_the_bound() -> None:
    assert cut_dtype(0) == np.uint8
    assert cut_dtype(255) == np.uint8
    assert cut_dtype(256) == np.uint16
    assert cut_dtype(65_535) == np.uint16
    assert cut_dtype(65_536) == np.int32


def test_cuts_are_uint8_and_widen_past_255_without_wrapping() -> None:
    arrays = long_lists(12, 300, 4).arrays("run")
    ranked = arrays.ranked()
    small = sweep(arrays, SweepGrid(max_k=(5, 255), thresholds=(0.0, 0.5)), ["udcg"])
    assert small.kept.dtype == np.uint8
    wide = sweep(arrays, SweepGrid(max_k=(5, 256, 300), thresholds=(0.0, 0.5)), ["udcg"])
    assert wide.kept.dtype == np.uint16
    for result in (small, wide):
        for i, p in enumerate(result.points):
            assert (result.kept[i] == cut_ranked(ranked, p).n_kept).all(), p
    top = wide.index(next(p for p in wide.points if p.max_k == 300 and not p.uses_scores))
    assert int(wide.kept[top].max()) == 300  # plain top-300 of a full list
    # a kernel narrower than a cap still stores what the policy keeps (up to the list
    # length, 300), not a count wrapped into uint8
    narrow = SweepKernel(arrays, ["udcg", PASSAGES], 10)
    points = (*SweepGrid(max_k=(10, 300), thresholds=(0.0,), cut_rules=()).points(),)
    kept = narrow.cuts(points)
    assert kept.dtype == np.uint16
    assert (kept[1] == cut_ranked(ranked, points[1]).n_kept).all()


def test_distinct_rows_by_hand_and_on_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = np.array([[1, 2], [3, 4], [1, 2], [3, 4], [0, 0]], dtype=np.uint8)
    first, which = distinct_rows(kept)
    assert first.tolist() == [0, 1, 4]
    assert which.tolist() == [0, 1, 0, 1, 2]
    # every row hashing alike: only an element-wise comparison tells them apart
    monkeypatch.setattr(sweep_module, "hash", lambda _: 0, raising=False)
    first, which = distinct_rows(kept)
    assert first.tolist() == [0, 1, 4]
    assert which.tolist() == [0, 1, 0, 1, 2]
    assert distinct_rows(kept[:0])[0].size == 0
    # on some columns only: rows that differ elsewhere count as copies
    first, which = distinct_rows(np.array([[1, 5], [1, 6], [2, 5]]), np.array([0]))
    assert first.tolist() == [0, 2]
    assert which.tolist() == [0, 0, 1]


# metrics NA on some queries (no evidence, nothing judged) at some cuts but not others
NA_METRICS = ("udcg", "recall", "precision", "evidence_recall", "ra_nwg", "proc", "pct_proc")


def _reference(arrays: EvalArrays, points: Sequence[PolicyParams], rows: np.ndarray) -> np.ndarray:
    """(P, M) each setting's mean of each metric over ``rows`` (repeats counted), from
    the runtime policy's cut and the metric registry, one setting at a time."""
    ranked = arrays.ranked()
    out = np.empty((len(points), len(NA_METRICS) + 1))
    for i, p in enumerate(points):
        cut = cut_ranked(ranked, p).n_kept
        for j, m in enumerate(NA_METRICS):
            v = compute(arrays, m, cut=cut)[rows]
            out[i, j] = np.nanmean(v) if (~np.isnan(v)).any() else np.nan
        out[i, -1] = np.minimum(cut, arrays.n_present)[rows].mean()
    return out


@pytest.mark.parametrize("lazy", [False, True])
def test_means_with_duplicated_cut_vectors_equal_brute_force(
    lazy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if lazy:  # tables recomputed in chunks of a few rows
        monkeypatch.setattr(sweep_module, "TABLE_BUDGET", 0)
        monkeypatch.setattr(sweep_module, "CHUNK_CELLS", 11 * 40)
        monkeypatch.setattr(sweep_module, "ROW_CELLS", 5 * 18)
        monkeypatch.setattr(sweep_module, "PREFIX_CELLS", 2 * 41)
    monkeypatch.setattr(sweep_module, "GATHER_CELLS", 64)  # several blocks of settings
    arrays = messy_evalset(11).arrays("messy")
    # caps past the longest list (18) and high thresholds cut alike: many duplicates
    grid = SweepGrid(max_k=(1, 3, 7, 30, 40), thresholds=(0.0, 0.5, 0.9, 0.95))
    points = grid.points()
    kernel = SweepKernel(arrays, (*NA_METRICS, PASSAGES), 40)
    assert kernel.lazy is lazy
    q = arrays.n_queries
    groups = np.array_split(np.random.default_rng(2).permutation(q), 4)
    result = sweep(kernel, points, NA_METRICS, groups=groups)
    first, which = distinct_rows(result.kept)
    assert first.size <= len(points) // 2
    union = np.sort(np.concatenate([groups[1], groups[3]]))
    fast = result.restricted(kernel, union)
    np.testing.assert_allclose(fast.means, _reference(arrays, points, union), atol=1e-12)
    # rows that are no union of groups (one repeated): summed directly, with weights
    rows = np.concatenate([union[:-3], union[:5]])
    direct = result.restricted(kernel, rows)
    np.testing.assert_allclose(direct.means, _reference(arrays, points, rows), atol=1e-12)
    # a duplicate's sums are its first occurrence's, bit for bit
    grouped = GroupedMeans(kernel, result.kept, groups)
    assert np.array_equal(grouped.sums, grouped.sums[:, first[which]])
    assert np.array_equal(grouped.counts, grouped.counts[:, first[which]])


@pytest.fixture(scope="module")
def notes() -> EvalSet:
    return load_inputs(NOTES)


def test_consumers_subtract_cuts_without_unsigned_wrap(notes: EvalSet) -> None:
    res = calibrate(notes, constraints=["evidence_recall>=0.8"], check=Check(n_bootstrap=50))
    r = res.recommended
    assert r.sweep.kept.dtype == np.uint8
    wide = r.sweep.kept.astype(np.int64)  # the reference: the same cuts, signed
    for got, point in ((r.chosen_kept, r.chosen), (r.baseline_kept, r.baseline),
                       (r.written_kept, r.written)):  # fmt: skip
        assert got.dtype == np.intp
        assert got.tolist() == wide[point].tolist()
    fewer = r.chosen_kept - r.baseline_kept
    assert (fewer < 0).any()  # the guard keeps fewer than top-k on some queries
    # the held-out comparison's paired difference in passages is the signed one
    rows = r.comparison.rows
    present = r.arrays.n_present.astype(np.int64)
    signed = np.minimum(wide[r.chosen], present) - np.minimum(wide[r.baseline], present)
    diff = r.comparison.difference[PASSAGES]
    assert diff.mean == pytest.approx(float(signed[rows].mean()), abs=1e-12)
    assert diff.low <= diff.mean <= diff.high < 0.0
    # the provenance's file hashes, read in blocks: the sha256 of each whole file
    assert res.files
    for path, digest in res.files.items():
        assert digest == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_guarantee_reads_small_cuts_as_counts(notes: EvalSet) -> None:
    res = calibrate(notes, check=Check(n_bootstrap=50), guarantee=Guarantee(recall=0.8))
    r = res.recommended
    g = r.guarantee
    assert g is not None and g.point is not None
    assert r.sweep.kept.dtype == np.uint8
    ev = compute(r.arrays, "evidence_recall", cut=r.sweep.kept[g.point].astype(np.int64))
    held = ev[res.header.heldout_rows]
    assert g.heldout_recall == pytest.approx(float(np.nanmean(held)), abs=1e-12)
