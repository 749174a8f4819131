"""Calibration: load evaluation data, turn labels into utilities, measure runs.

::

    from ragguard.calibration import load_evalset, evaluate

    evalset = load_evalset("eval.jsonl")                  # or format="trec" / "beir" / "udcg"
    evaluate(evalset, metrics=["ndcg@10", "udcg"])        # {"ndcg@10": 0.71, "udcg": 0.58}
    evaluate(evalset, metrics=["ndcg@10"], per_query=True)  # {"ndcg@10": {"q1": 0.63, ...}}
    evaluate(qrels, run, metrics=["recall@5"])            # plain dicts, as in ranx

Importing :mod:`ragguard` does not import this package; it loads on first use.
"""

from ragguard.calibration.arrays import EvalArrays, build_arrays
from ragguard.calibration.evalset import (
    EvalSet,
    Labels,
    LoadReport,
    Problem,
    ProblemKind,
    Query,
    Run,
    detect_format,
    load_evalset,
)
from ragguard.calibration.evaluate import arrays_from_dicts, evaluate
from ragguard.calibration.metrics import (
    METRICS,
    SafetyBand,
    SafetyBands,
    UDCGTheta,
    compute,
    fit_udcg_theta,
    parse_metric,
    safety_band,
    udcg_theta,
)
from ragguard.calibration.utility import UtilityRules, candidate_utilities

__all__ = [
    "METRICS",
    "EvalArrays",
    "EvalSet",
    "Labels",
    "LoadReport",
    "Problem",
    "ProblemKind",
    "Query",
    "Run",
    "SafetyBand",
    "SafetyBands",
    "UDCGTheta",
    "UtilityRules",
    "arrays_from_dicts",
    "build_arrays",
    "candidate_utilities",
    "compute",
    "detect_format",
    "evaluate",
    "fit_udcg_theta",
    "load_evalset",
    "parse_metric",
    "safety_band",
    "udcg_theta",
]
