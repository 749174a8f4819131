"""Layered configuration of the guard (docs/reference/config.md): keyword arguments >
environment (``RAGGUARD_*``, nested with ``__``) > TOML file > the profile's runtime
defaults > defaults; a bad value is a ``ConfigError`` naming key, value and layer."""

from __future__ import annotations

import copy
import difflib
import os
import re
import secrets
import tomllib
import warnings
from collections.abc import Mapping
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from ragguard._fields import ConfigModel, NumbersNotBools
from ragguard._optional import DISTRIBUTION
from ragguard._version import __version__
from ragguard.drift import ScoreReference
from ragguard.errors import ArgumentTypeError, ConfigError, ConfigWarning
from ragguard.policy import (
    DEFAULT_ANSWER_SIMILARITY,
    DEFAULT_CONFLICT_SIMILARITY,
    ConflictDetector,
    ConflictMode,
    CutRule,
    PolicyParams,
    UtilityCut,
)
from ragguard.probability import ProbabilityMap
from ragguard.profiles import DEFAULT_PROFILE, Profile, ProfileSpec, resolve_profile
from ragguard.scores import ScoreKind
from ragguard.tokens import DEFAULT_TOKEN_COUNTER, check_counter_spec

ENV_PREFIX = "RAGGUARD_"
#: provenance key of the ragguard version that wrote a config file (taken out on load)
WRITER_KEY = "ragguard_version"
#: RAGGUARD_* variables that ragguard reads but that are no config key
OTHER_VARIABLES = frozenset({"RAGGUARD_CACHE_DIR"})
PROFILE_FIELDS = ("max_k", "min_k", "relative_threshold")
#: score kinds whose normalised scores lie in [0, 1] (`ragguard.scores.normalize`)
UNIT_SCALE_KINDS = (ScoreKind.DISTANCE, ScoreKind.LOGIT, ScoreKind.PROBABILITY)


class InvalidScorePolicy(StrEnum):
    """What happens to a candidate whose score is missing, NaN or infinite."""

    DROP = "drop"
    """Drop it with reason ``invalid_score`` (the default)."""
    KEEP_LAST = "keep_last"
    """Keep it after every scored candidate, subject only to ``max_k``."""
    RAISE = "raise"
    """Raise [`InvalidScoreError`][ragguard.InvalidScoreError]."""


class DuplicatePolicy(StrEnum):
    """What happens when several candidates share an id."""

    KEEP_BEST = "keep_best"
    """Keep the occurrence with the best score (first on ties); drop the others."""
    KEEP_FIRST = "keep_first"
    """Keep the first occurrence with a valid score in input order (the first occurrence
    when none has one); drop the others."""
    KEEP_ALL = "keep_all"
    """Treat every occurrence as its own candidate."""
    RAISE = "raise"
    """Raise [`DuplicateIdError`][ragguard.DuplicateIdError]."""


class RerankFailure(StrEnum):
    """What the guard does when the rerank stage fails (the reranker raises, runs past
    ``timeout_ms`` or returns the wrong number of scores)."""

    FAIL_OPEN = "fail_open"
    """Select on retrieval scores as if rerank were off; warn
    ([`RerankWarning`][ragguard.RerankWarning]) and mark every decision with
    ``rerank_reason="rerank_failed"``."""
    FAIL_CLOSED = "fail_closed"
    """Raise [`RerankError`][ragguard.RerankError] (the cause attached)."""


class BeyondTopN(StrEnum):
    """What happens to candidates ranked by retrieval below ``rerank.top_n``."""

    DROP = "drop"
    """Drop them with reason ``not_reranked`` (the default)."""
    KEEP_BELOW = "keep_below"
    """Keep them after the reranked candidates that pass, in retrieval order, while room
    is left under ``max_k``; they are not checked against any score rule."""


DEFAULT_RERANK_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
RERANK_SCORE_KINDS = (ScoreKind.LOGIT, ScoreKind.PROBABILITY)


class RerankConfig(ConfigModel, NumbersNotBools):
    """The optional cross-encoder rerank stage (``GuardConfig.rerank``, TOML ``[rerank]``).
    Outputs become probabilities before any rule runs: logits through a sigmoid,
    probabilities clipped, or through ``probability_map``; ``score_kind`` unset asks the
    reranker.

    Example:
        >>> RerankConfig(enabled=True, top_n=10, min_score=0.2).top_n
        10
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="Run the rerank stage.")
    model: str = Field(
        default=DEFAULT_RERANK_MODEL,
        min_length=1,
        description="sentence-transformers CrossEncoder: a Hugging Face name or a local path.",
    )
    external: str | None = Field(
        default=None,
        description="A reranker the guard cannot build from the config (module:callable, "
        "or run:PATH of precomputed scores), recorded by ragguard calibrate and never "
        "imported: pass it as ContextGuard(config, reranker=...).",
    )
    device: str | None = Field(
        default=None, description="torch device (cpu, cuda, cuda:1, mps); None picks one."
    )
    batch_size: int = Field(default=32, ge=1, description="Pairs per forward pass.")
    max_length: int | None = Field(
        default=None, ge=8, description="Truncate (query, passage) pairs to this many tokens."
    )
    top_n: int = Field(
        default=20, ge=1, description="Rerank this many candidates, the best by retrieval score."
    )
    beyond_top_n: BeyondTopN = Field(
        default=BeyondTopN.DROP,
        description="Candidates below top_n: drop (reason not_reranked) or keep_below.",
    )
    score_kind: ScoreKind | None = Field(
        default=None,
        description="What the reranker returns: logit or probability; None asks the reranker.",
    )
    relative_threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Keep reranked passages with probability >= this x the top one; None "
        "uses the guard's relative_threshold.",
    )
    min_score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Absolute floor on the rerank probability; None disables it.",
    )
    timeout_ms: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Time budget of one rerank call; None waits as long as it takes.",
    )
    on_failure: RerankFailure = Field(
        default=RerankFailure.FAIL_OPEN, description="fail_open or fail_closed."
    )
    cache_size: int = Field(
        default=0, ge=0, description="Cache this many (query, passage) scores; 0 turns it off."
    )
    expected_utility: bool = Field(
        default=False,
        description="Keep a reranked passage only when p x 1 (gain of a relevant passage) "
        "exceeds (1 - p) x the profile's distractor penalty (-hard_negative_penalty).",
    )
    probability_map: ProbabilityMap | None = Field(
        default=None,
        description="Fitted map from rerank score to calibrated p(relevant) (written by "
        "ragguard calibrate --rerank); None: sigmoid for logits, clip for probabilities.",
    )

    @field_validator("score_kind")
    @classmethod
    def _rerank_kind(cls, value: ScoreKind | None) -> ScoreKind | None:
        if value is not None and value not in RERANK_SCORE_KINDS:
            raise ValueError(
                "a reranker returns 'logit' (most cross-encoders) or 'probability'; "
                f"got {value.value!r}"
            )
        return value


_loaded_file: ContextVar[tuple[Path, dict[str, Any]] | None] = ContextVar(
    "ragguard_config_file", default=None
)
#: set while one domain's config is resolved: (name, its table, the layer it was set in)
_domain: ContextVar[tuple[str, dict[str, Any], str] | None] = ContextVar(
    "ragguard_config_domain", default=None
)
#: set while a config is built from its arguments alone: the layers a copy keeps
_arguments_only: ContextVar[dict[str, str] | None] = ContextVar(
    "ragguard_config_arguments_only", default=None
)


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML file; a ``ConfigError`` names a missing, non-file or invalid one."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    if not p.is_file():
        raise ConfigError(f"config path is not a file: {p}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from exc


def _env_names(field: str) -> list[str]:
    name = (ENV_PREFIX + field).upper()
    return [k for k in os.environ if k.upper() == name or k.upper().startswith(name + "__")]


class GuardConfig(BaseSettings, NumbersNotBools):
    """Configuration of [`ContextGuard`][ragguard.ContextGuard] (every field:
    docs/reference/config.md).

    Example:
        >>> GuardConfig(max_k=3, relative_threshold=0.7, score_kind="similarity").max_k
        3
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    profile: str = Field(
        default=DEFAULT_PROFILE,
        description="Tolerance profile: medical, legal, support, creative, code or a custom one.",
    )
    score_kind: ScoreKind | None = Field(
        default=None,
        description="What retriever scores are; score rules are skipped while it is unknown.",
    )
    max_k: int = Field(default=5, ge=1, description="Most passages kept (profile default).")
    min_k: int = Field(default=1, ge=0, description="Fewest passages kept (profile default).")
    relative_threshold: float = Field(
        default=0.7,
        ge=0.0,
        le=1.0,
        description="Keep passages scoring >= this x the top normalised score (profile default).",
    )
    min_score: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="Absolute floor on the normalised score; None disables it.",
    )
    cut: CutRule = Field(
        default=CutRule.NONE, description="Label-free cut rule: none, gap or autocut."
    )
    gap_buffer: int = Field(default=0, ge=0, description="Extra passages kept after the gap.")
    gap_window: int | None = Field(
        default=None, ge=2, description="Look for the largest gap among this many top passages."
    )
    autocut_jumps: int = Field(default=1, ge=1, description="Cut before this score jump.")
    invalid_scores: InvalidScorePolicy = Field(
        default=InvalidScorePolicy.DROP,
        description="Missing/NaN/inf scores: drop (with reason), keep_last or raise.",
    )
    duplicates: DuplicatePolicy = Field(
        default=DuplicatePolicy.KEEP_BEST,
        description="Repeated ids: keep_best, keep_first, keep_all or raise.",
    )
    rrf_k: int = Field(default=60, ge=0, description="The k of reciprocal rank fusion scores.")
    near_duplicate_threshold: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="Drop a kept passage whose word 3-shingle Jaccard similarity with a "
        "kept, higher-ranked passage is >= this; None turns it off.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of the kept passages, filled in rank order (a passage "
        "that does not fit is skipped); None turns it off.",
    )
    token_counter: str = Field(
        default=DEFAULT_TOKEN_COUNTER,
        description="How max_tokens counts: chars:<characters per token>, "
        "tiktoken:<encoding> or hf:<tokenizer name or path>.",
    )
    min_evidence: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="Answerability: when the best candidate's normalised score (its rerank "
        "probability with the rerank stage on) is below this, nothing is kept (reason "
        "insufficient_evidence, verdict insufficient); None turns it off.",
    )
    conflicts: ConflictMode = Field(
        default=ConflictMode.OFF,
        description="Kept passages that nearly repeat each other but differ in facts: off, "
        "flag (keep, report), drop (every member), keep_first (the best-ranked member) or "
        "prefer (the member with the greatest conflict_prefer metadata value).",
    )
    conflict_similarity: float = Field(
        default=DEFAULT_CONFLICT_SIMILARITY,
        gt=0.0,
        le=1.0,
        description="Word 3-shingle Jaccard similarity from which two passages are compared "
        "for conflicting facts.",
    )
    conflict_detector: ConflictDetector = Field(
        default=ConflictDetector.NEAR_COPY,
        description="Which passages conflict: near-copy (near-copies that differ in a fact), "
        "answers (passages whose answers to the query differ) or both.",
    )
    conflict_answer_similarity: float = Field(
        default=DEFAULT_ANSWER_SIMILARITY,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="With the answers detector: the word Jaccard similarity from which two "
        "passages with different answers conflict.",
    )
    conflict_prefer: str | None = Field(
        default=None,
        min_length=1,
        description="With conflicts='prefer': the metadata key whose greatest value wins "
        "('-key': the smallest); members without it rank last.",
    )
    profiles: dict[str, ProfileSpec] = Field(
        default_factory=dict, description="Custom profiles, by name."
    )
    rerank: RerankConfig = Field(
        default_factory=RerankConfig,
        description="The optional cross-encoder rerank stage (TOML [rerank]).",
    )
    monitor: bool = Field(
        default=False,
        description="Watch for drift: test the guard's recent scores against reference "
        "(ContextGuard.drift, DriftWarning); needs reference.",
    )
    reference: ScoreReference | None = Field(
        default=None,
        description="What the scores looked like over the calibration queries (written by "
        "ragguard calibrate); what monitor tests against.",
    )
    provenance: dict[str, Any] = Field(
        default_factory=dict,
        description="Where this config came from (written by ragguard calibrate); not used "
        "by the guard.",
    )
    domains: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-domain settings (TOML [domains.NAME]): only the keys whose value "
        "differs from the settings above, merged over them by for_domain(NAME).",
    )

    _profile: Profile = PrivateAttr()
    _layers: dict[str, str] = PrivateAttr(default_factory=dict)
    _domains: dict[str, GuardConfig] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        loaded, kept = _loaded_file.get(), _arguments_only.get()
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, values, loaded, kept)) from exc
        except SettingsError as exc:  # an environment value that is not valid JSON
            raise ConfigError(_explain_env(exc)) from exc
        domain = _domain.get()
        if kept is None and domain is None:
            _warn_unknown_env()
        self._layers = {
            name: _origin(name, values, loaded, kept, domain)
            or (f"profile {self.profile}" if name in PROFILE_FIELDS else "default")
            for name in type(self).model_fields
        }
        if domain is not None:  # a resolved domain holds no domains of its own
            object.__setattr__(self, "domains", {})
        elif self.domains:  # each resolved now: a bad table fails at load, naming it
            layer = self._layers["domains"]
            given = {k: v for k, v in values.items() if k != "domains"}
            self._domains = {
                name: _resolve(type(self), name, table, layer, given)
                for name, table in self.domains.items()
            }

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with the fields of ``update`` changed, validated as ``GuardConfig(...)``
        validates; it keeps each value's layer and reads no environment or file again.

        Raises:
            ConfigError: a key of ``update`` is unknown or a value is invalid.
        """
        if not update:
            return super().model_copy(deep=deep)
        given = {name: getattr(self, name) for name in self.model_fields_set}
        if deep:
            given = copy.deepcopy(given)
        kept = {name: self._layers.get(name, "argument") for name in given if name not in update}
        token = _arguments_only.set(kept)
        try:
            return type(self)(**{**given, **update})
        finally:
            _arguments_only.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        kept, loaded, domain = _arguments_only.get(), _loaded_file.get(), _domain.get()
        if kept is not None:  # model_copy, without_environment
            if domain is None:
                return (init_settings,)
            # the values given, split around the domain's table by the layer each came from
            values = init_settings.init_kwargs  # type: ignore[attr-defined]
            rank = _rank(domain[2])
            above = {k for k in values if _rank(kept.get(k, "argument")) < rank}
            return (
                InitSettingsSource(settings_cls, {k: values[k] for k in above}),
                InitSettingsSource(settings_cls, domain[1]),
                InitSettingsSource(settings_cls, {k: values[k] for k in values if k not in above}),
            )
        sources = [init_settings, env_settings]
        if loaded is not None:
            data = (
                loaded[1]
                if domain is None
                else {k: v for k, v in loaded[1].items() if k != "domains"}
            )
            sources.append(InitSettingsSource(settings_cls, data))
        if domain is not None:  # the domain's table just above the layer it was set in
            sources.insert(_rank(domain[2]), InitSettingsSource(settings_cls, domain[1]))
        return tuple(sources)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Every field; ``domains`` only when there are some (a config without domains
        dumps, saves and prints as before they existed)."""
        data: dict[str, Any] = handler(self)
        if not self.domains:
            data.pop("domains", None)
        return data

    @field_validator("domains", mode="before")
    @classmethod
    def _domain_tables(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise PydanticCustomError(
                "domains",
                "domains={value} is not a table; write one [domains.NAME] table per domain, "
                "holding the keys that differ for it (e.g. [domains.legal] max_k = 3)",
                {"value": repr(value)[:60]},
            )
        for name, table in value.items():
            if not isinstance(name, str) or not name:
                raise PydanticCustomError(
                    "domains",
                    'a domain has an empty name ([domains.""]); name each domain, '
                    "e.g. [domains.legal]",
                )
            if not isinstance(table, dict):
                raise PydanticCustomError(
                    "domains",
                    "[domains.{name}] must be a table of the keys that differ for that "
                    "domain, got {kind}; write [domains.{name}] and its keys below it",
                    {"name": name, "kind": type(table).__name__},
                )
            for key, fix in (
                ("domains", "domains do not nest; give each domain its own [domains.NAME]"),
                ("provenance", "per-domain provenance goes under [provenance.domains.{name}]"),
            ):
                if key in table:
                    raise PydanticCustomError(
                        "domains",
                        "[domains.{name}] holds '{key}': " + fix,
                        {"name": name, "key": key},
                    )
        return value

    @field_validator("conflict_prefer")
    @classmethod
    def _prefer_key(cls, value: str | None) -> str | None:
        if value is not None and not value.removeprefix("-"):
            raise ValueError("names no metadata key; write 'key' (greatest wins) or '-key'")
        return value

    @field_validator("token_counter")
    @classmethod
    def _counter_syntax(cls, value: str) -> str:
        try:
            return check_counter_spec(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _apply_profile(self) -> GuardConfig:
        profile = resolve_profile(self.profile, self.profiles)
        for name in PROFILE_FIELDS:
            if name not in self.model_fields_set:
                object.__setattr__(self, name, getattr(profile, name))
        if self.min_k > self.max_k:
            raise PydanticCustomError(
                "min_k_above_max_k",
                "min_k={min_k} must not exceed max_k={max_k}",
                {"min_k": self.min_k, "max_k": self.max_k, "profile": self.profile},
            )
        self._profile = profile
        prefer = self.conflicts is ConflictMode.PREFER
        if prefer and self.conflict_prefer is None:
            raise PydanticCustomError(
                "conflict_prefer",
                "conflicts='prefer' needs conflict_prefer, the metadata key whose greatest "
                "value wins (e.g. 'version'; '-version' for the smallest)",
            )
        if not prefer and self.conflict_prefer is not None:
            raise PydanticCustomError(
                "conflict_prefer",
                "conflict_prefer={key} is read only with conflicts='prefer' (got "
                "conflicts='{conflicts}'); set conflicts='prefer' or remove conflict_prefer",
                {"conflicts": self.conflicts.value, "key": repr(self.conflict_prefer)},
            )
        return self

    @model_validator(mode="after")
    def _floors_in_reach(self) -> GuardConfig:
        """A floor above 1 on scores normalised into [0, 1] is never reached."""
        kind, rerank = self.score_kind, self.rerank.enabled
        for name, on_rerank, effect in (
            ("min_score", False, "no passage passes it and only min_k are kept"),
            ("min_evidence", rerank, "every query would abstain (verdict insufficient)"),
        ):
            floor = getattr(self, name)
            if floor is None or floor <= 1.0:
                continue
            if on_rerank:  # min_evidence reads the rerank probability then
                scale, by = "rerank probabilities lie in [0, 1]", "rerank"
            elif kind is not None and kind in UNIT_SCALE_KINDS:
                scale = f"score_kind={kind.value!r} scores are normalised into [0, 1]"
                by = "score_kind"
            else:
                continue
            raise PydanticCustomError(
                "floor_out_of_reach",
                "{name}={floor} is never reached: {scale}, so {effect}; set "
                "{name} to at most 1, or None to turn it off",
                {"name": name, "floor": floor, "scale": scale, "effect": effect, "by": by},
            )
        return self

    def for_domain(self, name: str) -> GuardConfig:
        """The config of domain ``name``: these settings with its ``[domains.NAME]`` table
        merged over them (resolved and validated when this config was built).

        The table refines the layer it was set in (usually the file): a value from a
        layer above it (an argument, or a ``RAGGUARD_*`` variable over a file) wins over
        it, in every domain; ``source_of`` names a value it supplied
        ``"file PATH [domains.NAME]"``.

        Raises:
            ArgumentTypeError: ``name`` is not a str.
            ConfigError: this config has no domain ``name`` (the message lists them).
        """
        resolved = self._domains.get(name) if isinstance(name, str) else None
        if resolved is not None:
            return resolved
        if not isinstance(name, str):
            raise ArgumentTypeError(f"domain must be a str, got {type(name).__name__}")
        known = ", ".join(self._domains) or "none (this config has no [domains.NAME] table)"
        raise ConfigError(f"unknown domain {name!r}; known domains: {known}")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> GuardConfig:
        """Load a TOML config file; environment variables and ``overrides`` win over it.

        Raises:
            ConfigError: the file is missing or malformed, a key is unknown or a value
                is invalid.
        """
        data = load_toml(path)
        _check_writer(Path(path), data)
        token = _loaded_file.set((Path(path), data))
        try:
            return cls(**overrides)
        finally:
            _loaded_file.reset(token)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this config as TOML that [`from_file`][ragguard.GuardConfig.from_file] reads back
        unchanged, atomically (a temporary file beside ``path``, then ``os.replace``).

        Raises:
            ConfigError: ``path`` is a folder, a parent of it is a file, or the file
                cannot be written or moved into place.
        """
        data = self.model_dump(mode="json", exclude_none=True)
        data["provenance"] = {**data["provenance"], WRITER_KEY: __version__}
        if not data["profiles"]:
            del data["profiles"]
        if self.rerank == RerankConfig():
            del data["rerank"]  # the stage is off and untouched: no [rerank] table
        elif self.rerank.external is not None and self.rerank.model == DEFAULT_RERANK_MODEL:
            del data["rerank"]["model"]  # a callable or a run file scores: no model is used
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        header = f"# ragguard guard config, written {stamp}. Load: ContextGuard.from_file(path)\n"
        p = Path(path)
        _write_atomic(p, header + tomli_w.dumps(data))
        return p

    @property
    def resolved_profile(self) -> Profile:
        """The profile this config uses, with custom overrides applied.

        Raises:
            ConfigError: this config was never validated (``GuardConfig.model_construct``).
        """
        try:
            return self._profile
        except AttributeError:
            raise ConfigError(
                "this GuardConfig was never validated (GuardConfig.model_construct skips "
                "validation); build it with GuardConfig(...) or copy a valid one with "
                ".model_copy(update=...)"
            ) from None

    def source_of(self, name: str) -> str:
        """Which layer supplied field ``name``: argument, environment, file, profile or
        default."""
        if name not in self._layers:
            raise KeyError(f"GuardConfig has no field {name!r}")
        return self._layers[name]

    def policy_params(self, *, score_rules: bool = True) -> PolicyParams:
        """The selection policy's parameters under this config."""
        return PolicyParams(
            max_k=self.max_k,
            min_k=self.min_k,
            relative_threshold=self.relative_threshold,
            min_score=self.min_score,
            cut=self.cut,
            gap_buffer=self.gap_buffer,
            gap_window=self.gap_window,
            autocut_jumps=self.autocut_jumps,
            keep_invalid=self.invalid_scores is InvalidScorePolicy.KEEP_LAST,
            score_rules=score_rules,
            near_duplicate_threshold=self.near_duplicate_threshold,
            max_tokens=self.max_tokens,
            min_evidence=self.min_evidence,
            conflicts=self.conflicts,
            conflict_similarity=self.conflict_similarity,
            conflict_detector=self.conflict_detector,
            conflict_answer_similarity=self.conflict_answer_similarity,
        )

    def rerank_policy_params(self) -> PolicyParams:
        """The policy's parameters for the rerank stage: the guard's, with the rerank
        threshold, floor and expected-utility rule, on rerank probabilities."""
        rerank = self.rerank
        threshold = rerank.relative_threshold
        return replace(
            self.policy_params(),
            relative_threshold=self.relative_threshold if threshold is None else threshold,
            min_score=rerank.min_score,
            expected_utility=(
                profile_utility_cut(self._profile) if rerank.expected_utility else None
            ),
        )

    @classmethod
    def without_environment(cls, **values: Any) -> GuardConfig:
        """A config of ``values`` over the profile and the defaults alone, reading no
        ``RAGGUARD_*`` variable (``ragguard calibrate`` writes what it measured).

        Raises:
            ConfigError: a value is invalid.
        """
        token = _arguments_only.set({})  # as model_copy builds: the values given only
        try:
            return cls(**values)
        finally:
            _arguments_only.reset(token)


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``ragguard.toml`` file."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.invalid/ragguard/ragguard.schema.json",
        **GuardConfig.model_json_schema(),
        "title": "ragguard.toml",
    }


def profile_utility_cut(profile: Profile) -> UtilityCut:
    """The expected-utility rule of ``profile``: gain 1, penalty ``-hard_negative_penalty``."""
    return UtilityCut(gain=1.0, penalty=-profile.hard_negative_penalty)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it and ``os.replace``."""
    if path.is_dir():
        raise ConfigError(
            f"cannot save the config to {path}: it is a folder; give a file name "
            f"(e.g. {path / 'ragguard.toml'})"
        )
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("x", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        file_parent = next((a for a in path.parents if a.exists() and not a.is_dir()), None)
        if file_parent is not None:
            reason = f"{file_parent} is a file, not a folder"
        else:
            reason = exc.strerror or str(exc)
        raise ConfigError(f"cannot save the config to {path}: {reason}") from exc


def _resolve(
    cls: type[GuardConfig], name: str, table: dict[str, Any], layer: str, given: dict[str, Any]
) -> GuardConfig:
    """Domain ``name``'s config: ``given`` (the arguments) and the layers, with ``table``
    just above ``layer``, the layer it was set in."""
    token = _domain.set((name, table, layer))
    try:
        return cls(**given)
    except ConfigError as exc:
        problem = str(exc).removeprefix("invalid ragguard config: ")
        raise ConfigError(f"invalid ragguard config in [domains.{name}]: {problem}") from None
    finally:
        _domain.reset(token)


def _rank(layer: str) -> int:
    """A layer's place, highest first: argument 0, environment 1, file 2, the rest 3."""
    return next((i for i, top in enumerate(_LAYERS) if layer.startswith(top)), len(_LAYERS))


_LAYERS = ("argument", "environment", "file")


def _origin(
    key: str,
    values: dict[str, Any],
    loaded: tuple[Path, dict[str, Any]] | None,
    kept: dict[str, str] | None,
    domain: tuple[str, dict[str, Any], str] | None = None,
) -> str | None:
    """The layer that set ``key`` (``kept``: a copy's original's; ``domain``: the table
    being resolved, above its own layer); None when none did."""
    found = _layer(key, values, loaded, kept)
    if domain is not None and key in domain[1] and _rank(found or "") >= _rank(domain[2]):
        return f"{domain[2]} [domains.{domain[0]}]"
    return found


def _layer(
    key: str,
    values: dict[str, Any],
    loaded: tuple[Path, dict[str, Any]] | None,
    kept: dict[str, str] | None,
) -> str | None:
    if kept is not None and key in kept:
        return kept[key]
    if key in values:
        return "argument"
    if kept is None and (env := _env_names(key)):
        return f"environment {env[0]}"
    if loaded is not None and key in loaded[1]:
        return f"file {loaded[0]}"
    return None


def _explain(
    exc: ValidationError,
    values: dict[str, Any],
    loaded: tuple[Path, dict[str, Any]] | None,
    kept: dict[str, str] | None,
) -> str:
    """One line per problem: key, value, where it came from, what is allowed."""

    def origin(key: str, profile: str | None = None) -> str:
        if found := _origin(key, values, loaded, kept, _domain.get()):
            return found
        if profile is not None and key in PROFILE_FIELDS:
            return f"profile {profile!r}"
        return "default"

    lines = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        key = ".".join(loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "min_k_above_max_k":
            ctx = err.get("ctx", {})
            lines.append(
                f"min_k={ctx['min_k']} ({origin('min_k', ctx['profile'])}) must not exceed "
                f"max_k={ctx['max_k']} ({origin('max_k', ctx['profile'])})"
            )
        elif err["type"] == "conflict_prefer":
            lines.append(
                f"{msg} (conflicts: {origin('conflicts')}, conflict_prefer: "
                f"{origin('conflict_prefer')})"
            )
        elif err["type"] == "domains":
            lines.append(f"{msg} ({origin('domains')})")
        elif err["type"] == "floor_out_of_reach":
            name, by = err["ctx"]["name"], err["ctx"]["by"]
            lines.append(f"{msg} ({name}: {origin(name)}, {by}: {origin(by)})")
        elif not loc:
            lines.append(msg)
        elif err["type"] == "extra_forbidden":
            model: type[BaseModel] = GuardConfig
            if loc[0] == "profiles" and len(loc) == 3:
                model = ProfileSpec
            elif loc[0] == "rerank" and len(loc) == 2:
                model = RerankConfig
            elif loc[:2] == ["rerank", "probability_map"] and len(loc) == 3:
                model = ProbabilityMap
            inner = ("domains", "provenance") if _domain.get() and model is GuardConfig else ()
            allowed = ", ".join(k for k in model.model_fields if k not in inner)
            lines.append(f"unknown key {key!r} ({origin(loc[0])}); allowed keys: {allowed}")
        else:
            lines.append(f"{key}={err['input']!r} ({origin(loc[0])}): {msg}")
    return "invalid ragguard config: " + "; ".join(lines)


def _explain_env(exc: SettingsError) -> str:
    field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else ""
    names = _env_names(field) if field else []
    where = ", ".join(names) or f"a {ENV_PREFIX}* variable"
    return (
        f"invalid ragguard config: {where} is not valid JSON; a table such as "
        f"{field or 'rerank'} is set as one JSON object "
        f"({ENV_PREFIX}RERANK='{{\"enabled\": true}}') or key by key with __ "
        f"({ENV_PREFIX}RERANK__ENABLED=1)"
    )


def _warn_unknown_env() -> None:
    """Warn about RAGGUARD_* variables that set nothing (a typo), naming the closest key."""
    unknown = [
        k
        for k in os.environ
        if k.upper().startswith(ENV_PREFIX) and k.upper() not in OTHER_VARIABLES
    ]
    if not unknown:
        return
    # top-level keys, and the keys of each nested table an environment variable may set
    keys = {
        name: set(RerankConfig.model_fields) if name == "rerank" else set()
        for name in GuardConfig.model_fields
    }
    for var in unknown:
        top, _, nested = var[len(ENV_PREFIX) :].lower().partition("__")
        if top in keys and (not nested or not keys[top] or nested in keys[top]):
            continue
        choices = [f"{top}__{k}" for k in keys[top]] if top in keys else list(keys)
        guess = difflib.get_close_matches(f"{top}__{nested}" if top in keys else top, choices, 1)
        hint = f"; did you mean {(ENV_PREFIX + guess[0]).upper()}?" if guess else ""
        warnings.warn(
            f"environment variable {var} is not a ragguard config key and is ignored{hint}",
            ConfigWarning,
            stacklevel=3,
        )


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = re.findall(r"\d+", text.split("+")[0])[:3]
    return tuple(int(p) for p in parts) if parts else None


def _check_writer(path: Path, data: dict[str, Any]) -> None:
    """Take the writer's version out of the file's provenance; warn when a newer ragguard
    wrote it (keys it added are unknown here)."""
    provenance = data.get("provenance")
    if not isinstance(provenance, dict) or WRITER_KEY not in provenance:
        return
    provenance = dict(provenance)
    written_by = str(provenance.pop(WRITER_KEY))
    if provenance:
        data["provenance"] = provenance
    else:
        del data["provenance"]
    theirs, ours = _version_tuple(written_by), _version_tuple(__version__)
    if theirs is not None and ours is not None and theirs > ours:
        warnings.warn(
            f"{path} was written by ragguard {written_by}, newer than this ragguard "
            f"{__version__}; settings it added may be unknown here or read differently. "
            f"Upgrade with: pip install -U {DISTRIBUTION}",
            ConfigWarning,
            stacklevel=4,
        )
