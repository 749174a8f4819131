"""The README's token budget / near-duplicate example runs and prints what it says."""

from __future__ import annotations

from tests.doc_checks import run_readme_example


def test_readme_budget_example_prints_its_comments() -> None:
    assert run_readme_example("Token budget and near-duplicates")
