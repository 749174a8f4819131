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

import typer
from typer.core import TyperCommand

from ragguard.cli._common import friendly_errors

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def option(kind: Any, help: str, *names: str, **settings: Any) -> Any:
    """``Annotated[kind, typer.Option(*names, help=help, **settings)]``: a grouped flag's
    type and option (a command's own parameters spell ``Annotated``, which type checkers
    read)."""
    return Annotated[kind, typer.Option(*names, help=help, **settings)]


@dataclass(frozen=True)
class Flag:
    """One flag of a group.

    Attributes:
        name: the parameter name the group's ``build`` receives it as.
        annotation: ``Annotated[type, typer.Option(...)]``, as in a typer signature.
        default: its default value; none given: its group's (``FlagGroup.default``),
            else none (the flag is required).
    """

    name: str
    annotation: Any
    default: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class FlagGroup(Generic[T]):
    """Flags shown together under ``title`` in ``--help``, and how one value is built
    from them.

    Attributes:
        title: the group's heading in ``--help``.
        flags: its flags, in the order ``--help`` lists them.
        build: called with every flag's value as a keyword argument; what it returns is
            what the command receives. It may raise the library's errors (a bad value):
            ``grouped`` builds inside the command's error boundary.
        options: the library's option classes (dataclasses) whose field defaults are the
            defaults of the flags that give none, the first with a field of the flag's
            name, so no default is typed twice; then ``build``'s field or parameter.
    """

    title: str
    flags: tuple[Flag, ...]
    build: Callable[..., T]
    options: tuple[type, ...] = ()

    def default(self, flag: Flag) -> Any:
        """``flag``'s default: its own, else its option field's (``options``), else
        ``build``'s field or parameter's."""
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
    """``FlagGroup(title, flags, build, options)`` with ``flags`` given as name:
    ``option(...)``, each with the default of ``options``' field or ``build``'s
    parameter of its name."""
    return FlagGroup(title, tuple(Flag(n, a) for n, a in flags.items()), build, options)


def _in_panel(annotation: Any, title: str) -> Any:
    """``annotation`` (``Annotated[type, typer.Option(...)]``) with its option shown under
    ``title`` (a copy: one option may stand in several groups)."""
    kind, info = get_args(annotation)
    info = copy.copy(info)
    info.rich_help_panel = title
    return Annotated[(kind, info)]


def grouped(groups: Mapping[str, FlagGroup[Any]]) -> Callable[[F], F]:
    """Present ``command`` to typer with each parameter named in ``groups`` (parameter
    name -> group) replaced by that group's flags, and call it with the groups' built
    values, all inside ``friendly_errors`` (with the command's ``verbose``), so that a
    bad value is one line, as the command's own errors are.

    Raises:
        TypeError: a group's flag name repeats another parameter's (at decoration time).
    """

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
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise TypeError(f"{command.__name__}: a grouped flag repeats a parameter: {names}")

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
    """``annotation`` as an object: a string one (``from __future__ import
    annotations``) evaluated in the module of ``command``, as typer would."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, command.__globals__)  # our own source's annotation, not data


class GroupedCommand(TyperCommand):
    """A command whose plain ``--help`` lists the options of each group under its title,
    then the ungrouped ones under ``Options``."""

    # Any: typer's own (vendored) click types, which it does not export
    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Arguments, each group in order of first appearance, the ungrouped options."""
        args: list[tuple[str, str]] = []
        sections: dict[str, list[tuple[str, str]]] = {}
        ungrouped: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append(record)
            else:
                title = getattr(param, "rich_help_panel", None)
                (sections.setdefault(title, []) if title else ungrouped).append(record)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for title, records in [*sections.items(), ("Options", ungrouped)]:
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
