"""Shared fixtures: every test starts with no RAGGUARD_* variables in the environment."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_ragguard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RAGGUARD_"):
            monkeypatch.delenv(key)
