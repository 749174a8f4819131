"""Fitting the guard: the sweep over the runtime's own stages, cross-validated
choice, statistics, guarantees, fitted maps and floors, and the orchestration
([`Calibrator`][ragguard.calibration.Calibrator])."""
