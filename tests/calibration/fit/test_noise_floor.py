"""The noise floor: ``min_score`` from each calibration query's scores against random
unrelated passages (``calibrate(..., noise_floor=NoiseFloor(alpha, scorer))``), no labels
read, with the conformal order-statistic bound and the guard dropping noise below it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard
from ragguard.calibration import (
    Check,
    EvalSet,
    NoiseFloor,
    RerankSearch,
    Split,
    calibrate,
)
from ragguard.calibration.fit.noise_floor import order_statistic_floor
from ragguard.calibration.fit.options import needed_samples
from ragguard.errors import ConfigError, CorpusError, InvalidScoreError
from ragguard.policy import Reason

N_QUERIES, N_NOISE = 40, 200


def scorer(query: str, texts: Sequence[str]) -> list[float]:
    """A query ``topicNN`` scores its own passages (``topicNN 0.9``) by their number, a
    noise passage (``noise 0.137``) by its number, and another query's passage 0.05."""
    out = []
    for t in texts:
        head, value = t.split()
        out.append(float(value) if head in (query, "noise") else 0.05)
    return out


def noise_data(
    score: Any = scorer, n_noise: int = N_NOISE, kind: str | None = "similarity"
) -> EvalSet:
    """40 queries, each with three candidates of its own (0.9 relevant, 0.8 and 0.7 not),
    and a corpus of ``n_noise`` noise passages scoring 0, 1/200, ..., for every query."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    passages: dict[str, str] = {f"n{i:03d}": f"noise {i / 200:g}" for i in range(n_noise)}
    queries = {}
    for q in range(N_QUERIES):
        qid, topic = f"q{q:02d}", f"topic{q:02d}"
        queries[qid] = topic
        qrels[qid] = {f"{qid}-a": 1, f"{qid}-b": 0}
        texts = {f"{qid}-{x}": f"{topic} {v}" for x, v in (("a", 0.9), ("b", 0.8), ("c", 0.7))}
        passages |= texts
        run[qid] = dict(zip(texts, score(topic, list(texts.values())), strict=True))
    return EvalSet.from_dicts(
        qrels, {"r": run}, queries=queries, passages=passages, score_kind=kind
    )


def fitted(option: NoiseFloor, es: EvalSet | None = None, **kw: Any) -> Any:
    options: dict[str, Any] = {"split": Split(holdout=0), "check": Check(n_bootstrap=50)}
    return calibrate(noise_data() if es is None else es, noise_floor=option, **(options | kw))


# --- the bound --------------------------------------------------------------------------


def test_the_order_statistic_by_hand() -> None:
    """n = 19 scores 1..19: alpha 0.05 takes the ceil(20 x 0.95) = 19th smallest, alpha 0.1
    the 18th; the floor is the 4-digit number just above it."""
    scores = np.arange(19, 0, -1, dtype=np.float64)
    assert order_statistic_floor(scores, 0.05) == (19.01, 19)
    assert order_statistic_floor(scores, 0.1) == (18.01, 18)
    assert needed_samples(0.05) == 19 and needed_samples(0.1) == 9 and needed_samples(0.01) == 99


def test_the_bound_holds_over_many_draws() -> None:
    """Uniform scores, n = 99, alpha = 0.1: a new score lies above the floor with
    probability (n + 1 - k) / (n + 1) = 0.1 on average over calibration draws, never more
    (the floor sits just above the order statistic)."""
    rng = np.random.default_rng(0)
    over = [
        1.0 - order_statistic_floor(rng.random(99), 0.1)[0]  # P(U > floor) for U uniform
        for _ in range(4000)
    ]
    assert 0.09 <= float(np.mean(over)) <= 0.1 + 0.003


@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.1, math.nan, math.inf, True, "0.1"])
def test_a_share_outside_zero_one_is_refused(alpha: Any) -> None:
    with pytest.raises(ConfigError, match=r"--noise-floor \(alpha\) must be a share in \(0, 1\)"):
        NoiseFloor(alpha=alpha, scorer=scorer)


def test_too_few_samples_says_how_many_are_needed() -> None:
    with pytest.raises(ConfigError, match=r"--noise-floor 0\.01 needs at least 99 unrelated"):
        NoiseFloor(alpha=0.01, scorer=scorer, samples=50)
    with pytest.raises(ConfigError, match=r"needs at least 19 unrelated passages .* got 5"):
        order_statistic_floor(np.arange(5.0), 0.05)
    with pytest.raises(ConfigError, match="must be callable"):
        NoiseFloor(alpha=0.1, scorer="model")  # type: ignore[arg-type]


def test_nan_scores_among_the_samples_are_refused() -> None:
    with pytest.raises(InvalidScoreError, match="1 of the 20 unrelated passages got a NaN"):
        order_statistic_floor(np.r_[np.arange(19.0), math.nan], 0.05)

    def nan_on_noise(query: str, texts: Sequence[str]) -> list[float]:
        return [
            math.nan if t.startswith("noise") else s
            for t, s in zip(texts, scorer(query, texts), strict=True)
        ]

    with pytest.raises(InvalidScoreError, match="NaN or infinite score"):
        fitted(NoiseFloor(alpha=0.1, scorer=nan_on_noise, samples=200), noise_data())


# --- through calibrate ------------------------------------------------------------------


def test_calibrate_writes_the_floor_the_noise_sets() -> None:
    """Per query the pool holds 200 noise passages (levels i / 200) and the 117 other
    queries' passages (0.05); the true share of unrelated passages above the floor is
    within sampling error of alpha, the config holds it with its provenance, and the
    labelled relevant passages (0.9) all pass it."""
    res = fitted(NoiseFloor(alpha=0.1, scorer=scorer, samples=2000))
    nf = res.noise_floor
    assert nf is not None and nf.samples == 2000 and nf.pool == 320 and nf.source == "corpus"
    levels = np.r_[np.arange(200) / 200, np.full(117, 0.05)]
    admitted = float((levels >= nf.floor).mean())
    assert 0.1 - 0.03 <= admitted <= 0.1 + 0.02
    assert nf.k == math.ceil(2001 * 0.9) and nf.bound <= 0.1
    assert nf.relevant == N_QUERIES and nf.relevant_dropped == 0.0
    config = res.config()
    assert config.min_score == nf.floor
    prov = config.provenance["noise_floor"]
    assert prov["alpha"] == 0.1 and prov["samples"] == 2000 and prov["floor"] == nf.floor
    assert "exchangeable" in prov["assumptions"]
    text = nf.statement()
    assert f"min_score {nf.floor:g}" in text and "drops 0.000 of the 40 labelled relevant" in text
    assert res.view().noise_floor is nf
    # the guard drops the noise below the floor, with its reason
    guard = ContextGuard(config.model_copy(update={"relative_threshold": 0.0}))
    sel = guard.select(
        "topic00",
        [Candidate(id="a", text="x", score=0.9), Candidate(id="n", text="y", score=0.5)],
    )
    assert [c.id for c in sel.kept] == ["a"]
    assert [d.reason for d in sel.dropped] == [Reason.BELOW_MIN_SCORE]
    # no option: no floor, the same config as before
    assert (
        calibrate(noise_data(), split=Split(holdout=0), check=Check(n_bootstrap=50))
        .config()
        .min_score
        is None
    )


def test_without_a_corpus_the_other_queries_candidates_are_drawn() -> None:
    res = fitted(NoiseFloor(alpha=0.1, scorer=scorer, samples=500), noise_data(n_noise=0))
    nf = res.noise_floor
    assert nf is not None and nf.pool == 120
    assert nf.floor == 0.05001  # every unrelated passage is another query's: 0.05


def test_what_cannot_be_calibrated_is_one_clear_error() -> None:
    def doubled(query: str, texts: Sequence[str]) -> list[float]:
        return [2 * s for s in scorer(query, texts)]

    option = NoiseFloor(alpha=0.1, scorer=doubled, samples=200)
    with pytest.raises(ConfigError, match="scorer does not give run 'r''s scores") as caught:
        fitted(option)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="its score kind is unknown; pass --score-kind"):
        fitted(NoiseFloor(alpha=0.1, scorer=scorer), noise_data(kind=None))
    tiny = EvalSet.from_dicts({"q": {"d": 1}}, {"r": {"q": {"d": 0.9}}}, passages={"d": "x 1"})
    with pytest.raises(CorpusError, match="needs passages to draw at random, got 1"):
        fitted(NoiseFloor(alpha=0.1, scorer=scorer), tiny)
    with pytest.raises(ConfigError, match="cannot be combined with a second stage"):
        fitted(
            NoiseFloor(alpha=0.1, scorer=scorer),
            rerank=RerankSearch(reranker=lambda q, t: [0.5] * len(t)),
        )
