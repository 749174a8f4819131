"""One helper for every optional import: fail loudly, name the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from ragguard.errors import MissingDependencyError

__all__ = ["DISTRIBUTION", "install_hint", "require"]

#: The name ragguard is published under on PyPI. The import package and the command
#: stay ``ragguard``; the PyPI name ``ragguard`` belongs to an unrelated project.
DISTRIBUTION = "ragguard-context"


def install_hint(extra: str) -> str:
    """The pip command that installs one of ragguard's extras, e.g. ``"rerank"``."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an error that says which extra installs it.

    Args:
        module: dotted module name, e.g. ``"langchain_core"``.
        extra: the ragguard extra that provides it, e.g. ``"langchain"``.

    Raises:
        MissingDependencyError: the module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module} is required for this feature but could not be imported ({exc}); "
            f"install it with: {install_hint(extra)}"
        ) from exc
