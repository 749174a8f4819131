"""The runtime guard applies the config's probability map to rerank scores, so
``rerank.min_score`` reads a calibrated probability (real tiny CrossEncoders)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

from ragguard import Candidate, ContextGuard, GuardConfig, Reason
from ragguard.probability import ProbabilityMap
from tests.rerank_models import PASSAGES, QUERY, sigmoid

pytest.importorskip("sentence_transformers")

PLATT = ProbabilityMap(method="platt", a=0.5, b=1.0)


def guard(model: Path, pmap: ProbabilityMap | None) -> ContextGuard:
    rerank = {"enabled": True, "model": str(model), "top_n": 5, "min_score": 0.65}
    if pmap is not None:
        rerank["probability_map"] = pmap
    config = GuardConfig(score_kind="similarity", max_k=5, relative_threshold=0.0, rerank=rerank)
    return ContextGuard(config)


@pytest.mark.parametrize("kind", ["logit", "probability"])
def test_min_score_is_a_calibrated_probability(
    logit_model: Path, prob_model: Path, kind: str
) -> None:
    model = {"logit": logit_model, "probability": prob_model}[kind]
    cands = [Candidate(cid, text, score) for cid, text, score, _ in PASSAGES]
    # without a map: sigmoid(logit) -> pr .998, slow .818, goal .378, talk .269, squat .047
    plain = guard(model, None).select(QUERY, cands)
    assert [c.id for c in plain.kept] == ["pr", "slow"]
    # with p = sigmoid(0.5 z + 1): pr .982, slow .852, goal .679, talk .622, squat .378
    sel = guard(model, PLATT).select(QUERY, cands)
    assert [c.id for c in sel.kept] == ["pr", "slow", "goal"]
    reasons = {d.candidate.id: d.reason for d in sel.dropped}
    assert reasons == {
        "talk": Reason.BELOW_MIN_SCORE,
        "squat": Reason.BELOW_MIN_SCORE,
        "deload": Reason.NOT_RERANKED,
    }
    for d in sel.decisions:
        logit = next(p[3] for p in PASSAGES if p[0] == d.candidate.id)
        if d.candidate.id == "deload":  # sixth by retrieval, beyond top_n=5: never scored
            assert d.rerank_score is None
        else:
            assert d.rerank_score == pytest.approx(sigmoid(0.5 * logit + 1.0), abs=1e-4)


def test_config_file_with_a_map_gives_the_same_selection(logit_model: Path, tmp_path: Path) -> None:
    cands = [Candidate(cid, text, score) for cid, text, score, _ in PASSAGES]
    direct = guard(logit_model, PLATT)
    path = direct.config.save(tmp_path / "guard.toml")
    loaded = ContextGuard.from_file(path)
    assert loaded.config.rerank.probability_map == PLATT
    a, b = direct.select(QUERY, cands), loaded.select(QUERY, cands)
    assert [c.id for c in a.kept] == [c.id for c in b.kept]
    assert [d.rerank_score for d in a.decisions] == [d.rerank_score for d in b.decisions]
