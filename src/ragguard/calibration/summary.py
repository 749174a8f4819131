"""A calibration result as one JSON document (``ragguard calibrate --json``), for CI
pipelines and experiment trackers.

The document (every NaN written as ``null``)::

    {
      "ragguard_version": "...", "evalset": "...", "profile": "support",
      "objective": "udcg", "constraints": ["recall>=0.8"],
      "queries": {"total": 51, "calibration": 36, "heldout": 15}, "seed": 0,
      "recommended": {
        "run": "bm25", "setting": "max_k=4, t=0.70", "feasible": true,
        "config": {"max_k": 4, "min_k": 1, "relative_threshold": 0.7, ...},
        "metrics": {"udcg": 0.61, ...},                # calibration queries
        "baseline": {"setting": "top-5", "metrics": {...}}
      },
      "heldout_check": {
        "split": "held-out", "queries": 15, "level": 0.95,
        "metrics": {"udcg": {"baseline": 0.55, "guarded": 0.61,
                             "difference": {"mean": 0.06, "low": 0.01, "high": 0.11},
                             "verdict": "better"}, ...}
      },
      "runs": [{"run": "bm25", "setting": "...", "feasible": true, "objective": 0.61}, ...],
      "rerank": null,                                   # or the two-stage choice
      "config_path": "ragguard.toml", "report": null    # or {"html": ..., "markdown": ...}
    }
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ragguard.calibration.sweep import PASSAGES, describe_point

if TYPE_CHECKING:
    from ragguard.calibration.calibrate import CalibrationResult

__all__ = ["result_document"]


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _means(values: dict[str, float]) -> dict[str, float | None]:
    return {k: _num(v) for k, v in values.items()}


def result_document(
    result: CalibrationResult,
    *,
    config_path: str | None = None,
    report: dict[str, str] | None = None,
    evalset: str | None = None,
) -> dict[str, Any]:
    """The JSON-ready document of ``result`` (see the module docstring)."""
    from ragguard import __version__

    r = result.recommended
    config = result.config().model_dump(mode="json", exclude_none=True)
    config.pop("provenance", None)
    c = r.comparison
    check = c.header()
    check["metrics"] = {
        m: {
            "baseline": _num(c.baseline[m].mean),
            "guarded": _num(c.guarded[m].mean),
            "difference": _means(c.difference[m].as_dict()),
            "verdict": c.passages_verdict() if m == PASSAGES else c.verdict(m),
        }
        for m in c.metrics
    }
    two = result.rerank
    return {
        "ragguard_version": __version__,
        "evalset": evalset or result.evalset.source,
        "profile": result.profile.name,
        "objective": result.objective,
        "constraints": [str(x) for x in result.constraints],
        "queries": {
            "total": len(result.qids),
            "calibration": int(result.calibration_rows.size),
            "heldout": int(result.heldout_rows.size),
        },
        "seed": result.seed,
        "recommended": {
            "run": r.name,
            "score_kind": r.score_kind.value if r.score_kind else None,
            # what the config holds: the chosen rule refitted on all queries (its means
            # over all queries); the calibration-only choice is what the held-out check tests
            "setting": describe_point(r.written_params),
            "feasible": r.written_feasible,
            "config": config,
            "metrics": _means(r.full.point_means(r.written)),
            "calibration_choice": {
                "setting": describe_point(r.chosen_params),
                "feasible": r.feasible,
                "metrics": _means(r.sweep.point_means(r.chosen)),
            },
            "fallback": r.fallback,
            "baseline": {
                "setting": describe_point(r.baseline_params),
                "metrics": _means(r.sweep.point_means(r.baseline)),
            },
            "why": result.why(),
        },
        "heldout_check": check,
        "runs": [
            {
                "run": run.name,
                "setting": describe_point(run.written_params),
                "feasible": run.written_feasible,
                "objective": _num(run.full.mean(run.written, result.objective)),
            }
            for run in result.runs
        ],
        "rerank": None if two is None else {"setting": two.describe(), **two.guard_settings()},
        "config_path": config_path,
        "report": report,
    }
