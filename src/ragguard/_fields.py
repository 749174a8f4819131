"""Validation shared by the config models: a boolean is never a number.

pydantic's lax mode reads ``True`` as ``1`` for an ``int`` field, so ``max_k = true`` in a
TOML file would silently keep one passage. Every model of the config rejects that.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationInfo, field_validator

__all__ = ["NumbersNotBools", "reject_bool_for_numbers"]


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
