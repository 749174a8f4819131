"""Evaluation sets: moved to :mod:`ragguard.calibration.data.evalset`; this module keeps
the old import path (``from ragguard.calibration.evalset import EvalSet``) working."""

from __future__ import annotations

from ragguard.calibration.data.evalset import *  # noqa: F403
from ragguard.calibration.data.evalset import __all__ as __all__
