"""Every flag that sets a field of the library's option objects has that field's default
(issue 34: one spelling per setting, no default typed twice)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from typing import Any

import ragguard.cli
from ragguard.cli._groups import Flag, FlagGroup
from ragguard.cli._groups import group as flag_group


def _groups() -> list[tuple[str, FlagGroup[Any]]]:
    """Every option group the commands of ``ragguard.cli`` declare."""
    found: dict[int, tuple[str, FlagGroup[Any]]] = {}
    for info in pkgutil.iter_modules(ragguard.cli.__path__):
        module = importlib.import_module(f"ragguard.cli.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, FlagGroup):
                found[id(value)] = (f"{info.name}.{name}", value)
    return list(found.values())


def test_every_flag_default_is_its_option_fields_default() -> None:
    checked = []
    for where, group in _groups():
        classes = group.options or (group.build,)
        params = {p.name: p for p in group.parameters()}
        for flag in group.flags:
            for option in classes:
                library = getattr(option, "__module__", "").startswith("ragguard.calibration")
                if not (library and dataclasses.is_dataclass(option)):
                    continue  # a command's own bundle of flags, not an option of the library
                field = {f.name: f for f in dataclasses.fields(option)}.get(flag.name)
                if field is None:
                    continue
                expected = (
                    inspect.Parameter.empty
                    if field.default is dataclasses.MISSING
                    else field.default
                )
                shown = params[flag.name].default  # what typer reads
                assert shown == expected, (where, flag.name, shown, expected)
                checked.append(f"{option.__name__}.{flag.name}")
                break
    # the groups build the library's objects: their flags are checked, not skipped
    for name in (
        "Calibrator.objective",
        "Guarantee.confidence",
        "Search.max_k",
        "Split.holdout",
        "Split.seed",
        "Split.folds",
        "Check.on_worse",
        "Stages.token_counter",
        "RerankSearch.probability_map",
        "Outputs.fresh",
        "Training.max_steps",
        "RerankerTrainer.holdout",
        "RerankerTrainer.base",
    ):
        assert name in checked, (name, checked)


def test_a_flag_without_a_default_of_its_own_takes_its_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Option:
        size: int = 7
        name: str = "x"

    group = FlagGroup("T", (Flag("size", Any), Flag("name", Any, "y"), Flag("other", Any)), Option)
    assert [group.default(f) for f in group.flags] == [7, "y", inspect.Parameter.empty]


def test_group_lists_its_flags_in_order_with_the_options_defaults_then_the_builds() -> None:
    @dataclasses.dataclass(frozen=True)
    class Option:
        size: int = 7

    def build(name: str = "x", size: int = 1, other: int | None = None) -> None:
        """A command's own bundle: ``size`` is the option's, so its default is too."""

    built = flag_group("T", build, Option, other=Any, size=Any, name=Any, needed=Any)
    assert [f.name for f in built.flags] == ["other", "size", "name", "needed"]
    assert [built.default(f) for f in built.flags] == [None, 7, "x", inspect.Parameter.empty]
