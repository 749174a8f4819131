"""Evaluation sets: moved to :mod:`ragguard.calibration.data.evalset`; this module keeps
the old import path (``from ragguard.calibration.evalset import EvalSet``) working."""

from __future__ import annotations

from ragguard.calibration.data.evalset import (
    FORMATS,
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

__all__ = [
    "FORMATS",
    "EvalSet",
    "Labels",
    "LoadReport",
    "Problem",
    "ProblemKind",
    "Query",
    "Run",
    "detect_format",
    "load_evalset",
]
