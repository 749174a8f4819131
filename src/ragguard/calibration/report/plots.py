"""The report's plots (matplotlib, drawn with the Agg canvas, never touching pyplot's
global state): ``draw_figures``."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import require
from ragguard.calibration._format import format_number
from ragguard.calibration.fit.result import CalibrationResult
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.space import FittedRerank
from ragguard.calibration.fit.sweep import PASSAGES, describe_point, is_plain_top_k, lower_is_better
from ragguard.calibration.report.document import Figure
from ragguard.errors import MissingDependencyError
from ragguard.policy import CutRule, PolicyParams

__all__ = ["draw_figures"]


def _figure_module() -> Any:
    """matplotlib's ``Figure`` class, or ``None`` when the ``report`` extra is missing."""
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
            [chosen.max_k],
            [g],
            marker="*",
            markersize=15,
            color="#c44e52",
            linestyle="none",
            label=f"guarded ({describe_point(chosen)})",
        )
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
                (b - 0.5, a - 0.5),
                1,
                1,
                fill=False,
                hatch="///",
                edgecolor="#f2f2f2",
                linewidth=0,
            )
        )
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
            (f"baseline ({describe_point(r.baseline_params)})", c.baseline, "#8c8c8c"),
            (f"guarded ({describe_point(r.chosen_params)})", c.guarded, "#c44e52"),
        )
    ):
        means = np.array([ivs[m].mean for m in unit])
        lows = np.array([ivs[m].low for m in unit])
        highs = np.array([ivs[m].high for m in unit])
        err = np.vstack((np.nan_to_num(means - lows), np.nan_to_num(highs - means)))
        ax.bar(
            x + (offset - 0.5) * width, means, width, yerr=err, capsize=3, label=label, color=color
        )
    ax.set_xticks(x)
    ax.set_xticklabels(unit)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean over queries")
    pct = round(c.level * 100)
    ax.set_title(f"{c.split} queries ({c.n_queries}), {pct}% bootstrap intervals", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _plot_reliability(mpl: Any, two: FittedRerank, split: str) -> bytes | None:
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
        ax.plot(
            rel.predicted[used],
            rel.observed[used],
            marker=marker,
            color=color,
            label=f"{label}, ECE {format_number(rel.ece)}",
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted p(relevant)")
    ax.set_ylabel("observed fraction relevant")
    ax.set_title(f"Reliability on {split} pairs", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.grid(alpha=0.3)
    return _png(fig)


def draw_figures(res: CalibrationResult) -> list[Figure] | None:
    """The plots of ``res``'s recommended run (see the package docstring), or ``None``
    when matplotlib (the ``report`` extra) is not installed."""
    mpl = _figure_module()
    if mpl is None:
        return None
    r = res.recommended
    figs: list[Figure] = []
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
    two = res.rerank
    stage = None if two is None else two.stage
    if two is not None and stage is not None:
        split = two.comparison.split
        if (rel := _plot_reliability(mpl, stage, split)) is not None:
            figs.append(
                Figure(
                    "reliability.png",
                    "Reliability of the rerank probabilities before and after the map "
                    f"({split} pairs).",
                    rel,
                )
            )
    return figs
