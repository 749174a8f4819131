"""The console printers: a calibration result (``ragguard calibrate`` without ``--json``),
from the result's [`view`][ragguard.calibration.CalibrationResult.view], and the tables of
``ragguard evaluate`` and ``ragguard compare``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ragguard._optional import install_hint
from ragguard.calibration._format import format_interval, format_number
from ragguard.calibration.fit.domains import DomainResults
from ragguard.calibration.fit.risk import EVIDENCE
from ragguard.calibration.fit.statistics import Comparison, Interval
from ragguard.calibration.fit.sweep import PASSAGES
from ragguard.calibration.fit.view import ResultView

if TYPE_CHECKING:
    from ragguard.calibration.data.evalset import EvalSet
    from ragguard.calibration.report.build import WrittenReport


def _table(title: str) -> Table:
    # fits 80 columns: a rule under the header, one space between columns
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        show_edge=False,
    )


def _interval(iv: Interval) -> str:
    """``[+0.002,+0.07]``: rounded outward, so it excludes 0 exactly when the verdict
    says better or worse (no space: the table fits 80 columns)."""
    return format_interval(iv.low, iv.high).replace(", ", ",")


def query_count(evalset: EvalSet) -> str:
    """``51 queries``, or ``51 queries (3 unanswerable: judged, none relevant)``."""
    n, k = len(evalset.qids), len(evalset.unanswerable)
    text = f"{n} {'query' if n == 1 else 'queries'}"
    return text + (f" ({k} unanswerable: judged, none relevant)" if k else "")


def print_result(view: ResultView, out: Console) -> None:
    """The console summary of ``view`` on ``out``: the runs, what the config holds and
    why, the held-out check, the second stage and what to try next; the eval set as
    ``view.evalset`` names it."""
    _print_summary(view, out)
    _print_check(view, out)
    dist = ", ".join(f"{k}: {n}" for k, n in view.optimal.distribution().items())
    out.print(f"per-query optimal k (queries): {dist}", highlight=False)
    _print_two_stage(view, out)
    _print_next_steps(view, out)


def print_domains(domains: DomainResults, out: Console) -> None:
    """The per-domain table of ``calibrate --by`` and whether per-domain beats global."""
    table = _table(
        f"per domain (--by {domains.by}): queries (calibration+held-out), setting, "
        f"{domains.objective} on held-out queries"
    )
    for name in domains.header():
        table.add_column(escape(name), overflow="fold")
    for row in domains.rows():
        table.add_row(*map(escape, row))
    out.print()
    out.print(table)
    for line in [*domains.reasons(), domains.verdict()]:
        out.print(escape(line), highlight=False)


def _print_summary(view: ResultView, out: Console) -> None:
    h, w = view.header, view.written
    obj, shown = h.objective, view.evalset or h.evalset.source or ""
    out.print(
        f"[bold]ragguard calibrate[/] {escape(shown)}: {query_count(h.evalset)}, runs "
        f"{escape(', '.join(h.runs))}, profile {h.profile.name}",
        highlight=False,
    )
    out.print(
        f"objective: {view.objective}; {h.calibration_rows.size} queries to "
        f"choose on, {h.heldout_rows.size} held out (seed {h.seed})",
        highlight=False,
    )
    if h.silver:
        out.print(f"[bold]Silver labels:[/] {escape(h.silver_note())}.", highlight=False)

    table = _table("best setting per run (calibration queries)")
    # at 80 columns long names wrap (folded), numbers never do
    evidence = h.evidence
    short = "cover." if evidence != EVIDENCE else "ev.rec"
    for col in ("run", "chosen", obj, short, "distr.", "kept", "best top-k"):
        named = col in ("run", "chosen")
        table.add_column(
            col,
            justify="left" if named else "right",
            no_wrap=not named,
            overflow="fold" if named else "ellipsis",
        )
    for x in view.runs:
        means = x.chosen_means
        table.add_row(
            x.run + (" *" if x.recommended else ""),
            x.chosen + ("" if x.feasible else " (!)"),
            format_number(means[obj]),
            format_number(means[evidence]),
            format_number(means["distractor_rate"]),
            format_number(means[PASSAGES], 2),
            f"{x.baseline} {format_number(x.baseline_means[obj])}",
        )
    out.print(table)

    kind = view.score_kind.value if view.score_kind else "none"
    # what the config holds, named as the JSON, the report and the provenance name it
    out.print(
        f"[bold]Chosen:[/] run {escape(view.run_name)} with {escape(w.setting)} "
        f"(score_kind {kind})",
        highlight=False,
    )
    if w.stage is not None:
        out.print(f"[bold]Second stage[/] {escape(w.stage)}.", highlight=False)
    if view.conflicts is not None:  # which conflict settings were swept, which is written
        swept = ", ".join(view.conflicts.swept)
        out.print(
            f"[bold]Conflict stage:[/] swept {escape(swept)}; the config holds "
            f"{escape(view.conflicts.written)}.",
            highlight=False,
        )
    label = "Why (retrieval only):" if w.stage is not None else "Why:"
    out.print(f"[bold]{label}[/] {escape(view.why)}.", highlight=False)
    if view.cost is not None:
        out.print(f"[bold]Constraint cost:[/] {escape(view.cost.line())}.", highlight=False)
    for line in view.unmet:
        out.print(f"[bold yellow]not met:[/] {escape(line)}", highlight=False)
    guarantee = w.guarantee
    if guarantee is not None and guarantee.met:
        out.print(f"[bold]Guarantee:[/] {escape(guarantee.statement(w.names))}.", highlight=False)
        out.print(escape(guarantee.heldout_line(w.names)), highlight=False)
    a = view.answerability
    if a is not None and a.met:
        out.print(f"[bold]Answerability:[/] {escape(a.statement())}.", highlight=False)
        effect = a.effect_line((obj, "evidence_recall"))
        for text in (a.calibration_line(), a.heldout_line(), effect):
            if text:
                out.print(escape(text), highlight=False)
    if view.noise_floor is not None:
        out.print(f"[bold]Noise floor:[/] {escape(view.noise_floor.statement())}.", highlight=False)


def _print_check(view: ResultView, out: Console) -> None:
    """The held-out check of the retrieval choice against plain top-k."""
    w, check = view.written, view.retrieval_check
    c = check.comparison
    if view.chosen_is_baseline:
        name = "held-out check" if c.split == "held-out" else "in-sample check (no hold-out)"
        out.print(
            f"{name}: the choice is plain {view.baseline}, the "
            f"baseline itself; nothing to compare ({c.split}, {c.n_queries} queries: "
            + ", ".join(f"{x.metric} {format_number(x.guarded.mean)}" for x in check.rows[:4])
            + ")",
            highlight=False,
        )
        return
    pct = round(c.level * 100)
    what = view.retrieval_choice
    if w.two_stage is not None:
        what = f"the retrieval-only choice {what}"
    title = (
        f"held-out check of {what}: {c.n_queries} queries never used to choose"
        if c.split == "held-out"
        else f"in-sample check of {what} (no hold-out): {c.n_queries} queries"
    )
    table = _table(title)
    table.add_column("metric", overflow="fold")
    for col in (view.baseline, "guarded", "change", f"{pct}% interval"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("verdict")
    for row in check.rows:
        style = {"better": "green", "worse": "red"}.get(row.verdict, "")
        table.add_row(
            row.metric,
            format_number(row.baseline.mean),
            format_number(row.guarded.mean),
            format_number(row.difference.mean, signed=True),
            _interval(row.difference),
            f"[{style}]{row.verdict}[/]" if style else row.verdict,
        )
    out.print(table)
    if check.bands is not None:
        b, g = check.bands
        which = "guarded" if w.two_stage is None else "retrieval only"
        out.print(f"safety band: {b.value} with plain top-k, {g.value} {which}", highlight=False)
    if view.header.objective in c.metrics:
        _print_verdict(view, c, w.two_stage is not None, out)
    if view.fallback is not None:
        out.print(
            f"[red]{escape(view.fallback)}: plain top-k is written instead[/]"
            if view.header.on_worse == "top-k"
            else f"[red]{escape(view.fallback)}[/]",
            highlight=False,
        )


def _print_verdict(view: ResultView, c: Comparison, retrieval_only: bool, out: Console) -> None:
    """One line: what the held-out check says about the objective (of the
    retrieval-only choice when the config holds the second stage)."""
    obj = view.header.objective
    v = c.verdict(obj)
    where = c.where()
    if view.header.target is not None:  # the objective is reported, not optimised
        than = {"better": "better than", "worse": "worse than"}.get(v, f"{v} from")
        out.print(
            f"{obj} (reported, not optimised under the guarantee): {than} plain "
            f"{view.baseline} {where}, difference {c.change(obj)}",
            highlight=False,
        )
    elif v == "better":
        which = "retrieval-only gain" if retrieval_only else "gain"
        out.print(f"The {which} in {obj} holds {where}.", highlight=False)
    elif v == "worse":
        which = "retrieval-only choice" if retrieval_only else "guarded setting"
        out.print(f"[red]The {which} is worse on {obj} {where}.[/]", highlight=False)
    else:
        out.print(
            f"{v.capitalize()} in {obj} {where}; more labelled queries would tell.", highlight=False
        )


def _print_two_stage(view: ResultView, out: Console) -> None:
    """Retrieval-only best, two-stage best and plain top-k on held-out queries, as the
    result's view holds them; whether the config holds the second stage was said under
    "Chosen" (``view.written``)."""
    st, checks, top_k = view.stage, view.stage_check, view.stage_top_k_check
    if st is None or checks is None or top_k is None:
        return
    objective = view.header.objective
    failed = ""
    if st.calls_failed:
        failed = f"; {st.calls_failed} of {st.calls} calls failed, swept fail-open"
    out.print()
    state = "written" if st.written else "left off"
    out.print(
        f"[bold]Two stages[/] ({state}): {escape(st.choice)} chosen on the "
        f"calibration queries, on run {escape(st.run)} with reranker {escape(st.reranker)} "
        f"({st.pairs_scored} pairs scored, {st.pairs_cached} from the cache{failed})",
        highlight=False,
    )
    out.print(f"probability map: {escape(st.probability_map)}", highlight=False)
    a = checks.comparison
    pct = round(a.level * 100)
    table = _table(f"{a.split}: {a.n_queries} queries, {pct}% paired bootstrap intervals")
    table.add_column("metric", overflow="fold")  # at 80 columns it wraps, numbers never do
    for col in ("top-k", "retrieval", "two-stage", "vs retrieval", "vs top-k"):
        table.add_column(col, justify="right", no_wrap=True)
    for x, y in zip(checks.rows, top_k.rows, strict=True):
        interval = _interval(x.difference)
        table.add_row(
            x.metric,
            format_number(y.baseline.mean),
            format_number(x.baseline.mean),
            format_number(x.guarded.mean),
            f"{x.difference.mean:+.2f} {interval}" if interval else "",
            f"{y.difference.mean:+.2f}",
        )
    out.print(table)
    if checks.bands is not None:
        rate = a.guarded["distractor_rate"].mean
        out.print(
            f"distractor rate: {format_number(a.baseline['distractor_rate'].mean)} retrieval-only, "
            f"{format_number(rate)} with the reranker (safety band {checks.bands[1].value})",
            highlight=False,
        )
    (brier_raw, brier_mapped), (raw, mapped) = st.brier, st.reliability
    out.print(
        f"calibration of rerank probabilities ({a.split}): Brier "
        f"{format_number(brier_raw)} -> {format_number(brier_mapped)}, ECE "
        f"{format_number(raw.ece)} -> {format_number(mapped.ece)}",
        highlight=False,
    )
    verdict = a.verdict(objective) if objective in a.metrics else ""
    if verdict:
        out.print(f"two-stage vs retrieval-only on {objective}: {verdict}", highlight=False)


def _print_next_steps(view: ResultView, out: Console) -> None:
    """When the written setting is RISKY or DANGEROUS: what to try, with the commands."""
    if not view.next_steps:
        return
    out.print()
    out.print(f"[bold]Next:[/] {escape(view.next_steps_intro)}:", highlight=False)
    for what, commands in view.next_steps:
        out.print(f"- {escape(what)}" + (":" if commands else ""), highlight=False)
        for command in commands:
            for line in _shell_lines(command):
                out.print(line, markup=False, highlight=False, soft_wrap=True)


def _shell_lines(command: str, width: int = 80, indent: str = "    ") -> list[str]:
    """``command`` as shell lines of at most ``width`` characters where it can be
    broken before an option, continued with `` \\`` (pasted back, it runs as one)."""
    lines: list[str] = []
    line = indent
    for word in command.replace(" --", "\0--").split("\0"):
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = indent + "    "
        line += (" " if line.strip() else "") + word
    return [*lines, line]


def config_line(view: ResultView, path: Path) -> str:
    """The line that names the written config at ``path`` and how to load it: by its
    path alone, or with its reranker passed in code when the config names one it never
    imports (``module:callable``, or the ``run:PATH`` of precomputed scores)."""
    shown = escape(str(path))
    external = view.reranker_code
    if external is None:
        how = f'load it: ContextGuard.from_file("{shown}")'
    else:
        load = f'ContextGuard(GuardConfig.from_file("{shown}"), reranker='
        if external.startswith("run:"):
            how = (
                f"its reranker gave precomputed scores ({escape(external)}): pass the "
                f"reranker that made them in code, {load}YOUR_RERANKER)"
            )
        else:
            module, _, name = external.partition(":")
            how = (
                f"its reranker is code, never loaded by path: pass it, from "
                f"{escape(module)} import {escape(name)}; {load}{escape(name)})"
            )
    return f"[bold]Config[/]  {shown}  ({how})"


def print_report_line(paths: WrittenReport | None, out: Console, err: Console) -> None:
    """Where the report went (on ``out``), and a note on ``err`` when it has no plots."""
    if paths is None:
        return
    out.print(
        f"[bold]Report[/]  {escape(str(paths.html))}  "
        f"(also {paths.markdown.name}" + (", plots/)" if paths.plots else ")"),
        highlight=False,
    )
    if not paths.plots_drawn:
        err.print(
            "[yellow]note:[/] the report has no plots: matplotlib is not installed; "
            + escape(install_hint("report")),
            highlight=False,
        )


def print_metrics(
    title: str,
    values: Mapping[str, Mapping[str, float | str]],
    groups: Sequence[tuple[str, Sequence[str]]],
    out: Console,
) -> None:
    """``ragguard evaluate``'s table: per run (a column), the metrics of each group."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    table.add_column("kind")
    table.add_column("metric")
    for r in values:
        table.add_column(r, justify="right")
    for n, (label, metrics) in enumerate(groups):
        for i, m in enumerate(metrics):
            cells = (format_number(float(row[m])) for row in values.values())
            table.add_row(label if i == 0 else "", m, *cells)
        if metrics and any(later for _, later in groups[n + 1 :]):
            table.add_section()
    out.print(table)


def print_comparison(
    title: str,
    rows: Mapping[str, Mapping[str, float | str]],
    cols: Sequence[tuple[str, str]],
    k: int,
    out: Console,
) -> None:
    """``ragguard compare``'s table (``cols``: metric and header) and, for several runs,
    which has the highest recall, the fewest distractors and the best UDCG."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    table.add_column("run", no_wrap=True)
    for _, header in cols:
        table.add_column(header, justify="right")
    table.add_column("safety band")
    style = {"SAFE": "green", "RISKY": "yellow", "DANGEROUS": "red"}
    for r, means in rows.items():
        band = str(means["safety_band"])
        cells = (format_number(float(means[c])) for c, _ in cols)
        table.add_row(r, *cells, f"[{style[band]}]{band}[/]")
    out.print(table)
    if len(rows) < 2:
        return
    rate = f"distractor_rate@{k}"
    by_recall = max(rows, key=lambda r: float(rows[r][f"recall@{k}"]))
    safest = min(rows, key=lambda r: float(rows[r][rate]))
    best_udcg = max(rows, key=lambda r: float(rows[r][f"udcg@{k}"]))
    out.print(
        f"highest recall@{k}: {by_recall} (distractor rate "
        f"{format_number(float(rows[by_recall][rate]))}, {rows[by_recall]['safety_band']}); "
        f"fewest distractors: {safest}; best UDCG: {best_udcg}",
        highlight=False,
    )
    if by_recall != safest:
        out.print(
            f"The highest-recall profile ({by_recall}) is not the safest: more of what "
            "it retrieves argues for a wrong answer.",
            highlight=False,
        )
