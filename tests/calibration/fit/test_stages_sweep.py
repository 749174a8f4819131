"""The sweep with the stages after the cut (token budget, near-duplicates) equals the
runtime guard, query by query; calibrate --max-tokens writes a config that does so."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard, ScoreWarning
from ragguard.calibration import EvalSet, Search, Split, Stages, SweepGrid, calibrate
from ragguard.calibration.fit.sweep import PASSAGES, SweepKernel, sweep
from ragguard.calibration.fit.sweep_stages import passage_stages
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import CutRule, PolicyParams
from tests.calibration.conftest import random_trec_data
from tests.calibration.sweep_reference import brute_force

GAMMA = 1.0 / 3.0
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def texts_for(docs: set[str], seed: int) -> dict[str, str]:
    """Random passages of 1..30 words; every third one a copy of another with one word
    changed, so near-duplicates occur, and lengths vary so the budget bites."""
    rng = np.random.default_rng(seed)
    out: dict[str, str] = {}
    ordered = sorted(docs)
    for d in ordered:
        if out and rng.random() < 0.33:
            words = list(out[ordered[int(rng.integers(0, len(out)))]].split())
            words[int(rng.integers(0, len(words)))] = str(rng.choice(WORDS))
        else:
            words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 31)))]
        out[d] = " ".join(words)
    return out


def evalset_with_texts(seed: int) -> tuple[EvalSet, dict[str, str]]:
    qrels, run = random_trec_data(seed, n_queries=60, pool=40, max_cands=14)
    docs = {d for cands in run.values() for d in cands}
    return EvalSet.from_dicts(qrels, {"r": run}), texts_for(docs, seed)


@pytest.mark.parametrize(("max_tokens", "near"), [(12, None), (None, 0.5), (20, 0.6), (3, 1.0)])
def test_sweep_with_the_stages_equals_the_guard_query_by_query(
    max_tokens: int | None, near: float | None
) -> None:
    es, texts = evalset_with_texts(5)
    grid = SweepGrid(max_k=(1, 3, 6), thresholds=(0.0, 0.5, 0.9), cut_rules=((CutRule.GAP, 0),))
    stages = passage_stages(
        es, max_tokens=max_tokens, near_duplicate_threshold=near, passages=texts
    )
    assert stages is not None
    points = tuple(stages.params(p) for p in grid.points())
    kernel = SweepKernel(
        es.arrays("r"), ["udcg", "recall", PASSAGES], 6, stages=stages.for_run(es.arrays("r"), 6)
    )
    result = sweep(kernel, points, ["udcg", "recall"])
    values = brute_force(es, "r", points, list(es.qids), texts)
    np.testing.assert_allclose(result.column("udcg"), values[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column("recall"), values[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column(PASSAGES), values[:, 2], rtol=0, atol=1e-12)


def test_the_budget_keeps_fewer_passages_than_the_cut_alone() -> None:
    es, texts = evalset_with_texts(9)
    grid = SweepGrid(max_k=(8,), thresholds=(0.0,), cut_rules=())
    plain = sweep(es.arrays("r"), grid, ["udcg"])
    stages = passage_stages(es, max_tokens=8, near_duplicate_threshold=None, passages=texts)
    assert stages is not None
    points = tuple(stages.params(p) for p in grid.points())
    kernel = SweepKernel(
        es.arrays("r"), ["udcg", PASSAGES], 8, stages=stages.for_run(es.arrays("r"), 8)
    )
    budgeted = sweep(kernel, points, ["udcg"])
    assert budgeted.mean(0, PASSAGES) < plain.mean(0, PASSAGES)


def test_a_kernel_refuses_settings_that_do_not_match_its_stages() -> None:
    es, texts = evalset_with_texts(1)
    kernel = SweepKernel(es.arrays("r"), ["udcg"], 3)
    with pytest.raises(ConfigError, match="stages"):
        kernel.cut(PolicyParams(max_k=3, max_tokens=10))
    stages = passage_stages(es, max_tokens=10, near_duplicate_threshold=None, passages=texts)
    assert stages is not None
    staged = SweepKernel(es.arrays("r"), ["udcg"], 3, stages=stages.for_run(es.arrays("r"), 3))
    with pytest.raises(ConfigError, match="max_tokens"):
        staged.cut(PolicyParams(max_k=3, max_tokens=11))


def test_missing_texts_are_named() -> None:
    es, texts = evalset_with_texts(2)
    some = dict(list(texts.items())[:3])
    stages = passage_stages(es, max_tokens=10, near_duplicate_threshold=None, passages=some)
    assert stages is not None
    with pytest.raises(EvalSetError, match="have none"):
        stages.for_run(es.arrays("r"), 5)


def test_calibrate_with_a_budget_writes_a_config_that_keeps_what_was_measured(
    tmp_path: Path,
) -> None:
    es, texts = evalset_with_texts(4)
    result = calibrate(
        es,
        search=Search(max_k=6),
        split=Split(holdout=0.3, seed=0),
        stages=Stages(max_tokens=15, token_counter="chars:3", near_duplicate_threshold=0.7),
        passages=texts,
    )
    r = result.recommended
    # every setting swept, the calibration-only choice and its refit on all queries alike
    for params in (r.chosen_params, r.written_params):
        assert params.max_tokens == 15 and params.near_duplicate_threshold == 0.7
    path = result.save_config(tmp_path / "ragguard.toml")
    text = path.read_text()
    assert "max_tokens = 15" in text and 'token_counter = "chars:3"' in text
    guard = ContextGuard.from_file(path)
    assert guard.config.policy_params() == r.written_params
    kept = []
    for q in result.header.qids:
        cands = [Candidate(d, texts[d], s) for d, s in es.runs["r"].candidates[q].items()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScoreWarning)
            sel = guard.select(q, cands)
        assert sum(math.ceil(len(c.text) / 3) for c in sel.kept) <= 15
        kept.append(len(sel.kept))
    assert kept == r.written_kept.tolist()
