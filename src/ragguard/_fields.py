"""Validation shared by the config models: a boolean is never a number, and a bad value
is a [`ConfigError`][ragguard.ConfigError].

pydantic's lax mode reads ``True`` as ``1`` for an ``int`` field, so ``max_k = true`` in a
TOML file would silently keep one passage. Every model of the config rejects that.

A model a user builds by hand (``RerankConfig(top_n=0)``) raises ``ConfigError`` with one
line naming each bad field and what it allows, as the errors module promises, instead of
pydantic's multi-line ``ValidationError``.
"""

from __future__ import annotations

import numbers
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError, ValidationInfo, field_validator

from ragguard.errors import ConfigError


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number (a NumPy scalar included), never a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _leaves(annotation: Any) -> list[Any]:
    """The plain types an annotation admits: Annotated and unions unwrapped."""
    if get_origin(annotation) is Annotated:
        return _leaves(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [leaf for arg in get_args(annotation) for leaf in _leaves(arg)]
    return [annotation]


def _number_not_bool(annotation: Any) -> bool:
    leaves = _leaves(annotation)
    if bool in leaves or Any in leaves:
        return False
    return any(leaf in (int, float) for leaf in leaves)


def reject_bool_for_numbers(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """A ``mode="before"`` field check: ``True`` / ``False`` for a field that does not
    take a bool is an error, not 1 / 0."""
    name = info.field_name
    if isinstance(value, bool) and name and _number_not_bool(model.model_fields[name].annotation):
        raise ValueError("must be a number, not a boolean (true/false)")
    return value


class NumbersNotBools(BaseModel):
    """Base of the config models: ``true`` / ``false`` for a number field is an error."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return reject_bool_for_numbers(cls, value, info)


def validation_problems(model: type[BaseModel], exc: ValidationError, noun: str = "field") -> str:
    """``Model: problem; problem`` on one line: each bad field with its value and what is
    allowed, each unknown one with the allowed names (``noun``: what the fields are
    called to the user), each rule across fields with its own message."""
    problems = []
    for err in exc.errors():
        name = ".".join(str(part) for part in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            problems.append(f"unknown {noun} {name!r}; allowed: {allowed}")
        elif err["type"] == "missing":
            problems.append(f"{name}: missing")
        elif not name:  # a rule across fields: its message names them
            problems.append(msg)
        else:
            problems.append(f"{name}={err['input']!r}: {msg}")
    return f"{model.__name__}: {'; '.join(problems)}"


class ConfigModel(BaseModel):
    """Base of the models users build by hand: a bad value raises
    [`ConfigError`][ragguard.ConfigError] (see ``validation_problems``), not pydantic's
    ``ValidationError``. Validation inside another model (a ``[rerank]`` table of a
    [`GuardConfig`][ragguard.GuardConfig]) is reported by that model, as before."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(validation_problems(type(self), exc)) from exc

    # pydantic calls a model's own __init__ when it validates the model nested in another
    # (a [rerank] table in a GuardConfig), unless the __init__ is marked as its base one:
    # marked, nested errors stay pydantic's, which the outer model reports by their path
    # (rerank.top_n), as before
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]
