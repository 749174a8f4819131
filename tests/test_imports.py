"""The shape of ragguard's imports: no import circle, and no private name of one module
imported into another.

Circles: the import-linter contract in pyproject.toml (``[tool.importlinter]``), run by
``lint-imports`` on the package the tests import. Private names: ruff's PLC2701 skips
imports from a file's own package, so the package's own modules are checked here (a
function-local import counts like any other).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ragguard

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(ragguard.__file__).resolve().parent

# Private names one module still imports from another, each with the issue that removes
# it. The test fails when one is gone, too: then delete its line.
KNOWN_PRIVATE: dict[tuple[str, str], str] = {
    # issue 25 splits calibrate.py; pipeline.py imports these back from it
    ("ragguard.calibration.pipeline", "ragguard.calibration.calibrate._feasible"): "#25",
    ("ragguard.calibration.pipeline", "ragguard.calibration.calibrate._finite"): "#25",
    ("ragguard.calibration.pipeline", "ragguard.calibration.calibrate._guarantee"): "#25",
}


def _modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (a folder)."""
    out: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(package: Path) -> set[tuple[str, str]]:
    """``(importer, module.name)`` for every private name (``_x``, not a module) that a
    module of ``package`` imports from another of its modules, or reads as an attribute
    of a module it imported (``from pkg import mod`` then ``mod._x``)."""
    modules = _modules(package)
    found: set[tuple[str, str]] = set()
    for name, path in modules.items():
        package_of = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> one of the package's modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package_of.split(".")[: len(package_of.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                if base not in modules:
                    continue
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        aliases[alias.asname or alias.name] = target
                    elif _private(alias.name) and base != name:
                        found.add((name, target))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
                and f"{aliases[node.value.id]}.{node.attr}" not in modules
                and aliases[node.value.id] != name
            ):
                found.add((name, f"{aliases[node.value.id]}.{node.attr}"))
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports(PACKAGE)
    assert sorted(found - set(KNOWN_PRIVATE)) == []
    assert sorted(set(KNOWN_PRIVATE) - found) == []  # fixed: delete its KNOWN_PRIVATE line


def test_the_private_name_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The check against a small package with each way of reaching a private name, and
    the imports it must let through (private modules, dunders, a module's own names)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "_low.py").write_text("_SECRET = 1\nPUBLIC = 2\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_impl.py").write_text("def _helper(): ...\ndef _other(): ...\n")
    (pkg / "top.py").write_text(
        "from pkg._low import PUBLIC, _SECRET\n"  # a private name: found
        "from pkg import _low, __version__\n"  # a private module, a dunder: fine
        "from pkg.sub import _impl\n"
        "def f():\n"
        "    from .sub._impl import _helper\n"  # function-local and relative: found
        "    return _impl._other, _low.PUBLIC\n"  # attribute of an imported module: found
    )
    (pkg / "sub" / "mine.py").write_text(
        "from pkg.sub import mine\n_own = 1\nx = mine._own\n"  # its own name: fine
    )
    assert private_imports(pkg) == {
        ("pkg.top", "pkg._low._SECRET"),
        ("pkg.top", "pkg.sub._impl._helper"),
        ("pkg.top", "pkg.sub._impl._other"),
    }


def test_no_import_circles() -> None:
    """``lint-imports`` with pyproject.toml's contracts, on the ragguard the tests import."""
    pytest.importorskip("importlinter", reason="import-linter comes with the dev extra")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE.parent), env.get("PYTHONPATH", "")) if p
    )
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
            "--config",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
            "--no-logo",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no import circles KEPT" in run.stdout  # the contract did run
