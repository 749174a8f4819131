"""Built-in tolerance profiles follow the practitioner write-up; custom ones resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragguard import BUILTIN_PROFILES, ConfigError, ContextGuard, GuardConfig
from ragguard.profiles import ProfileSpec, resolve_profile


def test_builtin_profiles_exist() -> None:
    assert set(BUILTIN_PROFILES) == {"medical", "legal", "support", "creative", "code"}
    assert GuardConfig().profile == "support"


@pytest.mark.parametrize("name", ["medical", "legal"])
def test_strict_profiles_use_half_ratio_and_full_penalty(name: str) -> None:
    p = BUILTIN_PROFILES[name]
    assert (p.distractor_score_ratio, p.hard_negative_penalty, p.known_distractor_penalty) == (
        0.5,
        -1.0,
        -1.0,
    )


def test_support_uses_the_write_ups_defaults() -> None:
    p = BUILTIN_PROFILES["support"]
    assert (p.distractor_score_ratio, p.distractor_top_ranks, p.hard_negative_penalty) == (
        0.7,
        3,
        -0.5,
    )
    assert p.known_distractor_penalty == -1.0
    assert p.relative_threshold == 0.7


def test_creative_is_relaxed_and_code_is_strict() -> None:
    creative, code, support = (BUILTIN_PROFILES[n] for n in ("creative", "code", "support"))
    assert (creative.distractor_score_ratio, creative.hard_negative_penalty) == (0.9, -0.2)
    assert code.distractor_score_ratio <= support.distractor_score_ratio
    assert code.hard_negative_penalty == -1.0


def test_strictness_orders_the_runtime_defaults() -> None:
    """Less tolerance for distractors -> fewer passages and a higher bar at runtime."""
    order = ["medical", "code", "support", "creative"]
    ks = [BUILTIN_PROFILES[n].max_k for n in order]
    ts = [BUILTIN_PROFILES[n].relative_threshold for n in order]
    assert ks == sorted(ks)
    assert ts == sorted(ts, reverse=True)


def test_custom_profile_chain_resolves_overrides_in_order() -> None:
    custom = {
        "oncology": ProfileSpec(base="medical", max_k=2),
        "peds": ProfileSpec(base="oncology", relative_threshold=0.9),
    }
    p = resolve_profile("peds", custom)
    assert (p.name, p.max_k, p.relative_threshold, p.distractor_score_ratio) == (
        "peds",
        2,
        0.9,
        0.5,
    )


def test_custom_profile_errors() -> None:
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        resolve_profile("a", {"a": ProfileSpec(base="b"), "b": ProfileSpec(base="a")})
    with pytest.raises(
        ConfigError, match="unknown profile 'nope' \\(base of custom profile 'a'\\)"
    ):
        resolve_profile("a", {"a": ProfileSpec(base="nope")})


def test_custom_profile_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "ragguard.toml"
    path.write_text(
        'profile = "oncology"\nscore_kind = "similarity"\n\n'
        '[profiles.oncology]\nbase = "medical"\nmax_k = 2\nhard_negative_penalty = -0.8\n',
        encoding="utf-8",
    )
    guard = ContextGuard.from_file(path)
    assert guard.profile.hard_negative_penalty == -0.8
    assert guard.config.max_k == 2
    assert guard.config.relative_threshold == 0.8


def test_custom_profile_values_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"profiles\.x\.hard_negative_penalty=0\.5"):
        GuardConfig(profile="x", profiles={"x": {"hard_negative_penalty": 0.5}})  # type: ignore[dict-item]


# --- grades: which labels a profile counts as relevant -----------------------------------


def _graded_folder(tmp_path: Path) -> Path:
    """Every query: d1 graded 1 at rank 1, d2 graded 2 at rank 2, d3 unjudged at rank 3."""
    folder = tmp_path / "graded"
    (folder / "runs").mkdir(parents=True)
    qrels = [f"q{i} 0 d{i}_{r} {g}" for i in range(12) for r, g in ((1, 1), (2, 2))]
    run = [f"q{i} Q0 d{i}_{r} {r} {1 - r / 10} x" for i in range(12) for r in (1, 2, 3)]
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    (folder / "runs" / "r.trec").write_text("\n".join(run) + "\n")
    return folder


def test_a_custom_profile_carries_grades_into_utilities(tmp_path: Path) -> None:
    from ragguard.calibration import UtilityRules, load_evalset

    toml = tmp_path / "ragguard.toml"
    toml.write_text('[profiles.graded]\nbase = "medical"\nrelevant_grade = 2\npartial_grade = 1\n')
    custom = GuardConfig.from_file(toml).profiles
    graded = resolve_profile("graded", custom)
    assert (graded.relevant_grade, graded.partial_grade) == (2, 1)
    folder = _graded_folder(tmp_path)
    es = load_evalset(folder / "qrels.txt", runs=folder / "runs" / "r.trec")
    # utilities by rank: grade 1 partially relevant (+0.5), grade 2 relevant (+1.0)
    assert es.arrays("r", profile=graded).utility[0, :2].tolist() == [0.5, 1.0]
    # the same as the rules given in Python, on the same profile otherwise
    medical = resolve_profile("medical")
    explicit = es.arrays("r", profile=medical, rules=UtilityRules(2, 1))
    assert explicit.utility[0, :2].tolist() == [0.5, 1.0]
    # built-in profiles keep binary relevance at grade 1
    assert es.arrays("r", profile=medical).utility[0, :2].tolist() == [1.0, 1.0]
    with pytest.raises(ConfigError, match="partial_grade=2 must be below relevant_grade=2"):
        GuardConfig(profiles={"bad": {"relevant_grade": 2, "partial_grade": 2}}, profile="bad")


def test_calibrate_reads_custom_profiles_from_a_toml_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ragguard.cli import app

    folder = _graded_folder(tmp_path)
    toml = tmp_path / "profiles.toml"
    toml.write_text("[profiles.graded]\nrelevant_grade = 2\npartial_grade = 1\n")
    base = ["calibrate", str(folder), "--no-report", "--min-recall", "0", "--folds", "0"]
    runs = {
        "file": [*base, "--profiles", str(toml), "--profile", "graded"],
        "flags": [*base, "--relevant-grade", "2", "--partial-grade", "1"],
        "default": base,
    }
    evidence = {}
    for name, args in runs.items():
        res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / f"{name}.toml")])
        assert res.exit_code == 0, res.output
        provenance = GuardConfig.from_file(tmp_path / f"{name}.toml").provenance
        evidence[name] = provenance["baseline_metrics"]["evidence_recall"]
    # the TOML profile and the flags count the same passages as evidence
    assert evidence["file"] == evidence["flags"]
    written = GuardConfig.from_file(tmp_path / "file.toml")
    assert written.profile == "graded" and written.resolved_profile.relevant_grade == 2
    # an unknown custom name, or a missing file, is one line
    res = CliRunner().invoke(app, [*base, "--profiles", str(toml), "--profile", "nope"])
    assert res.exit_code == 1 and "unknown profile 'nope'" in res.output
    res = CliRunner().invoke(app, [*base, "--profiles", str(tmp_path / "missing.toml")])
    assert res.exit_code == 1 and "config file not found" in res.output
