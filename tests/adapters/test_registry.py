"""The adapter registry (``ragguard.adapters``): ``wrap()`` and ``as_*`` find their adapter
through one table; ``guard.py`` names no framework; ``wrap()``'s types are precise."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from ragguard import ArgumentTypeError, ContextGuard
from ragguard.adapters import COMPONENTS, RETRIEVERS

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "ragguard"
FRAMEWORKS = ("langchain_core", "langchain", "llama_index", "haystack")


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"


def test_each_entry_names_the_framework_class_its_adapter_wraps() -> None:
    """Against the frameworks themselves: the base of each entry is the framework's
    documented retriever class, and its adapter is a retriever of that framework."""
    for entry in RETRIEVERS:
        module, _, name = entry.base.partition(":")
        base = getattr(importlib.import_module(module), name)
        public_module, _, public_name = entry.public.rpartition(".")
        assert getattr(importlib.import_module(public_module), public_name) is base
        adapter_module, _, adapter_name = entry.adapter.partition(":")
        adapter = importlib.import_module(adapter_module)
        assert adapter_module.startswith("ragguard.adapters.")
        assert adapter.Retriever is base  # the type wrap()'s overload names
        assert issubclass(getattr(adapter, adapter_name), base)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {entry.extra for entry in RETRIEVERS} <= set(extras)
    for method, path in COMPONENTS.items():
        assert callable(getattr(ContextGuard, method))
        module, _, name = path.partition(":")
        assert module.startswith("ragguard.adapters.")
        assert isinstance(getattr(importlib.import_module(module), name), type)


def test_the_tables_cannot_be_extended() -> None:
    """A constant of ragguard's code, not a place where data could name code."""
    with pytest.raises(TypeError):
        COMPONENTS["as_evil"] = "os:system"  # type: ignore[index]
    assert isinstance(RETRIEVERS, tuple)


def test_an_unsupported_retriever_names_what_is_supported() -> None:
    with pytest.raises(ArgumentTypeError) as info:
        ContextGuard().wrap(3)
    assert str(info.value) == (
        "ContextGuard.wrap() cannot guard a builtins.int; it supports LangChain retrievers "
        "(langchain_core.retrievers.BaseRetriever, extra 'langchain') and LlamaIndex "
        "retrievers (llama_index.core.retrievers.BaseRetriever, extra 'llamaindex')"
    )


def test_wrap_imports_no_framework() -> None:
    """A retriever of a framework means its module is loaded: wrap() looks, never imports."""
    code = f"""
import sys
from ragguard import ArgumentTypeError, ContextGuard
try:
    ContextGuard().wrap(object())
except ArgumentTypeError:
    pass
print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}
             or m.startswith('ragguard.adapters.')))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_guard_names_no_framework_and_imports_no_adapter_at_run_time() -> None:
    """guard.py reaches the adapters through the registry only: no framework module is
    named in it, and an adapter module is imported only for type checking."""
    tree = ast.parse((SRC / "guard.py").read_text())
    typing_only = {
        id(node) for block in ast.walk(tree) if _type_checking(block) for node in ast.walk(block)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert not any(f in node.value for f in ("langchain_core", "llama_index.")), node.value
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only:
            names = [a.name for a in node.names]
            module = node.module if isinstance(node, ast.ImportFrom) else ""
            for name in (f"{module}.{n}" if module else n for n in names):
                assert name.split(".")[0] not in FRAMEWORKS, name
                assert not name.startswith("ragguard.adapters."), name


@pytest.mark.slow  # mypy analyses the three frameworks (a minute or two on a cold cache)
def test_wrap_has_a_precise_type_per_framework(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypy (strict, the project's config) infers each framework's adapter type."""
    api = pytest.importorskip("mypy.api")
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))  # this checkout's ragguard
    snippet = tmp_path / "typed_wrap.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from typing import Any, assert_type

            from langchain_core.retrievers import BaseRetriever as LangChainBase
            from llama_index.core.retrievers import BaseRetriever as LlamaIndexBase

            from ragguard import ContextGuard
            from ragguard.adapters import haystack, langchain, llamaindex


            def check(guard: ContextGuard, lc: LangChainBase, li: LlamaIndexBase) -> None:
                assert_type(guard.wrap(lc), langchain.GuardedRetriever)
                assert_type(guard.wrap(lc, k=3), langchain.GuardedRetriever)
                assert_type(guard.wrap(li), llamaindex.GuardedRetriever)
                assert_type(guard.wrap(object()), Any)
                assert_type(guard.as_compressor(), langchain.GuardCompressor)
                assert_type(guard.as_postprocessor(), llamaindex.GuardPostprocessor)
                assert_type(guard.as_haystack(), haystack.GuardRanker)
            """
        )
    )
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--strict", str(snippet)]
    )
    assert status == 0, stdout + stderr
