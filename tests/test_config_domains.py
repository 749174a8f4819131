"""Per-domain settings (``[domains.NAME]``, issue 37): the loader merges a domain's
differences over the global settings, keeps the layers' meaning, and refuses a bad table
in one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from ragguard import ConfigError, GuardConfig
from ragguard.errors import ArgumentTypeError

# the contract with `ragguard calibrate --by domain`: global settings at the top, one
# table per domain holding only what differs, provenance per domain under [provenance]
CALIBRATED = """\
profile = "support"
score_kind = "similarity"
max_k = 5
relative_threshold = 0.7

[rerank]
top_n = 10
batch_size = 16

[provenance]
tool = "ragguard calibrate"

[provenance.domains.legal]
queries = 40

[domains.legal]
max_k = 3
relative_threshold = 0.8

[domains.legal.rerank]
top_n = 5

[domains."release notes"]
profile = "legal"
conflicts = "flag"

[domains.support]
"""


@pytest.fixture
def calibrated(tmp_path: Path) -> Path:
    path = tmp_path / "ragguard.toml"
    path.write_text(CALIBRATED, encoding="utf-8")
    return path


def test_a_domain_is_the_global_settings_with_its_differences_merged_over_them(
    calibrated: Path,
) -> None:
    config = GuardConfig.from_file(calibrated)
    legal = config.for_domain("legal")
    assert (legal.max_k, legal.relative_threshold, legal.score_kind) == (3, 0.8, "similarity")
    # [domains.legal.rerank] holds only top_n: the global [rerank] keys stay
    assert (legal.rerank.top_n, legal.rerank.batch_size) == (5, 16)
    assert legal.domains == {} and legal.provenance == config.provenance
    assert legal.source_of("max_k") == f"file {calibrated} [domains.legal]"
    assert legal.source_of("score_kind") == f"file {calibrated}"
    # the global settings are untouched, and resolving is done once
    assert (config.max_k, config.rerank.top_n) == (5, 10)
    assert config.for_domain("legal") is legal


def test_an_empty_domain_table_is_a_known_domain_with_the_global_settings(
    calibrated: Path,
) -> None:
    config = GuardConfig.from_file(calibrated)
    support = config.for_domain("support")
    assert support.model_dump(exclude={"domains"}) == config.model_dump(exclude={"domains"})


def test_a_domain_profile_brings_its_defaults_unless_a_layer_sets_them(calibrated: Path) -> None:
    notes = GuardConfig.from_file(calibrated).for_domain("release notes")
    legal = GuardConfig(profile="legal")
    assert notes.profile == "legal" and notes.conflicts == "flag"
    assert notes.max_k == 5  # the file sets max_k for every domain
    assert notes.min_k == legal.min_k and notes.resolved_profile == legal.resolved_profile


def test_arguments_and_environment_win_over_a_domain_table(
    calibrated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGGUARD_RELATIVE_THRESHOLD", "0.5")
    monkeypatch.setenv("RAGGUARD_RERANK__BATCH_SIZE", "8")
    config = GuardConfig.from_file(calibrated, max_k=7)
    legal = config.for_domain("legal")
    assert (legal.max_k, legal.source_of("max_k")) == (7, "argument")
    assert legal.relative_threshold == 0.5
    assert legal.source_of("relative_threshold") == "environment RAGGUARD_RELATIVE_THRESHOLD"
    # a nested key of the environment merges with the domain's nested keys
    assert (legal.rerank.batch_size, legal.rerank.top_n) == (8, 5)


def test_a_copy_keeps_the_layers_around_the_domain_table(calibrated: Path) -> None:
    copy = GuardConfig.from_file(calibrated).model_copy(update={"max_k": 9})
    legal = copy.for_domain("legal")
    assert (legal.max_k, legal.relative_threshold) == (9, 0.8)  # the update is an argument
    assert legal.source_of("relative_threshold") == f"file {calibrated} [domains.legal]"


@pytest.mark.parametrize("build", [GuardConfig, GuardConfig.without_environment])
def test_domains_given_as_an_argument_refine_the_arguments(build: type[GuardConfig]) -> None:
    config = build(max_k=4, domains={"a": {"max_k": 2}})
    assert (config.max_k, config.for_domain("a").max_k) == (4, 2)
    assert config.for_domain("a").source_of("max_k") == "argument [domains.a]"


def test_save_writes_the_domain_tables_and_reads_them_back(
    calibrated: Path, tmp_path: Path
) -> None:
    config = GuardConfig.from_file(calibrated)
    saved = GuardConfig.from_file(config.save(tmp_path / "again.toml"))
    assert saved.domains == config.domains
    assert saved.for_domain("legal").model_dump() == config.for_domain("legal").model_dump()
    plain = GuardConfig(max_k=3).save(tmp_path / "plain.toml").read_text(encoding="utf-8")
    assert "domains" not in plain  # no domains: the file is as before


@pytest.mark.parametrize(
    ("domains", "expected"),
    [
        ({"legal": {"max_kk": 3}}, ["[domains.legal]", "'max_kk'", "allowed keys: profile"]),
        ({"legal": {"rerank": {"topn": 3}}}, ["[domains.legal]", "'rerank.topn'", "top_n"]),
        ({"legal": {"max_k": 0}}, ["[domains.legal]", "max_k=0", "greater than or equal to 1"]),
        ({"legal": {"min_k": 9}}, ["[domains.legal]", "min_k=9", "must not exceed max_k=5"]),
        ({"": {"max_k": 3}}, ["empty name", "[domains.legal]"]),
        ("legal", ["domains='legal'", "[domains.NAME]"]),
        ({"legal": 3}, ["[domains.legal] must be a table", "got int"]),
        ({"legal": {"domains": {"x": {}}}}, ["[domains.legal]", "'domains'", "do not nest"]),
        ({"legal": {"provenance": {"q": 1}}}, ["[domains.legal]", "[provenance.domains.legal]"]),
    ],
    ids=[
        "unknown-key",
        "unknown-rerank-key",
        "bad-value",
        "min_k-above-max_k",
        "empty-name",
        "not-a-table",
        "domain-not-a-table",
        "nested-domains",
        "provenance-inside",
    ],
)
def test_a_bad_domain_table_is_one_line_naming_it_and_the_fix(
    tmp_path: Path, domains: object, expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig(max_k=5, domains=domains)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and all(part in message for part in expected), message
    if isinstance(domains, dict) and "" not in domains:  # the same from a file
        path = tmp_path / "bad.toml"
        path.write_text(tomli_w.dumps({"max_k": 5, "domains": domains}), encoding="utf-8")
        with pytest.raises(ConfigError, match=r"\[domains\.legal\]"):
            GuardConfig.from_file(path)


def test_an_empty_domain_name_in_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[domains.""]\nmax_k = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"empty name .*\(file {path}\)$"):
        GuardConfig.from_file(path)


def test_an_unknown_domain_lists_the_known_ones(calibrated: Path) -> None:
    config = GuardConfig.from_file(calibrated)
    with pytest.raises(ConfigError, match=r"^unknown domain 'lgal'; known domains: legal, "):
        config.for_domain("lgal")
    with pytest.raises(ConfigError, match=r"no \[domains\.NAME\] table"):
        GuardConfig().for_domain("legal")
    with pytest.raises(ArgumentTypeError, match="domain must be a str, got int"):
        config.for_domain(3)  # type: ignore[arg-type]
