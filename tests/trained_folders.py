"""Trained folders written by hand: a valid fusion card, a folder that holds it, and the
tampered cards (with what the error message must say) that loading must refuse; shared
by the tests of trained folders, of the command line's failures and of hostile files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ragguard.trained import CARD_NAME, PACKAGED_ENCODER


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
