"""The eval-data model of calibration: labelled queries, runs and passage texts, held as
columns, and the readers of each format.

==========================  ================================================================
module                      what it holds
==========================  ================================================================
``evalset``                 :class:`EvalSet` and :func:`load_evalset`: the loaded set, its
                            arrays, format detection, reconciling runs with labels
``records``                 :class:`Query`, :class:`Labels`, :class:`Run` (one query's view)
                            and the grade scale
``columns``                 the one storage: labels and candidates as Arrow / numpy columns
                            (:class:`~ragguard.calibration.data.columns.ColumnarLabels`,
                            :class:`~ragguard.calibration.data.columns.ColumnarCandidates`),
                            the way into :class:`~ragguard.calibration.data.arrays.EvalArrays`,
                            the data fingerprint
``problems``                problems counted while loading (:class:`ProblemKind`,
                            :class:`LoadReport`)
``texts``                   passage texts per (query, passage) and per passage
``formats/``                one module per format: ``trec`` (qrels and runs), ``beir``,
                            ``jsonl``, ``udcg``, ``tables`` (pandas, polars, pyarrow, ranx),
                            over ``delimited`` (whitespace / tab separated lines) and
                            ``common`` (line layouts, JSON values, JSON run files)
==========================  ================================================================

Adding a format is one module in ``formats/`` (returning
:class:`~ragguard.calibration.data.columns.ColumnarRead`) and one branch of
:func:`load_evalset`.
"""

from __future__ import annotations

from ragguard.calibration.data.evalset import *  # noqa: F403
from ragguard.calibration.data.evalset import __all__ as __all__
