"""Importing by name: one helper for every optional import (fail loudly, name the extra
to install), and one for the ``module:attr`` a user types on the command line."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

from ragguard.errors import MissingDependencyError, RagguardError, RetrieverError

#: The name ragguard is published under on PyPI. The import package and the command
#: stay ``ragguard``; the PyPI name ``ragguard`` belongs to an unrelated project.
DISTRIBUTION = "ragguard-context"


def install_hint(extra: str) -> str:
    """The pip command that installs one of ragguard's extras, e.g. ``"rerank"``."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise a ``MissingDependencyError`` naming the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module} is required for this feature but could not be imported ({exc}); "
            f"install it with: {install_hint(extra)}"
        ) from exc


def import_object(
    spec: str, option: str = "--retriever", error: type[RagguardError] = RetrieverError
) -> Any:
    """Import what ``module:attr`` names (the current directory first). Only for what a user
    types as code, never for a name read from data; raises ``error``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise error(
            f"{option} expects 'module:function' (e.g. 'my_rag:make_retriever'), got {spec!r}"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or anything the module raises at import
        raise error(
            f"cannot import module {module_name!r} for {option} {spec}: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise error(f"module {module_name!r} has no attribute {attr!r} ({option})")
        target = getattr(target, part)
    return target
