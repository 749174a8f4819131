"""The README's conflicts / min_evidence example runs and prints what it says."""

from __future__ import annotations

from tests.doc_checks import run_readme_example


def test_readme_conflicts_example_prints_its_comments() -> None:
    assert len(run_readme_example("Conflicting passages and not enough evidence")) == 5
