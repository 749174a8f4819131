"""Fixtures for the calibration tests: reference files and random ranx/trec-style data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _find_udcg_dir() -> Path:
    """The UDCG authors' sample files, copied with their license into tests/data."""
    path = ROOT / "tests" / "data" / "udcg-authors"
    if not path.is_dir():
        pytest.fail(f"{path} is missing")
    return path


@pytest.fixture(scope="session")
def udcg_dir() -> Path:
    return _find_udcg_dir()


@pytest.fixture(scope="session")
def udcg_expected(udcg_dir: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((udcg_dir / "dataset_with_udcg.json").read_text())
    return data


def random_trec_data(
    seed: int, n_queries: int = 120, pool: int = 60, max_cands: int = 25
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Random qrels and run with distinct float32-exact scores.

    Per query: 0..max_cands candidates (so lists shorter than any cutoff occur, and
    empty ones), 1..12 judged documents with grades -1..3 drawn from a pool larger than
    the run (so relevant documents go unretrieved), and some queries whose judged
    documents are all non-relevant.
    """
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = f"q{q:03d}"
        n = int(rng.integers(0, max_cands + 1))
        docs = [f"d{j}" for j in rng.choice(pool, size=pool, replace=False)]
        # distinct multiples of 1/1024 below 2**14: exact in float32 and in float64
        scores = rng.choice(1 << 24, size=n, replace=False) / 1024.0
        run[qid] = dict(zip(docs[:n], scores.tolist(), strict=True))
        judged = rng.choice(pool, size=int(rng.integers(1, 13)), replace=False)
        if q % 7 == 0:
            grades = rng.integers(-1, 1, size=judged.size)  # nothing relevant
        else:
            grades = rng.integers(-1, 4, size=judged.size)
        qrels[qid] = {docs[j]: int(g) for j, g in zip(judged, grades, strict=True)}
    return qrels, run
