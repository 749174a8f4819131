"""The eval-data model of calibration: labelled queries, runs and passage texts, held as
columns (``columns``), loaded by [`load_evalset`][ragguard.calibration.load_evalset] (``evalset``)
through one reader per format (``formats/``), with the records (``records``), load problems
(``problems``) and texts (``texts``) they carry. The wing also holds what every metric and the sweep
read from the model: utilities from labels (``utility``), the dense (queries x candidates)
arrays (``arrays``, one builder: ``arrays_from_codes``),
and runs from a live retriever (``inputs``).

Adding a format is one module in ``formats/`` defining its ``Format`` (a reader
returning ``ColumnarRead``) and one entry of ``FORMATS``.
"""

from __future__ import annotations

from ragguard.calibration.data.evalset import *  # noqa: F403
from ragguard.calibration.data.evalset import __all__ as __all__
