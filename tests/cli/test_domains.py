"""``ragguard calibrate --by``: one TOML with a ``[domains.NAME]`` table per domain (read back
with the raw TOML reader), the per-domain table on the console and in ``--json``, and one
line for each bad input."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from ragguard import Candidate, ContextGuard
from tests.calibration.domain_data import write_domains
from tests.cli.checks import error_line, invoke


def _calibrate(tmp_path: Path, *args: object) -> object:
    data = write_domains(tmp_path)
    out, report = tmp_path / "ragguard.toml", tmp_path / "report"
    return invoke(
        "calibrate",
        data,
        "--objective",
        "utility",
        "--min-recall",
        "0",
        "--holdout",
        "0.5",
        "-o",
        out,
        "--report",
        report,
        *args,
    )


def test_by_domain_writes_one_toml_with_a_table_per_domain(tmp_path: Path) -> None:
    result = _calibrate(tmp_path, "--by", "domain", "--profile", "support,precise=legal")
    assert result.exit_code == 0, result.output
    assert "per domain (--by domain)" in result.stdout and "beats global" in result.stdout
    data = tomllib.loads((tmp_path / "ragguard.toml").read_text())
    assert data["max_k"] >= 3 and data["profile"] == "support"  # the global, at the top
    precise = data["domains"]["precise"]
    assert precise.pop("reference")["top"]["n"] == 24  # its own queries' scores (the drift watch)
    assert precise == {"max_k": 1, "profile": "legal"}
    assert set(data["domains"]) == {"precise", "broad"}
    for table in data["domains"].values():
        assert all(k in data and data[k] != v for k, v in table.items())
    assert data["provenance"]["domains"]["precise"]["fallback"] is False
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Per domain (--by domain)" in report or "### Per domain (--by domain)" in report


def test_the_written_toml_routes_each_domain_at_runtime(tmp_path: Path) -> None:
    result = _calibrate(tmp_path, "--by", "domain", "--profile", "support,precise=legal")
    assert result.exit_code == 0, result.output
    guard = ContextGuard.from_file(tmp_path / "ragguard.toml")
    candidates = [Candidate(f"p{i}", score=1.0 - i / 100) for i in range(6)]
    precise = guard.select("q", candidates, domain="precise")
    assert precise.domain == "precise" and [c.id for c in precise.kept] == ["p0"]
    assert guard.for_domain("precise").profile.name == "legal"
    broad = guard.select("q", candidates, domain="broad")  # its table is empty: the global settings
    assert len(broad.kept) == len(guard.select("q", candidates).kept) >= 3


def test_by_domain_json_holds_the_per_domain_rows(tmp_path: Path) -> None:
    result = _calibrate(tmp_path, "--by", "domain", "--json", "--no-report")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {r["domain"]: r for r in doc["domains"]["domains"]}
    assert rows["precise"]["fallback"] is False and rows["precise"]["setting"] == "top-1"
    utility = rows["precise"]["heldout"]["utility"]
    assert utility["own"] == 1.0 and utility["global"] == -1.0  # top-1 against top-3 on every query
    assert utility["difference"][1] > 0
    assert doc["domains"]["verdict"].startswith("per-domain beats global")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--by", "tenant"), "no query has a metadata key 'tenant'"),
        (("--by", "domain", "--profile", "legal=legal"), "names domain 'legal', which no query"),
        (("--by", "domain", "--profile", "precise=nope"), "unknown profile 'nope'"),
        (("--by", "domain", "--profile", "=legal"), "a domain name must not be empty"),
        (("--profile", "precise=legal"), "with --by FIELD one per domain"),
        (("--profile", "legal,support"), "give one profile"),
    ],
)
def test_bad_domain_inputs_are_one_line(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    line = error_line(_calibrate(tmp_path, *args))
    assert expected in line
    assert not (tmp_path / "ragguard.toml").exists()
