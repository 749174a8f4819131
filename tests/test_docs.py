"""Every page's code says what the code does: each python block of README.md and of
docs/ runs and prints what it says it prints (addressed by page and block, see
tests/doc_checks.py), every skipped block still compiles, every TOML block is a config
the guard accepts, and every ``ragguard`` command line in a bash block names a real
command and real options. The site: no docstring uses a Sphinx role, and mkdocs.yml's
settings make a broken link or anchor fail the build."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ragguard import GuardConfig
from ragguard.errors import ConfigWarning
from tests.doc_checks import ROOT, Block, all_blocks, blocks, output_matches, pages, run_block

PYTHON = list(all_blocks("python"))
RUNNABLE = [b for b in PYTHON if b.skip is None]


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.name)
def test_the_block_runs_and_prints_what_it_says(block: Block, tmp_path: Path) -> None:
    run_block(block, tmp_path)


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.name)
def test_every_python_block_compiles(block: Block) -> None:
    compile(block.source, block.name, "exec")


def test_the_runner_finds_the_blocks_it_should() -> None:
    """The runner sees the pages' code: if the fence pattern broke, every test above
    would pass on nothing."""
    assert "README.md" in pages() and "docs/guides/calibrate.md" in pages()
    assert len(RUNNABLE) >= 10
    quick = blocks("README.md", "python")[0]
    assert quick.skip is None and quick.expected_output()[0] == "['log-03-02', 'log-02-10']"
    skipped = [b for b in PYTHON if b.skip is not None]
    assert skipped and all(b.skip for b in skipped)  # every skip gives its reason


def test_output_matching_is_exact_but_for_a_marked_prefix() -> None:
    assert output_matches(["a b c"], ["a b ..."])
    assert not output_matches(["a b c"], ["a b"])  # no prefix without the marker
    assert not output_matches(["a", "b"], ["a"])  # an extra printed line fails
    assert not output_matches(["x b c"], ["a b ..."])


def test_a_block_that_says_other_output_than_it_prints_fails(tmp_path: Path) -> None:
    real = blocks("README.md", "python")[0]
    says_other = Block(
        page=real.page, lang="python", number=real.number, line=real.line,
        source=real.source.replace("# ['log-03-02', 'log-02-10']", "# ['log-03-02']"),
        skip=None,
    )  # fmt: skip
    with pytest.raises(AssertionError, match="printed"):
        run_block(says_other, tmp_path)


@pytest.mark.parametrize(
    "block", [b for b in all_blocks("toml") if b.skip is None], ids=lambda b: b.name
)
def test_every_toml_block_is_a_config_the_guard_accepts(block: Block) -> None:
    data = tomllib.loads(block.source)
    config = GuardConfig.model_validate(data)
    assert config.profile == data.get("profile", config.profile)


# --------------------------------------------------------------- commands in bash blocks


def _cli_options() -> dict[str, set[str]]:
    import typer.main

    from ragguard.cli import app

    options: dict[str, set[str]] = {}

    def walk(prefix: str, command: Any) -> None:
        options[prefix] = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(f"{prefix} {name}".strip(), sub)

    walk("", typer.main.get_command(app))
    return options


def _command_lines() -> list[tuple[Block, str]]:
    lines = []
    for lang in ("bash", "console"):
        for block in all_blocks(lang):
            joined = re.sub(r"\\\n\s*", " ", block.source)
            for line in joined.splitlines():
                line = line.removeprefix("$ ").split(" #", 1)[0].strip()
                if line.startswith("ragguard "):
                    lines.append((block, line))
    return lines


def test_every_ragguard_command_line_in_the_docs_is_real() -> None:
    options = _cli_options()
    checked = 0
    for block, line in _command_lines():
        words = shlex.split(line)[1:]
        command = ""
        while words and f"{command} {words[0]}".strip() in options:
            command = f"{command} {words.pop(0)}".strip()
        assert command, f"{block.name}: {line!r} names no ragguard command"
        for word in words:
            if word.startswith("--"):
                assert word.split("=", 1)[0] in options[command], (
                    f"{block.name}: {line!r}: ragguard {command} has no option {word}"
                )
        checked += 1
    assert checked >= 20


def test_the_quickstart_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGGUARD_")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    assert "log-2024-03-16   below_relative_threshold" in out.stdout
    assert "medical profile keeps: ['log-2024-03-02', 'log-2024-02-10']" in out.stdout


@pytest.mark.slow  # each example loads the packaged MiniLM in a fresh process
@pytest.mark.parametrize(
    "name", ["langchain_quickstart.py", "llamaindex_quickstart.py", "haystack_quickstart.py"]
)
def test_framework_examples_run_offline(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGGUARD_")}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True, text=True, check=True, env=env, timeout=120,
    )  # fmt: skip
    guarded = out.stdout.split("Guarded retriever:")[1].strip().splitlines()[:3]
    assert [line.split()[-1] for line in guarded] == [
        "log-2024-03-16",
        "log-2024-03-02",
        "log-2024-02-10",
    ]


def _extras_closure(names: set[str], extras: dict[str, list[str]]) -> set[str]:
    """``names`` with the extras they pull in (``all`` = every feature extra)."""
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            for pulled in re.findall(
                r"^ragguard-context\[([\w,]+)\]", "\n".join(extras[name]), re.M
            ):
                todo += pulled.split(",")
    return out


def _distributions(requirements: list[str]) -> set[str]:
    names = (re.match(r"[A-Za-z0-9._-]+", r) for r in requirements)
    return {re.sub(r"[-_.]+", "-", m.group(0)).lower() for m in names if m}


_IN_DEMO_VENV = """
import contextlib, io, json, sys
for module in json.loads(sys.argv[1]):
    sys.modules[module] = None  # as if its extra were not installed
from ragguard.errors import MissingDependencyError
namespace = {"__name__": "__doc_block__"}
for number, source in json.loads(sys.stdin.read()):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"block {number}", "exec"), namespace)
    except MissingDependencyError as exc:
        print(json.dumps([number, str(exc)]))
"""


def test_each_readme_block_runs_in_the_demo_venv_or_says_which_extra_it_needs(
    tmp_path: Path,
) -> None:
    """README says: run scripts/demo.sh, then the quick start. Each python block runs in
    the `.venv` demo.sh makes (its extras' modules present, every other extra's absent),
    or the text just before it names the install line of the extra it fails for."""
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    (installed,) = re.findall(r'^\. scripts/_venv\.sh "([\w,]*)"', demo, re.M)
    present = _distributions(project["dependencies"]) | _distributions(
        [r for e in _extras_closure(set(installed.split(",")), extras) for r in extras[e]]
    )
    absent = _distributions([r for reqs in extras.values() for r in reqs]) - present
    absent.discard(project["name"])  # extras that pull in extras name the project
    blocked = sorted(
        module
        for module, dists in packages_distributions().items()
        if _distributions(dists) & absent and not _distributions(dists) & present
    )
    assert "langchain_core" in blocked or "langchain" in installed  # the block does block
    readme = [b for b in blocks("README.md", "python") if b.skip is None]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGGUARD_")}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _IN_DEMO_VENV, json.dumps(blocked)],
        input=json.dumps([[b.number, b.source] for b in readme]),
        capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    ends = [b.line + b.source.count("\n") + 1 for b in blocks("README.md")]  # closing fences
    for number, message in (json.loads(line) for line in out.stdout.splitlines()):
        block = next(b for b in readme if b.number == number)
        (extra,) = re.findall(r"ragguard-context\[(\w+)\]", message)
        start = max([end for end in ends if end < block.line], default=0)
        prose = "\n".join(lines[start : block.line - 1])
        assert f'pip install -e ".[{extra}]"' in prose, (
            f"{block.name} needs the {extra} extra ({message}); the text before it must "
            f"say so, or scripts/demo.sh must install it"
        )


def test_a_variable_the_changelog_removed_is_gone_and_warned_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    removed = changelog.split("\n### Removed\n", 1)[1].split("\n### ", 1)[0]
    names = sorted(set(re.findall(r"RAGGUARD_[A-Z_]+", removed)))
    assert "RAGGUARD_COLUMNAR" in names
    for path in (ROOT / "src" / "ragguard").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not [n for n in names if n in text], path  # nothing reads it any more
    for name in names:  # and a user who still sets it is told
        monkeypatch.setenv(name, "0")
        with pytest.warns(ConfigWarning, match=name):
            GuardConfig()
        monkeypatch.delenv(name)


# ------------------------------------------------ completeness: commands, options, fields


def _docs_text() -> str:
    return "\n".join((ROOT / page).read_text(encoding="utf-8") for page in pages())


def test_the_readme_command_table_lists_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    commands = _cli_options()
    leaves = [c for c in commands if c and not any(o.startswith(c + " ") for o in commands)]
    assert "train-reranker" in leaves and "config schema" in leaves
    for command in leaves:
        assert f"`ragguard {command}" in table, f"README's command table lacks ragguard {command}"


def test_every_option_of_every_command_is_documented() -> None:
    text = _docs_text()
    for command, options in _cli_options().items():
        for option in sorted(options):
            if option.startswith("--") and option != "--help":
                assert re.search(re.escape(option) + r"(?![\w-])", text), (
                    f"ragguard {command} {option} appears on no page"
                )


def test_the_readme_links_lead_to_files_that_exist() -> None:
    """mkdocs checks the site's links; the README is read on its own (GitHub, PyPI)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert len(local) >= 10
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_readme_stays_an_introduction() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200


# --------------------------------------------------------------------------- the site build

SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|ref|const):`")


def docstrings(path: Path) -> list[tuple[int, str]]:
    """Every docstring of a module as ``(line, text)``: the bare string statements of
    its module, class and function bodies (attribute docstrings included), which is
    what mkdocstrings renders."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.append((node.lineno, node.value.value))
    return found


def test_no_docstring_uses_a_sphinx_role() -> None:
    """The API pages render docstrings as Markdown, where ``:class:`X``` shows as raw
    text: cross-references are Markdown links (``[`X`][ragguard.X]``) that autorefs
    resolves, or plain code."""
    modules = sorted((ROOT / "src" / "ragguard").rglob("*.py"))
    assert len(modules) > 50
    roles = [
        f"{path.relative_to(ROOT)}:{line + offset}: {match.group(0)}"
        for path in modules
        for line, text in docstrings(path)
        for offset, row in enumerate(text.splitlines())
        for match in SPHINX_ROLE.finditer(row)
    ]
    assert not roles, "Sphinx roles in docstrings (write [`Name`][ragguard.path.Name]):\n" + (
        "\n".join(roles)
    )


def mini_site(tmp_path: Path, page: str) -> Path:
    """A two-page site in ``tmp_path`` whose ``strict``, ``validation`` and
    ``markdown_extensions`` are mkdocs.yml's own, with ``page`` as its index; the other
    page has the heading ``## Section two``. Returns its mkdocs.yml."""
    pytest.importorskip("mkdocs")
    import yaml

    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config = {
        "site_name": "links",
        "docs_dir": "docs",
        "site_dir": str(tmp_path / "site"),
        "theme": {"name": "mkdocs"},
        "plugins": [],
        "nav": [{"Home": "index.md"}, {"Other": "other.md"}],
        **{key: site[key] for key in ("strict", "validation", "markdown_extensions")},
    }
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page, encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Section two\n", encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


def run_in(folder: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """``command`` in ``folder`` with this interpreter's scripts (``mkdocs``) first on
    the path; stdout and stderr together in ``stdout``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        command,
        cwd=folder,
        env={**os.environ, "PATH": path, "NO_MKDOCS_2_WARNING": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )


def build_mini_site(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    """``mkdocs build`` with no flags (as ``mkdocs serve`` builds) of :func:`mini_site`."""
    config = mini_site(tmp_path, page)
    return run_in(tmp_path, [sys.executable, "-m", "mkdocs", "build", "-f", str(config)])


def docs_step() -> str:
    """The docs step of scripts/test.sh: its lines from ``echo "== docs`` to the next
    ``echo "==``, run by bash as the script runs them (``set -euo pipefail``)."""
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    match = re.search(r'^echo "== docs.*?(?=^echo "==)', script, re.S | re.M)
    assert match, "scripts/test.sh has no docs step"
    return "set -euo pipefail\n" + match.group(0)


GOOD_PAGE = (
    "# Home\n\n## Section one\n\n"
    "[other](other.md), [two](other.md#section-two), [one](#section-one).\n"
)


def test_a_site_with_sound_links_builds_without_a_warning(tmp_path: Path) -> None:
    built = build_mini_site(tmp_path, GOOD_PAGE)
    log = built.stdout
    assert built.returncode == 0, log
    assert "WARNING" not in log
    assert (tmp_path / "site" / "other" / "index.html").exists()


@pytest.mark.parametrize(
    ("link", "warning"),
    [
        ("[gone](missing.md)", "'missing.md', but the target is not found"),
        ("[gone](other.md#section-three)", "does not contain an anchor '#section-three'"),
        ("[gone](#section-three)", "'#section-three'"),
    ],
    ids=["page", "anchor on another page", "anchor on the page"],
)
def test_mkdocs_yml_fails_the_build_on_a_broken_link(
    tmp_path: Path, link: str, warning: str
) -> None:
    """mkdocs.yml's own settings (strict, validation) refuse a link to a missing page or
    anchor; loosening them fails this test."""
    built = build_mini_site(tmp_path, GOOD_PAGE + f"\n{link}\n")
    log = built.stdout
    assert built.returncode != 0, log
    assert "Aborted with 1 warnings in strict mode" in log
    assert re.search(r"^WARNING .*" + re.escape(warning), log, re.M), log


@pytest.mark.parametrize(
    "broken", [None, "[gone](other.md#section-three)"], ids=["sound", "broken anchor"]
)
def test_the_test_scripts_docs_step_fails_on_a_broken_anchor(
    tmp_path: Path, broken: str | None
) -> None:
    """scripts/test.sh's docs step, run on the small site: it passes a sound site and
    fails a broken anchor (``--quiet`` would hide the warning from strict mode)."""
    mini_site(tmp_path, GOOD_PAGE + (f"\n{broken}\n" if broken else ""))
    ran = run_in(tmp_path, ["bash", "-c", docs_step()])
    if broken is None:
        assert ran.returncode == 0, ran.stdout
    else:
        assert ran.returncode != 0, ran.stdout
        assert "#section-three" in ran.stdout
