"""The UDCG family against the authors' sample outputs and hand-computed cases."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard.calibration import evaluate, load_evalset
from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.data.utility import UtilityRules
from ragguard.calibration.metrics import (
    UDCGTheta,
    context_utility,
    fit_udcg_theta,
    udcg,
    udcg_dcg,
    udcg_ndcg,
    udcg_theta,
)

TOL = 1e-12
MODEL = "meta-llama/Llama-3.2-3B-Instruct"


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def with_utilities(contexts: list[list[float]]) -> EvalArrays:
    """Arrays whose queries hold the given utilities in this order (no scores)."""
    qids = [f"q{i}" for i in range(len(contexts))]
    cands = [{f"d{j}": math.nan for j in range(len(u))} for u in contexts]
    utils = [{f"d{j}": x for j, x in enumerate(u)} for u in contexts]
    return build_arrays(qids, cands, [{} for _ in qids], score_kind=None, utilities=utils)


# --- the authors' files ----------------------------------------------------------------


def test_udcg_reproduces_the_authors_outputs_with_their_gamma(
    udcg_dir: Path, udcg_expected: list[dict[str, Any]]
) -> None:
    evalset = load_evalset(udcg_dir / "dataset_with_scores.json")
    ours = evaluate(evalset, metrics="udcg(gamma=0.333)", per_query=True)["udcg(gamma=0.333)"]
    expected = {ex["example_id"]: ex["udcg"][MODEL] for ex in udcg_expected}
    assert len(expected) == 3
    assert set(ours) == set(expected)
    for qid, value in expected.items():
        assert abs(ours[qid] - value) <= TOL, qid


def test_the_file_with_outputs_loads_too_and_gives_the_same(
    udcg_dir: Path, udcg_expected: list[dict[str, Any]]
) -> None:
    evalset = load_evalset(udcg_dir / "dataset_with_udcg.json", model=MODEL)
    ours = evaluate(evalset, metrics="udcg(gamma=0.333)", per_query=True)["udcg(gamma=0.333)"]
    for ex in udcg_expected:
        assert abs(ours[ex["example_id"]] - ex["udcg"][MODEL]) <= TOL


def test_default_gamma_is_one_third_not_the_authors_0_333(
    udcg_dir: Path, udcg_expected: list[dict[str, Any]]
) -> None:
    assert inspect.signature(udcg).parameters["gamma"].default == 1 / 3
    evalset = load_evalset(udcg_dir / "dataset_with_scores.json")
    ours = evaluate(evalset, metrics="udcg", per_query=True)["udcg"]
    for ex in udcg_expected:
        passages = ex["passages"]
        n = len(passages)
        rel = sum(1 - p["models_info"][MODEL]["no_res_prob"] for p in passages if p["is_relevant"])
        irr = sum(
            1 - p["models_info"][MODEL]["no_res_prob"] for p in passages if not p["is_relevant"]
        )
        assert ours[ex["example_id"]] == pytest.approx(sigmoid((rel - irr / 3) / n), abs=TOL)
        assert abs(ours[ex["example_id"]] - ex["udcg"][MODEL]) > 1e-6  # 1/3 != 0.333


def test_sample_dataset_without_model_info_uses_label_rules(udcg_dir: Path) -> None:
    evalset = load_evalset(udcg_dir / "sample_dataset.json")
    arrays = evalset.arrays()
    # no scores: run order; relevant +1, non-relevant in the top 3 ranks -0.5 (support)
    assert arrays.utility[0, :5].tolist() == [1.0, 1.0, -0.5, 0.0, 0.0]
    data = json.loads((udcg_dir / "sample_dataset.json").read_text())
    assert arrays.qids == tuple(ex["example_id"] for ex in data)


# --- Eq. 4 by hand ----------------------------------------------------------------------


def test_udcg_by_hand_and_edge_cases() -> None:
    arrays = with_utilities([[1.0, -0.6, 0.5, -0.3], [], [-1.0]])
    got = udcg(arrays)
    assert got[0] == pytest.approx(sigmoid((1.5 + (-0.9) / 3) / 4), abs=TOL)
    assert got[1] == 0.0  # empty context: 0.0, as the authors' code returns
    assert got[2] == pytest.approx(sigmoid(-1 / 3), abs=TOL)
    # @k reads the first k passages and divides by the passages actually there
    assert udcg(arrays, 2)[0] == pytest.approx(sigmoid((1.0 - 0.2) / 2), abs=TOL)
    assert udcg(arrays, 10)[2] == pytest.approx(sigmoid(-1 / 3), abs=TOL)
    assert udcg(arrays, gamma=0.0)[0] == pytest.approx(sigmoid(1.5 / 4), abs=TOL)
    with pytest.raises(ValueError, match="gamma"):
        udcg(arrays, gamma=1.5)


def test_context_utility_is_the_plain_sum() -> None:
    arrays = with_utilities([[1.0, -0.6, 0.5, -0.3], [], [-1.0]])
    assert context_utility(arrays).tolist() == pytest.approx([0.6, 0.0, -1.0], abs=TOL)
    assert context_utility(arrays, 2).tolist() == pytest.approx([0.4, 0.0, -1.0], abs=TOL)
    cut = np.array([3, 0, 0])
    assert context_utility(arrays, cut=cut).tolist() == pytest.approx([0.9, 0.0, 0.0], abs=TOL)
    assert evaluate(arrays, metrics="utility@3") == {"utility@3": pytest.approx((0.9 - 1.0) / 3)}


# --- the practitioner write-up's worked example -----------------------------------------

# relevant, partial, distractor, relevant, irrelevant
SCORES = {"d1": 0.95, "d2": 0.9, "d3": 0.8, "d4": 0.75, "d5": 0.1}
GRADES = {"d1": 2, "d2": 1, "d4": 2, "d5": 0}
RULES = UtilityRules(relevant_grade=2, partial_grade=1)


def post_rounding(utilities: list[float]) -> float:
    """The write-up's arithmetic: log2(i + 1) rounded to two decimals, as it prints."""
    logs = [1.0, 1.58, 2.0, 2.32, 2.58]
    return sum(u / d for u, d in zip(utilities, logs, strict=True))


def test_worked_example_1_497_and_1_747() -> None:
    # support profile: d3 is not relevant and ranked 3rd (top-3 window) -> -0.5;
    # d5 scores 0.1 < 0.7 x 0.95 and ranks 5th -> 0.0
    support = build_arrays(["q"], [SCORES], [GRADES], profile="support", rules=RULES)
    assert support.utility[0].tolist() == [1.0, 0.5, -0.5, 1.0, 0.0]
    with_distractor = float(udcg_dcg(support, 5)[0])
    exact = 1.0 + 0.5 / math.log2(3) - 0.5 / 2.0 + 1.0 / math.log2(5)
    assert with_distractor == pytest.approx(exact, abs=TOL)
    assert round(post_rounding([1.0, 0.5, -0.5, 1.0, 0.0]), 3) == 1.497
    assert abs(with_distractor - 1.497) < 2e-3  # the post rounds each log to 2 decimals

    # creative profile: only rank 1 or >= 0.9 x top count, so d3 is neutral
    creative = support.with_profile("creative")
    assert creative.utility[0].tolist() == [1.0, 0.5, 0.0, 1.0, 0.0]
    without = float(udcg_dcg(creative, 5)[0])
    assert without == pytest.approx(1.0 + 0.5 / math.log2(3) + 1.0 / math.log2(5), abs=TOL)
    assert round(post_rounding([1.0, 0.5, 0.0, 1.0, 0.0]), 3) == 1.747
    assert abs(without - 1.747) < 2e-3
    assert without - with_distractor == pytest.approx(0.25, abs=TOL)  # the distractor's cost


def test_normalised_udcg_dcg_by_hand() -> None:
    # retrieved: relevant, known distractor, partial; one relevant document unretrieved
    arrays = build_arrays(
        ["q"],
        [{"a": 3.0, "x": 2.0, "p": 1.0}],
        [{"a": 2, "p": 1, "missed": 2}],
        distractors=[{"x"}],
        profile="medical",
        rules=RULES,
    )
    assert arrays.utility[0].tolist() == [1.0, -1.0, 0.5]
    dcg = 1.0 - 1.0 / math.log2(3) + 0.5 / 2.0
    ideal = 1.0 + 1.0 / math.log2(3) + 0.5 / 2.0  # relevant, relevant (missed), partial
    assert udcg_dcg(arrays)[0] == pytest.approx(dcg, abs=TOL)
    assert udcg_ndcg(arrays)[0] == pytest.approx(dcg / ideal, abs=TOL)
    assert udcg_ndcg(arrays, 1)[0] == pytest.approx(1.0, abs=TOL)
    # nothing with positive utility labelled: ideal 0 -> 0, like nDCG
    none = with_utilities([[-0.5, 0.0]])
    assert udcg_ndcg(none)[0] == 0.0
    assert udcg_dcg(none)[0] == pytest.approx(-0.5, abs=TOL)


def test_stated_relevant_documents_raise_the_ideal() -> None:
    base = build_arrays(["q"], [{"a": 1.0}], [{"a": 1}])
    stated = build_arrays(["q"], [{"a": 1.0}], [{"a": 1}], n_relevant=[3])
    assert udcg_ndcg(base)[0] == pytest.approx(1.0)
    assert udcg_ndcg(stated)[0] == pytest.approx(1.0 / (1.0 + 1 / math.log2(3) + 0.5), abs=TOL)


# --- UDCG_theta (Eq. 3) -----------------------------------------------------------------


def test_udcg_theta_with_uniform_weights_is_udcg() -> None:
    rng = np.random.default_rng(3)
    contexts = [rng.uniform(-1, 1, 4).round(3).tolist() for _ in range(20)]
    arrays = with_utilities(contexts)
    gamma = 1 / 3
    weights = UDCGTheta(alpha=(0.25,) * 4, beta=(gamma / 4,) * 4)
    np.testing.assert_allclose(udcg_theta(arrays, weights), udcg(arrays, 4), atol=TOL, rtol=0)
    # shorter contexts: missing positions contribute 0
    short = with_utilities([[0.5], []])
    assert udcg_theta(short, weights).tolist() == pytest.approx([sigmoid(0.125), 0.5])


def test_fit_udcg_theta_recovers_weights_from_soft_labels() -> None:
    rng = np.random.default_rng(7)
    k = 3
    contexts = [rng.uniform(-1, 1, k).tolist() for _ in range(400)]
    arrays = with_utilities(contexts)
    true = UDCGTheta(alpha=(2.0, 0.5, 1.0), beta=(3.0, 1.0, 0.5))
    p_correct = udcg_theta(arrays, true)  # expected correctness of each context
    fitted = fit_udcg_theta(arrays, p_correct, k, l2=1e-9)
    np.testing.assert_allclose(fitted.alpha, true.alpha, atol=1e-4)
    np.testing.assert_allclose(fitted.beta, true.beta, atol=1e-4)
    by_id = dict(zip(arrays.qids, p_correct.tolist(), strict=True))
    again = fit_udcg_theta(arrays, by_id, k, l2=1e-9)
    np.testing.assert_allclose(again.alpha, fitted.alpha, atol=1e-9)


def test_fit_udcg_theta_on_binary_correctness_learns_the_right_signs() -> None:
    rng = np.random.default_rng(11)
    contexts = [rng.uniform(-1, 1, 2).tolist() for _ in range(3000)]
    arrays = with_utilities(contexts)
    true = UDCGTheta(alpha=(2.0, 2.0), beta=(2.0, 2.0))
    correct = rng.random(arrays.n_queries) < udcg_theta(arrays, true)
    fitted = fit_udcg_theta(arrays, correct.astype(float), 2)
    assert all(1.2 < a < 2.8 for a in (*fitted.alpha, *fitted.beta))


def test_fit_udcg_theta_rejects_bad_input() -> None:
    arrays = with_utilities([[1.0], [-1.0]])
    with pytest.raises(ValueError, match="no correctness label"):
        fit_udcg_theta(arrays, {"q0": 1.0}, 1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_udcg_theta(arrays, [2.0, 0.0], 1)
    with pytest.raises(ValueError, match="2 queries"):
        fit_udcg_theta(arrays, [1.0], 1)
    with pytest.raises(ValueError, match="l2"):
        fit_udcg_theta(arrays, [1.0, 0.0], 1, l2=0.0)
    with pytest.raises(ValueError, match="same non-zero length"):
        UDCGTheta(alpha=(1.0,), beta=())
