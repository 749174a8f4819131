"""The shape of ragguard's imports: no import circle, no private name of one module
imported into another, and no test module importing another (shared helpers live in
helper modules and conftest.py).

Circles: the import-linter contract in pyproject.toml (``[tool.importlinter]``), run by
``lint-imports`` on the package the tests import. Private names: ruff's PLC2701 skips
imports from a file's own package, so the package's own modules are checked here (a
function-local import counts like any other).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ragguard

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(ragguard.__file__).resolve().parent

# Private names one module still imports from another, each with the issue that removes
# it. The test fails when one is gone, too: then delete its line.
KNOWN_PRIVATE: dict[tuple[str, str], str] = {}


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


def _is_test_module(dotted: str) -> bool:
    return dotted.rpartition(".")[2].startswith("test_")


def imported_test_modules(root: Path) -> set[tuple[str, str]]:
    """``(file, module)`` for every test module (``test_*.py`` under ``root``, the path
    relative to ``root``'s parent) that imports another test module, at the top or in a
    function, absolutely or relatively, as ``from pkg import test_x`` or ``import``."""
    found: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("test_*.py")):
        rel = path.relative_to(root.parent)
        package = list(rel.parent.parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package[: len(package) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                folder = root.parent.joinpath(*base.split("."))
                targets = [base]  # from tests.x.test_y import z
                targets += [  # from tests.x import test_y (a module, not a name test_y)
                    f"{base}.{a.name}"
                    for a in node.names
                    if _is_test_module(a.name) and (folder / f"{a.name}.py").is_file()
                ]
            found |= {(rel.as_posix(), t) for t in targets if _is_test_module(t)}
    return found


def test_no_test_module_imports_another() -> None:
    """What two test modules share lives in a helper module or a conftest.py fixture:
    a test module imported by another runs its module-level code twice and ties the
    two files' tests together."""
    found = sorted(imported_test_modules(ROOT / "tests"))
    assert found == [], "\n".join(f"{file} imports the test module {name}" for file, name in found)


def test_the_test_import_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The check against a small test tree with each way of importing a test module, and
    the imports it must let through (helper modules, conftest, names that merely start
    with ``test``)."""
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "sub" / "test_a.py").write_text(
        "from tests.sub.test_b import helper\n"  # absolute: found
        "from tests.sub.helpers import make, test_data\n"  # a helper module: fine
        "from tests.sub.conftest import fixture\n"
        "def f():\n"
        "    from .test_c import other\n"  # function-local and relative: found
        "    from . import test_d, shared\n"  # a test module as a name: found
        "    import tests.test_e\n"  # plain import: found
    )
    for name in ("test_b", "test_c", "test_d", "shared", "helpers", "conftest"):
        (tests / "sub" / f"{name}.py").write_text("")
    (tests / "test_e.py").write_text("from tests.sub.test_b import x\n")  # found
    assert imported_test_modules(tests) == {
        ("tests/sub/test_a.py", "tests.sub.test_b"),
        ("tests/sub/test_a.py", "tests.sub.test_c"),
        ("tests/sub/test_a.py", "tests.sub.test_d"),
        ("tests/sub/test_a.py", "tests.test_e"),
        ("tests/test_e.py", "tests.sub.test_b"),
    }


CONTRACTS = (
    "no import circles",
    "the runtime applies, calibration fits: the runtime never imports calibration or the CLI",
    "calibration wings: synth > train | annotate > report > fit > metrics > data",
    "fit layers: orchestration > result > search > spaces > options > risk and statistics > sweep",
)


def _lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with pyproject.toml's contracts on the ragguard in ``package_parent``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(package_parent), env.get("PYTHONPATH", "")) if p
    )
    env["COLUMNS"] = "1000"  # one line per contract in the report
    return subprocess.run(
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


def test_no_import_circles() -> None:
    """``lint-imports`` with pyproject.toml's contracts, on the ragguard the tests import:
    no circle, the runtime never imports calibration or the CLI, calibration's layers,
    and nothing in calibration imports training or annotation."""
    pytest.importorskip("importlinter", reason="import-linter comes with the dev extra")
    run = _lint_imports(PACKAGE.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    for name in CONTRACTS:  # each contract did run
        assert f"{name} KEPT" in run.stdout, run.stdout


def test_the_contracts_catch_each_kind_of_wrong_import(tmp_path: Path) -> None:
    """A copy of ragguard with one wrong import per contract fails each of them: a
    runtime module importing calibration (a circle too), the statistics layer of the
    fitting wing importing the orchestration above it, and the sweep importing the
    training wing."""
    pytest.importorskip("importlinter", reason="import-linter comes with the dev extra")
    copy = tmp_path / "ragguard"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    wrong = {
        copy / "scores.py": "import ragguard.calibration.fit.sweep\n",
        copy
        / "calibration"
        / "fit"
        / "statistics.py": "import ragguard.calibration.fit.calibrator\n",
        copy / "calibration" / "fit" / "sweep.py": "import ragguard.calibration.train.reranker\n",
    }
    for path, line in wrong.items():
        path.write_text(path.read_text(encoding="utf-8") + line, encoding="utf-8")
    run = _lint_imports(tmp_path)
    assert run.returncode != 0
    for name in CONTRACTS:
        assert f"{name} BROKEN" in run.stdout, run.stdout
    assert "ragguard.scores -> ragguard.calibration.fit.sweep" in run.stdout
    assert (
        "ragguard.calibration.fit.statistics -> ragguard.calibration.fit.calibrator" in run.stdout
    )
    assert "ragguard.calibration.fit.sweep -> ragguard.calibration.train.reranker" in run.stdout
