"""Calibration: load evaluation data, turn labels into utilities, measure runs, and
sweep the guard's settings to recommend a config.

::

    from ragguard.calibration import calibrate, evaluate, load_evalset

    evalset = load_evalset("eval.jsonl")                  # or format="trec" / "beir" / "udcg"
    evaluate(evalset, metrics=["ndcg@10", "udcg"])        # {"ndcg@10": 0.71, "udcg": 0.58}
    evaluate(evalset, metrics=["ndcg@10"], per_query=True)  # {"ndcg@10": {"q1": 0.63, ...}}
    evaluate(qrels, run, metrics=["recall@5"])            # plain dicts, as in ranx
    result = calibrate(evalset, objective="udcg", min_recall=0.8)   # the sweep
    result = Calibrator(constraints=["evidence_recall>=0.8"], split=Split(seed=1)).fit(evalset)
    result.save_config("ragguard.toml")                   # ContextGuard.from_file(...)

Importing :mod:`ragguard` does not import this package; it loads on first use.

The rule: the runtime applies, calibration fits. The runtime guard (every module of
:mod:`ragguard` outside ``calibration`` and ``cli``) never imports this package; this
package reads the runtime's policy, configs and scores to fit them. Its wings and
layers are drawn in ``DESIGN.md``; the ``[tool.importlinter]`` contracts of
``pyproject.toml`` hold them (``lint-imports``).
"""

from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.data.evalset import (
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
from ragguard.calibration.data.inputs import load_inputs, retrieve_run
from ragguard.calibration.data.utility import UtilityRules, candidate_utilities
from ragguard.calibration.fit.calibrator import Calibrator, calibrate
from ragguard.calibration.fit.options import (
    Answerability,
    Check,
    Guarantee,
    RerankGrid,
    RerankSearch,
    Search,
    Split,
    Stages,
)
from ragguard.calibration.fit.probability import (
    brier_score,
    expected_calibration_error,
    fit_probability_map,
)
from ragguard.calibration.fit.result import (
    CalibrationResult,
    RunCalibration,
    WrittenSetting,
    data_fingerprint,
)
from ragguard.calibration.fit.statistics import Comparison, Interval, split_queries
from ragguard.calibration.fit.sweep import (
    Constraint,
    OptimalK,
    SweepGrid,
    SweepResult,
    optimal_k,
    sweep,
)
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
from ragguard.calibration.metrics.evaluate import arrays_from_dicts, evaluate

__all__ = [
    "METRICS",
    "Answerability",
    "CalibrationResult",
    "Calibrator",
    "Check",
    "Comparison",
    "Constraint",
    "EvalArrays",
    "EvalSet",
    "Guarantee",
    "Interval",
    "Labels",
    "LoadReport",
    "OptimalK",
    "Problem",
    "ProblemKind",
    "Query",
    "RerankGrid",
    "RerankSearch",
    "Run",
    "RunCalibration",
    "SafetyBand",
    "SafetyBands",
    "Search",
    "Split",
    "Stages",
    "SweepGrid",
    "SweepResult",
    "UDCGTheta",
    "UtilityRules",
    "WrittenSetting",
    "arrays_from_dicts",
    "brier_score",
    "build_arrays",
    "calibrate",
    "candidate_utilities",
    "compute",
    "data_fingerprint",
    "detect_format",
    "evaluate",
    "expected_calibration_error",
    "fit_probability_map",
    "fit_udcg_theta",
    "load_evalset",
    "load_inputs",
    "optimal_k",
    "parse_metric",
    "retrieve_run",
    "safety_band",
    "split_queries",
    "sweep",
    "udcg_theta",
]
