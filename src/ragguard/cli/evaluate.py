"""``ragguard evaluate`` and ``ragguard compare``: metric tables for runs, traditional
next to distraction-aware."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ragguard.cli._common import Verbose, app, friendly_errors, out
from ragguard.cli._data import EvalSetArg, ProfileOpt, ProfilesOpt, RunOpt, ScoreKindOpt

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

MetricsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metrics",
        "-m",
        metavar="METRICS",
        help="Metric strings, comma-separated or repeated (e.g. ndcg@10,udcg@5). Default: "
        f"{', '.join(TRADITIONAL)} and {', '.join(DISTRACTION_AWARE)}, at --k.",
    ),
]
KOpt = Annotated[
    int, typer.Option("--k", "-k", min=1, metavar="INT", help="Cutoff of the default metrics.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


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


def _means(
    evalset: Path,
    run: list[Path] | None,
    score_kind: ScoreKindOpt,
    profile: str,
    profiles: Path | None,
    metrics: list[str],
) -> tuple[EvalSet, dict[str, dict[str, float | str]]]:
    """The eval set and, per run, the means of ``metrics``."""
    from ragguard.calibration import evaluate as compute_means
    from ragguard.cli._data import load_evalset_for_cli, profile_for_cli
    from ragguard.errors import EvalSetError

    es = load_evalset_for_cli(evalset, run, score_kind=score_kind)
    if not es.runs:
        raise EvalSetError(
            "no runs to evaluate: pass run files with --run (or use a folder with runs/)",
            path=str(evalset),
        )
    prof = profile_for_cli(profile, profiles)
    return es, {r: dict(compute_means(es, r, metrics=metrics, profile=prof)) for r in es.runs}


def _print_json(table: dict[str, dict[str, float | str]]) -> None:
    """Per run, its values with NaN (a metric undefined on every query) as null."""
    safe = {
        run: {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for run, row in table.items()
    }
    out.print_json(json.dumps(safe))


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
        from ragguard.calibration.metrics import parse_metric
        from ragguard.calibration.report.console import print_metrics, query_count

        names = split_metrics(metrics) or [f"{m}@{k}" for m in (*TRADITIONAL, *DISTRACTION_AWARE)]
        parsed = [parse_metric(m) for m in names]
        es, values = _means(evalset, run, score_kind, profile, profiles, names)
        if as_json:
            _print_json(values)
            return
        aware = [p.text for p in parsed if p.spec.name in AWARE_NAMES]
        traditional = [p.text for p in parsed if p.spec.name not in AWARE_NAMES]
        title = f"{evalset}: {query_count(es)}, profile {profile}"
        print_metrics(
            title, values, (("traditional", traditional), ("distraction-aware", aware)), out
        )


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
        from ragguard.calibration.metrics import safety_band
        from ragguard.calibration.report.console import print_comparison, query_count

        cols = [f"{m}@{k}" for m in HEADERS]  # mrr, recall, ndcg, distractor rate, harm, udcg
        es, rows = _means(evalset, run, score_kind, profile, profiles, cols)
        rate = f"distractor_rate@{k}"
        for means in rows.values():
            means["safety_band"] = safety_band(float(means[rate])).value
        if as_json:
            _print_json(rows)
            return
        title = f"{evalset}: {query_count(es)}, each run's top {k}, profile {profile}"
        print_comparison(title, rows, [(c, HEADERS[c.partition("@")[0]]) for c in cols], k, out)
