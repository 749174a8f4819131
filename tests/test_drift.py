"""The drift watch (``ragguard.drift``, ``GuardConfig(monitor=True)``, ``ContextGuard.drift``):
its distance and threshold against scipy's two-sample Kolmogorov-Smirnov test, and a guard
that stays quiet on the reference's own distribution and alarms once when the scores move."""

from __future__ import annotations

import math
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ragguard import (
    Candidate,
    ConfigError,
    ContextGuard,
    DriftWarning,
    GuardConfig,
    ScoreReference,
)
from ragguard.drift import ALPHA, STEP, DriftMonitor, Quantiles, critical_distance, read_log

FACTORS = (1.0, 0.9, 0.85, 0.6, 0.5)  # with relative_threshold=0.8: three kept, cut at 0.85


def candidates(top: float) -> list[Candidate]:
    return [Candidate(f"p{i}", score=top * f) for i, f in enumerate(FACTORS)]


def reference(rng: np.random.Generator, n: int = 400) -> ScoreReference:
    """The reference of calls whose top score is uniform on [0.5, 0.9], by hand: the cut
    keeps the first three (0.85 x top), so cut = 0.85 x top and kept = 3."""
    top = rng.uniform(0.5, 0.9, n)
    ref = ScoreReference.of(top, 0.85 * top, np.full(n, 3))
    assert ref is not None
    return ref


def guard(ref: ScoreReference | None, **settings: object) -> ContextGuard:
    return ContextGuard(
        GuardConfig(
            score_kind="similarity", max_k=4, relative_threshold=0.8, reference=ref, **settings
        )
    )


# --------------------------------------------------------------------------- the test itself


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.2])
def test_the_distance_never_exceeds_the_exact_two_sample_distance(shift: float) -> None:
    rng = np.random.default_rng(1)
    calibration = rng.normal(0.6, 0.1, 300)
    window = np.sort(rng.normal(0.6 + shift, 0.1, 200))
    q = Quantiles.of(calibration)
    assert q is not None and q.n == 300
    exact = stats.ks_2samp(window, calibration).statistic
    assert q.distance(window) <= exact + 1e-12
    assert q.distance(window) >= exact - 0.05  # within one level of the reference's grid


def test_the_distance_on_counts_with_few_values_is_a_close_lower_bound() -> None:
    rng = np.random.default_rng(2)
    calibration = rng.integers(1, 5, 500).astype(float)
    window = np.sort(rng.integers(2, 6, 120).astype(float))
    q = Quantiles.of(calibration)
    assert q is not None
    exact = stats.ks_2samp(window, calibration).statistic
    assert exact - 0.05 <= q.distance(window) <= exact


@pytest.mark.parametrize(("n", "m", "alpha"), [(50, 51, 1e-3), (200, 400, 1e-4), (500, 3000, 1e-6)])
def test_the_critical_distance_keeps_the_false_alarm_rate(n: int, m: int, alpha: float) -> None:
    d = critical_distance(alpha, n, m)
    p = stats.kstwo.sf(d, round(n * m / (n + m)))  # the exact one-sample law at the same size
    assert p <= alpha * 1.1


def test_reference_of_values_leaves_nan_out_and_needs_a_top_score() -> None:
    ref = ScoreReference.of([0.9, math.nan, 0.7], [0.8, 0.5, math.nan], [2, 9, 0])
    assert ref is not None
    assert ref.top.n == 2 and ref.kept.n == 2 and ref.cut is not None and ref.cut.n == 1
    assert ref.kept.quantiles[0] == 0.0 and ref.kept.quantiles[-1] == 2.0  # the 9 left out
    assert ScoreReference.of([math.nan], [math.nan], [1]) is None


@pytest.mark.parametrize(
    "quantiles", [[0.5] * 20, [math.nan] * 21, list(np.linspace(1, 0, 21)), []]
)
def test_a_malformed_reference_is_one_config_error(quantiles: list[float]) -> None:
    table = {"n": 10, "quantiles": quantiles}
    with pytest.raises(ConfigError, match=r"reference\.top\.quantiles") as e:
        GuardConfig(reference={"top": table, "kept": table})
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- the guard


def test_a_guard_on_the_reference_distribution_stays_quiet() -> None:
    rng = np.random.default_rng(3)
    g = guard(reference(rng), monitor=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DriftWarning)
        for top in rng.uniform(0.5, 0.9, 3000):
            g.select("q", candidates(float(top)))
    report = g.drift()
    assert not report.alarm and report.queries == 3000 and report.checkpoint == 3000 // STEP
    assert report.statistic < report.threshold and report.moved == () and report.at is None
    assert "no alarm after 3000 selections" in str(report)


def test_a_squashed_scorer_alarms_once_within_200_selections() -> None:
    rng = np.random.default_rng(4)
    g = guard(reference(rng), monitor=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for top in rng.uniform(0.5, 0.9, 400):
            g.select("q", candidates(float(top) ** 2))  # a monotone squash of the scores
    drift = [w for w in caught if issubclass(w.category, DriftWarning)]
    assert len(drift) == 1 and drift[0].filename == __file__  # the caller of select()
    report = g.drift()
    assert report.alarm and report.at is not None and report.at <= 200
    assert "top" in report.moved and report.quantity in report.moved
    assert report.statistic > report.threshold and report.queries == 400
    assert str(report) == str(drift[0].message).replace(
        f"; {report.at} selections", "; 400 selections"
    )


def test_fewer_passages_kept_alone_is_caught() -> None:
    rng = np.random.default_rng(5)
    g = guard(reference(rng), monitor=True, max_tokens=10)  # a budget that keeps less
    with pytest.warns(DriftWarning, match="passages kept"):
        for top in rng.uniform(0.5, 0.9, 100):
            g.select("q", [Candidate(c.id, "word " * 30, c.score) for c in candidates(float(top))])
    report = g.drift()
    assert report.alarm and report.moved == ("kept",)


def test_calls_without_a_valid_score_are_skipped_and_counted() -> None:
    rng = np.random.default_rng(6)
    g = guard(reference(rng), monitor=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the guard's own ScoreWarning for all-invalid scores
        for _ in range(60):
            g.select("q", [Candidate("a", score=math.nan), Candidate("b", score=None)])
        g.select("q", [])
        g.select("q", [Candidate("a", score=0.8)], scored=False)
    for top in rng.uniform(0.5, 0.9, 10):
        g.select("q", candidates(float(top)))
    report = g.drift()
    assert report.skipped == 61 and report.queries == 10 and report.checkpoint == 0
    assert "61 without a valid score skipped" in str(report) and "no checkpoint yet" in str(report)


def test_monitor_without_a_reference_is_one_config_error_at_build() -> None:
    with pytest.raises(ConfigError, match=r"monitor=True needs the score reference") as e:
        guard(None, monitor=True)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="the drift watch is off"):
        guard(reference(np.random.default_rng(0))).drift()


def test_monitor_comes_from_the_environment_and_the_reference_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = reference(np.random.default_rng(7))
    path = GuardConfig(score_kind="similarity", reference=ref).save(tmp_path / "ragguard.toml")
    monkeypatch.setenv("RAGGUARD_MONITOR", "1")
    g = ContextGuard.from_file(path)
    assert g.config.reference == ref and g.drift().queries == 0


def test_concurrent_calls_are_each_counted_once() -> None:
    rng = np.random.default_rng(8)
    g = guard(reference(rng), monitor=True)
    tops = rng.uniform(0.5, 0.9, 8 * 250).reshape(8, 250)

    def work(row: np.ndarray) -> None:
        for top in row:
            g.select("q", candidates(float(top)))

    threads = [threading.Thread(target=work, args=(row,)) for row in tops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = g.drift()
    assert report.queries == 2000 and report.checkpoint == 2000 // STEP and not report.alarm


def test_the_false_alarm_rate_is_spent_over_the_checkpoints() -> None:
    """Checkpoint j spends ALPHA / (j (j + 1)): the threshold grows as the guard runs."""
    rng = np.random.default_rng(9)
    m = DriftMonitor(reference(rng))
    seen = []
    for n in (STEP, 10 * STEP):
        for top in rng.uniform(0.5, 0.9, n - m.report().queries):
            m.add(top, 0.85 * top, 3)
        report = m.report()
        assert not report.alarm and report.checkpoint == n // STEP
        seen.append(report.threshold)
    n_kept = m.reference.kept.n
    assert seen[0] == pytest.approx(critical_distance(ALPHA / 2 / 3, STEP, n_kept))
    assert seen[1] == pytest.approx(critical_distance(ALPHA / 110 / 3, 500, n_kept))


def test_read_log_takes_hostile_records_as_problems_and_reads_the_rest() -> None:
    good = '{"ragguard.kept": 2, "ragguard.score.top": 0.5, "ragguard.score.cut": 0.4}'
    text = "\n".join(
        [
            "[" * 100_000,  # nested past the parser's recursion limit
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "ragguard.select", '
            '"attributes": {"not": "a list"}}]}]}]}',
            '{"ragguard.kept": true, "ragguard.score.top": 0.5}',
            good,
        ]
    )
    log = read_log(text)
    assert log.observations == ((0.5, 0.4, 2),) and log.spans == 2
    assert log.problems == (
        "line 1: not JSON (nested too deep); skipped",
        "line 2: a resourceSpans record of unexpected shape; skipped",
        "line 3: a ragguard.select span of no use: ragguard.kept=True is not a number; skipped",
    )
