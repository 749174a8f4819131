"""Calibration: load evaluation data, turn labels into utilities, measure runs, and
sweep the guard's settings to recommend a config.

::

    from ragguard.calibration import calibrate, evaluate, load_evalset

    evalset = load_evalset("eval.jsonl")                  # or format="trec" / "beir" / "udcg"
    evaluate(evalset, metrics=["ndcg@10", "udcg"])        # {"ndcg@10": 0.71, "udcg": 0.58}
    evaluate(evalset, metrics=["ndcg@10"], per_query=True)  # {"ndcg@10": {"q1": 0.63, ...}}
    evaluate(qrels, run, metrics=["recall@5"])            # plain dicts, as in ranx
    result = calibrate(evalset, constraints=["evidence_coverage>=0.9"])  # the sweep
    result = Calibrator(constraints=["evidence_coverage>=0.9"], split=Split(seed=1)).fit(evalset)
    result.save_config("ragguard.toml")                   # ContextGuard.from_file(...)
    write_report(result, "report/")                       # Markdown + HTML, with plots

Importing ``ragguard`` does not import this package; it loads on first use.

The runtime applies, calibration fits: no module of ``ragguard`` outside ``calibration``
and ``cli`` imports this package (its wings and layers: ``DESIGN.md``, ``lint-imports``).
"""

from ragguard.calibration.annotate import Annotator
from ragguard.calibration.data.evalset import EvalSet, load_evalset
from ragguard.calibration.data.inputs import load_inputs
from ragguard.calibration.data.utility import UtilityRules
from ragguard.calibration.fit.calibrator import Calibrator, calibrate
from ragguard.calibration.fit.options import (
    Answerability,
    Check,
    Domains,
    Guarantee,
    NoiseFloor,
    RerankGrid,
    RerankSearch,
    Search,
    Split,
    Stages,
)
from ragguard.calibration.fit.rerank_scores import RerankScores
from ragguard.calibration.fit.result import CalibrationResult
from ragguard.calibration.fit.sweep import Constraint, SweepGrid
from ragguard.calibration.metrics.evaluate import evaluate
from ragguard.calibration.report import write_report
from ragguard.calibration.train.reranker import train_reranker

__all__ = [
    "Annotator",
    "Answerability",
    "CalibrationResult",
    "Calibrator",
    "Check",
    "Constraint",
    "Domains",
    "EvalSet",
    "Guarantee",
    "NoiseFloor",
    "RerankGrid",
    "RerankScores",
    "RerankSearch",
    "Search",
    "Split",
    "Stages",
    "SweepGrid",
    "UtilityRules",
    "calibrate",
    "evaluate",
    "load_evalset",
    "load_inputs",
    "train_reranker",
    "write_report",
]
