"""The eval-data model of calibration (DESIGN.md, the data wing): eval sets loaded by
[`load_evalset`][ragguard.calibration.load_evalset] through ``FORMATS``, and the arrays
every metric and the sweep read."""

from __future__ import annotations

from ragguard.calibration.data.evalset import FORMATS, EvalSet, detect_format, load_evalset
from ragguard.calibration.data.formats.beir import LABEL_FILES
from ragguard.calibration.data.formats.common import Format
from ragguard.calibration.data.problems import LoadReport, Problem, ProblemKind
from ragguard.calibration.data.records import Labels, Query, Run

__all__ = [
    "FORMATS",
    "LABEL_FILES",
    "EvalSet",
    "Format",
    "Labels",
    "LoadReport",
    "Problem",
    "ProblemKind",
    "Query",
    "Run",
    "detect_format",
    "load_evalset",
]
