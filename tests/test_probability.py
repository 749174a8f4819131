"""The runtime guard applies the config's probability map to rerank scores, so
``rerank.min_score`` reads a calibrated probability (real tiny CrossEncoders)."""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

from ragguard import Candidate, ContextGuard, GuardConfig, Reason
from ragguard.probability import ProbabilityMap
from tests.rerank_models import IDENTITY, build_cross_encoder

pytest.importorskip("sentence_transformers")

QUERY = "what was my 500 lb deadlift pr"
# id, text, retrieval similarity, designed cross-encoder logit
PASSAGES = [
    ("goal", "goals 500 lb deadlift bench run", 0.85, -0.5),
    ("pr", "pulled 500 lb for a single today new deadlift pr", 0.83, 6.0),
    ("squat", "squat pr 405 lb deadlift accessories only", 0.80, -3.0),
    ("slow", "deadlift 480 felt slow off the floor", 0.79, 1.5),
    ("talk", "notes from a talk why 500 lb is a milestone", 0.78, -1.0),
    ("deload", "deload week deadlift 405", 0.60, -2.0),
]
LOGITS = {text: logit for _, text, _, logit in PASSAGES}
PLATT = ProbabilityMap(method="platt", a=0.5, b=1.0)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ce-map")
    return {
        "logit": build_cross_encoder(root / "logit", QUERY, LOGITS, activation=IDENTITY),
        "probability": build_cross_encoder(root / "prob", QUERY, LOGITS),
    }


def guard(model: Path, pmap: ProbabilityMap | None) -> ContextGuard:
    rerank = {"enabled": True, "model": str(model), "top_n": 5, "min_score": 0.65}
    if pmap is not None:
        rerank["probability_map"] = pmap
    config = GuardConfig(score_kind="similarity", max_k=5, relative_threshold=0.0, rerank=rerank)
    return ContextGuard(config)


@pytest.mark.parametrize("kind", ["logit", "probability"])
def test_min_score_is_a_calibrated_probability(models: dict[str, Path], kind: str) -> None:
    cands = [Candidate(cid, text, score) for cid, text, score, _ in PASSAGES]
    # without a map: sigmoid(logit) -> pr .998, slow .818, goal .378, talk .269, squat .047
    plain = guard(models[kind], None).select(QUERY, cands)
    assert [c.id for c in plain.kept] == ["pr", "slow"]
    # with p = sigmoid(0.5 z + 1): pr .982, slow .852, goal .679, talk .622, squat .378
    sel = guard(models[kind], PLATT).select(QUERY, cands)
    assert [c.id for c in sel.kept] == ["pr", "slow", "goal"]
    reasons = {d.candidate.id: d.reason for d in sel.dropped}
    assert reasons == {
        "talk": Reason.BELOW_MIN_SCORE,
        "squat": Reason.BELOW_MIN_SCORE,
        "deload": Reason.NOT_RERANKED,
    }
    for d in sel.decisions:
        logit = next(p[3] for p in PASSAGES if p[0] == d.candidate.id)
        if d.candidate.id != "deload":
            assert d.rerank_score == pytest.approx(sigmoid(0.5 * logit + 1.0), abs=1e-4)


def test_config_file_with_a_map_gives_the_same_selection(
    models: dict[str, Path], tmp_path: Path
) -> None:
    cands = [Candidate(cid, text, score) for cid, text, score, _ in PASSAGES]
    direct = guard(models["logit"], PLATT)
    path = direct.config.save(tmp_path / "guard.toml")
    loaded = ContextGuard.from_file(path)
    assert loaded.config.rerank.probability_map == PLATT
    a, b = direct.select(QUERY, cands), loaded.select(QUERY, cands)
    assert [c.id for c in a.kept] == [c.id for c in b.kept]
    assert [d.rerank_score for d in a.decisions] == [d.rerank_score for d in b.decisions]
