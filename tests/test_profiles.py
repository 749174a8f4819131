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
