"""One helper for every optional import: fail loudly, name the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from ragguard.errors import MissingDependencyError

__all__ = ["require"]


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
            f'install it with: pip install "ragguard[{extra}]"'
        ) from exc
