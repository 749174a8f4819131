"""One reader per eval-set format (see ``ragguard.calibration.data``)."""
