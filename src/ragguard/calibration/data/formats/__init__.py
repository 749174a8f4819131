"""One reader per eval-set format (see :mod:`ragguard.calibration.data`)."""
