"""Validation shared by the config models: a boolean is never a number (``max_k = true``
would keep one passage), and a model built by hand raises a one-line ``ConfigError``."""

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


class NumbersNotBools(BaseModel):
    """Base of the config models: ``true`` / ``false`` for a number field is an error."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name:
            leaves = _leaves(cls.model_fields[info.field_name].annotation)
            if bool not in leaves and Any not in leaves and (int in leaves or float in leaves):
                raise ValueError("must be a number, not a boolean (true/false)")
        return value


def validation_problems(model: type[BaseModel], exc: ValidationError, noun: str = "field") -> str:
    """``Model: problem; problem`` on one line (``noun``: what the fields are called)."""
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
    """Base of the models users build by hand: a bad value raises ``ConfigError``; nested in
    another model, its errors are reported by that model."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(validation_problems(type(self), exc)) from exc

    # marked as pydantic's base __init__: nested, errors stay pydantic's (the outer model
    # reports them by their path, rerank.top_n)
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]
