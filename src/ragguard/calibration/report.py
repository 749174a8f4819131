"""The calibration report: Markdown and a self-contained HTML page, with plots.

:func:`write_report` writes, into a folder::

    report.md          the report in Markdown; plots referenced as plots/*.png
    report.html        the same report as one self-contained page (plots embedded as
                       base64 PNG, inline CSS, no scripts, nothing fetched)
    plots/*.png        the plots

Plots (matplotlib, drawn with the Agg canvas, never touching pyplot's global state):

* ``utility_vs_k.png``: mean total utility and mean UDCG of plain top-k for each k on the
  calibration queries, the guarded setting marked at its ``max_k``, and the per-query
  optimal (oracle) utility as a ceiling;
* ``heatmap.png``: the objective over ``max_k`` x ``relative_threshold``, settings that
  fail a constraint greyed, the chosen one boxed;
* ``optimal_k.png``: how many queries have each optimal k;
* ``baseline_vs_guarded.png``: held-out means with their bootstrap intervals (not
  drawn when the choice is the baseline itself).

Plots need the ``report`` extra (matplotlib). Without it the report is still written,
Markdown and HTML, with every table and a note saying how to get the plots.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import install_hint, require
from ragguard.calibration._format import floor_number, format_interval, format_number
from ragguard.calibration._output import check_output_path, staging_folder
from ragguard.calibration.metrics import SafetyBands, compute, safety_band
from ragguard.calibration.pipeline import TwoStageCalibration
from ragguard.calibration.result import (
    SMALL_SET,
    CalibrationResult,
    RunCalibration,
    WrittenSetting,
)
from ragguard.calibration.risk import EVIDENCE, GuaranteeResult
from ragguard.calibration.statistics import Comparison, Interval
from ragguard.calibration.sweep import (
    PASSAGES,
    choose,
    describe_point,
    is_plain_top_k,
    lower_is_better,
)
from ragguard.errors import MissingDependencyError
from ragguard.policy import ConflictMode, CutRule, PolicyParams

__all__ = [
    "Report",
    "WrittenReport",
    "build_report",
    "format_interval",
    "format_number",
    "next_steps_intro",
    "write_report",
]

logger = logging.getLogger(__name__)

PLOT_NOTE = (
    "Plots were not drawn: matplotlib is not installed. Install the report extra "
    f"(`{install_hint('report')}`) and run calibrate again to get them."
)
N_EXAMPLES = 5

# --------------------------------------------------------------------------- document


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Figure:
    name: str
    caption: str
    png: bytes = field(repr=False)


Block = Heading | Para | Bullets | Table | Figure


@dataclass(frozen=True)
class Report:
    """A report as blocks, rendered to Markdown or HTML."""

    title: str
    blocks: tuple[Block, ...]
    plots: bool

    @property
    def figures(self) -> tuple[Figure, ...]:
        """The plots, in order."""
        return tuple(b for b in self.blocks if isinstance(b, Figure))

    def markdown(self, plot_dir: str = "plots") -> str:
        """The report in Markdown; figures point to ``plot_dir/NAME``. Text from the
        data (queries, ids, names) never becomes HTML: ``<`` and ``&`` are written as
        entities everywhere, so a viewer that renders HTML in Markdown shows them."""
        out = [f"# {_md(self.title)}", ""]
        for b in self.blocks:
            if isinstance(b, Heading):
                out += ["#" * (b.level + 1) + " " + _md(b.text), ""]
            elif isinstance(b, Para):
                out += [_md(b.text), ""]
            elif isinstance(b, Bullets):
                out += [f"- {_md(item)}" for item in b.items] + [""]
            elif isinstance(b, Table):
                out.append("| " + " | ".join(_md_cell(c) for c in b.header) + " |")
                aligns = b.numeric or (False,) * len(b.header)
                out.append("|" + "|".join("---:" if a else "---" for a in aligns) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
                out.append("")
            else:
                caption = _md(b.caption)
                out += [f"![{caption}]({plot_dir}/{b.name})", "", f"*{caption}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        """The report as one self-contained XHTML-compatible page (plots inline)."""
        body: list[str] = [f"<h1>{_inline(self.title)}</h1>"]
        for b in self.blocks:
            if isinstance(b, Heading):
                level = min(b.level + 1, 6)
                anchor = re.sub(r"[^a-z0-9]+", "-", b.text.lower()).strip("-")
                body.append(f'<h{level} id="{anchor}">{_inline(b.text)}</h{level}>')
            elif isinstance(b, Para):
                body.append(f"<p>{_inline(b.text)}</p>")
            elif isinstance(b, Bullets):
                items = "".join(f"<li>{_inline(i)}</li>" for i in b.items)
                body.append(f"<ul>{items}</ul>")
            elif isinstance(b, Table):
                aligns = b.numeric or (False,) * len(b.header)
                head = "".join(f"<th>{_inline(c)}</th>" for c in b.header)
                rows = "".join(
                    "<tr>"
                    + "".join(
                        f'<td class="num">{_inline(c)}</td>' if a else f"<td>{_inline(c)}</td>"
                        for c, a in zip(row, aligns, strict=True)
                    )
                    + "</tr>"
                    for row in b.rows
                )
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            else:
                data = base64.b64encode(b.png).decode("ascii")
                body.append(
                    f'<figure><img src="data:image/png;base64,{data}" '
                    f'alt="{html.escape(b.caption, quote=True)}" data-plot="{b.name}" />'
                    f"<figcaption>{_inline(b.caption)}</figcaption></figure>"
                )
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8" />\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1" />\n'
            f"<title>{html.escape(self.title)}</title>\n<style>{_CSS}</style>\n</head>\n"
            "<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
        )


_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:#1f2328;background:#fff;margin:0;line-height:1.5}
main{max-width:1080px;margin:0 auto;padding:24px 32px 64px}
h1{font-size:1.9em;border-bottom:1px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.4em;margin-top:1.8em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1.1em;margin-top:1.4em}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;
background:#f0f2f4;padding:.1em .3em;border-radius:4px}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.92em}
th,td{border:1px solid #d0d7de;padding:4px 10px;vertical-align:top}
th{background:#f6f8fa;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}
figure{margin:1em 0 1.6em}
figure img{max-width:100%;height:auto;border:1px solid #eaeef2}
figcaption{color:#57606a;font-size:.9em;margin-top:.3em}
"""


def _md(text: str) -> str:
    """``text`` safe in Markdown that a viewer may render as HTML: ``&`` and ``<`` as
    entities (everywhere, code spans included: a viewer that reads a code span
    differently from us must still find no tag), so no tag or entity from the data
    reaches the page."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _md_cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> str:
    """Escape ``text`` and render `code` and **bold** spans."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


# --------------------------------------------------------------------------- numbers


def _iv(iv: Interval, signed: bool = False) -> str:
    """A mean and its interval, the interval rounded outward (see
    :func:`~ragguard.calibration._format.format_interval`)."""
    mean = format_number(iv.mean, signed=signed)
    interval = format_interval(iv.low, iv.high, 3, signed=signed)
    return f"{mean} {interval}" if interval else mean


def _setting(r: RunCalibration, which: str = "chosen") -> str:
    p = r.chosen_params if which == "chosen" else r.baseline_params
    return describe_point(p)


# --------------------------------------------------------------------------- plots


def _figure_module() -> Any:
    try:
        require("matplotlib", "report")
    except MissingDependencyError:
        return None
    from matplotlib.figure import Figure as MplFigure

    return MplFigure


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _with_chosen_conflicts(r: RunCalibration, p: PolicyParams) -> bool:
    """Whether ``p`` runs the chosen setting's conflict stage (the plots draw one
    conflict setting when several were swept)."""
    c = r.chosen_params
    return (p.conflicts, p.conflict_similarity) == (c.conflicts, c.conflict_similarity)


def _passages(r: RunCalibration, kept: NDArray[np.intp]) -> NDArray[np.float64]:
    """Passages each query keeps under per-query cuts ``kept`` of ``r``'s kernel (a cut
    is not a count under the conflict stage's ``drop``, or across conflict settings)."""
    out: NDArray[np.float64] = r.kernel.values(kept, [PASSAGES])[0]
    return out


def _top_k_curve(r: RunCalibration, metric: str) -> tuple[list[int], list[float]]:
    ks: list[int] = []
    vals: list[float] = []
    for i, p in enumerate(r.sweep.points):
        if is_plain_top_k(p) and _with_chosen_conflicts(r, p):
            ks.append(p.max_k)
            vals.append(r.sweep.mean(i, metric))
    return ks, vals


def _plot_utility_vs_k(mpl: Any, res: CalibrationResult, r: RunCalibration) -> bytes:
    metrics = ["utility", "udcg"]
    if res.objective not in metrics and res.objective in r.sweep.metrics:
        metrics.append(res.objective)
    fig = mpl(figsize=(4.2 * len(metrics), 3.4))
    axes = fig.subplots(1, len(metrics))
    chosen = r.chosen_params
    rows = res.calibration_rows
    for ax, metric in zip(np.atleast_1d(axes), metrics, strict=True):
        ks, vals = _top_k_curve(r, metric)
        ax.plot(ks, vals, marker="o", color="#4c72b0", label="plain top-k")
        g = r.sweep.mean(r.chosen, metric)
        ax.axvline(chosen.max_k, color="#c44e52", linestyle="--", linewidth=1)
        ax.plot(
            [chosen.max_k], [g], marker="*", markersize=15, color="#c44e52", linestyle="none",
            label=f"guarded ({describe_point(chosen)})",
        )  # fmt: skip
        if metric == "utility":
            oracle = float(np.mean(r.optimal.utility[rows])) if rows.size else math.nan
            ax.axhline(oracle, color="#55a868", linestyle=":", label="per-query optimal k")
        ax.set_xlabel("k (passages given to the LLM)")
        ax.set_ylabel(f"mean {metric}")
        ax.set_title(f"{metric} vs k")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"run {r.name}: calibration queries ({rows.size})", fontsize=10)
    return _png(fig)


def _plot_heatmap(mpl: Any, res: CalibrationResult, r: RunCalibration) -> bytes | None:
    pts = r.sweep.points
    ks = sorted({p.max_k for p in pts if p.cut is CutRule.NONE})
    drawn = {i for i, p in enumerate(pts) if _with_chosen_conflicts(r, p)}
    ts = sorted({p.relative_threshold for p in pts if p.cut is CutRule.NONE})
    if len(ts) < 2:
        return None
    z = np.full((len(ks), len(ts)), np.nan)
    bad = np.zeros(z.shape, dtype=bool)
    obj = r.sweep.column(res.objective)
    violation = np.zeros(len(pts))
    for con in res.constraints:
        violation += con.violation(r.sweep.column(con.metric))
    where: dict[tuple[int, float], tuple[int, int]] = {}
    for i, p in enumerate(pts):
        if p.cut is not CutRule.NONE or p.min_score is not None or i not in drawn:
            continue
        a, b = ks.index(p.max_k), ts.index(p.relative_threshold)
        z[a, b] = obj[i]
        bad[a, b] = violation[i] > 0
        where[(p.max_k, p.relative_threshold)] = (a, b)
    fig = mpl(figsize=(9.5, 4.6))
    ax = fig.subplots()
    cmap = "viridis_r" if lower_is_better(res.objective) else "viridis"
    im = ax.imshow(z, aspect="auto", origin="lower", cmap=cmap)
    from matplotlib.patches import Rectangle

    for a, b in zip(*np.nonzero(bad), strict=True):
        ax.add_patch(
            Rectangle(
                (b - 0.5, a - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#f2f2f2",
                linewidth=0,
            )
        )  # fmt: skip
    fig.colorbar(im, ax=ax, label=f"mean {res.objective}")
    ax.set_xticks(range(len(ts)))
    ax.set_xticklabels([f"{t:.2f}" for t in ts], rotation=60, fontsize=7)
    ax.set_yticks(range(len(ks)))
    ax.set_yticklabels([str(k) for k in ks], fontsize=8)
    ax.set_xlabel("relative_threshold")
    ax.set_ylabel("max_k")
    c = r.chosen_params
    title = f"mean {res.objective} on calibration queries"
    if res.constraints:
        title += " (hatched: fails " + " and ".join(str(x) for x in res.constraints) + ")"
    if (c.max_k, c.relative_threshold) in where and c.cut is CutRule.NONE:
        a, b = where[(c.max_k, c.relative_threshold)]
        ax.add_patch(
            Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, edgecolor="#e8000b", linewidth=2.5)
        )
        title += f"; chosen: {describe_point(c)}"
    else:
        title += f"; chosen: {describe_point(c)} (a cut rule, not on this grid)"
    ax.set_title(title, fontsize=9)
    return _png(fig)


def _plot_optimal_k(mpl: Any, res: CalibrationResult, r: RunCalibration) -> bytes:
    counts = r.optimal.counts
    fig = mpl(figsize=(6.4, 3.4))
    ax = fig.subplots()
    ks = np.arange(counts.size)
    ax.bar(ks, counts, color="#4c72b0")
    mean_kept = float(np.mean(_passages(r, r.chosen_kept)))
    ax.axvline(
        mean_kept,
        color="#c44e52",
        linestyle="--",
        label=f"guarded: {mean_kept:.2f} kept on average",
    )
    ax.set_xticks(ks)
    ax.set_xlabel("optimal k (where cumulative utility peaks; 0: every passage harms)")
    ax.set_ylabel("queries")
    ax.set_title(f"per-query optimal k, run {r.name} (all {len(res.qids)} queries)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _plot_baseline_vs_guarded(mpl: Any, res: CalibrationResult, r: RunCalibration) -> bytes | None:
    c = r.comparison
    unit = [m for m in c.metrics if m in ("udcg", "recall", "precision", "ndcg", "distractor_rate")]
    if not unit or c.n_queries == 0:
        return None
    fig = mpl(figsize=(7.5, 3.6))
    ax = fig.subplots()
    x = np.arange(len(unit))
    width = 0.38
    for offset, (label, ivs, color) in enumerate(
        (
            (f"baseline ({_setting(r, 'baseline')})", c.baseline, "#8c8c8c"),
            (f"guarded ({_setting(r)})", c.guarded, "#c44e52"),
        )
    ):
        means = np.array([ivs[m].mean for m in unit])
        lows = np.array([ivs[m].low for m in unit])
        highs = np.array([ivs[m].high for m in unit])
        err = np.vstack((np.nan_to_num(means - lows), np.nan_to_num(highs - means)))
        ax.bar(x + (offset - 0.5) * width, means, width, yerr=err, capsize=3, label=label,
               color=color)  # fmt: skip
    ax.set_xticks(x)
    ax.set_xticklabels(unit)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean over queries")
    pct = round(c.level * 100)
    ax.set_title(f"{c.split} queries ({c.n_queries}), {pct}% bootstrap intervals", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _plot_reliability(mpl: Any, two: TwoStageCalibration) -> bytes | None:
    """Predicted probability vs observed frequency of relevance, per bin, before and
    after the probability map (held-out pairs)."""
    curves = (
        ("reranker's own probability", two.reliability_raw, "#8c8c8c", "o"),
        (
            f"calibrated ({two.probability_map.method.value})",
            two.reliability_mapped,
            "#c44e52",
            "s",
        ),
    )
    if all(int(rel.counts.sum()) == 0 for _, rel, _, _ in curves):
        return None
    fig = mpl(figsize=(4.8, 4.4))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="#bbbbbb", linestyle="--", linewidth=1, label="perfect")
    for label, rel, color, marker in curves:
        used = rel.counts > 0
        ax.plot(rel.predicted[used], rel.observed[used], marker=marker, color=color,
                label=f"{label}, ECE {format_number(rel.ece)}")  # fmt: skip
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted p(relevant)")
    ax.set_ylabel("observed fraction relevant")
    ax.set_title(f"Reliability on {two.vs_retrieval.split} pairs", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.grid(alpha=0.3)
    return _png(fig)


# --------------------------------------------------------------------------- sections


def _header(res: CalibrationResult, config_path: str | None) -> list[Block]:
    es = res.evalset
    cons = " and ".join(str(c) for c in res.constraints) or "none"
    r = res.recommended
    w = res.written_setting()
    how = res.objective_text(constraints=False)
    blocks: list[Block] = [
        Bullets(
            (
                f"eval set: `{es.source or 'in memory'}`, {len(res.qids)} labelled queries"
                + (f" ({len(es.unanswerable)} unanswerable)" if es.unanswerable else "")
                + f", runs: {', '.join(f'`{x.name}`' for x in res.runs)}",
                f"profile: `{res.profile.name}` (distractor score ratio "
                f"{res.profile.distractor_score_ratio:g}, hard negative "
                f"{res.profile.hard_negative_penalty:g}, known distractor "
                f"{res.profile.known_distractor_penalty:g})",
                f"objective: {how}; constraints: {cons}",
                f"queries: {res.calibration_rows.size} to choose on, {res.heldout_rows.size} "
                f"held out (holdout {res.holdout:g}, seed {res.seed})",
                f"data sha256: `{res.data_sha256}`",
                f"created: {res.created.strftime('%Y-%m-%d %H:%M UTC')}",
            )
        ),
        Heading(1, "Recommendation"),
        Para(f"**Run `{r.name}`: {w.setting}** ({_config_fields(res)})."),
    ]
    if w.stage is not None:
        blocks.append(Para(f"Second stage {w.stage}."))
    blocks += [
        Para(_written_note(res, w)),
        Para(("Retrieval-only choice: " if w.stage is not None else "Why: ") + f"{res.why()}."),
    ]
    blocks += _small_set(res, r)
    if config_path and res.stopped is None:
        line = f'Config: `{config_path}`; load it with `ContextGuard.from_file("{config_path}")`.'
        if res.unmet(r):
            line = (
                f"Config: `{config_path}` is written only with `--allow-unmet` "
                "(`allow_unmet=True`), the shortfall recorded in its provenance (see below)."
            )
        blocks.append(Para(line))
    return blocks + _unmet(res, r)


def _config_fields(res: CalibrationResult) -> str:
    """The config's own fields for the setting, read from the config itself."""
    cfg = res.config()
    fields = [
        f"`max_k = {cfg.max_k}`",
        f"`relative_threshold = {cfg.relative_threshold:g}`",
        f'`cut = "{cfg.cut.value}"`',
        f'`score_kind = "{cfg.score_kind.value if cfg.score_kind else "none"}"`',
    ]
    if cfg.conflicts is not ConflictMode.OFF:
        fields.append(f'`conflicts = "{cfg.conflicts.value}"`')
        fields.append(f"`conflict_similarity = {cfg.conflict_similarity:g}`")
    if cfg.rerank.enabled:
        fields.append(f"`rerank.top_n = {cfg.rerank.top_n}`")
        if cfg.rerank.relative_threshold:
            fields.append(f"`rerank.relative_threshold = {cfg.rerank.relative_threshold:g}`")
        if cfg.rerank.min_score is not None:
            fields.append(f"`rerank.min_score = {cfg.rerank.min_score:g}`")
        if cfg.rerank.expected_utility:
            fields.append("`rerank.expected_utility = true`")
    if cfg.min_evidence is not None:
        fields.append(f"`min_evidence = {cfg.min_evidence:g}`")
    return ", ".join(fields)


def _written_note(res: CalibrationResult, w: WrittenSetting) -> str:
    """What the config holds: the refit on all queries, a fallback to plain top-k, or
    nothing (stopped); and which setting the held-out check tests."""
    r = w.run
    n_all, n_cal = len(res.qids), res.calibration_rows.size
    if res.stopped is not None:
        return (
            f"**No config is written** (`on_worse='stop'`): {r.fallback}. Plain top-k "
            f"refitted on all {n_all} queries would be {describe_point(r.written_params)}."
        )
    if w.two_stage is None and r.fallback is not None:
        return (
            f"**Fallback to plain top-k:** {r.fallback}. The config therefore holds plain "
            f"top-k, refitted on all {n_all} queries: **{w.setting}** (the choice on the "
            f"{n_cal} calibration queries was {describe_point(r.chosen_params)})."
        )
    g = w.guarantee
    if g is not None:
        if not g.met:
            return (
                f"No setting carries the guarantee on the {n_cal} calibration queries: the "
                f"largest context stands in ({w.setting}); the config is written only with "
                "`--allow-unmet` (see Constraints not met)."
            )
        return (
            f"This is the setting the config holds: certified on the {n_cal} calibration "
            "queries and not refitted, so the held-out check below tests exactly it on "
            "queries it has not seen."
        )
    if w.setting == w.tested:
        return (
            f"This is the setting the config holds: the chosen rule family refitted on all "
            f"{n_all} queries, which gives the same setting as the choice on the {n_cal} "
            "calibration queries alone (the one the held-out check below tests)."
        )
    return (
        f"This is the setting the config holds: the chosen rule family refitted on all "
        f"{n_all} queries. On the {n_cal} calibration queries alone the choice was "
        f"**{w.tested}**; that calibration-only choice is what the held-out check below "
        "tests (the refit has seen every query)."
    )


def _small_set(res: CalibrationResult, r: RunCalibration) -> list[Block]:
    n = len(res.qids)
    if n >= SMALL_SET:
        return []
    c, obj = r.comparison, res.objective
    text = f"**Small eval set:** {n} labelled queries ({SMALL_SET} or more advised)."
    if obj in c.metrics and c.n_queries:
        iv = c.guarded[obj]
        text += (
            f" The {round(c.level * 100)}% interval of mean `{obj}` on the {c.n_queries} "
            f"{c.split} queries is {format_number(iv.high - iv.low)} wide "
            f"([{format_number(iv.low)}, {format_number(iv.high)}]), so differences "
            "smaller than that cannot be told from noise."
        )
    return [Para(text)]


def _unmet(res: CalibrationResult, r: RunCalibration) -> list[Block]:
    """The constraints (and the guarantee) the written setting misses, with the best
    reachable value and the setting that reaches it."""
    w = res.written_setting(r)
    short = res.shortfalls(r)
    g = w.guarantee
    if not short and (g is None or g.met):
        return []
    blocks: list[Block] = [Heading(1, "Constraints not met")]
    if short:
        blocks.append(
            Para(
                f"Over all {len(res.qids)} queries, with caps up to {short[0].max_k} "
                "passages: the best value any setting reaches, and the setting that "
                "reaches it."
            )
        )
        rows = tuple(
            (
                str(s.constraint),
                format_number(s.best_value),
                s.best_setting,
                f"{w.setting}: {format_number(s.written_value)}",
            )
            for s in short
        )
        blocks.append(
            Table(
                ("constraint", "best reachable", "reached by", "written setting"),
                rows,
                (False, True, False, False),
            )
        )
    if g is not None and not g.met:
        blocks.append(Para(f"Guarantee: {g.statement(w.names)}."))
        more = (
            f"`--holdout 0` certifies on all {len(res.qids)} queries (with nothing held "
            "out to check it), "
            if res.heldout_rows.size
            else ""
        )
        blocks.append(
            Para(
                f"Lower the target, {more}label more queries, or improve retrieval; "
                "`--allow-unmet` (`allow_unmet=True`) writes the config anyway with the "
                "shortfall recorded."
            )
        )
        return blocks
    raise_cap = "raise `--max-k`" if res.caps_fixed else "improve retrieval"
    blocks.append(
        Para(
            f"Lower the floor, {raise_cap}, or add a second stage; `--allow-unmet` "
            "(`allow_unmet=True`) writes the config anyway with the shortfall recorded."
        )
    )
    return blocks


def _selection(res: CalibrationResult, r: RunCalibration) -> list[Block]:
    """The cross-validated choice of rule family, with each family's CV mean and
    standard error and the one-standard-error rule."""
    s = r.selection
    if s is None:
        return []
    obj = res.objective
    n_cal = res.calibration_rows.size
    b, c = s.best, s.chosen
    if s.folds:
        intro = (
            f"The {n_cal} calibration queries were split into **{s.folds} folds** (seed "
            f"{res.seed}). For each fold, each rule family's best setting was chosen on the "
            f"other folds and scored on the fold left out: a family's cross-validated "
            f"`{obj}` is the mean of its {s.folds} fold scores, its standard error their "
            f"standard deviation over the square root of {s.folds}. Among the families "
            "that meet the constraints (all, ranked by violation, when none does) the "
            "simplest within one standard error of the best wins: plain top-k first, then "
            "one rule."
        )
    else:
        intro = (
            f"Too few calibration queries ({n_cal}) to cross-validate: each family is "
            f"scored by its best setting's mean `{obj}` on all of them, and the simplest "
            "of the best wins."
        )
    sign = -1.0 if lower_is_better(obj) else 1.0
    bar = s.cv_mean[b] - sign * (s.cv_se[b] if s.folds else 0.0)
    rows = []
    for j, (_, name) in enumerate(s.families):
        role = []
        if j == b:
            role.append("best")
        if j == c:
            role.append("**chosen**")
        rows.append(
            (
                name,
                format_number(s.cv_mean[j]),
                format_number(s.cv_se[j]) if s.folds else "n/a",
                "yes" if s.cv_feasible[j] else "no",
                ", ".join(role),
            )
        )
    word = "at least" if sign > 0 else "at most"
    closing = (
        f"Best: {s.families[b][1]} ({format_number(s.cv_mean[b])} +/- "
        f"{format_number(s.cv_se[b])}); within one standard error means a cross-validated "
        f"`{obj}` of {word} {format_number(bar)}. Chosen: **{s.family}**; its best setting "
        f"on the calibration queries is {describe_point(r.chosen_params)}, refitted on all "
        f"{len(res.qids)} queries {describe_point(r.written_params)}."
    )
    if r.fallback is not None:
        closing += " The held-out check overruled it (see the fallback above)."
    return [
        Heading(1, "Choosing the rule family: cross-validation"),
        Para(intro),
        Table(
            ("rule family", f"CV mean {obj}", "standard error", "meets constraints", ""),
            tuple(rows),
            (False, True, True, False, False),
        ),
        Para(closing),
    ]


METHOD = (
    "Learn-then-Test (Angelopoulos, Bates, Candès, Jordan, Lei, *Learn then Test: "
    "Calibrating Predictive Algorithms to Achieve Risk Control*, 2021, arXiv:2110.01052) "
    "with Hoeffding-Bentkus p-values (Bates, Angelopoulos, Lei, Malik, Jordan, "
    "*Distribution-free, Risk-controlling Prediction Sets*, 2021)"
)
ASSUMPTIONS = (
    "new queries are exchangeable with the calibration queries (drawn from the same "
    "distribution of queries, over the same corpus and retriever; a shift voids the "
    "guarantee); the per-query loss, 1 - evidence recall, is bounded in [0, 1]; queries "
    "whose candidates hold no evidence are left out; the guarantee is on the mean over "
    "new queries, not on every query"
)


def _guarantee(
    g: GuaranteeResult,
    describe: Any,
    n_queries: int,
    passages: float,
    heading: tuple[int, str] = (1, "Recall guarantee"),
    scope: str = "",
) -> list[Block]:
    """The guarantee: target, confidence, method, assumptions, the certified bound and
    context (the one written), and its evidence recall on the held-out queries.
    ``describe(i)`` names the point ``i``; ``passages`` is the certified setting's mean
    context on the calibration queries; ``scope`` qualifies "setting" (``"two-stage "``)."""
    pct = f"{g.confidence:.0%}"
    m = len(g.paths)
    delta = (1.0 - g.confidence) / max(1, m)
    items = [
        f"target: mean evidence recall >= {g.target:g} on new queries, with confidence "
        f"{pct} (the probability, over the draw of the queries, that it holds)",
        f"method: {METHOD}: along each of {m} fixed sequence(s) of settings "
        f"({'; '.join(f'`{x}`' for x in g.paths)}), largest context first, the null 'mean loss > "
        f"{1 - g.target:g}' is tested at level {delta:.4g} (Bonferroni over the sequences) "
        "until the first one not rejected; the smallest certified context wins",
        f"assumptions: {ASSUMPTIONS} ({g.n_calibration} calibration queries have "
        f"evidence, of {n_queries} queries)",
    ]
    if g.point is not None:
        items.append(
            f"certified on the {g.n_calibration} calibration queries with evidence and "
            f"written: **{describe(g.point)}**, mean evidence recall >= "
            f"{floor_number(g.recall_bound)} (certified lower bound), keeping "
            f"{format_number(passages, 2)} passages on average"
        )
    else:
        items.append(
            f"**not met**: no {scope}setting is certified on the {g.n_calibration} calibration "
            f"queries with evidence; the most that can be guaranteed at {pct} confidence "
            f"is {floor_number(g.best_bound)} ({describe(g.best_point)})"
        )
    items.append(g.heldout_line(describe))
    return [Heading(*heading), Bullets(tuple(items))]


def _answerability(res: CalibrationResult) -> list[Block]:
    """The calibrated ``min_evidence``: its guarantee, what it does on the calibration
    and the held-out queries, and the written setting with and without it."""
    a = res.answerability
    if a is None:
        return []
    items = [a.statement() if a.met else f"**not met**: {a.shortfall()}"]
    if a.met:
        items += [a.calibration_line(), a.heldout_line()]
        effect = a.effect_line((res.objective, EVIDENCE, "distractor_rate", PASSAGES))
        if effect:
            items.append(
                effect + "; UDCG scores an empty context 0 (the authors' convention), so "
                "it counts an abstention on an unanswerable query as a loss"
            )
    items.append(
        "unanswerable: judged, none relevant (they set the floors tested); answerable: "
        "a relevant passage among the candidates (their share that abstains is bounded); "
        "queries that are neither count in neither share"
    )
    return [Heading(1, "Answerability (min_evidence)"), Bullets(tuple(items))]


def _runs_table(res: CalibrationResult) -> list[Block]:
    obj = res.objective
    header = ("run", "chosen", obj, "evidence recall", "recall (all judged)", "distractor rate",
              "passages", "best top-k", f"top-k {obj}", "constraints met",
              "written (all queries)")  # fmt: skip
    rows = []
    for r in res.runs:
        s = r.sweep
        rows.append(
            (
                f"`{r.name}`" + (" (recommended)" if r is res.recommended else ""),
                describe_point(r.chosen_params),
                format_number(s.mean(r.chosen, obj)),
                format_number(s.mean(r.chosen, EVIDENCE)),
                format_number(s.mean(r.chosen, "recall")),
                format_number(s.mean(r.chosen, "distractor_rate")),
                format_number(s.mean(r.chosen, PASSAGES), 2),
                describe_point(r.baseline_params),
                format_number(s.mean(r.baseline, obj)),
                "yes" if r.feasible else "**no**",
                describe_point(r.written_params) + ("" if r.written_feasible else " (**unmet**)"),
            )
        )
    return [
        Heading(1, "Runs side by side"),
        Para(
            f"Each run's best setting on the {res.calibration_rows.size} calibration queries, "
            "next to its best plain top-k (the baseline), and the setting its config would "
            f"hold (refitted on all {len(res.qids)} queries)."
        ),
        Table(header, tuple(rows), (False, False, *([True] * 7), False, False)),
    ]


def _ceiling(r: RunCalibration, c: Comparison) -> list[Block]:
    """Evidence recall next to classic recall, the retriever's ceiling."""
    if EVIDENCE not in c.metrics or "recall" not in c.metrics or not c.n_queries:
        return []
    every = compute(r.arrays, "recall")[c.rows]
    ceiling = float(np.nanmean(every)) if not np.isnan(every).all() else math.nan
    return [
        Para(
            "`evidence_recall` counts the relevant passages **among the retrieved "
            "candidates**: the recall a guard controls (keeping every candidate reaches "
            "1). `recall` counts every judged-relevant document, retrieved or not: it is "
            "bounded by the **retriever's ceiling**, which no cut can raise; keeping every "
            f"candidate gives recall {format_number(ceiling)} on these {c.n_queries} queries."
        )
    ]


def _heldout(
    res: CalibrationResult, r: RunCalibration, fig: Figure | None, w: WrittenSetting
) -> list[Block]:
    c = r.comparison
    pct = round(c.level * 100)
    where = (
        f"On the {c.n_queries} held-out queries (never used to choose)"
        if c.split == "held-out"
        else f"No queries were held out (holdout 0): this is **in-sample** on all "
        f"{c.n_queries} queries, so it overstates any gain"
    )
    if r.chosen_is_baseline:
        only = tuple((m, _iv(c.guarded[m])) for m in c.metrics)
        return [
            Heading(1, "Baseline vs guarded"),
            Para(
                f"The choice is plain {describe_point(r.chosen_params)}, **the baseline "
                "itself**: there is nothing to compare it with, so no baseline-vs-guarded "
                f"verdict is given. {where}, with {pct}% percentile bootstrap intervals, "
                "it reaches:"
            ),
            Table(("metric", describe_point(r.chosen_params)), only, (False, True)),
            *_ceiling(r, c),
        ]
    intro = (
        f"{where}, with {pct}% percentile bootstrap intervals ({c.n_bootstrap} paired "
        "resamples). A difference whose interval excludes 0 is called better or worse; "
        "otherwise there is no clear difference."
    )
    if w.two_stage is not None:
        intro += (
            f" This is the retrieval-only choice; the config holds the two-stage setting "
            f"({w.setting}), checked under Two stages below."
        )
    elif r.written_params != r.chosen_params and r.fallback is None:
        intro += (
            f" The guarded setting here is the calibration-only choice; the written "
            f"setting ({describe_point(r.written_params)}) was refitted on all queries, "
            "these included."
        )
    rows = []
    for m in c.metrics:
        rows.append(
            (
                m,
                _iv(c.baseline[m]),
                _iv(c.guarded[m]),
                _iv(c.difference[m], signed=True),
                c.verdict(m) if m != PASSAGES else c.passages_verdict(),
            )
        )
    blocks: list[Block] = [
        Heading(1, "Baseline vs guarded"),
        Para(intro),
        Table(
            (
                "metric",
                f"baseline: {_setting(r, 'baseline')}",
                f"guarded: {_setting(r)}",
                "difference",
                "verdict",
            ),
            tuple(rows),
            (False, True, True, True, False),
        ),
    ]
    blocks += _ceiling(r, c)
    if r.fallback is not None:
        blocks.append(
            Para(
                f"**Worse than plain top-k:** {r.fallback}; "
                + (
                    "nothing is written (`on_worse='stop'`)."
                    if res.stopped is not None
                    else f"plain top-k is written instead ({describe_point(r.written_params)})."
                    if w.two_stage is None
                    else f"plain top-k ({describe_point(r.written_params)}) is the "
                    "retrieval-only setting."
                )
            )
        )
    if "distractor_rate" in c.metrics and c.n_queries:
        b = safety_band(min(max(c.baseline["distractor_rate"].mean, 0.0), 1.0))
        g = safety_band(min(max(c.guarded["distractor_rate"].mean, 0.0), 1.0))
        blocks.append(
            Para(f"Safety band (by mean distractor rate): baseline **{b}**, guarded **{g}**.")
        )
    if fig is not None:
        blocks.append(fig)
    return blocks


def next_steps_intro(res: CalibrationResult) -> str:
    """Why the report and the console suggest next steps: the written setting's held-out
    safety band (only when :meth:`CalibrationResult.next_steps` has any)."""
    w = res.written_setting()
    c = w.comparison
    rate = c.guarded["distractor_rate"].mean
    return (
        f"the written setting is still DANGEROUS: mean distractor rate "
        f"{format_number(rate)} {c.where()} (DANGEROUS from {SafetyBands().dangerous:g}); "
        "to hand the LLM fewer look-alikes, try"
    )


def _next_steps(res: CalibrationResult, evalset: str | None) -> list[Block]:
    steps = res.next_steps(evalset)
    if not steps:
        return []
    return [
        Heading(1, "What to try next"),
        Para(next_steps_intro(res) + ":"),
        Bullets(
            tuple(
                what + (": " + ", then ".join(f"`{c}`" for c in commands) if commands else "")
                for what, commands in steps
            )
        ),
    ]


def _two_stage(
    two: TwoStageCalibration, objective: str, fig: Figure | None, w: WrittenSetting
) -> list[Block]:
    """Plain top-k, the best retrieval-only setting and the two-stage choice on the
    held-out queries, with the probability map's calibration before and after, and why
    the config holds the second stage or not (``w``, what is written)."""
    a, b = two.vs_retrieval, two.vs_top_k
    pct = round(a.level * 100)
    s = two.scores
    rows = []
    for m in a.metrics:
        rows.append(
            (
                m,
                _iv(b.baseline[m]),
                _iv(a.baseline[m]),
                _iv(a.guarded[m]),
                _iv(a.difference[m], signed=True),
                a.verdict(m) if m != PASSAGES else a.passages_verdict(),
                _iv(b.difference[m], signed=True),
                b.verdict(m) if m != PASSAGES else b.passages_verdict(),
            )
        )
    blocks: list[Block] = [
        Heading(1, "Two stages: retrieval, then the reranker"),
        Para(
            f"The reranker {s.name} read query and passage together for the top "
            f"{two.top_n} candidates of run {two.run} ({s.n_computed} pairs scored, "
            f"{s.n_cached} from the cache). Its scores were mapped to p(relevant) by "
            f"{two.probability_map.describe()}, fitted on {two.n_pairs_fit} pairs of the "
            "calibration queries. "
            + (
                f"Certified on the calibration queries and not refitted: **{two.describe()}** "
                "(the setting the table below checks)"
                if two.guarantee is not None
                else f"Chosen on the calibration queries: {two.describe_chosen()} (the "
                f"setting the table below checks); refitted on all queries: "
                f"**{two.describe()}**"
            )
            + (f"; {two.selection.describe()}" if two.selection is not None else "")
            + (
                ". The config holds it (see Recommendation)."
                if w.two_stage is not None
                else f". The config leaves it off and holds run {two.run}'s retrieval-only "
                f"setting, {w.setting} (see Recommendation)."
            )
        ),
        Para(
            f"On the {a.n_queries} {a.split} queries, with {pct}% paired bootstrap "
            "intervals: plain top-k and the best retrieval-only setting against the "
            "two-stage choice."
        ),
        Table(
            (
                "metric",
                "plain top-k",
                "retrieval only",
                "two-stage",
                "vs retrieval",
                "verdict",
                "vs top-k",
                "verdict",
            ),
            tuple(rows),
            (False, True, True, True, True, False, True, False),
        ),
    ]
    if "distractor_rate" in a.metrics and a.n_queries:
        blocks.append(
            Para(
                "Distractor rate: "
                f"{format_number(a.baseline['distractor_rate'].mean)} retrieval-only, "
                f"{format_number(a.guarded['distractor_rate'].mean)} with the reranker."
            )
        )
    blocks.append(
        Table(
            ("calibration of p(relevant), " + a.split, "reranker's own", "after the map"),
            (
                ("Brier score", format_number(two.brier_raw), format_number(two.brier_mapped)),
                (
                    "expected calibration error",
                    format_number(two.reliability_raw.ece),
                    format_number(two.reliability_mapped.ece),
                ),
            ),
            (False, True, True),
        )
    )
    if objective in a.metrics:
        blocks.append(Para(f"Two-stage vs retrieval-only on {objective}: {a.verdict(objective)}."))
    if two.guarantee is not None:
        g = two.guarantee
        blocks += _guarantee(
            g,
            two.name,
            int(two.sweep.kept.shape[1]),
            two.sweep.mean(g.written, PASSAGES),
            heading=(2, "Recall guarantee with the reranker"),
            scope="two-stage ",
        )
    if fig is not None:
        blocks.append(fig)
    return blocks


def _examples(res: CalibrationResult, r: RunCalibration) -> list[Block]:
    c = r.comparison
    obj = res.objective
    if obj not in c.metrics or c.n_queries == 0:
        return []
    j = c.metrics.index(obj)
    delta = c.guarded_values[j] - c.baseline_values[j]
    if lower_is_better(obj):
        delta = -delta
    delta = np.where(np.isnan(delta), 0.0, delta)
    order = np.argsort(-delta, kind="stable")
    gained = [i for i in order[:N_EXAMPLES].tolist() if delta[i] > 0]
    lost = [i for i in order[::-1][:N_EXAMPLES].tolist() if delta[i] < 0]
    arrays = r.arrays
    base_kept, guard_kept = r.baseline_kept, r.chosen_kept

    def describe(i: int) -> tuple[str, ...]:
        row = int(c.rows[i])
        qid = arrays.qids[row]
        text = res.evalset.queries[qid].text or ""
        ids = arrays.doc_ids(row)
        u = arrays.utility[row]
        # the passages each setting keeps (the stages after the cut may skip some)
        base = r.kernel.context(row, int(base_kept[row]))
        guard = r.kernel.context(row, int(guard_kept[row]))

        def ctx(positions: list[int]) -> str:
            parts = []
            for pos in positions:
                mark = "+" if u[pos] > 0 else ("-" if u[pos] < 0 else "0")
                parts.append(f"`{ids[pos]}` ({mark})")
            return ", ".join(parts) or "(nothing)"

        named = []
        for pos in sorted({*base, *guard}):
            if u[pos] < 0:
                kind = "known distractor" if arrays.distractor[row, pos] else "hard negative"
                fate = "kept" if pos in guard else "removed"
                named.append(f"`{ids[pos]}` ({kind}, {fate})")
        return (
            f"`{qid}` {text}",
            format_number(float(c.guarded_values[j][i] - c.baseline_values[j][i]), signed=True),
            ctx(base),
            ctx(guard),
            ", ".join(named) or "none",
        )

    header = ("query", f"{obj} change", f"baseline context ({_setting(r, 'baseline')})",
              f"guarded context ({_setting(r)})", "distractors in either context")  # fmt: skip
    blocks: list[Block] = [
        Heading(1, "Queries that gained and lost most"),
        Para(
            f"On the {c.split} queries of run `{r.name}`. Contexts list passages best first "
            "with their utility sign: (+) helps, (-) a distractor, (0) neutral. A known "
            "distractor is labelled as one; a hard negative is an unlabelled passage the "
            f"`{res.profile.name}` profile's rules count as harmful (ranked in the top "
            f"{res.profile.distractor_top_ranks} or scoring at least "
            f"{res.profile.distractor_score_ratio:g} x the top score)."
        ),
    ]
    blocks.append(Heading(2, "Gained most"))
    if gained:
        blocks.append(
            Table(header, tuple(describe(i) for i in gained), (False, True, False, False, False))
        )
    else:
        blocks.append(Para("No query gained."))
    blocks.append(Heading(2, "Lost most"))
    if lost:
        blocks.append(
            Table(header, tuple(describe(i) for i in lost), (False, True, False, False, False))
        )
    else:
        blocks.append(Para("No query lost."))
    return blocks


def _conflicts(res: CalibrationResult, r: RunCalibration) -> list[Block]:
    """The conflict settings swept, the best of each, and how well detection finds the
    labelled distractors at each similarity swept, on the calibration and the held-out
    queries."""
    from ragguard.calibration.conflict_sweep import (
        StageKernels,
        conflict_detection,
        describe_conflicts,
        setting_of,
        similarity_levels,
    )

    kernel = r.kernel
    if not isinstance(kernel, StageKernels):
        return []
    obj = res.objective
    rows = []
    for setting in kernel.settings:
        among = [i for i, p in enumerate(r.sweep.points) if setting_of(p) == setting]
        if not among:
            continue
        i, ok = choose(r.sweep, obj, res.constraints, among=among)
        rows.append(
            (
                describe_conflicts(setting),
                describe_point(r.sweep.points[i]) + ("" if ok else " (fails constraints)"),
                format_number(r.sweep.mean(i, obj)),
                format_number(r.sweep.mean(i, "distractor_rate")),
                format_number(r.sweep.mean(i, PASSAGES), 2),
            )
        )
    w = r.written_params
    written = describe_conflicts(setting_of(w))
    blocks: list[Block] = [
        Heading(1, "Conflicting passages"),
        Para(
            "The conflict stage (passages that nearly repeat each other but differ in "
            "facts: a number, a name, a negation) was swept under each setting below, with "
            "the runtime's own stage after the cut; the choice among them was made on "
            f"`{obj}` like any other setting (a conflict mode counts as one more rule in "
            f"the cross-validation), and the config holds **{written}**. `prefer` is not "
            "swept: it keeps the member with the greatest value of a metadata key, which "
            "eval sets do not carry; set it in the config by hand."
        ),
        Table(
            (
                "conflict setting",
                "best setting (calibration queries)",
                obj,
                "distractor rate",
                "passages",
            ),
            tuple(rows),
            (False, False, True, True, True),
        ),
    ]
    max_k = min(w.max_k, max(kernel.width, 1))
    splits = [("calibration", res.calibration_rows)]
    if res.heldout_rows.size:
        splits.append(("held-out", res.heldout_rows))
    table = []
    on = w.conflicts is not ConflictMode.OFF
    for level in similarity_levels(kernel.settings):
        for name, split_rows in splits:
            d = conflict_detection(kernel, split_rows, level, max_k)
            table.append(
                (
                    f"{level:g}" + (" (written)" if on and w.conflict_similarity == level else ""),
                    f"{name} ({d.queries})",
                    f"{d.flagged} / {d.candidates}",
                    format_number(d.precision),
                    format_number(d.recall),
                    format_number(d.relevant_rate),
                    format_number(d.query_precision),
                    format_number(d.query_recall),
                    format_number(d.clean_flagged_rate),
                )
            )
    blocks += [
        Para(
            f"Detection against the labels, among each query's first {max_k} ranked "
            "candidates (the written `max_k`): a candidate is *flagged* when it conflicts "
            "with another of them, *positive* when it is a known distractor or has "
            "negative utility. Precision: flagged candidates that are positive; recall: "
            "positive candidates flagged; relevant flagged: relevant candidates flagged "
            "(`drop` removes them too). Per query: flagged when one of its candidates is, "
            "positive when one is; clean flagged: queries without a positive that are "
            "flagged anyway."
        ),
        Table(
            (
                "similarity",
                "queries",
                "flagged",
                "precision",
                "recall",
                "relevant flagged",
                "query precision",
                "query recall",
                "clean flagged",
            ),
            tuple(table),
            (False, False, True, True, True, True, True, True, True),
        ),
    ]
    return blocks


def _optimal(res: CalibrationResult, r: RunCalibration, fig: Figure | None) -> list[Block]:
    dist = r.optimal.distribution()
    counts = r.optimal.counts
    n = int(counts.sum())
    zero = int(counts[0]) if counts.size else 0
    rows = tuple((str(k), str(v), f"{100 * v / n:.0f}%") for k, v in sorted(dist.items()))
    blocks: list[Block] = [
        Heading(1, "Per-query optimal k"),
        Para(
            f"For each query, the context size where its cumulative utility peaks (the "
            f"smallest such k, up to {counts.size - 1}). {zero} of {n} queries are best "
            "served by no passage at all under these labels: every prefix of their ranking "
            "harms more than it helps. A single fixed k cannot fit them all; a relative "
            "threshold adapts k per query."
        ),
        Table(("optimal k", "queries", "share"), rows, (True, True, True)),
    ]
    if fig is not None:
        blocks.append(fig)
    return blocks


def _grid_section(res: CalibrationResult, r: RunCalibration, figs: list[Figure]) -> list[Block]:
    grid = r.grid or res.grid  # the run's grid: its caps may have grown
    rules = [describe_point(p) for p in r.sweep.points if p.cut is not CutRule.NONE]
    blocks: list[Block] = [
        Heading(1, "How utility and the objective change with k"),
        Para(
            "Plain top-k gives every query the same number of passages; the star is the "
            "guarded setting at its `max_k` (it keeps fewer on queries whose lower passages "
            "score far below the top one)."
        ),
    ]
    blocks += [f for f in figs if f.name == "utility_vs_k.png"]
    blocks.append(Heading(1, "The settings grid"))
    blocks.append(
        Para(
            f"{len(r.sweep.points)} settings: `max_k` in {min(grid.max_k)}..{max(grid.max_k)} x "
            f"`relative_threshold` in {{{', '.join(f'{t:g}' for t in grid.thresholds)}}} "
            f"(`min_k = {grid.min_k}`), plus the label-free cut rules at every `max_k`."
            if r.score_kind is not None
            else "This run has no scores, so only plain top-k settings apply."
        )
    )
    blocks += [f for f in figs if f.name == "heatmap.png"]
    if rules:
        obj = res.objective
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(r.sweep.points):
            if p.cut is CutRule.NONE:
                continue
            extra = f"+{p.gap_buffer}" if p.cut is CutRule.GAP else f"@{p.autocut_jumps}"
            groups.setdefault(p.cut.value + extra, []).append(i)
        rows = []
        for key, members in groups.items():
            i, ok = choose(r.sweep, obj, res.constraints, among=members)
            rows.append(
                (
                    key,
                    describe_point(r.sweep.points[i]) + ("" if ok else " (fails constraints)"),
                    format_number(r.sweep.mean(i, obj)),
                    format_number(r.sweep.mean(i, EVIDENCE)),
                    format_number(r.sweep.mean(i, "recall")),
                )
            )
        blocks.append(
            Para(
                "Best setting of each label-free cut rule under the same objective and "
                "constraints (calibration queries):"
            )
        )
        blocks.append(
            Table(
                ("rule", "best setting", obj, "evidence recall", "recall (all judged)"),
                tuple(rows),
                (False, False, True, True, True),
            )
        )
    return blocks


# --------------------------------------------------------------------------- build


def build_report(
    res: CalibrationResult,
    *,
    config_path: str | None = None,
    plots: bool = True,
    evalset: str | None = None,
) -> Report:
    """The report of ``res`` as blocks (plots drawn when matplotlib is available and
    ``plots`` is True); ``evalset`` is the eval set as the commands it suggests name
    it (default: its file)."""
    r = res.recommended
    mpl = _figure_module() if plots else None
    figs: list[Figure] = []
    if mpl is not None:
        figs.append(
            Figure(
                "utility_vs_k.png",
                "Mean utility and UDCG vs k on the calibration queries; the star marks the "
                "guarded setting.",
                _plot_utility_vs_k(mpl, res, r),
            )
        )
        heat = _plot_heatmap(mpl, res, r)
        if heat is not None:
            figs.append(
                Figure(
                    "heatmap.png",
                    f"Mean {res.objective} over max_k x relative_threshold (calibration "
                    "queries); the chosen setting is boxed.",
                    heat,
                )
            )
        figs.append(
            Figure(
                "optimal_k.png",
                "How many queries have each optimal k (argmax of cumulative utility).",
                _plot_optimal_k(mpl, res, r),
            )
        )
        # nothing to compare when the choice is the baseline itself
        bvg = None if r.chosen_is_baseline else _plot_baseline_vs_guarded(mpl, res, r)
        if bvg is not None:
            figs.append(
                Figure(
                    "baseline_vs_guarded.png",
                    f"Baseline vs guarded on the {r.comparison.split} queries, with "
                    "bootstrap intervals.",
                    bvg,
                )
            )
        if res.rerank is not None and (rel := _plot_reliability(mpl, res.rerank)) is not None:
            figs.append(
                Figure(
                    "reliability.png",
                    "Reliability of the rerank probabilities before and after the map "
                    f"({res.rerank.vs_retrieval.split} pairs).",
                    rel,
                )
            )
    by_name = {f.name: f for f in figs}
    blocks: list[Block] = _header(res, config_path)
    if mpl is None:
        blocks.append(Para(PLOT_NOTE if plots else "Plots were turned off."))
    w = res.written_setting()
    if r.guarantee is not None:
        g = r.guarantee
        blocks += _guarantee(
            g,
            lambda i: describe_point(r.sweep.points[i]),
            len(res.qids),
            r.sweep.mean(g.written, PASSAGES),
            scope="" if res.rerank is None else "retrieval-only ",
        )
    blocks += _answerability(res)
    blocks += _selection(res, r)
    blocks += _heldout(res, r, by_name.get("baseline_vs_guarded.png"), w)
    if res.rerank is not None:
        blocks += _two_stage(res.rerank, res.objective, by_name.get("reliability.png"), w)
    blocks += _next_steps(res, evalset)
    if len(res.runs) > 1:
        blocks += _runs_table(res)
    blocks += _grid_section(res, r, figs)
    blocks += _conflicts(res, r)
    blocks += _optimal(res, r, by_name.get("optimal_k.png"))
    if not r.chosen_is_baseline:
        blocks += _examples(res, r)
    blocks += [
        Heading(1, "How this was computed"),
        Bullets(
            (
                "Utilities per passage come from the labels under the profile's rules "
                "(relevant +1, partially relevant +0.5, known distractor and hard negative "
                "penalties, else 0), or from utilities / abstention probabilities given in "
                "the data.",
                "Every setting was applied with the runtime guard's own policy function to "
                "each query's ranked candidates; metrics are means over queries of the kept "
                "context (UDCG: sigmoid of mean positive utility plus 1/3 of mean negative "
                "utility; utility: the sum of utilities).",
                "The setting and the baseline (plain top-k, the best fixed k under the same "
                "objective and constraints) were both chosen on the calibration queries only, "
                "and compared on the held-out queries; the config holds the choice refitted "
                "on all queries (plain top-k when the held-out check found the choice worse).",
                "Evidence recall counts relevant passages among the candidates (what a guard "
                "can keep); recall counts every judged-relevant document (the retriever's "
                "ceiling).",
            )
        ),
    ]
    return Report("ragguard calibration report", tuple(blocks), mpl is not None)


@dataclass(frozen=True)
class WrittenReport:
    """Where :func:`write_report` put things."""

    folder: Path
    markdown: Path
    html: Path
    plots: tuple[Path, ...]
    plots_drawn: bool


def write_report(
    res: CalibrationResult,
    folder: str | os.PathLike[str],
    *,
    config_path: str | None = None,
    plots: bool = True,
    evalset: str | None = None,
) -> WrittenReport:
    """Write ``report.md``, ``report.html`` and ``plots/*.png`` into ``folder``.

    ``evalset`` is the eval set as the suggested commands name it (default: its file).
    Without matplotlib (the ``report`` extra) everything but the plots is written and
    the report says how to get them. The report is built in memory, each file is
    written in a temporary folder inside ``folder`` and moved into place with
    :func:`os.replace`; nothing temporary is left behind, whatever fails.

    Raises:
        ConfigError: ``folder`` is a file, or lies under a file.
        OSError: a file cannot be written (permissions, a full disk).
    """
    out = check_output_path(folder, folder=True, what="the report")
    rep = build_report(res, config_path=config_path, plots=plots, evalset=evalset)
    files: dict[str, bytes] = {f"plots/{f.name}": f.png for f in rep.figures}
    files["report.md"] = rep.markdown().encode("utf-8")
    files["report.html"] = rep.html().encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    with staging_folder(out) as tmp:
        if rep.figures:
            (tmp / "plots").mkdir()
            (out / "plots").mkdir(exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        for name in files:
            os.replace(tmp / name, out / name)
    if not rep.plots and plots:
        logger.info("report written without plots: matplotlib is not installed")
    return WrittenReport(
        out,
        out / "report.md",
        out / "report.html",
        tuple(out / "plots" / f.name for f in rep.figures),
        rep.plots,
    )
