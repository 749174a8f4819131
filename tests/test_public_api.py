"""The public surface: a complete, sorted __all__ and helpful errors for missing extras."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

import ragguard
from ragguard import MissingDependencyError
from ragguard._optional import install_hint, require

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ragguard"


def test_all_is_sorted_and_complete() -> None:
    # the order ruff's RUF022 keeps: CONSTANTS, then Classes, then the rest, each sorted
    def group(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert list(ragguard.__all__) == sorted(ragguard.__all__, key=group)
    public = {n for n in vars(ragguard) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(ragguard.__all__)
    for name in ragguard.__all__:
        assert hasattr(ragguard, name), name


def test_the_reranker_registry_is_public() -> None:
    """Saved pipelines name rerankers that user code registers (issue 21)."""
    registry = {"register_reranker", "registered_reranker", "unregister_reranker"}
    assert registry <= set(ragguard.__all__)
    assert ragguard.register_reranker is ragguard.rerank.register_reranker


def test_py_typed_marker_ships() -> None:
    assert (SRC / "py.typed").exists()


def test_require_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError, match=re.escape(install_hint("langchain"))):
        require("surely_not_an_installed_module_xyz", "langchain")
    assert require("json", "core") is sys.modules["json"]


def test_every_extra_named_in_the_code_exists_in_pyproject() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        named |= set(re.findall(r"ragguard\[([a-z]+)\]", text))
        named |= set(re.findall(r'require\(\s*"[\w.]+",\s*"([a-z]+)"\s*\)', text))
    assert named <= extras, named - extras
    assert {"langchain", "llamaindex", "haystack", "otel", "rerank", "all", "dev"} <= extras


def test_importing_ragguard_imports_no_framework() -> None:
    import subprocess

    frameworks = (
        "('langchain_core', 'llama_index', 'haystack', 'opentelemetry', 'sentence_transformers',"
        " 'torch')"
    )
    code = f"import sys, ragguard; print(sorted(m for m in {frameworks} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_load_reranker_is_runtime_code() -> None:
    """Issue 22: ``ragguard.load_reranker`` lives in the runtime (:mod:`ragguard.rerank`):
    importing ragguard and loading a reranker with it import no calibration module."""
    import subprocess

    code = """
import sys, ragguard
reranker = ragguard.load_reranker("tests.adapters.helpers:keyword_reranker")
print(list(reranker("deadlift pr", ["deadlift pr", "deadlift", "oats"])))
model = ragguard.load_reranker("cross-encoder/ms-marco-MiniLM-L6-v2")
print(type(model).__name__, model.model_name, model.loaded)
print(sorted(m for m in sys.modules if m.startswith("ragguard.calibration")))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.splitlines() == [
        "[1.0, 0.5, 0.0]",  # the share of the query's words in each text
        "CrossEncoderReranker cross-encoder/ms-marco-MiniLM-L6-v2 False",  # loads on first use
        "[]",
    ]
    assert ragguard.load_reranker is ragguard.rerank.load_reranker


@pytest.mark.parametrize(
    ("module", "blocked", "extra", "call"),
    [
        ("ragguard.adapters.langchain", "langchain_core", "langchain", "as_compressor"),
        ("ragguard.adapters.llamaindex", "llama_index.core", "llamaindex", "as_postprocessor"),
        ("ragguard.adapters.haystack", "haystack", "haystack", "as_haystack"),
    ],
)
def test_missing_framework_names_the_extra(
    module: str, blocked: str, extra: str, call: str
) -> None:
    """With the framework uninstallable, importing its adapter or asking the guard for
    it fails with the pip command for the right extra."""
    import subprocess

    code = f"""
import sys
sys.modules[{blocked!r}] = None  # as if the package were not installed
from ragguard import ContextGuard, MissingDependencyError
for attempt in (lambda: __import__({module!r}), lambda: ContextGuard().{call}()):
    try:
        attempt()
    except MissingDependencyError as exc:
        print(exc)
    else:
        raise SystemExit("no error")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(install_hint(extra) in line for line in lines)
