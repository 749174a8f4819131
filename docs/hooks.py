"""mkdocs hook: pages that are generated from the code, so they cannot drift from it.

A page holds a marker line and the build replaces it:

- ``<!-- generated: config-reference -->``: every field of ``GuardConfig`` (and of its
  ``[rerank]``, ``[rerank.probability_map]`` and ``[profiles.NAME]`` tables), read from
  its JSON Schema (the one ``ragguard config schema`` prints);
- ``<!-- generated: error-tree -->``: the exception and warning classes of
  ``ragguard.errors``, as a tree with each class's built-in base and docstring;
- ``<!-- generated: commands -->``: every command of the ``ragguard`` CLI with its help line.

The tests (``tests/test_docs_reference.py``) call the same functions, so the reference
is complete by construction and checked without building the site.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

MARKERS = ("config-reference", "error-tree", "commands")


# --------------------------------------------------------------------------- config


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref:
        return dict(schema["$defs"][ref.rsplit("/", 1)[1]])
    return node


def _allowed(schema: dict[str, Any], node: dict[str, Any]) -> str:
    """What values a schema node accepts, in words (``none`` for JSON null)."""
    options = node.get("anyOf")
    if options:
        return ", ".join(_allowed(schema, option) for option in options)
    node = _resolve(schema, node)
    if "enum" in node:
        return ", ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "null":
        return "none"
    if kind == "object":
        return "table"
    if kind == "array":
        return "list of " + _allowed(schema, node.get("items", {}))
    words = {"integer": "int", "number": "float", "boolean": "bool", "string": "string"}
    text = words.get(str(kind), str(kind))
    bounds = []
    if "minimum" in node:
        bounds.append(f">= {node['minimum']}")
    if "exclusiveMinimum" in node:
        bounds.append(f"> {node['exclusiveMinimum']}")
    if "maximum" in node:
        bounds.append(f"<= {node['maximum']}")
    if "minLength" in node:
        bounds.append("not empty")
    return text + (" " + " and ".join(bounds) if bounds else "")


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return "required" if node.get("$ref") is None else "see below"
    value = node["default"]
    if value is None:
        return "none"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    """One table cell: reStructuredText roles and literals as Markdown code, one line."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    return " ".join(text.replace("|", "\\|").split())


def config_fields(schema: dict[str, Any] | None = None) -> list[tuple[str, str, str, str]]:
    """Every configurable key as ``(dotted name, default, allowed, meaning)``: the top
    level of ``GuardConfig``, then ``rerank.*``, ``rerank.probability_map.*`` and
    ``profiles.NAME.*``, in the schema's order."""
    if schema is None:
        from ragguard import GuardConfig

        schema = GuardConfig.model_json_schema()
    rows: list[tuple[str, str, str, str]] = []

    def walk(prefix: str, properties: dict[str, Any]) -> None:
        for name, node in properties.items():
            rows.append(
                (
                    prefix + name,
                    _default(node),
                    _allowed(schema, node),
                    _cell(node.get("description", "")),
                )
            )

    walk("", schema["properties"])
    defs = schema["$defs"]
    walk("rerank.", defs["RerankConfig"]["properties"])
    walk("rerank.probability_map.", defs["ProbabilityMap"]["properties"])
    walk("profiles.NAME.", defs["ProfileSpec"]["properties"])
    return rows


def config_reference() -> str:
    """The config reference table, one row per key of :func:`config_fields`."""
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for name, default, allowed, meaning in config_fields():
        lines.append(f"| `{name}` | {default} | {_cell(allowed)} | {meaning} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- errors


def _first_line(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return _cell(doc.split("\n\n", 1)[0])


def error_classes() -> list[type]:
    """The public classes of ``ragguard.errors`` (its ``__all__``)."""
    from ragguard import errors

    return [getattr(errors, name) for name in errors.__all__]


def error_tree() -> str:
    """The error and warning hierarchy as nested Markdown lists, each class with its
    built-in bases and its docstring's first paragraph."""
    from ragguard import errors

    classes = error_classes()
    lines: list[str] = []

    def builtin_bases(cls: type) -> str:
        names = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"]
        return f" ({', '.join(names)})" if names else ""

    def add(cls: type, depth: int) -> None:
        indent = "    " * depth
        lines.append(f"{indent}- `{cls.__name__}`{builtin_bases(cls)}: {_first_line(cls)}")
        for sub in classes:
            if cls in sub.__bases__:
                add(sub, depth + 1)

    add(errors.RagguardError, 0)
    lines.append("")
    add(errors.RagguardWarning, 0)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- commands


def cli_commands() -> list[tuple[str, str]]:
    """Every ``ragguard`` command and subcommand as ``(command line, help line)``."""
    import typer.main

    from ragguard.cli import app

    group = typer.main.get_command(app)
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, command: Any) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(f"{prefix} {name}", sub)
        else:
            rows.append((prefix, _cell(command.get_short_help_str(limit=200))))

    walk("ragguard", group)
    return rows


def commands() -> str:
    lines = ["| command | what it does |", "|---|---|"]
    for command, text in cli_commands():
        lines.append(f"| `{command}` | {text} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the hook

GENERATORS = {"config-reference": config_reference, "error-tree": error_tree, "commands": commands}


def expand(markdown: str) -> str:
    """``markdown`` with every generated-content marker replaced by its content."""
    for name, generate in GENERATORS.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand(markdown)
