"""One fit's resolved settings (``FitPlan``), read alike by the search over a run's retrieval
settings and over its second stage's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragguard.calibration.data.utility import UtilityRules, rules_of
from ragguard.calibration.fit.conflict_sweep import StageSweep
from ragguard.calibration.fit.options import Check, Guarantee, Split
from ragguard.calibration.fit.statistics import Bootstrap
from ragguard.calibration.fit.sweep import Constraint, I
from ragguard.profiles import Profile


@dataclass(frozen=True, kw_only=True, eq=False)
class FitPlan:
    """The settings of one fit, resolved from its option objects and its eval set."""

    profile: Profile
    rules: UtilityRules | None
    objective: str
    constraints: Sequence[Constraint]
    metrics: Sequence[str]
    reported: Sequence[str]
    calibration_rows: I
    heldout_rows: I
    split: Split
    check: Check
    guarantee: Guarantee | None
    stages: StageSweep | None

    @property
    def utility_rules(self) -> UtilityRules:
        """The grade rules in force: the given ones, or the profile's."""
        return rules_of(self.profile, self.rules)

    def bootstrap(self, split: str) -> Bootstrap:
        """How the checks on ``split`` resample (``compare``)."""
        check = self.check
        return Bootstrap(
            split=split, n_bootstrap=check.n_bootstrap, seed=self.split.seed, level=check.level
        )

    @property
    def target(self) -> float | None:
        """The guaranteed recall, or ``None`` without a guarantee."""
        return None if self.guarantee is None else self.guarantee.recall
