"""``ragguard profiles`` (list / show) and ``ragguard config show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ragguard.cli._common import Verbose, app, err, friendly_errors, out
from ragguard.cli._data import compact_table

profiles_app = typer.Typer(
    help="Tolerance profiles: distractor penalties, guard defaults.",
    invoke_without_command=True,
    no_args_is_help=False,
)
config_app = typer.Typer(help="The guard's configuration.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
app.add_typer(config_app, name="config")

ConfigFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="A ragguard.toml whose custom [profiles.NAME] tables are included.",
    ),
]

_PROFILE_FIELDS = (
    ("tolerance", "distractor tolerance"),
    ("distractor_score_ratio", "non-relevant passage scoring >= this x top score: hard negative"),
    ("distractor_top_ranks", "non-relevant passage ranked within this many: hard negative"),
    ("known_distractor_penalty", "utility of a labelled distractor"),
    ("hard_negative_penalty", "utility of a hard negative"),
    ("max_k", "runtime default: most passages kept"),
    ("min_k", "runtime default: fewest passages kept"),
    ("relative_threshold", "runtime default: keep score >= this x top score"),
)


def _value(profile: Any, field: str) -> str:
    value = getattr(profile, field)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _profiles(config: Path | None, *names: str) -> dict[str, Any]:
    """The profiles ``names`` (default: every built-in and custom one), resolved."""
    from ragguard.config import GuardConfig
    from ragguard.profiles import BUILTIN_PROFILES, resolve_profile

    custom = GuardConfig.from_file(config).profiles if config is not None else {}
    names = names or (*BUILTIN_PROFILES, *(n for n in custom if n not in BUILTIN_PROFILES))
    return {n: resolve_profile(n, custom) for n in names}


@profiles_app.callback()
def _profiles_root(
    ctx: typer.Context, config: ConfigFileOpt = None, verbose: Verbose = False
) -> None:
    """List the profiles (or `ragguard profiles show NAME` for one)."""
    if ctx.invoked_subcommand is None:
        with friendly_errors(verbose):
            _print_list(config)


def _print_list(config: Path | None) -> None:
    from ragguard.profiles import DEFAULT_PROFILE

    table = compact_table(f"tolerance profiles (default: {DEFAULT_PROFILE})")
    numbers = ("ratio", "ranks", "known", "hard", "max_k", "min_k", "threshold")
    for col in ("profile", "tolerance", *numbers):
        table.add_column(col, justify="right" if col in numbers else "left")
    for name, p in _profiles(config).items():
        table.add_row(name, *(_value(p, field) for field, _ in _PROFILE_FIELDS))
    out.print(table)
    out.print(
        "ratio / ranks: a non-relevant passage scoring >= ratio x the top score, or "
        "ranked within the top ranks, is a hard negative; known / hard: utilities of known "
        "distractors and hard negatives; max_k, min_k, threshold: the guard's defaults. "
        "Details: ragguard profiles show NAME",
        highlight=False,
    )


@profiles_app.command("list")
def profiles_list(config: ConfigFileOpt = None, verbose: Verbose = False) -> None:
    """List the built-in profiles (and custom ones from --config)."""
    with friendly_errors(verbose):
        _print_list(config)


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The profile's name.")],
    config: ConfigFileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    verbose: Verbose = False,
) -> None:
    """Show one profile: its distractor rules and runtime defaults."""
    with friendly_errors(verbose):
        p = _profiles(config, name)[name]
        if as_json:
            out.print_json(json.dumps(p.model_dump(mode="json")))
            return
        out.print(f"[bold]{escape(p.name)}[/]: {escape(p.description)}", highlight=False)
        table = compact_table()
        table.add_column("field")
        table.add_column("value", justify="right")
        table.add_column("meaning")
        for field, meaning in _PROFILE_FIELDS:
            table.add_row(field, _value(p, field), meaning)
        out.print(table)


@config_app.command("show")
def config_show(
    file: Annotated[
        Path | None,
        typer.Argument(
            metavar="FILE",
            help="A config TOML; default ./ragguard.toml when it exists, else defaults and "
            "environment only.",
        ),
    ] = None,
    domain: Annotated[
        str | None,
        typer.Option(
            "--domain",
            metavar="NAME",
            help="Resolve one domain: the file's [domains.NAME] table over the global settings.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    verbose: Verbose = False,
) -> None:
    """Show the resolved config and where each value came from.

    The layer of each value: argument, environment RAGGUARD_*, file, profile or
    default; the domains a config routes to; and the provenance a calibrated config
    carries."""
    with friendly_errors(verbose):
        from ragguard.config import GuardConfig

        if file is None and Path("ragguard.toml").is_file():
            file = Path("ragguard.toml")
        top = GuardConfig.from_file(file) if file is not None else GuardConfig()
        cfg = top if domain is None else top.for_domain(domain)
        data = cfg.model_dump(mode="json")
        provenance = data.pop("provenance")
        profiles = data.pop("profiles")
        data.pop("domains", None)  # listed below, resolved one at a time by --domain
        if domain is not None:  # the domain's own provenance, under the global one's
            provenance = provenance.get("domains", {}).get(domain, {})
        if as_json:
            values = {k: {"value": v, "source": cfg.source_of(k)} for k, v in data.items()}
            doc = {"file": str(file) if file else None, "values": values}
            routing: dict[str, Any] = {"domain": domain} if domain is not None else {}
            if top.domains:
                routing["domains"] = list(top.domains)
            shown = {**doc, **routing, "profiles": profiles, "provenance": provenance}
            out.print_json(json.dumps(shown))
            return
        where = f"file {file}" if file else "no file (defaults and environment)"
        if domain is not None:
            where += f", domain {domain}"
        out.print(f"[bold]ragguard config[/] from {escape(where)}", highlight=False)
        table = compact_table()
        table.add_column("field", no_wrap=True)
        table.add_column("value", overflow="fold")
        table.add_column("source")
        for key, value in data.items():
            source = escape(cfg.source_of(key))  # a domain's: "file PATH [domains.NAME]"
            if isinstance(value, dict):  # a table such as [rerank]: one row per field
                for sub, v in value.items():
                    table.add_row(f"{key}.{sub}", _shown(v), source)
            else:
                table.add_row(key, _shown(value), source)
        out.print(table)
        if profiles:
            out.print(f"custom profiles: {', '.join(profiles)}", highlight=False)
        if top.domains and domain is None:
            out.print(
                f"domains: {escape(', '.join(top.domains))} (one resolved: ragguard config "
                "show --domain NAME)",
                highlight=False,
            )
        if provenance:
            _print_provenance(provenance, domain)
        if file is None:
            err.print("[dim]no ragguard.toml here; pass a file to show it[/]")


@config_app.command("schema")
def config_schema(
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="FILE", help="Write the schema to this file instead of stdout."
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Print the JSON Schema of ragguard.toml.

    Editors and CI validate config files against it (TOML read as JSON: e.g. taplo,
    or tomllib plus the jsonschema package)."""
    with friendly_errors(verbose):
        from ragguard.config import config_json_schema

        text = json.dumps(config_json_schema(), indent=2) + "\n"
        if out_file is None:
            typer.echo(text, nl=False)
            return
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text, encoding="utf-8")
        err.print(f"wrote {escape(str(out_file))}", highlight=False)


def _shown(value: object) -> str:
    return "none" if value is None else str(value)


def _print_provenance(prov: dict[str, Any], domain: str | None = None) -> None:
    """What ragguard calibrate recorded: the global keys, or every key of one domain."""
    said = ("tool", "created", "source", "run", "profile", "objective", "setting")
    keys = (*said, "second_stage", "baseline", "data_sha256") if domain is None else prov
    special = ("constraints", "constraints_met", "metrics")  # the rows below
    rows = [(key, str(prov[key])) for key in keys if key in prov and key not in special]
    if "constraints" in prov:
        met = "met" if prov.get("constraints_met", True) else "NOT met"
        rows.append(("constraints", f"{', '.join(prov['constraints']) or 'none'} ({met})"))
    metrics = prov.get("metrics")
    if isinstance(metrics, dict):
        shown = ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()
        )
        queries = "all queries" if domain is None else "the domain's queries"
        rows.append(("metrics", f"{shown} (the setting written, {queries})"))
    of = "" if domain is None else f" of domain {escape(domain)}"
    out.print(f"[bold]provenance[/]{of} (written by ragguard calibrate)", highlight=False)
    table = compact_table()
    table.show_header = False
    table.add_column("key", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(key, escape(value))
    out.print(table)
