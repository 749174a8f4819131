"""Shared fixtures: every test starts with no RAGGUARD_* variables in the environment;
the tiny cross-encoders of the shared rerank scenario (tests/rerank_models.py) are built
once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.rerank_models import IDENTITY, LOGITS, QUERY, build_cross_encoder


@pytest.fixture(autouse=True)
def _clean_ragguard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RAGGUARD_"):
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def logit_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like cross-encoder/ms-marco-*: the config says Identity, predict returns logits."""
    return build_cross_encoder(
        tmp_path_factory.mktemp("ce") / "logit", QUERY, LOGITS, activation=IDENTITY
    )


@pytest.fixture(scope="session")
def prob_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights without an activation in the config: predict applies Sigmoid."""
    return build_cross_encoder(tmp_path_factory.mktemp("ce") / "prob", QUERY, LOGITS)
