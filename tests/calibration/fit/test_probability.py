"""Probability maps of the rerank stage: Platt and isotonic fits, Brier / ECE, TOML."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ragguard import ConfigError, GuardConfig
from ragguard.calibration.fit.probability import (
    brier_score,
    expected_calibration_error,
    fit_isotonic,
    fit_platt,
    reliability,
)
from ragguard.probability import ProbabilityMap, rerank_probabilities, to_logit
from ragguard.scores import ScoreKind


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def test_platt_recovers_the_parameters_of_a_logistic_model() -> None:
    """Labels drawn from p = sigmoid(1.5 z - 0.7): the fit lands within 5 standard errors
    (from the Fisher information at the true parameters) of the truth."""
    rng = np.random.default_rng(7)
    n, a, b = 20_000, 1.5, -0.7
    z = rng.normal(0.3, 2.0, n)
    p = _sigmoid(a * z + b)
    y = (rng.random(n) < p).astype(float)
    fitted = fit_platt(z, y, smooth=False)
    design = np.stack([z, np.ones(n)], axis=1)
    info = (design * (p * (1 - p))[:, None]).T @ design
    se = np.sqrt(np.diag(np.linalg.inv(info)))
    assert fitted.a is not None and fitted.b is not None
    assert abs(fitted.a - a) < 5 * se[0]
    assert abs(fitted.b - b) < 5 * se[1]


def test_platt_equals_unpenalised_logistic_regression() -> None:
    sklearn = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(3)
    z = rng.normal(0, 3, 500)
    y = (rng.random(500) < _sigmoid(0.4 * z + 0.2)).astype(float)
    ref = sklearn.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(z[:, None], y)
    fitted = fit_platt(z, y, smooth=False)
    assert fitted.a == pytest.approx(float(ref.coef_[0, 0]), rel=1e-5)
    assert fitted.b == pytest.approx(float(ref.intercept_[0]), rel=1e-5, abs=1e-6)


def test_platt_stays_finite_when_scores_separate_the_labels() -> None:
    z = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    y = np.array([0, 0, 0, 1, 1, 1])
    fitted = fit_platt(z, y)  # Platt's targets: 3 positives -> 0.8, 3 negatives -> 0.2
    probs = fitted.apply_logit(z)
    assert np.all(np.diff(probs) > 0)
    assert 0.0 < probs[0] < 0.2 < 0.8 < probs[-1] < 1.0
    with pytest.raises(ValueError, match="relevant and non-relevant"):
        fit_platt([1.0, 2.0], [1, 1])


def test_isotonic_matches_a_hand_computed_pava() -> None:
    """y = 0 1 0 0 1 1 at z = 1..6: the violators 1, 0, 0 pool into 1/3 over z = 2..4."""
    fitted = fit_isotonic([1, 2, 3, 4, 5, 6], [0, 1, 0, 0, 1, 1])
    assert fitted.x == [1.0, 2.0, 4.0, 5.0, 6.0]
    assert fitted.y == pytest.approx([0.0, 1 / 3, 1 / 3, 1.0, 1.0])
    got = fitted.apply_logit([0.0, 3.0, 4.5, 10.0, math.nan])
    assert got[:4] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert math.isnan(got[4])


def test_isotonic_is_monotone_and_equals_scikit_learn() -> None:
    isotonic = pytest.importorskip("sklearn.isotonic")
    rng = np.random.default_rng(11)
    z = np.round(rng.normal(0, 2, 400), 1)  # rounded: many ties
    y = (rng.random(400) < _sigmoid(z)).astype(float)
    fitted = fit_isotonic(z, y)
    grid = np.linspace(-9, 9, 2001)
    mine = fitted.apply_logit(grid)
    assert np.all(np.diff(mine) >= -1e-15)
    ref = isotonic.IsotonicRegression(out_of_bounds="clip").fit(z, y)
    assert mine == pytest.approx(ref.predict(grid), abs=1e-12)


def test_brier_and_ece_by_hand() -> None:
    p = [0.1, 0.9, 0.8, 0.3]
    y = [0, 1, 0, 1]
    assert brier_score(p, y) == pytest.approx((0.01 + 0.01 + 0.64 + 0.49) / 4)
    # bins [0, .5): mean p .2, freq .5; [.5, 1]: mean p .85, freq .5
    assert expected_calibration_error(p, y, bins=2) == pytest.approx(0.5 * 0.3 + 0.5 * 0.35)
    rel = reliability(p, y, bins=2)
    assert rel.counts.tolist() == [2, 2]
    assert rel.predicted == pytest.approx([0.2, 0.85])
    # a perfectly calibrated bin has no error; p = 1.0 falls into the last bin
    assert expected_calibration_error([1.0, 1.0], [1, 1], bins=4) == 0.0


def test_to_logit_inverts_the_sigmoid() -> None:
    logits = np.array([-6.0, -0.5, 0.0, 2.0, 9.0])
    assert to_logit(_sigmoid(logits), "probability") == pytest.approx(logits, abs=1e-6)
    assert to_logit(logits, ScoreKind.LOGIT) is not None
    with pytest.raises(ValueError):
        to_logit(logits, "similarity")


def test_rerank_probabilities_apply_the_map_and_keep_invalid_scores_invalid() -> None:
    m = ProbabilityMap(method="platt", a=0.5, b=1.0)
    raw = np.array([2.0, math.nan, -2.0])
    norm = rerank_probabilities(raw, "logit", m)
    assert norm.valid.tolist() == [[True, False, True]]
    assert norm.values[0, 0] == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert math.isnan(norm.values[0, 1])
    assert norm.values[0, 2] == pytest.approx(0.5)
    plain = rerank_probabilities(raw, "logit", None)
    assert plain.values[0, 0] == pytest.approx(1 / (1 + math.exp(-2.0)))


@pytest.mark.parametrize(
    "pmap",
    [
        ProbabilityMap(method="platt", a=0.8312345678901234, b=-1.9),
        fit_isotonic([0.5, 1.25, 2.0, 3.0, 4.0], [0, 1, 0, 1, 1]),
    ],
)
def test_probability_map_round_trips_through_toml(tmp_path: Path, pmap: ProbabilityMap) -> None:
    config = GuardConfig(
        score_kind="similarity",
        rerank={"enabled": True, "probability_map": pmap, "min_score": 0.4},
    )
    path = config.save(tmp_path / "guard.toml")
    text = path.read_text()
    assert "[rerank.probability_map]" in text
    back = GuardConfig.from_file(path)
    assert back.rerank.probability_map == pmap
    assert back.model_dump() == config.model_dump()


def test_bad_probability_maps_in_toml_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "guard.toml"
    path.write_text('[rerank.probability_map]\nmethod = "platt"\na = 1.0\nb = 0.0\nc = 2\n')
    with pytest.raises(ConfigError, match=r"unknown key 'rerank.probability_map.c'.*method"):
        GuardConfig.from_file(path)
    path.write_text(
        '[rerank.probability_map]\nmethod = "isotonic"\nx = [1.0, 0.5]\ny = [0.1, 0.2]\n'
    )
    with pytest.raises(ConfigError, match="strictly increasing"):
        GuardConfig.from_file(path)
    path.write_text('[rerank.probability_map]\nmethod = "platt"\na = 1.0\n')
    with pytest.raises(ConfigError, match="a and b"):
        GuardConfig.from_file(path)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ("method = 'platt'\na = -1.0\nb = 0.0", "slope"),  # audit PM-02
        ("method = 'platt'\na = 0.0\nb = 0.5", "slope"),
        ("method = 'platt'\na = nan\nb = 0.0", "a"),
        ("method = 'platt'\na = 1.0\nb = inf", "b"),
        ("method = 'isotonic'\nx = [0.0, 1.0]\ny = [0.8, 0.2]", "non-decreasing"),
        ("method = 'isotonic'\nx = [0.0, nan]\ny = [0.2, 0.8]", "finite"),
        ("method = 'isotonic'\nx = [0.0, 1.0]\ny = [0.2, inf]", "finite"),
    ],
    ids=[
        "platt a<0",
        "platt a=0",
        "platt a nan",
        "platt b inf",
        "isotonic falls",
        "isotonic x nan",
        "isotonic y inf",
    ],
)
def test_maps_that_cannot_be_right_are_refused_in_toml(
    tmp_path: Path, table: str, match: str
) -> None:
    """Issue 21 item 5: a decreasing map keeps the reranker's worst passages; a NaN or
    infinite parameter makes every probability NaN or 0/1. Each is a ConfigError."""
    path = tmp_path / "guard.toml"
    path.write_text(f"[rerank]\nenabled = true\n[rerank.probability_map]\n{table}\n")
    with pytest.raises(ConfigError, match=match) as info:
        GuardConfig.from_file(path)
    assert "probability_map" in str(info.value)


def test_the_platt_fitter_refuses_scores_that_fall_with_relevance() -> None:
    """Relevant passages score lower: maximum likelihood gives a negative slope, a map
    no config may hold; the fitter says so instead of returning it."""
    rng = np.random.default_rng(11)
    z = rng.normal(0, 2, 400)
    y = (rng.random(400) < _sigmoid(-1.2 * z)).astype(float)
    with pytest.raises(ValueError, match=r"do not rise with relevance.*slope"):
        fit_platt(z, y)


def test_the_isotonic_fitter_refuses_a_map_that_cannot_rank() -> None:
    """Every relevant passage below every other: pooling leaves one flat block, a map
    that gives every passage the same probability."""
    z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    y = np.array([1, 1, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="do not rise with relevance"):
        fit_isotonic(z, y)
