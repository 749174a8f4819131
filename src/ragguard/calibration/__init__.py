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

This package exports what a user calls: loading
([`load_evalset`][ragguard.calibration.load_evalset],
[`load_inputs`][ragguard.calibration.load_inputs]), [`evaluate`][ragguard.calibration.evaluate],
calibrating ([`Calibrator`][ragguard.calibration.Calibrator] with its option objects, or
[`calibrate`][ragguard.calibration.calibrate] with the same fields as keywords), the result,
[`write_report`][ragguard.calibration.write_report],
[`train_reranker`][ragguard.calibration.train_reranker] and
[`Annotator`][ragguard.calibration.Annotator] (whose keyword face is
``ragguard.calibration.annotate.annotate``: the function keeps its wing's name, so it is not
exported here, where it would hide the ``annotate`` package). Everything else stays importable from
its module: ``data`` (the eval-data model, arrays, utilities), ``metrics`` (the registry and each
metric), ``fit`` (the sweep, statistics, guarantees, probability maps), ``report``, ``train`` and
``annotate``.

The rule: the runtime applies, calibration fits. The runtime guard (every module of
``ragguard`` outside ``calibration`` and ``cli``) never imports this package; this
package reads the runtime's policy, configs and scores to fit them. Its wings and layers
are drawn in ``DESIGN.md``; the ``[tool.importlinter]`` contracts of ``pyproject.toml``
hold them (``lint-imports``).
"""

from ragguard.calibration.annotate import Annotator
from ragguard.calibration.data.evalset import EvalSet, load_evalset
from ragguard.calibration.data.inputs import load_inputs
from ragguard.calibration.data.utility import UtilityRules
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
    "EvalSet",
    "Guarantee",
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
