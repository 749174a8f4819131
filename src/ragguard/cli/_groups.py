"""Option groups for typer commands, which has none: ``grouped`` shows typer each grouped
parameter as its group's flags (under the group's title in ``--help``) and calls the
command with the value the group builds from them."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from typing import Annotated, Any, Generic, TypeVar, get_args

from typer.core import TyperCommand

from ragguard.cli._common import friendly_errors

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Flag:
    """One flag of a group: its parameter name, ``Annotated`` type and own default
    (none: ``FlagGroup.default``)."""

    name: str
    annotation: Any
    default: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class FlagGroup(Generic[T]):
    """Flags shown under ``title`` in ``--help`` and the ``build`` that makes the command's
    value of them (inside the command's error boundary). Flags without a default take
    the field of ``options`` (the library's option classes), so none is typed twice."""

    title: str
    flags: tuple[Flag, ...]
    build: Callable[..., T]
    options: tuple[type, ...] = ()

    def default(self, flag: Flag) -> Any:
        """Its own default, else the field of ``options``, else ``build``'s field or parameter."""
        if flag.default is not inspect.Parameter.empty:
            return flag.default
        for owner in (*self.options, self.build):
            field = getattr(owner, "__dataclass_fields__", {}).get(flag.name)
            if field is not None and field.default is not MISSING:
                return field.default
            if field is None and inspect.isfunction(owner):
                param = inspect.signature(owner).parameters.get(flag.name)
                if param is not None and param.default is not inspect.Parameter.empty:
                    return param.default
        return inspect.Parameter.empty

    def parameters(self) -> list[inspect.Parameter]:
        """The flags as keyword parameters, each shown under the group's title."""
        return [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=_in_panel(f.annotation, self.title),
                default=self.default(f),
            )
            for f in self.flags
        ]


def group(title: str, build: Callable[..., T], *options: type, **flags: Any) -> FlagGroup[T]:
    """A ``FlagGroup`` with its flags given as ``name=option(...)``."""
    return FlagGroup(title, tuple(Flag(n, a) for n, a in flags.items()), build, options)


def _in_panel(annotation: Any, title: str) -> Any:
    """A copy of ``annotation`` shown under ``title`` (one option may be in several groups)."""
    kind, info = get_args(annotation)
    info = copy.copy(info)
    info.rich_help_panel = title
    return Annotated[(kind, info)]


def grouped(groups: Mapping[str, FlagGroup[Any]]) -> Callable[[F], F]:
    """Show typer each parameter named in ``groups`` as its group's flags; call ``command``
    with the built values inside ``friendly_errors``, so a bad value is one line."""

    def decorate(command: F) -> F:
        sig = inspect.signature(command)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name in groups:
                params += groups[p.name].parameters()
            else:  # typer reads the annotation: resolved where the command is defined
                params.append(
                    p.replace(
                        kind=inspect.Parameter.KEYWORD_ONLY,
                        annotation=_resolved(p.annotation, command),
                    )
                )

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            own = {k: v for k, v in kwargs.items() if k in sig.parameters}
            with friendly_errors(own["verbose"]):
                for name, group in groups.items():
                    own[name] = group.build(**{f.name: kwargs[f.name] for f in group.flags})
                return command(**own)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        del wrapper.__wrapped__  # typer reads the signature above, not the command's
        return wrapper  # type: ignore[return-value]

    return decorate


def _resolved(annotation: Any, command: Callable[..., Any]) -> Any:
    """A string annotation evaluated in ``command``'s module, as typer would."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, command.__globals__)  # our own source's annotation, not data


class GroupedCommand(TyperCommand):
    """A command whose plain ``--help`` lists each group's options under its title."""

    # Any: typer's own (vendored) click types, which it does not export
    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Arguments, each group in order of first appearance, then ``Options``."""
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": []}
        ungrouped: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            argument = param.param_type_name == "argument"
            title = "Arguments" if argument else getattr(param, "rich_help_panel", None)
            (sections.setdefault(title, []) if title else ungrouped).append(record)
        for title, records in [*sections.items(), ("Options", ungrouped)]:
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
