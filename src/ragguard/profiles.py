"""Tolerance profiles: the distractor rules calibration turns labels into utilities with,
and the runtime defaults (``max_k``, ``min_k``, ``relative_threshold``) any layer overrides.
The built-in values and why: docs/reference/profiles.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from ragguard._fields import ConfigModel, NumbersNotBools
from ragguard.errors import ConfigError

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-1.0, le=0.0)]
Grade = Annotated[int, Field(ge=1, le=5)]


class Profile(ConfigModel, NumbersNotBools):
    """A resolved tolerance profile (docs/reference/profiles.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    tolerance: str = ""
    distractor_score_ratio: Ratio = Field(
        description="A non-relevant passage scoring >= this x the top score is a hard negative."
    )
    distractor_top_ranks: int = Field(
        ge=0, description="A non-relevant passage ranked inside this window is a hard negative."
    )
    known_distractor_penalty: Penalty = Field(description="Utility of a labelled distractor.")
    hard_negative_penalty: Penalty = Field(description="Utility of a hard negative.")
    max_k: int = Field(ge=1, description="Runtime default: most passages kept.")
    min_k: int = Field(ge=0, description="Runtime default: fewest passages kept.")
    relative_threshold: Ratio = Field(description="Runtime default: keep >= t x top score.")
    relevant_grade: Grade = Field(default=1, description="Grades at or above this are relevant.")
    partial_grade: Grade | None = Field(
        default=None,
        description="Grades at or above this, below relevant_grade, are partially relevant.",
    )

    @model_validator(mode="after")
    def _grades(self) -> Profile:
        if self.partial_grade is not None and self.partial_grade >= self.relevant_grade:
            raise ValueError(
                f"partial_grade={self.partial_grade} must be below "
                f"relevant_grade={self.relevant_grade}"
            )
        return self


class ProfileSpec(ConfigModel, NumbersNotBools):
    """A custom profile as written in TOML: a base profile plus overrides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str = "support"
    description: str | None = None
    tolerance: str | None = None
    distractor_score_ratio: Ratio | None = None
    distractor_top_ranks: int | None = Field(default=None, ge=0)
    known_distractor_penalty: Penalty | None = None
    hard_negative_penalty: Penalty | None = None
    max_k: int | None = Field(default=None, ge=1)
    min_k: int | None = Field(default=None, ge=0)
    relative_threshold: Ratio | None = None
    relevant_grade: Grade | None = None
    partial_grade: Grade | None = None


# Why: medical, legal: a wrong dosage or a superseded statute read as fact costs most, so
# every non-relevant passage above half the top score is a full distractor, and 3 passages
# within 80% are kept. support: the write-up's defaults. creative: related material mostly
# inspires, so only passages within 90% or at rank 1 count, lightly, and 8 are kept. code:
# a wrong-version API compiles into wrong code (strict), but snippets need neighbours (5).
BUILTIN_PROFILES: Mapping[str, Profile] = {
    row[0]: Profile.model_validate(dict(zip(Profile.model_fields, row, strict=False)))
    for row in (  # name, description, tolerance, the distractor rules, max_k, min_k, t
        ("medical", "Clinical and health content; distractors can harm.", "very low",
         0.5, 3, -1.0, -1.0, 3, 1, 0.8),
        ("legal", "Law and compliance; superseded or foreign rules mislead.", "very low",
         0.5, 3, -1.0, -1.0, 3, 1, 0.8),
        ("support", "Customer support and general Q&A (the default).", "medium",
         0.7, 3, -1.0, -0.5, 5, 1, 0.7),
        ("creative", "Creative writing; related material mostly inspires.", "high",
         0.9, 1, -0.5, -0.2, 8, 1, 0.5),
        ("code", "Code generation; wrong-version APIs compile into bugs.", "low",
         0.5, 3, -1.0, -1.0, 5, 1, 0.75),
    )
}  # fmt: skip

DEFAULT_PROFILE = "support"


def resolve_profile(name: str, custom: Mapping[str, ProfileSpec] | None = None) -> Profile:
    """The profile called ``name``: a custom one (resolved through its bases) or a built-in.

    Raises:
        ConfigError: the name is unknown, custom bases form a cycle, or the resolved
            profile is invalid.
    """
    custom = custom or {}
    chain: list[str] = []
    current = name
    while current in custom:
        if current in chain:
            raise ConfigError(f"custom profiles form a cycle: {' -> '.join([*chain, current])}")
        chain.append(current)
        current = custom[current].base
    if current not in BUILTIN_PROFILES:
        known = sorted({*BUILTIN_PROFILES, *custom})
        where = f" (base of custom profile {chain[-1]!r})" if chain else ""
        raise ConfigError(f"unknown profile {current!r}{where}; known profiles: {', '.join(known)}")
    data = BUILTIN_PROFILES[current].model_dump()
    for link in reversed(chain):
        data.update(custom[link].model_dump(exclude={"base"}, exclude_none=True))
    data["name"] = name
    return Profile(**data)
