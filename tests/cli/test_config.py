"""``ragguard config show`` on a config with ``[domains.NAME]`` tables (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.checks import error_line, invoke

ROUTED = """\
score_kind = "similarity"
max_k = 5

[provenance]
tool = "ragguard calibrate"

[provenance.domains.legal]
queries = 40

[domains.legal]
max_k = 3

[domains.support]
"""


@pytest.fixture
def routed(tmp_path: Path) -> Path:
    path = tmp_path / "ragguard.toml"
    path.write_text(ROUTED, encoding="utf-8")
    return path


def test_config_show_lists_the_domains_and_resolves_one(routed: Path) -> None:
    shown = invoke("config", "show", routed)
    assert shown.exit_code == 0, shown.output
    assert "domains" not in json.loads(invoke("config", "show", routed, "--json").stdout)["values"]
    assert "domains: legal, support (one resolved: ragguard config show --domain NAME)" in (
        " ".join(shown.stdout.split())
    )
    legal = json.loads(invoke("config", "show", routed, "--domain", "legal", "--json").stdout)
    assert legal["domain"] == "legal" and legal["domains"] == ["legal", "support"]
    assert legal["values"]["max_k"] == {"value": 3, "source": f"file {routed} [domains.legal]"}
    assert legal["values"]["score_kind"]["value"] == "similarity"
    assert "domains" not in legal["values"] and legal["provenance"] == {"queries": 40}
    text = " ".join(invoke("config", "show", routed, "--domain", "legal").stdout.split())
    assert f"from file {routed}, domain legal" in text and "[domains.legal]" in text
    assert "provenance of domain legal" in text and "queries 40" in text


def test_config_show_of_an_unknown_domain_lists_the_known_ones(routed: Path) -> None:
    line = error_line(invoke("config", "show", routed, "--domain", "lgal"))
    assert line == "error: unknown domain 'lgal'; known domains: legal, support"


def test_config_show_of_a_bad_domain_table_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[domains.legal]\nmax_kk = 3\n", encoding="utf-8")
    line = error_line(invoke("config", "show", path))
    assert "[domains.legal]" in line and "unknown key 'max_kk'" in line


def test_config_show_without_domains_prints_no_domain_keys(tmp_path: Path) -> None:
    path = tmp_path / "plain.toml"
    path.write_text("max_k = 3\n", encoding="utf-8")
    data = json.loads(invoke("config", "show", path, "--json").stdout)
    assert set(data) == {"file", "values", "profiles", "provenance"}
    assert "domains" not in data["values"]
    assert "domains:" not in invoke("config", "show", path).stdout
