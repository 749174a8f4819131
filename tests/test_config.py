"""Layered config: one test per adjacent pair of layers, errors, and TOML round trips."""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragguard
from ragguard import (
    Candidate,
    ConfigError,
    ConfigWarning,
    ContextGuard,
    GuardConfig,
    ScoreKind,
    Verdict,
)
from ragguard.config import config_json_schema, load_toml
from ragguard.policy import DEFAULT_CONFLICT_SIMILARITY, ConflictMode, CutRule
from tests.faults import replace_fails


def write(tmp_path: Path, text: str, name: str = "ragguard.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- precedence: defaults < profile < file < environment < arguments -------------------


def test_profile_beats_field_default() -> None:
    assert GuardConfig().max_k == 5  # support
    config = GuardConfig(profile="medical")
    assert (config.max_k, config.relative_threshold) == (3, 0.8)
    assert config.source_of("max_k") == "profile medical"
    assert config.source_of("rrf_k") == "default"


def test_file_beats_profile(tmp_path: Path) -> None:
    path = write(tmp_path, 'profile = "medical"\nmax_k = 7\n')
    config = GuardConfig.from_file(path)
    assert config.max_k == 7
    assert config.relative_threshold == 0.8  # still from the profile
    assert config.source_of("max_k") == f"file {path}"


def test_environment_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "max_k = 7\nscore_kind = 'distance'\n")
    monkeypatch.setenv("RAGGUARD_MAX_K", "9")
    config = GuardConfig.from_file(path)
    assert config.max_k == 9
    assert config.score_kind is ScoreKind.DISTANCE
    assert config.source_of("max_k") == "environment RAGGUARD_MAX_K"


def test_arguments_beat_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGGUARD_MAX_K", "9")
    monkeypatch.setenv("RAGGUARD_SCORE_KIND", "logit")
    config = GuardConfig(max_k=2)
    assert config.max_k == 2
    assert config.score_kind is ScoreKind.LOGIT
    assert config.source_of("max_k") == "argument"


def test_nested_environment_and_custom_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGGUARD_PROFILE", "mine")
    monkeypatch.setenv("RAGGUARD_PROFILES__MINE__BASE", "legal")
    monkeypatch.setenv("RAGGUARD_PROFILES__MINE__MAX_K", "2")
    config = GuardConfig()
    assert config.resolved_profile.name == "mine"
    assert config.resolved_profile.hard_negative_penalty == -1.0  # from legal
    assert (config.max_k, config.relative_threshold) == (2, 0.8)


def test_without_environment_reads_only_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """What calibration writes with: no RAGGUARD_* variable is read, none warns, and a bad
    one does not fail it (issue 41, CB-83); the ordinary constructor still reads them."""
    monkeypatch.setenv("RAGGUARD_MIN_EVIDENCE", "0.99")
    monkeypatch.setenv("RAGGUARD_CONFLICTS", "drop")
    monkeypatch.setenv("RAGGUARD_RERANK__ENABLED", "1")
    monkeypatch.setenv("RAGGUARD_MAX_K", "0")  # invalid: GuardConfig() refuses it
    monkeypatch.setenv("RAGGUARD_MAXK", "3")  # unknown: GuardConfig() warns
    config = GuardConfig.without_environment(profile="legal", max_k=4)
    assert (config.max_k, config.min_evidence, config.conflicts) == (4, None, ConflictMode.OFF)
    assert config.rerank.enabled is False
    assert config.relative_threshold == ragguard.BUILTIN_PROFILES["legal"].relative_threshold
    assert config.source_of("min_evidence") == "default"
    assert config.source_of("max_k") == "argument"
    with pytest.raises(ConfigError, match=r"max_k=0 \(argument\)"):
        GuardConfig.without_environment(max_k=0)
    with pytest.raises(ConfigError, match="environment RAGGUARD_MAX_K"):
        GuardConfig()


def test_guard_from_file_with_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, 'score_kind = "similarity"\nmax_k = 4\nrelative_threshold = 0.5\n')
    guard = ContextGuard.from_file(path, max_k=1)
    assert (guard.config.max_k, guard.config.relative_threshold) == (1, 0.5)


# --- invalid values and files -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"max_k": 0}, "max_k=0 (argument): Input should be greater than or equal to 1"),
        ({"max_k": -3}, "max_k=-3"),
        ({"relative_threshold": 1.2}, "relative_threshold=1.2 (argument): Input should be less"),
        ({"relative_threshold": -0.1}, "greater than or equal to 0"),
        ({"score_kind": "cosine"}, "score_kind='cosine' (argument): Input should be 'similarity'"),
        ({"profile": "finance"}, "unknown profile 'finance'; known profiles: code, creative"),
        ({"max_k": 2, "min_k": 3}, "min_k=3 (argument) must not exceed max_k=2 (argument)"),
        ({"cut": "elbow"}, "cut='elbow'"),
        ({"invalid_scores": "zero"}, "Input should be 'drop', 'keep_last' or 'raise'"),
        ({"min_score": float("nan")}, "min_score=nan"),
        ({"min_evidence": float("nan")}, "min_evidence=nan (argument): Input should be a finite"),
        ({"min_evidence": float("inf")}, "min_evidence=inf (argument): Input should be a finite"),
        ({"conflict_similarity": 0}, "conflict_similarity=0 (argument): Input should be greater"),
        ({"conflict_similarity": 1.5}, "conflict_similarity=1.5 (argument): Input should be less"),
        ({"conflicts": "maybe"}, "conflicts='maybe' (argument): Input should be 'off', 'flag'"),
        (
            {"conflicts": "flag", "conflict_prefer": "version"},
            "conflict_prefer='version' is read only with conflicts='prefer' (got "
            "conflicts='flag'); set conflicts='prefer' or remove conflict_prefer",
        ),
        ({"conflict_prefer": "version"}, "(got conflicts='off')"),
        ({"conflicts": "prefer"}, "conflicts='prefer' needs conflict_prefer, the metadata key"),
        ({"conflicts": "prefer", "conflict_prefer": ""}, "conflict_prefer='' (argument): String"),
        ({"conflicts": "prefer", "conflict_prefer": "-"}, "conflict_prefer='-' (argument): names"),
    ],
)
def test_invalid_values_name_field_value_and_allowed(
    kwargs: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig(**kwargs)  # type: ignore[arg-type]
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_invalid_value_from_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGGUARD_MAX_K", "0")
    with pytest.raises(ConfigError, match="environment RAGGUARD_MAX_K"):
        GuardConfig()


def test_conflict_and_evidence_fields_from_file_environment_and_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        'min_evidence = 0.4\nconflicts = "prefer"\nconflict_prefer = "-version"\n'
        "conflict_similarity = 0.6\n",
    )
    config = GuardConfig.from_file(path)
    assert (config.min_evidence, config.conflicts, config.conflict_prefer) == (
        0.4,
        ConflictMode.PREFER,
        "-version",
    )
    assert config.conflict_similarity == 0.6
    assert config.source_of("conflict_prefer") == f"file {path}"
    params = config.policy_params()
    assert (params.min_evidence, params.conflicts, params.conflict_similarity) == (
        0.4,
        ConflictMode.PREFER,
        0.6,
    )
    assert config.rerank_policy_params().min_evidence == 0.4  # read on rerank probabilities
    monkeypatch.setenv("RAGGUARD_MIN_EVIDENCE", "0.25")
    monkeypatch.setenv("RAGGUARD_CONFLICT_PREFER", "date")
    monkeypatch.setenv("RAGGUARD_CONFLICT_SIMILARITY", "0.7")
    config = GuardConfig.from_file(path)
    assert (config.min_evidence, config.conflict_prefer, config.conflict_similarity) == (
        0.25,
        "date",
        0.7,
    )
    assert config.source_of("min_evidence") == "environment RAGGUARD_MIN_EVIDENCE"
    assert GuardConfig.from_file(path, min_evidence=None).min_evidence is None
    # defaults: off
    for name in ("MIN_EVIDENCE", "CONFLICT_PREFER", "CONFLICT_SIMILARITY"):
        monkeypatch.delenv(f"RAGGUARD_{name}")
    plain = GuardConfig()
    assert (plain.min_evidence, plain.conflicts, plain.conflict_prefer) == (
        None,
        ConflictMode.OFF,
        None,
    )
    assert plain.conflict_similarity == DEFAULT_CONFLICT_SIMILARITY


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("RAGGUARD_MIN_EVIDENCE", "nan", "min_evidence='nan' (environment RAGGUARD_MIN_EVID"),
        ("RAGGUARD_CONFLICT_SIMILARITY", "0", "(environment RAGGUARD_CONFLICT_SIMILARITY)"),
        ("RAGGUARD_CONFLICTS", "sometimes", "conflicts='sometimes' (environment"),
        ("RAGGUARD_CONFLICT_PREFER", "version", "conflict_prefer: environment RAGGUARD_CONF"),
    ],
)
def test_bad_conflict_and_evidence_values_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        GuardConfig()
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_the_json_schema_lists_the_conflict_and_evidence_fields() -> None:
    schema = config_json_schema()
    props = schema["properties"]
    assert {"min_evidence", "conflicts", "conflict_similarity", "conflict_prefer"} <= set(props)
    assert props["conflicts"]["$ref"] == "#/$defs/ConflictMode"
    assert schema["$defs"]["ConflictMode"]["enum"] == [m.value for m in ConflictMode]
    assert props["conflict_similarity"]["exclusiveMinimum"] == 0.0
    assert props["conflict_similarity"]["maximum"] == 1.0
    assert {"type": "number"} in props["min_evidence"]["anyOf"]
    assert all(props[k]["description"] for k in ("min_evidence", "conflicts"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.toml"):
        ContextGuard.from_file(tmp_path / "nope.toml")


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a file"):
        GuardConfig.from_file(tmp_path)


def test_file_that_is_not_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "max_k: 3\n", "broken.toml")
    with pytest.raises(ConfigError, match=r"broken.toml is not valid TOML.*line 1"):
        GuardConfig.from_file(path)


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "max_kk = 3\n")
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    message = str(info.value)
    assert "unknown key 'max_kk'" in message and str(path) in message and "max_k" in message


def test_unknown_key_in_custom_profile_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, 'profile = "x"\n[profiles.x]\nratio = 0.4\n')
    expected = r"unknown key 'profiles\.x\.ratio'.*distractor_score_ratio"
    with pytest.raises(ConfigError, match=expected):
        GuardConfig.from_file(path)


def test_invalid_value_in_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "relative_threshold = 70\n")
    with pytest.raises(ConfigError, match=f"relative_threshold=70 \\(file {path}\\)"):
        GuardConfig.from_file(path)


def test_config_is_frozen() -> None:
    config = GuardConfig()
    with pytest.raises(ValueError):
        config.max_k = 3


# --- save / from_file round trip -------------------------------------------------------------

configs = st.builds(
    GuardConfig,
    profile=st.sampled_from(["medical", "legal", "support", "creative", "code", "mine"]),
    score_kind=st.one_of(st.none(), st.sampled_from(list(ScoreKind))),
    max_k=st.integers(3, 50),
    min_k=st.integers(0, 3),
    relative_threshold=st.floats(0, 1),
    min_score=st.one_of(st.none(), st.floats(-10, 1)),  # above 1: not for every kind
    cut=st.sampled_from(list(CutRule)),
    gap_window=st.one_of(st.none(), st.integers(2, 30)),
    profiles=st.just({"mine": {"base": "code", "max_k": 4, "description": "mine"}}),
    provenance=st.one_of(
        st.just({}), st.just({"objective": "udcg", "queries": 25, "data_sha256": "ab12"})
    ),
)


@st.composite
def conflict_configs(draw: st.DrawFn) -> GuardConfig:
    """Configs that set the answerability and conflict fields (prefer only with its key)."""
    mode, key = draw(
        st.sampled_from(
            [("off", None), ("flag", None), ("drop", None), ("keep_first", None)]
            + [("prefer", k) for k in ("version", "-version", "date", "-x y", "\u00e9t\u00e9")]
        )
    )
    return GuardConfig(
        score_kind="similarity",
        min_evidence=draw(st.one_of(st.none(), st.floats(-10, 10))),
        conflicts=mode,
        conflict_prefer=key,
        conflict_similarity=draw(st.floats(0, 1, exclude_min=True)),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(configs, conflict_configs()))
def test_save_then_from_file_reads_back_unchanged(tmp_path: Path, config: GuardConfig) -> None:
    path = config.save(tmp_path / "out" / "ragguard.toml")
    again = GuardConfig.from_file(path)
    assert again.model_dump() == config.model_dump()
    assert again.resolved_profile == config.resolved_profile
    assert "ragguard guard config" in path.read_text().splitlines()[0]


def test_profile_defaults_stay_explicit_after_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saved config pins the profile's values; changing the profile later changes only
    what the file does not set."""
    path = GuardConfig(profile="medical").save(tmp_path / "a.toml")
    assert load_toml(path)["max_k"] == 3
    monkeypatch.setenv("RAGGUARD_PROFILE", "creative")
    config = GuardConfig.from_file(path)
    assert config.profile == "creative" and config.max_k == 3


def test_save_to_a_folder_is_a_config_error_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    # SE-09: a bare IsADirectoryError, and cfg.toml.tmp left in the parent folder
    (tmp_path / "cfg.toml").mkdir()
    with pytest.raises(ConfigError) as info:
        GuardConfig().save(tmp_path / "cfg.toml")
    assert str(info.value) == (
        f"cannot save the config to {tmp_path / 'cfg.toml'}: it is a folder; give a file "
        f"name (e.g. {tmp_path / 'cfg.toml' / 'ragguard.toml'})"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.toml"]
    assert list((tmp_path / "cfg.toml").iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"file is a file, not a folder"):
        GuardConfig().save(tmp_path / "file" / "sub" / "ragguard.toml")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_save_that_cannot_move_the_file_into_place_keeps_the_old_file_and_no_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = GuardConfig(max_k=4).save(tmp_path / "ragguard.toml")
    before = path.read_text()
    replace_fails(monkeypatch, lambda dst: dst == path, code)
    with pytest.raises(ConfigError, match=rf"cannot save the config to .*: {os.strerror(code)}"):
        GuardConfig(max_k=9).save(path)
    assert path.read_text() == before  # the old config, whole
    assert [p.name for p in tmp_path.iterdir()] == ["ragguard.toml"]


# --- bad input the user can make, each a ConfigError or ConfigWarning that says where -----


@pytest.mark.parametrize("variable", ["RAGGUARD_PROFILES", "RAGGUARD_RERANK"])
def test_malformed_json_in_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "{not json")
    with pytest.raises(ConfigError, match=f"{variable} is not valid JSON"):
        GuardConfig()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("max_k = true\n", "max_k"),
        ("relative_threshold = false\n", "relative_threshold"),
        ("[rerank]\ntop_n = true\n", "rerank.top_n"),
        ("[profiles.mine]\nmax_k = true\n", "profiles.mine.max_k"),
    ],
)
def test_a_boolean_is_not_a_number(tmp_path: Path, text: str, key: str) -> None:
    # lax pydantic would read true as 1 and keep a single passage without a word
    with pytest.raises(ConfigError, match=rf"{key}=(True|False) \(file .*\): must be a number"):
        GuardConfig.from_file(write(tmp_path, text))
    # booleans stay booleans where a boolean belongs
    assert GuardConfig.from_file(write(tmp_path, "[rerank]\nenabled = true\n")).rerank.enabled


def test_unknown_environment_variable_warns_with_the_closest_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGGUARD_MAXK", "3")
    with pytest.warns(ConfigWarning, match="RAGGUARD_MAXK .* did you mean RAGGUARD_MAX_K"):
        config = GuardConfig()
    assert config.max_k == 5  # the typo set nothing: the profile's value stands
    monkeypatch.delenv("RAGGUARD_MAXK")
    monkeypatch.setenv("RAGGUARD_MAX_K", "3")
    monkeypatch.setenv("RAGGUARD_CACHE_DIR", "/tmp/rerank-cache")  # read by calibrate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GuardConfig().max_k == 3


def test_min_k_above_max_k_names_where_each_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"min_k=4 \(argument\) .* max_k=3 \(profile 'medical'\)"):
        GuardConfig(profile="medical", min_k=4)
    monkeypatch.setenv("RAGGUARD_MIN_K", "4")
    path = write(tmp_path, "max_k = 2\n")
    with pytest.raises(
        ConfigError, match=r"min_k=4 \(environment RAGGUARD_MIN_K\) .* max_k=2 \(file .*\)"
    ):
        GuardConfig.from_file(path)


def test_config_from_a_newer_ragguard_warns(tmp_path: Path) -> None:
    path = GuardConfig(max_k=4).save(tmp_path / "mine.toml")
    assert f'ragguard_version = "{ragguard.__version__}"' in path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = GuardConfig.from_file(path)  # same version: silent, and unchanged
    assert loaded.model_dump() == GuardConfig(max_k=4).model_dump()
    newer = path.read_text().replace(ragguard.__version__, "99.0.0")
    with pytest.warns(ConfigWarning, match="written by ragguard 99.0.0, newer than"):
        GuardConfig.from_file(write(tmp_path, newer))


# --- copies: model_copy(update=...) validates as the constructor does (issue 41) ----------

COPIED = {"score_kind": "similarity", "conflicts": "flag"}
# a valid value other than the default for each field, spelled as text where text is a
# valid spelling of it (with the fields a rule between fields needs alongside)
AS_TEXT: dict[str, dict[str, object]] = {
    "profile": {"profile": "medical"},
    "score_kind": {"score_kind": "probability"},
    "max_k": {"max_k": "3"},
    "min_k": {"min_k": "2"},
    "relative_threshold": {"relative_threshold": "0.5"},
    "min_score": {"min_score": "0.25"},
    "cut": {"cut": "gap"},
    "gap_buffer": {"gap_buffer": "1"},
    "gap_window": {"gap_window": "4"},
    "autocut_jumps": {"autocut_jumps": "2"},
    "invalid_scores": {"invalid_scores": "keep_last"},
    "duplicates": {"duplicates": "keep_first"},
    "rrf_k": {"rrf_k": "10"},
    "near_duplicate_threshold": {"near_duplicate_threshold": "0.9"},
    "max_tokens": {"max_tokens": "100"},
    "token_counter": {"token_counter": "chars:3"},
    "min_evidence": {"min_evidence": "0.5"},
    "conflicts": {"conflicts": "drop"},
    "conflict_similarity": {"conflict_similarity": "0.6"},
    "conflict_detector": {"conflict_detector": "both"},
    "conflict_answer_similarity": {"conflict_answer_similarity": "0.3"},
    "conflict_prefer": {"conflicts": "prefer", "conflict_prefer": "-version"},
    "monitor": {"monitor": "true"},
}
TABLES = {"profiles", "rerank", "reference", "provenance", "domains"}  # a mapping, never text
# values that are right for some fields and wrong for others: text, numbers out of and
# in range, booleans, None and an empty table
PROBES: list[object] = ["3", "0.5", "1.5", "x", "", "drop", 0, 2, 0.5, 1.5, -1, True, None, {}]


def typed(config: GuardConfig) -> dict[str, tuple[type, object, str]]:
    """Each field's type, value and layer: a StrEnum equals its text, so compare types."""
    return {name: (type(value), value, config.source_of(name)) for name, value in config}


def outcome(build: Callable[[], GuardConfig]) -> object:
    try:
        config = build()
    except ConfigError:
        return ConfigError
    return typed(config), config.resolved_profile


def test_every_field_has_a_text_spelling_or_is_a_table() -> None:
    assert set(AS_TEXT) | TABLES == set(GuardConfig.model_fields)


@pytest.mark.parametrize("field", sorted(AS_TEXT))
def test_model_copy_applies_a_value_given_as_text_as_the_constructor_does(field: str) -> None:
    update = AS_TEXT[field]
    copy = GuardConfig(**COPIED).model_copy(update=update)  # type: ignore[arg-type]
    built = GuardConfig(**{**COPIED, **update})  # type: ignore[arg-type]
    assert typed(copy) == typed(built)
    assert copy.resolved_profile == built.resolved_profile
    assert getattr(copy, field) != getattr(GuardConfig(**COPIED), field)  # type: ignore[arg-type]


@pytest.mark.parametrize("wrong", [[1], object()], ids=["list", "object"])
@pytest.mark.parametrize("field", sorted(GuardConfig.model_fields))
def test_model_copy_refuses_a_value_of_the_wrong_type(field: str, wrong: object) -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig(**COPIED).model_copy(update={field: wrong})  # type: ignore[arg-type]
    assert f"{field}=" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError):  # as the constructor does
        GuardConfig(**{**COPIED, field: wrong})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", sorted(GuardConfig.model_fields))
def test_model_copy_accepts_and_refuses_what_the_constructor_does(field: str) -> None:
    original = GuardConfig(**COPIED)  # type: ignore[arg-type]
    for value in PROBES:
        copied = outcome(lambda value=value: original.model_copy(update={field: value}))
        built = outcome(lambda value=value: GuardConfig(**{**COPIED, field: value}))  # type: ignore[arg-type]
        assert copied == built, (field, value)


def test_model_copy_reads_no_environment_variable_the_original_did_not_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = GuardConfig(score_kind="similarity")
    monkeypatch.setenv("RAGGUARD_MIN_K", "2")
    monkeypatch.setenv("RAGGUARD_MAX_TOKENS", "50")
    monkeypatch.setenv("RAGGUARD_MAXK", "3")  # a typo: the copy reads none, nor warns
    copy = original.model_copy(update={"max_k": "3"})
    assert (copy.max_k, copy.min_k, copy.max_tokens) == (3, 1, None)
    assert copy.source_of("min_k") == "profile support"
    assert copy.source_of("max_tokens") == "default"


def test_model_copy_keeps_the_values_and_layers_of_the_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "max_k = 7\nmin_evidence = 0.4\n")
    monkeypatch.setenv("RAGGUARD_SCORE_KIND", "distance")
    original = GuardConfig.from_file(path)
    path.unlink()  # never read again
    monkeypatch.setenv("RAGGUARD_SCORE_KIND", "logit")
    copy = original.model_copy(update={"min_k": "2"})
    assert (copy.max_k, copy.min_evidence, copy.score_kind, copy.min_k) == (
        7,
        0.4,
        ScoreKind.DISTANCE,
        2,
    )
    assert copy.source_of("max_k") == f"file {path}"
    assert copy.source_of("score_kind") == "environment RAGGUARD_SCORE_KIND"
    assert copy.source_of("min_k") == "argument"
    # an error names each value's layer in the original, not today's environment
    with pytest.raises(ConfigError, match=rf"min_k=9 \(argument\) .* max_k=7 \(file {path}\)"):
        original.model_copy(update={"min_k": 9})


def test_model_copy_of_a_config_built_without_validation_validates() -> None:
    raw = GuardConfig.model_construct(score_kind="similarity", conflicts="bogus")
    with pytest.raises(ConfigError, match="conflicts='bogus'"):
        raw.model_copy(update={"max_k": 2})
    fixed = raw.model_copy(update={"conflicts": "flag"})
    assert typed(fixed) == typed(GuardConfig(score_kind="similarity", conflicts="flag"))


def test_a_guard_refuses_a_config_built_without_validation() -> None:
    raw = GuardConfig.model_construct(score_kind="similarity", conflicts="bogus")
    with pytest.raises(ConfigError, match=r"never validated .*model_construct"):
        ContextGuard(raw)


# the audit's cases (reliability-2026-11-28): a copy the constructor would refuse is a
# ConfigError; a valid value spelled as text is applied


PLANT = "In 2019 the Austin plant built {} electric cars and employed about two thousand people."


def plant_candidates() -> list[Candidate]:
    return [
        Candidate("report", PLANT.format("3,559"), 0.82),
        Candidate("blog", PLANT.format("4,112"), 0.80),
    ]


@pytest.mark.parametrize(
    ("base", "update", "expected"),
    [
        pytest.param(COPIED, {"conflicts": "bogus"}, "conflicts='bogus' (argument)", id="MC-01"),
        pytest.param(
            {"score_kind": "similarity"},
            {"conflicts": "prefer"},
            "conflicts='prefer' needs conflict_prefer",
            id="MC-07",
        ),
        pytest.param(
            {"score_kind": "similarity", "conflicts": "prefer", "conflict_prefer": "v"},
            {"conflict_prefer": ""},
            "conflict_prefer='' (argument): String should have at least 1 character",
            id="MC-08",
        ),
        pytest.param(
            {"score_kind": "similarity", "conflicts": "prefer", "conflict_prefer": "v"},
            {"conflict_prefer": 5},
            "conflict_prefer=5 (argument): Input should be a valid string",
            id="MC-09",
        ),
    ],
)
def test_audit_a_copy_with_a_value_the_constructor_refuses(
    base: dict[str, object], update: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ContextGuard(GuardConfig(**base).model_copy(update=update)).select(  # type: ignore[arg-type]
            "q", plant_candidates()
        )
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "update",
    [
        pytest.param({"min_evidence": "0.5"}, id="MC-06"),
        pytest.param({"conflicts": "off"}, id="MC-12"),
        pytest.param({"conflicts": "drop"}, id="MC-13"),
    ],
)
def test_audit_a_copy_with_a_valid_value_as_text_selects_as_the_constructor(
    update: dict[str, object],
) -> None:
    copied = ContextGuard(GuardConfig(**COPIED).model_copy(update=update))  # type: ignore[arg-type]
    built = ContextGuard(GuardConfig(**{**COPIED, **update}))  # type: ignore[arg-type]
    got, want = (g.select("q", plant_candidates()) for g in (copied, built))
    assert (got.verdict, got.decisions) == (want.verdict, want.decisions)


# --- a floor above the scale of the normalised scores is never reached (issue 41) ---------


@pytest.mark.parametrize("kind", ["probability", "logit", "distance"])
@pytest.mark.parametrize(
    ("field", "effect"),
    [
        ("min_evidence", "every query would abstain"),
        ("min_score", "no passage passes it and only min_k are kept"),
    ],
)
def test_a_floor_above_1_on_a_unit_scale_is_a_config_error(
    kind: str, field: str, effect: str
) -> None:
    # audit CV-28: ContextGuard(score_kind="probability", min_evidence=1.5) abstained on
    # every query without a word
    with pytest.raises(ConfigError) as info:
        ContextGuard(score_kind=kind, **{field: 1.5})
    message = str(info.value)
    assert (
        f"{field}=1.5 is never reached: score_kind='{kind}' scores are normalised into "
        "[0, 1]" in message
    )
    assert effect in message and f"set {field} to at most 1, or None" in message
    assert f"({field}: argument, score_kind: argument)" in message and "\n" not in message


def test_a_floor_of_1_on_a_unit_scale_is_reached() -> None:
    guard = ContextGuard(score_kind="probability", min_evidence=1.0, min_score=1.0)
    sel = guard.select("q", [Candidate("a", "t", 1.0), Candidate("b", "t", 0.99)])
    assert (sel.verdict, [c.id for c in sel.kept]) == (Verdict.ANSWERABLE, ["a"])


@pytest.mark.parametrize(
    ("kind", "scores"),
    [
        ("similarity", [2.0, 1.0]),  # BM25 scores exceed 1
        ("rrf", [2 / 61, 1 / 61]),  # first in two lists: 2.0 in units of a first place
    ],
)
def test_a_floor_above_1_stands_where_scores_go_above_1(kind: str, scores: list[float]) -> None:
    guard = ContextGuard(score_kind=kind, min_evidence=1.5, min_score=1.5)
    sel = guard.select("q", [Candidate(str(i), "t", x) for i, x in enumerate(scores)])
    assert (sel.verdict, [c.id for c in sel.kept]) == (Verdict.ANSWERABLE, ["0"])


def test_min_evidence_above_1_with_the_rerank_stage_on_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # with the rerank stage on, min_evidence reads the rerank probability, whatever the
    # retrieval scores are
    monkeypatch.setenv("RAGGUARD_MIN_EVIDENCE", "1.5")
    with pytest.raises(ConfigError) as info:
        GuardConfig(score_kind="similarity", rerank={"enabled": True})
    assert "min_evidence=1.5 is never reached: rerank probabilities lie in [0, 1]" in str(
        info.value
    )
    assert "(min_evidence: environment RAGGUARD_MIN_EVIDENCE, rerank: argument)" in str(info.value)
