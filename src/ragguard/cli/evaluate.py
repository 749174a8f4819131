"""``ragguard evaluate`` and ``ragguard compare``: metric tables for runs, traditional
next to distraction-aware."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ragguard.cli._common import Verbose, app, friendly_errors, option, out
from ragguard.cli._data import (
    EvalSetArg,
    ProfileOpt,
    ProfilesOpt,
    RunOpt,
    ScoreKindOpt,
    compact_table,
    load_evalset_for_cli,
    profile_for_cli,
)

if TYPE_CHECKING:
    from ragguard.calibration import EvalSet

TRADITIONAL = ("ndcg", "mrr", "recall", "precision", "map", "hit_rate")
DISTRACTION_AWARE = ("udcg", "udcg_ndcg", "utility", "distractor_rate", "distractor_harm")
#: the metrics on graded labels (RA-nWG and its family), distraction-aware too
GRADED = ("ra_nwg", "proc", "pct_proc", "n_recall_4plus", "n_recall_5", "precision_4plus")
AWARE_NAMES = frozenset({*DISTRACTION_AWARE, "udcg_dcg", "harm", *GRADED})

HEADERS = {
    "mrr": "MRR",
    "recall": "recall",
    "ndcg": "nDCG",
    "distractor_rate": "distractor rate",
    "distractor_harm": "harm",
    "udcg": "UDCG",
}

MetricsOpt = option(
    list[str] | None,
    "Metric strings, comma-separated or repeated (e.g. ndcg@10,udcg@5). Default: "
    f"{', '.join(TRADITIONAL)} and {', '.join(DISTRACTION_AWARE)}, at --k.",
    "--metrics",
    "-m",
    metavar="METRICS",
)
KOpt = option(int, "Cutoff of the default metrics.", "--k", "-k", min=1, metavar="INT")
JsonOpt = option(bool, "Print JSON instead of a table.", "--json")


def split_metrics(values: list[str] | None) -> list[str]:
    """Metric strings from repeated, comma-separated options (commas inside parentheses
    belong to the metric: ``ra_nwg(alpha=0, cap3=0.5)@5``)."""
    found: list[str] = []
    for value in values or ():
        depth, start = 0, 0
        for i, ch in enumerate(value):
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0:
                found.append(value[start:i])
                start = i + 1
        found.append(value[start:])
    return [m.strip() for m in found if m.strip()]


def _json_safe(table: Mapping[str, Mapping[str, float | str]]) -> dict[str, dict[str, object]]:
    """Per run, its values with NaN (a metric undefined on every query) as null: JSON
    has no NaN."""
    return {
        run: {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for run, row in table.items()
    }


def _load(
    evalset: Path, run: list[Path] | None, score_kind: ScoreKindOpt
) -> tuple[EvalSet, list[str]]:
    from ragguard.errors import EvalSetError

    es = load_evalset_for_cli(evalset, run, score_kind=score_kind)
    if not es.runs:
        raise EvalSetError(
            "no runs to evaluate: pass run files with --run (or use a folder with runs/)",
            path=str(evalset),
        )
    return es, list(es.runs)


@app.command()
def evaluate(
    evalset: EvalSetArg,
    run: RunOpt = None,
    metrics: MetricsOpt = None,
    k: KOpt = 10,
    profile: ProfileOpt = "support",
    profiles: ProfilesOpt = None,
    score_kind: ScoreKindOpt = None,
    as_json: JsonOpt = False,
    verbose: Verbose = False,
) -> None:
    """A metrics table for each run.

    Traditional ranking metrics next to distraction-aware ones (UDCG, utility, distractor
    rate and harm)."""
    with friendly_errors(verbose):
        from ragguard.calibration import evaluate as compute_means
        from ragguard.calibration._format import format_number
        from ragguard.calibration.metrics import parse_metric
        from ragguard.calibration.report.console import query_count

        names = split_metrics(metrics) or [f"{m}@{k}" for m in (*TRADITIONAL, *DISTRACTION_AWARE)]
        parsed = [parse_metric(m) for m in names]
        es, runs = _load(evalset, run, score_kind)
        prof = profile_for_cli(profile, profiles)
        values = {r: compute_means(es, r, metrics=names, profile=prof) for r in runs}
        if as_json:
            out.print_json(json.dumps(_json_safe(values)))
            return
        table = compact_table(f"{evalset}: {query_count(es)}, profile {profile}")
        table.add_column("kind")
        table.add_column("metric")
        for r in runs:
            table.add_column(r, justify="right")
        groups = (
            ("traditional", [p for p in parsed if p.spec.name not in AWARE_NAMES]),
            ("distraction-aware", [p for p in parsed if p.spec.name in AWARE_NAMES]),
        )
        for label, group in groups:
            for i, p in enumerate(group):
                table.add_row(
                    label if i == 0 else "",
                    p.text,
                    *(format_number(values[r][p.text]) for r in runs),
                )
            if group and label == "traditional" and groups[1][1]:
                table.add_section()
        out.print(table)


@app.command()
def compare(
    evalset: EvalSetArg,
    run: RunOpt = None,
    k: KOpt = 5,
    profile: ProfileOpt = "support",
    profiles: ProfilesOpt = None,
    score_kind: ScoreKindOpt = None,
    as_json: JsonOpt = False,
    verbose: Verbose = False,
) -> None:
    """Runs (retrieval profiles) side by side at top-k.

    MRR, recall, nDCG, distractor rate, harm, UDCG and safety band: a high-recall
    profile can be the most dangerous one."""
    with friendly_errors(verbose):
        from ragguard.calibration import evaluate as compute_means
        from ragguard.calibration._format import format_number
        from ragguard.calibration.metrics import safety_band
        from ragguard.calibration.report.console import query_count

        cols = [f"{m}@{k}" for m in HEADERS]  # mrr, recall, ndcg, distractor rate, harm, udcg
        es, runs = _load(evalset, run, score_kind)
        prof = profile_for_cli(profile, profiles)
        rows: dict[str, dict[str, float | str]] = {}
        for r in runs:
            means: dict[str, float | str] = dict(compute_means(es, r, metrics=cols, profile=prof))
            means["safety_band"] = safety_band(float(means[f"distractor_rate@{k}"])).value
            rows[r] = means
        if as_json:
            out.print_json(json.dumps(_json_safe(rows)))
            return
        table = compact_table(
            f"{evalset}: {query_count(es)}, each run's top {k}, profile {profile}"
        )
        table.add_column("run", no_wrap=True)
        for c in cols:
            table.add_column(HEADERS[c.partition("@")[0]], justify="right")
        table.add_column("safety band")
        style = {"SAFE": "green", "RISKY": "yellow", "DANGEROUS": "red"}
        for r, means in rows.items():
            band = str(means["safety_band"])
            table.add_row(
                r, *(format_number(float(means[c])) for c in cols), f"[{style[band]}]{band}[/]"
            )
        out.print(table)
        if len(rows) > 1:
            rate = f"distractor_rate@{k}"
            by_recall = max(rows, key=lambda r: float(rows[r][f"recall@{k}"]))
            safest = min(rows, key=lambda r: float(rows[r][rate]))
            best_udcg = max(rows, key=lambda r: float(rows[r][f"udcg@{k}"]))
            out.print(
                f"highest recall@{k}: {by_recall} (distractor rate "
                f"{format_number(float(rows[by_recall][rate]))}, "
                f"{rows[by_recall]['safety_band']}); "
                f"fewest distractors: {safest}; best UDCG: {best_udcg}",
                highlight=False,
            )
            if by_recall != safest:
                out.print(
                    f"The highest-recall profile ({by_recall}) is not the safest: more of what "
                    "it retrieves argues for a wrong answer.",
                    highlight=False,
                )
