"""The report's plots (matplotlib, drawn with the Agg canvas, never touching pyplot's
global state): ``draw_figures``."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from ragguard._optional import require
from ragguard.calibration._format import format_number
from ragguard.calibration.fit.sweep import lower_is_better
from ragguard.calibration.fit.view import ResultView, StageView
from ragguard.calibration.report.document import Figure
from ragguard.errors import MissingDependencyError


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


def _plot_utility_vs_k(mpl: Any, v: ResultView) -> bytes:
    fig = mpl(figsize=(4.2 * len(v.curves), 3.4))
    axes = fig.subplots(1, len(v.curves))
    rows = v.header.calibration_rows
    for ax, curve in zip(np.atleast_1d(axes), v.curves, strict=True):
        metric = curve.metric
        ax.plot(curve.ks, curve.means, marker="o", color="#4c72b0", label="plain top-k")
        ax.axvline(v.chosen_max_k, color="#c44e52", linestyle="--", linewidth=1)
        ax.plot(
            [v.chosen_max_k],
            [curve.chosen],
            marker="*",
            markersize=15,
            color="#c44e52",
            linestyle="none",
            label=f"guarded ({v.retrieval_choice})",
        )
        if metric == "utility":
            ax.axhline(
                v.oracle_utility, color="#55a868", linestyle=":", label="per-query optimal k"
            )
        ax.set_xlabel("k (passages given to the LLM)")
        ax.set_ylabel(f"mean {metric}")
        ax.set_title(f"{metric} vs k")
        ax.set_xticks(curve.ks)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"run {v.run_name}: calibration queries ({rows.size})", fontsize=10)
    return _png(fig)


def _plot_heatmap(mpl: Any, v: ResultView) -> bytes | None:
    h, objective, constraints = v.heatmap, v.header.objective, v.header.constraints
    if h is None:
        return None
    fig = mpl(figsize=(9.5, 4.6))
    ax = fig.subplots()
    cmap = "viridis_r" if lower_is_better(objective) else "viridis"
    im = ax.imshow(h.objective, aspect="auto", origin="lower", cmap=cmap)
    from matplotlib.patches import Rectangle

    for a, b in zip(*np.nonzero(h.fails), strict=True):
        ax.add_patch(
            Rectangle(
                (b - 0.5, a - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#f2f2f2", linewidth=0
            )
        )
    fig.colorbar(im, ax=ax, label=f"mean {objective}")
    ax.set_xticks(range(len(h.thresholds)))
    ax.set_xticklabels([f"{t:.2f}" for t in h.thresholds], rotation=60, fontsize=7)
    ax.set_yticks(range(len(h.max_k)))
    ax.set_yticklabels([str(k) for k in h.max_k], fontsize=8)
    ax.set_xlabel("relative_threshold")
    ax.set_ylabel("max_k")
    title = f"mean {objective} on calibration queries"
    if constraints:
        title += " (hatched: fails " + " and ".join(str(x) for x in constraints) + ")"
    if h.chosen is not None:
        a, b = h.chosen
        ax.add_patch(
            Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, edgecolor="#e8000b", linewidth=2.5)
        )
        title += f"; chosen: {v.retrieval_choice}"
    else:
        title += f"; chosen: {v.retrieval_choice} (a cut rule, not on this grid)"
    ax.set_title(title, fontsize=9)
    return _png(fig)


def _plot_optimal_k(mpl: Any, v: ResultView) -> bytes:
    counts = v.optimal.counts
    fig = mpl(figsize=(6.4, 3.4))
    ax = fig.subplots()
    ks = np.arange(counts.size)
    ax.bar(ks, counts, color="#4c72b0")
    mean_kept = v.passages_kept
    ax.axvline(
        mean_kept,
        color="#c44e52",
        linestyle="--",
        label=f"guarded: {mean_kept:.2f} kept on average",
    )
    ax.set_xticks(ks)
    ax.set_xlabel("optimal k (where cumulative utility peaks; 0: every passage harms)")
    ax.set_ylabel("queries")
    n = len(v.header.qids)
    ax.set_title(f"per-query optimal k, run {v.run_name} (all {n} queries)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _plot_baseline_vs_guarded(mpl: Any, v: ResultView) -> bytes | None:
    c = v.retrieval_check.comparison
    unit = [m for m in c.metrics if m in ("udcg", "recall", "precision", "ndcg", "distractor_rate")]
    if not unit or c.n_queries == 0:
        return None
    fig = mpl(figsize=(7.5, 3.6))
    ax = fig.subplots()
    x = np.arange(len(unit))
    width = 0.38
    for offset, (label, ivs, color) in enumerate(
        (
            (f"baseline ({v.baseline})", c.baseline, "#8c8c8c"),
            (f"guarded ({v.retrieval_choice})", c.guarded, "#c44e52"),
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


def _plot_reliability(mpl: Any, st: StageView, split: str) -> bytes | None:
    """Predicted probability vs observed frequency of relevance, per bin, before and
    after the probability map (held-out pairs)."""
    curves = (
        ("reranker's own probability", st.reliability[0], "#8c8c8c", "o"),
        (f"calibrated ({st.map_method})", st.reliability[1], "#c44e52", "s"),
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


def draw_figures(v: ResultView) -> list[Figure] | None:
    """The plots of ``v``'s run (see the package docstring), or ``None`` when
    matplotlib (the ``report`` extra) is not installed."""
    mpl = _figure_module()
    if mpl is None:
        return None
    figs: list[Figure] = []

    def add(name: str, caption: str, png: bytes | None) -> None:
        if png is not None:
            figs.append(Figure(name, caption, png))

    add(
        "utility_vs_k.png",
        "Mean utility and UDCG vs k on the calibration queries; the star marks the "
        "guarded setting.",
        _plot_utility_vs_k(mpl, v),
    )
    add(
        "heatmap.png",
        f"Mean {v.header.objective} over max_k x relative_threshold (calibration "
        "queries); the chosen setting is boxed.",
        _plot_heatmap(mpl, v),
    )
    add(
        "optimal_k.png",
        "How many queries have each optimal k (argmax of cumulative utility).",
        _plot_optimal_k(mpl, v),
    )
    add(  # nothing to compare when the choice is the baseline itself
        "baseline_vs_guarded.png",
        f"Baseline vs guarded on the {v.retrieval_check.comparison.split} queries, "
        "with bootstrap intervals.",
        None if v.chosen_is_baseline else _plot_baseline_vs_guarded(mpl, v),
    )
    if v.stage is not None and v.stage_top_k_check is not None:
        split = v.stage_top_k_check.comparison.split
        add(
            "reliability.png",
            f"Reliability of the rerank probabilities before and after the map ({split} pairs).",
            _plot_reliability(mpl, v.stage, split),
        )
    return figs
