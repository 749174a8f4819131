"""Prefix-sum metric tables equal the registry kernels at every context size."""

from __future__ import annotations

import numpy as np
import pytest

from ragguard.calibration import EvalSet
from ragguard.calibration.metrics import compute, parse_metric
from ragguard.calibration.metrics.tables import prefix_table
from tests.calibration.sweep_reference import messy_evalset

METRICS = (
    "precision", "precision@3", "recall", "recall@4", "evidence_recall", "evidence_coverage",
    "evidence_coverage(needs=2)", "evidence_coverage@3", "hit_rate",
    "mrr", "mrr@2", "ndcg", "ndcg@5", "udcg", "udcg(gamma=0.5)", "udcg@3", "udcg_dcg",
    "udcg_ndcg", "udcg_ndcg@4", "utility", "distractor_rate", "distractor_harm@6",
)  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("metric", METRICS)
def test_prefix_table_is_the_metric_at_every_size(seed: int, metric: str) -> None:
    ev: EvalSet = messy_evalset(seed)  # ties, missing scores, empty lists, distractors
    arrays = ev.arrays(next(iter(ev.runs)))
    parsed = parse_metric(metric)
    cols = arrays.shape[1] + 3  # sizes past the longest list too
    table = prefix_table(arrays, parsed, cols)
    assert table is not None and table.shape == (arrays.n_queries, cols)
    for c in range(cols):
        expected = compute(arrays, parsed, cut=np.full(arrays.n_queries, c))
        np.testing.assert_allclose(table[:, c], expected, rtol=1e-12, atol=1e-12)


def test_metrics_without_a_prefix_form_say_so() -> None:
    ev = messy_evalset(0)
    arrays = ev.arrays(next(iter(ev.runs)))
    assert prefix_table(arrays, parse_metric("map"), 5) is None
    assert prefix_table(arrays, parse_metric("ra_nwg"), 5) is None
