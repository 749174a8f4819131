"""What a new user meets before any code runs: the install lines, the licence, the test
suite starting on a machine without the optional reference libraries."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ragguard._optional import DISTRIBUTION, install_hint

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_distribution_name_is_the_one_install_lines_use() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == DISTRIBUTION
    # the PyPI name "ragguard" belongs to an unrelated project: never publish under it
    assert DISTRIBUTION != "ragguard"
    # the command and the import package keep the short name
    assert project["scripts"] == {"ragguard": "ragguard.cli:main"}
    # extras that pull in other extras name the distribution, or pip resolves them from
    # the unrelated project
    for extra, reqs in project["optional-dependencies"].items():
        for req in reqs:
            if req.startswith("ragguard"):
                assert req.startswith(f"{DISTRIBUTION}["), (extra, req)


def test_licence_file_is_shipped() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert PYPROJECT["project"]["license"] == "MIT"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def _install_lines(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"pip install [^\n`]*", text)]


def test_every_install_line_names_the_distribution_and_a_real_extra() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    sources += sorted((ROOT / "examples").glob("*.py"))
    sources += sorted((ROOT / "src" / "ragguard").rglob("*.py"))
    seen = 0
    for path in sources:
        for line in _install_lines(path.read_text(encoding="utf-8")):
            # a bare `pip install ragguard` or `"ragguard[x]"` installs the other project
            assert not re.search(r"""(^|[\s"'])ragguard($|[\s"'\[])""", line[12:]), (
                path.name,
                line,
            )
            for names in re.findall(re.escape(DISTRIBUTION) + r"\[([a-z,]+)\]", line):
                seen += 1
                assert set(names.split(",")) <= extras, (path.name, line)
    assert seen >= 10  # the install page's block alone has fourteen extras
    assert install_hint("rerank") == f'pip install "{DISTRIBUTION}[rerank]"'


def _hint_calls() -> list[tuple[str, str | None, object]]:
    """``(file, module, extra)`` of every ``require(module, extra)`` and
    ``install_hint(extra)`` call in the package (``module`` None when not a literal)."""
    calls = []
    for path in sorted((ROOT / "src" / "ragguard").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if node.func.id == "require" and len(args) == 2:
                calls.append((path.name, args[0], args[1]))
            elif node.func.id == "install_hint" and len(args) == 1 and args[0] is not None:
                calls.append((path.name, None, args[0]))
    return calls


def _installed_by(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The distributions ``pip install "ragguard-context[extra]"`` installs (as far as
    this environment's metadata tells: requirements of what is installed)."""
    found: set[str] = set()
    todo = [Requirement(r) for r in extras[extra]]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == DISTRIBUTION:
            todo += [Requirement(r) for e in req.extras for r in extras[e]]
            continue
        if name in found or (req.marker is not None and "extra" in str(req.marker)):
            continue
        found.add(name)
        with contextlib.suppress(metadata.PackageNotFoundError):  # not installed here
            todo += [Requirement(r) for r in metadata.requires(req.name) or ()]
    return found


def test_every_install_hint_in_the_code_names_an_extra_that_installs_the_module() -> None:
    extras: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
    providers = metadata.packages_distributions()
    calls = _hint_calls()
    assert len(calls) >= 30  # the scan sees the calls
    checked = 0
    for where, module, extra in calls:
        assert extra in extras, (where, module, extra)  # a literal naming a real extra
        assert install_hint(extra) == f'pip install "{DISTRIBUTION}[{extra}]"'
        dists = providers.get(module.split(".")[0], []) if module else []
        if dists:  # installed here: the extra named must be what brings it
            checked += 1
            installs = _installed_by(extra, extras)
            assert {canonicalize_name(d) for d in dists} & installs, (where, module, extra)
    assert checked >= 20


def test_suite_starts_without_numba(tmp_path: Path) -> None:
    """numba comes with ranx, a test-only reference; the warning filter in pyproject
    must not need it, or pytest refuses to start where it is absent."""
    shadow = tmp_path / "numba"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('numba is not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"]
    out = subprocess.run(
        [*command, "tests/test_scores.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "error" not in out.stdout.lower().splitlines()[-1]
