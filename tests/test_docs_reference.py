"""The generated reference pages (docs/hooks.py, run by mkdocs at build time) are
complete: every GuardConfig field and every field of its tables, every error and
warning class, every command; and the pages hold the markers the build replaces."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import ragguard
from ragguard import GuardConfig, ProbabilityMap, RerankConfig, errors
from ragguard.cli import app
from tests.doc_checks import ROOT, load_script, page_text

hooks = load_script(ROOT / "docs" / "hooks.py", "docs_hooks")


def model_keys(model: type[BaseModel], prefix: str) -> set[str]:
    return {prefix + (field.alias or name) for name, field in model.model_fields.items()}


def test_the_config_reference_lists_every_field_of_every_table() -> None:
    from ragguard.config import ProfileSpec

    listed = [row[0] for row in hooks.config_fields()]
    assert len(listed) == len(set(listed))
    expected = (
        model_keys(GuardConfig, "")
        | model_keys(RerankConfig, "rerank.")
        | model_keys(ProbabilityMap, "rerank.probability_map.")
        | model_keys(ProfileSpec, "profiles.NAME.")
    )
    assert set(listed) == expected
    table = hooks.config_reference()
    for key in expected:
        assert f"| `{key}` |" in table


def test_the_config_reference_reads_the_schema_the_cli_prints() -> None:
    result = CliRunner().invoke(app, ["config", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert hooks.config_fields(schema) == hooks.config_fields()


def test_config_rows_say_defaults_and_bounds_as_the_schema_does() -> None:
    rows = {name: (default, allowed) for name, default, allowed, _ in hooks.config_fields()}
    assert rows["max_k"] == ("`5`", "int >= 1")
    assert rows["score_kind"][0] == "none"
    assert rows["score_kind"][1].startswith("`similarity`, `distance`")
    assert rows["rerank.top_n"] == ("`20`", "int >= 1")
    assert rows["near_duplicate_threshold"][1] == "float > 0.0 and <= 1.0, none"


def test_the_error_tree_shows_every_class_under_its_parent() -> None:
    tree = hooks.error_tree()
    for name in errors.__all__:
        assert f"`{name}`" in tree, name
    lines = tree.splitlines()
    (model_line,) = [line for line in lines if "`RerankModelError`" in line]
    (rerank_line,) = [line for line in lines if line.lstrip().startswith("- `RerankError`")]
    assert model_line.index("-") > rerank_line.index("-")  # nested under RerankError
    assert "`ConfigError` (ValueError)" in tree
    assert "``" not in tree and ":class:" not in tree  # docstring markup made Markdown


def test_every_leaf_command_is_in_the_generated_table() -> None:
    table = hooks.commands()
    for command in ("annotate", "calibrate", "compare", "evaluate", "train-reranker",
                    "profiles list", "profiles show", "config show", "config schema"):  # fmt: skip
        assert f"| `ragguard {command}` |" in table


@pytest.mark.parametrize(
    ("page", "marker"),
    [
        ("docs/reference/config.md", "config-reference"),
        ("docs/reference/errors.md", "error-tree"),
        ("docs/guides/command-line.md", "commands"),
    ],
)
def test_the_pages_hold_the_markers_the_build_expands(page: str, marker: str) -> None:
    text = page_text(page)
    assert f"<!-- generated: {marker} -->" in text
    assert f"<!-- generated: {marker} -->" not in hooks.expand(text)


def test_the_public_api_pages_document_the_public_faces() -> None:
    assert "::: ragguard\n" in page_text("docs/reference/api/ragguard.md")
    assert "::: ragguard.calibration\n" in page_text("docs/reference/api/calibration.md")
    adapters = page_text("docs/reference/api/adapters.md")
    for module in ("langchain", "llamaindex", "haystack"):
        assert f"::: ragguard.adapters.{module}\n" in adapters
    assert ragguard.__all__  # the page renders __all__; it must not be empty


def test_the_mkdocs_nav_names_every_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.md")):
        assert path.relative_to(ROOT / "docs").as_posix() in nav, path
