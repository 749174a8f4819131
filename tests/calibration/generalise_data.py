"""Synthetic eval sets with known structure, shared by the calibration tests."""

from __future__ import annotations

import numpy as np

from ragguard.calibration import EvalSet
from ragguard.calibration.fit.statistics import split_queries


def synthetic(n: int, depth: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: scores (descending) and a relevance mask; relevant passages score
    from N(0.7, 0.1), others from N(0.45, 0.12); 1-4 relevant among ``depth``."""
    rng = np.random.default_rng(seed)
    n_rel = rng.integers(1, 5, size=n)
    rel = np.arange(depth)[None, :] < n_rel[:, None]
    scores = np.where(rel, rng.normal(0.7, 0.1, (n, depth)), rng.normal(0.45, 0.12, (n, depth)))
    return np.clip(scores, 0.01, 0.99), rel


def adversarial(n: int, seed: int, holdout: float) -> EvalSet:
    """Calibration queries reward a relative threshold (1 or 3 relevant passages far
    above harmful ones: no fixed k fits both); held-out queries punish it (the top
    passage harms, the relevant ones score well below it). Utilities given directly."""
    _, held = split_queries(n, holdout, seed)
    held_set = set(held.tolist())
    labels: dict[str, dict[str, int]] = {}
    utilities: dict[str, dict[str, float]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(n):
        q = f"q{i:03d}"
        if i in held_set:
            run[q] = {"top": 0.95, "r1": 0.20, "r2": 0.19, "x": 0.18}
            utilities[q] = {"top": -1.0, "r1": 1.0, "r2": 1.0, "x": 0.0}
        elif i % 3:
            run[q] = {"a": 0.95, "b": 0.94, "c": 0.93, "x": 0.30}
            utilities[q] = {"a": 1.0, "b": 1.0, "c": 1.0, "x": -1.0}
        else:
            run[q] = {"a": 0.95, "x1": 0.30, "x2": 0.29, "x3": 0.28}
            utilities[q] = {"a": 1.0, "x1": -1.0, "x2": -1.0, "x3": -1.0}
        labels[q] = {d: 1 for d, u in utilities[q].items() if u > 0}
    return EvalSet.from_dicts(labels, {"run": run}, utilities=utilities)


def synthetic_evalset(n: int, depth: int, seed: int) -> EvalSet:
    """:func:`synthetic` as an eval set: one run ``run``, relevant passages graded 1."""
    scores, rel = synthetic(n, depth, seed)
    qrels = {f"q{i:03d}": {f"d{j}": 1 for j in range(depth) if rel[i, j]} for i in range(n)}
    run = {f"q{i:03d}": {f"d{j}": float(scores[i, j]) for j in range(depth)} for i in range(n)}
    return EvalSet.from_dicts(qrels, {"run": run})
