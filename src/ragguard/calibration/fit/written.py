"""What the config holds (``WrittenSetting``): the run's retrieval setting or the second
stage's, why the second stage is written or left off, the constraints it misses, and what
its scores look like (``score_reference``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ragguard.calibration._format import floor_number, format_number
from ragguard.calibration.fit.risk import GuaranteeResult
from ragguard.calibration.fit.search import RunCalibration
from ragguard.calibration.fit.sweep import PASSAGES, Constraint
from ragguard.calibration.metrics import SafetyBand, safety_band
from ragguard.config import GuardConfig
from ragguard.drift import ScoreReference
from ragguard.policy import PolicyParams, cut_ranked


@dataclass(frozen=True)
class Shortfall:
    """A constraint the written setting misses
    ([`CalibrationResult.shortfalls`][ragguard.calibration.CalibrationResult.shortfalls])."""

    constraint: Constraint
    best: PolicyParams
    best_value: float
    written_value: float
    max_k: int
    best_setting: str = ""


def shortfalls(w: WrittenSetting, constraints: Sequence[Constraint]) -> list[Shortfall]:
    """The ``constraints`` the written setting ``w`` misses on all queries, each with the
    best reachable value and the point that reaches it."""
    full, index = w.search.full, w.index
    out: list[Shortfall] = []
    for c in constraints:
        col = full.column(c.metric)
        if c.violation(col[[index]])[0] == 0:
            continue
        signed = np.where(np.isnan(col), -np.inf, col if c.op == ">=" else -col)
        best = int(np.flatnonzero(signed == signed.max())[0])
        out.append(
            Shortfall(
                c,
                full.points[best],
                float(col[best]),
                float(col[index]),
                w.search.cap,
                w.names(best),
            )
        )
    return out


@dataclass(frozen=True, eq=False)
class WrittenSetting:
    """What the config holds, described once (``ResultView.written``)."""

    run: RunCalibration
    two_stage: RunCalibration | None
    stage: str | None = None

    @property
    def search(self) -> RunCalibration:
        """The search whose setting the config holds: the second stage's, or the run's."""
        return self.two_stage if self.two_stage is not None else self.run

    @property
    def guarantee(self) -> GuaranteeResult | None:
        """The recall guarantee of the written setting's search, if it has one."""
        return self.search.guarantee

    @property
    def setting(self) -> str:
        """The setting the config holds, in words (``max_k=2, autocut@1``; with a second
        stage ``rerank top-5, max_k=3, min_score=0.2``)."""
        return self.search.describe(self.search.written)

    @property
    def tested(self) -> str:
        """The setting the held-out check tests, in words: the choice on the calibration
        queries (the written setting is that choice's rule family refitted on all
        queries; with a guarantee the two are the same)."""
        return self.search.describe(self.search.chosen)

    @property
    def index(self) -> int:
        """The written setting's index in ``search.full``."""
        return self.search.written

    def names(self, i: int) -> str:
        """Point ``i`` of ``search.full`` in words."""
        return self.search.describe(i)

    @property
    def feasible(self) -> bool:
        """Whether the written setting meets every constraint on all queries."""
        return self.search.written_feasible

    @property
    def params(self) -> PolicyParams:
        """The written setting (the rerank policy's, with a second stage)."""
        return self.search.full.points[self.index]

    @property
    def met(self) -> bool:
        """Whether it meets every constraint and, when asked for, the guarantee."""
        return self.feasible and (self.guarantee is None or self.guarantee.met)

    @property
    def metrics(self) -> dict[str, float]:
        """Its mean metrics over all queries."""
        return self.search.full.point_means(self.index)

    @property
    def tested_metrics(self) -> dict[str, float]:
        """The tested setting's mean metrics over the calibration queries."""
        s = self.search
        return s.sweep.point_means(s.chosen)

    @property
    def tested_feasible(self) -> bool:
        """Whether the tested setting meets every constraint on the calibration queries."""
        return self.search.feasible

    @property
    def checked_rate(self) -> float:
        """Its own mean distractor rate on the queries ``search.comparison`` checked (NaN
        without queries or a distractor rate); where it is not ``tested``, its refit
        on all queries saw these queries."""
        c = self.search.comparison
        if not c.n_queries or "distractor_rate" not in c.metrics:
            return math.nan
        return self.search.space.means(c.rows).mean(self.index, "distractor_rate")

    def checked_band(self) -> SafetyBand | None:
        """The safety band of ``checked_rate`` (``None`` when it is NaN): what the
        next steps (``ResultView.next_steps``) are suggested on."""
        rate = self.checked_rate
        return None if math.isnan(rate) else safety_band(min(max(rate, 0.0), 1.0))


def written_setting(
    r: RunCalibration,
    two: RunCalibration | None,
    objective: str,
    constraints: Sequence[Constraint],
    n_calibration: int,
) -> WrittenSetting:
    """What the config of run ``r`` holds, with ``two`` the second search (``None`` without one):
    the second stage's setting when it is written (see ``WrittenSetting``), chosen under
    ``objective`` and ``constraints`` on ``n_calibration`` calibration queries."""
    retrieval = WrittenSetting(r, None)
    if two is None or two.name != r.name:
        return retrieval
    written = WrittenSetting(r, two)
    on, why = _stage_decision(retrieval, written, objective, constraints, n_calibration)
    return replace(written if on else retrieval, stage=why)


def _stage_decision(
    one: WrittenSetting,
    two: WrittenSetting,
    objective: str,
    constraints: Sequence[Constraint],
    n_calibration: int,
) -> tuple[bool, str]:
    """Whether the config enables the second stage, and why, in one line that starts with
    ``written:`` or ``left off:``."""
    stage = two.two_stage
    assert stage is not None
    obj = objective
    g1, g2 = one.search.guarantee, two.search.guarantee
    if g1 is not None and g2 is not None:  # the smallest certified context wins
        p1 = one.run.sweep.mean(one.index, PASSAGES)
        p2 = stage.sweep.mean(two.index, PASSAGES)
        if not g2.met:
            return False, (
                f"left off: no two-stage setting is certified for recall>={g2.target:g} "
                f"(the most it can guarantee is {floor_number(g2.best_bound)})"
            )
        if g1.met and p1 < p2:
            return False, (
                f"left off: {two.setting} is certified but keeps {p2:.2f} passages on "
                f"average against {p1:.2f} for retrieval only ({one.setting}), and the "
                "smallest certified context is written"
            )
        return True, (
            f"written: {two.setting} is the smallest certified context, keeping "
            f"{p2:.2f} passages on average on the calibration queries"
            + (
                f" against {p1:.2f} for retrieval only ({one.setting})"
                if g1.met
                else "; retrieval alone certifies none"
            )
        )
    if stage.fallback is not None:
        return False, f"left off: {stage.fallback}"
    missed_two = shortfalls(two, constraints)
    missed_one = shortfalls(one, constraints)
    also_one = {s.constraint for s in missed_one}
    worse = [s.constraint for s in missed_two if s.constraint not in also_one]
    if worse:
        return False, (
            f"left off: {two.setting} misses {' and '.join(map(str, worse))} on all "
            f"queries, which retrieval only ({one.setting}) meets"
        )
    a = stage.against_retrieval
    assert a is not None
    if obj not in a.metrics or not a.n_queries:
        return True, f"written (no queries to compare it with retrieval only on {obj})"
    verdict = a.verdict(obj)
    if verdict == "better":
        return True, (
            f"written: better than retrieval only ({one.tested}) on {obj} {a.where()}, "
            f"difference {a.change(obj)}"
        )
    cal_two = stage.sweep.mean(stage.chosen, obj)
    cal_one = one.run.sweep.mean(one.run.chosen, obj)
    return True, (
        f"written: {verdict} from retrieval only ({one.tested}) on {obj} {a.where()} "
        f"(difference {a.change(obj)}); the stage is left off only when clearly worse, "
        f"and on the {n_calibration} calibration queries it scored "
        f"{format_number(cal_two)} against {format_number(cal_one)}"
    )


def score_reference(w: WrittenSetting, config: GuardConfig) -> ScoreReference | None:
    """What the scores of all queries look like under ``config``, the config of ``w``'s
    written setting (``ragguard.drift``): the runtime policy of ``config`` on the scores
    its cut reads (the second stage's probabilities when it is written); the kept
    counts after the stages after the cut are the sweep's. ``None`` without scores."""
    s = w.search
    arrays = s.kernel.arrays
    if arrays.score_kind is None or not arrays.n_queries:
        return None
    params = config.rerank_policy_params() if config.rerank.enabled else config.policy_params()
    result = cut_ranked(arrays.ranked(), params)
    m = result.n_kept_valid
    last = result.ranked.scores[np.arange(m.size), np.maximum(m - 1, 0)]
    kept = result.n_kept
    if params.uses_stages:  # the context the stages leave; nothing where min_evidence abstains
        kept = np.minimum(kept, s.written_kept)
    return ScoreReference.of(result.top, np.where(m > 0, last, np.nan), kept)
