"""One search, two spaces: the second stage is searched by the same loop as a run's
retrieval settings, over one block of settings per rerank depth, and checked against
the run's own plain top-k and retrieval-only choice."""

from __future__ import annotations

import numpy as np
import pytest

from ragguard.calibration import (
    CalibrationResult,
    Check,
    RerankGrid,
    RerankSearch,
    Search,
    calibrate,
)
from ragguard.calibration.fit.sweep import sweep
from tests.calibration.two_stage_data import make_data, oracle


@pytest.fixture(scope="module")
def result() -> CalibrationResult:
    es, texts, _ = make_data()
    return calibrate(
        es,
        search=Search(max_k=5),
        check=Check(n_bootstrap=200),
        rerank=RerankSearch(reranker=oracle, grid=RerankGrid(top_n=(4, 8)), cache_dir=None),
        passages=texts,
    )


def test_the_second_space_has_one_block_per_rerank_depth(result: CalibrationResult) -> None:
    two = result.rerank
    assert two is not None and two.stage is not None
    space = two.space
    assert space.top_n == (4, 8) and len(space.blocks) == len(space.kernels) == 2
    per_block = len(space.blocks[0].points)
    assert len(space.points) == 2 * per_block == len(two.sweep.points)
    all_rows = np.arange(space.arrays.n_queries, dtype=np.intp)
    for i in (0, per_block - 1, per_block, 2 * per_block - 1):
        n = 4 if i < per_block else 8
        assert space.top_n_of(i) == n and two.describe(i).startswith(f"rerank top-{n}, ")
        kernel = space.kernel_of(i)
        # the block's lists are the first n candidates of the run, reranked
        assert int((~np.isnan(kernel.arrays.scores)).sum(axis=1).max()) == n
        # its means over all queries are the sweep of its own settings on its own kernel
        alone = sweep(kernel, [space.points[i]], kernel.metrics, rows=all_rows)
        np.testing.assert_array_equal(two.full.means[i], alone.means[0])


def test_the_second_search_is_checked_against_the_runs_own_choices(
    result: CalibrationResult,
) -> None:
    """Same queries, same bootstrap: the second stage's plain top-k is the run's plain
    top-k, and its retrieval-only reference is the run's choice, to the last digit."""
    two, run = result.rerank, result.recommended
    assert two is not None and two.against_retrieval is not None
    assert two.name == run.name and two.baseline is None and run.baseline is not None
    top_k, retrieval = two.comparison, two.against_retrieval
    np.testing.assert_array_equal(top_k.rows, run.comparison.rows)
    np.testing.assert_array_equal(top_k.baseline_values, run.comparison.baseline_values)
    np.testing.assert_array_equal(retrieval.baseline_values, run.comparison.guarded_values)
    # one choice, checked twice
    np.testing.assert_array_equal(top_k.guarded_values, retrieval.guarded_values)
    for m in top_k.metrics:
        assert top_k.baseline[m] == run.comparison.baseline[m]
        assert retrieval.baseline[m] == run.comparison.guarded[m]
    with pytest.raises(ValueError, match="no plain top-k of its own"):
        _ = two.baseline_params
