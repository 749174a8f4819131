"""The eval-data model of calibration (DESIGN.md, the data wing): eval sets loaded by
[`load_evalset`][ragguard.calibration.load_evalset] through ``FORMATS``, and the arrays
every metric and the sweep read."""

from __future__ import annotations

from ragguard.calibration.data.evalset import *  # noqa: F403
from ragguard.calibration.data.evalset import __all__ as __all__
