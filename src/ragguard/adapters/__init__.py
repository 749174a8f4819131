"""Framework adapters: translate framework objects to Candidates and back.

Import the one you use on purpose; ``import ragguard`` never imports a framework::

    from ragguard.adapters.langchain import GuardedRetriever, GuardCompressor
    from ragguard.adapters.llamaindex import GuardedRetriever, GuardPostprocessor
    from ragguard.adapters.haystack import GuardRanker

Usually you need none of these imports: ``ContextGuard.wrap(retriever)``,
``ContextGuard.as_compressor()``, ``ContextGuard.as_postprocessor()`` and
``ContextGuard.as_haystack()`` pick the adapter.

**How they pick it.** This module holds the table: ``RETRIEVERS`` maps each
framework's retriever base class to the adapter that wraps it, ``COMPONENTS`` each
``ContextGuard.as_*`` method to the adapter it builds. ``guarded`` finds a
retriever's adapter without importing any framework (a retriever of a framework means
the framework is loaded: its base class is looked up in ``sys.modules``) and imports
only that adapter; ``component`` imports the one adapter asked for. Both tables are
constants of ragguard's own code and name only ragguard's adapter modules: nothing a
user, a config or a saved pipeline passes in is ever imported through them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from ragguard.errors import ArgumentTypeError

__all__ = ["COMPONENTS", "RETRIEVERS", "RetrieverAdapter", "component", "guarded"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrieverAdapter:
    """One framework's retriever base class and ragguard's adapter for it.

    Attributes:
        framework: the framework's name, for messages (``"LangChain"``).
        base: where the framework defines its retriever base class,
            ``"module:qualname"``.
        public: the import path the framework documents for that class, for messages.
        extra: the ragguard extra that installs the framework.
        adapter: ragguard's adapter class, ``"ragguard.adapters.<module>:<class>"``;
            built as ``adapter(retriever=retriever, guard=guard, **options)``.
    """

    framework: str
    base: str
    public: str
    extra: str
    adapter: str

    def supports(self) -> str:
        """What the entry supports, for the message of an unsupported retriever."""
        return f"{self.framework} retrievers ({self.public}, extra {self.extra!r})"


RETRIEVERS: Final[tuple[RetrieverAdapter, ...]] = (
    RetrieverAdapter(
        framework="LangChain",
        base="langchain_core.retrievers:BaseRetriever",
        public="langchain_core.retrievers.BaseRetriever",
        extra="langchain",
        adapter="ragguard.adapters.langchain:GuardedRetriever",
    ),
    RetrieverAdapter(
        framework="LlamaIndex",
        base="llama_index.core.base.base_retriever:BaseRetriever",
        public="llama_index.core.retrievers.BaseRetriever",
        extra="llamaindex",
        adapter="ragguard.adapters.llamaindex:GuardedRetriever",
    ),
)
"""``ContextGuard.wrap()``'s table, in the order it is tried: the first entry whose base
class the retriever is an instance of gives the adapter."""

COMPONENTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "as_compressor": "ragguard.adapters.langchain:GuardCompressor",
        "as_postprocessor": "ragguard.adapters.llamaindex:GuardPostprocessor",
        "as_haystack": "ragguard.adapters.haystack:GuardRanker",
    }
)
"""``ContextGuard.as_*`` method -> the adapter class it builds, as
``adapter(guard=guard, **options)``."""


def guarded(guard: object, retriever: object, **options: Any) -> Any:
    """``guard.wrap(retriever)``: ``retriever`` inside the adapter of its framework.

    Args:
        guard: the [`ContextGuard`][ragguard.ContextGuard] (the adapter checks it).
        retriever: an instance of a base class of ``RETRIEVERS``.
        **options: the adapter's options.

    Raises:
        ArgumentTypeError: ``retriever`` is an instance of no base class of
            ``RETRIEVERS`` (a ``TypeError``).
        MissingDependencyError: the adapter's framework cannot be imported.
    """
    for entry in RETRIEVERS:
        base = _loaded(entry.base)
        if base is not None and isinstance(retriever, base):
            return _adapter(entry.adapter)(retriever=retriever, guard=guard, **options)
    kind = type(retriever)
    raise ArgumentTypeError(
        f"ContextGuard.wrap() cannot guard a {kind.__module__}.{kind.__qualname__}; it "
        f"supports {' and '.join(entry.supports() for entry in RETRIEVERS)}"
    )


def component(method: str, guard: object, **options: Any) -> Any:
    """What ``guard.<method>(**options)`` returns (``method`` a key of
    ``COMPONENTS``, e.g. ``"as_compressor"``).

    Raises:
        MissingDependencyError: the adapter's framework is not installed.
    """
    return _adapter(COMPONENTS[method])(guard=guard, **options)


def _loaded(path: str) -> type | None:
    """The class ``module:qualname`` names when its module is already imported, else
    ``None``: never imports."""
    module, _, qualname = path.partition(":")
    found: object = sys.modules.get(module)
    for name in qualname.split("."):
        found = getattr(found, name, None)
    return found if isinstance(found, type) else None


def _adapter(path: str) -> Any:
    """The adapter class ``ragguard.adapters.<module>:<class>`` names, importing its
    module (which imports its framework or raises MissingDependencyError)."""
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for name in qualname.split("."):
        found = getattr(found, name)
    return found
