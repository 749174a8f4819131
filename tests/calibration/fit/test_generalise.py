"""Calibration that generalises (issue 13): evidence recall, unmet constraints, refit on
all queries, fallback to top-k, and the Learn-then-Test recall guarantee."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ragguard.calibration import Check, EvalSet, Split, calibrate
from ragguard.calibration.data.arrays import build_arrays
from ragguard.calibration.fit.risk import (
    GuaranteeResult,
    binomial_cdf,
    certify,
    fixed_sequence,
    hb_p_value,
    risk_upper_bound,
)
from ragguard.calibration.fit.select import fold_count, refit, rule_family
from ragguard.calibration.fit.sweep import describe_point, is_plain_top_k
from ragguard.calibration.metrics import compute
from ragguard.cli import app
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError
from ragguard.policy import CutRule, PolicyParams
from tests.calibration.generalise_data import adversarial, synthetic

NOTES = Path(__file__).resolve().parents[3] / "examples" / "notes"


@pytest.fixture(scope="module")
def notes() -> EvalSet:
    from ragguard.calibration import load_inputs

    return load_inputs(NOTES)


# --------------------------------------------------------------------------- risk math


def test_binomial_cdf_matches_hand_computed_values() -> None:
    # P(Bin(4, 0.5) <= 1) = (1 + 4) / 16; P(Bin(3, 0.1) <= 0) = 0.9**3
    assert binomial_cdf(1, 4, 0.5) == pytest.approx(5 / 16, abs=1e-15)
    assert binomial_cdf(0, 3, 0.1) == pytest.approx(0.729, abs=1e-15)
    assert binomial_cdf(2, 3, 0.1) == pytest.approx(1 - 0.001, abs=1e-15)
    assert binomial_cdf(3, 3, 0.1) == 1.0 and binomial_cdf(-1, 3, 0.1) == 0.0


def test_hb_p_value_is_the_smaller_of_hoeffding_and_bentkus() -> None:
    # n = 100, mean loss 0.05, alpha = 0.1
    n, r, a = 100, 0.05, 0.1
    hoeffding = math.exp(-n * (r * math.log(r / a) + (1 - r) * math.log((1 - r) / (1 - a))))
    bentkus = math.e * sum(math.comb(n, i) * a**i * (1 - a) ** (n - i) for i in range(6))
    assert hb_p_value(r, n, a) == pytest.approx(min(hoeffding, bentkus), rel=1e-12)
    assert hb_p_value(0.2, n, a) == 1.0  # the mean loss above alpha: no evidence
    assert hb_p_value(0.0, 1000, 0.1) < 1e-40


def test_fixed_sequence_stops_at_the_first_failure() -> None:
    assert fixed_sequence([0.01, 0.02, 0.2, 0.001], 0.05) == 2
    assert fixed_sequence([0.5, 0.001], 0.05) == 0


def test_certify_and_upper_bound_agree() -> None:
    rng = np.random.default_rng(1)
    # three settings: mean losses ~0.02, ~0.06, ~0.3, contexts shrinking
    losses = np.column_stack([rng.random(400) < p for p in (0.02, 0.06, 0.3)]).astype(float)
    cert = certify(losses, alpha=0.1, delta=0.05)
    assert cert.certified == 2 and cert.last == 1
    for j in range(2):
        ucb = risk_upper_bound(float(cert.risks[j]), 400, 0.05)
        assert ucb <= 0.1 and hb_p_value(float(cert.risks[j]), 400, ucb) <= 0.05 + 1e-9
    with pytest.raises(ConfigError):
        certify(losses * 2, alpha=0.1, delta=0.05)


# --------------------------------------------------------------------------- coverage


def test_guaranteed_recall_holds_on_new_queries_in_the_promised_share() -> None:
    n, depth, target, confidence = 600, 30, 0.9, 0.9
    scores, rel = synthetic(n, depth, 7)
    qids = [f"q{i}" for i in range(n)]
    cands = [{f"d{j}": float(scores[i, j]) for j in range(depth)} for i in range(n)]
    grades = [{f"d{j}": 1 for j in range(depth) if rel[i, j]} for i in range(n)]
    arrays = build_arrays(qids, cands, grades)
    from ragguard.calibration.fit.risk import certify_paths, guarantee_paths
    from ragguard.calibration.fit.sweep import SweepGrid, sweep

    grid = SweepGrid(max_k=tuple(range(1, depth + 1)), cut_rules=())
    result = sweep(arrays, grid, ["evidence_recall"])
    ev = np.stack([compute(arrays, "evidence_recall", cut=k) for k in result.kept])  # (P, Q)
    paths = guarantee_paths(result.points)
    passages = result.kept.astype(float)  # (P, Q)
    rng = np.random.default_rng(0)
    held, smaller, splits = 0, 0, 120
    for _ in range(splits):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2 :]
        point, bound, _, _ = certify_paths(
            paths, ev[:, cal], passages[:, cal].mean(axis=1), target, confidence
        )
        assert point is not None and bound >= target
        held += ev[point, test].mean() >= target
        smaller += passages[point, test].mean() < depth
    # at least the promised share, less 2 binomial standard errors of `splits` draws
    slack = 2 * math.sqrt(confidence * (1 - confidence) / splits)
    assert held / splits >= confidence - slack
    assert smaller == splits  # every certified context is smaller than keep-all


# --------------------------------------------------------------------------- evidence recall


def test_evidence_recall_counts_only_what_was_retrieved() -> None:
    # q1: relevant a (rank 1), c (rank 3) retrieved, z judged relevant but not retrieved
    arrays = build_arrays(
        ["q1", "q2"],
        [{"a": 0.9, "b": 0.8, "c": 0.7}, {"x": 0.5}],
        [{"a": 1, "c": 1, "z": 1}, {"y": 1}],
    )
    assert compute(arrays, "recall@1").tolist() == pytest.approx([1 / 3, 0.0])
    got = compute(arrays, "evidence_recall@1")
    assert got[0] == pytest.approx(0.5) and math.isnan(got[1])  # q2: no evidence, NA
    assert compute(arrays, "evidence_recall")[0] == 1.0  # keep-all reaches 1, recall 2/3


# --------------------------------------------------------------------------- unmet


def deep_evidence(tmp_path: Path, n: int = 30, depth: int = 150) -> Path:
    """A run 150 deep whose single relevant passage sits at rank 120 for 2 of 3
    queries: no cap up to 100 reaches evidence recall 0.8."""
    lines, qrels = [], []
    for i in range(n):
        deep = i % 3 != 0
        rel_rank = 120 if deep else 1
        for r in range(1, depth + 1):
            lines.append(f"q{i} Q0 d{i}_{r} {r} {1.0 - r / 1000:.4f} run")
        qrels.append(f"q{i} 0 d{i}_{rel_rank} 1")
    folder = tmp_path / "deep"
    (folder / "runs").mkdir(parents=True)
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    (folder / "runs" / "bm25.trec").write_text("\n".join(lines) + "\n")
    return folder


def test_an_unreachable_floor_names_the_reachable_recall_and_writes_nothing(
    tmp_path: Path,
) -> None:
    folder = deep_evidence(tmp_path)
    out, rep = tmp_path / "g.toml", tmp_path / "r"
    args = ["calibrate", str(folder), "--out", str(out), "--report", str(rep), "--no-report"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert not out.exists()
    text = " ".join(res.output.split())
    assert "no config written" in text
    assert "best reachable evidence_coverage is 0.333" in text
    assert "caps up to 100" in text  # the grid grew to the stated cap
    res = CliRunner().invoke(app, [*args, "--allow-unmet"])
    assert res.exit_code == 0, res.output
    prov = GuardConfig.from_file(out).provenance
    assert prov["constraints_met"] is False
    assert any("best reachable evidence_coverage is 0.333" in s for s in prov["shortfall"])


# --------------------------------------------------------------------------- refit, fallback


def test_the_written_setting_is_the_family_refitted_on_all_queries(notes: EvalSet) -> None:
    result = calibrate(notes, constraints=["evidence_recall>=0.8"])
    r = result.recommended
    assert r.selection is not None and r.full is not None
    from ragguard.calibration.fit.sweep import sweep

    everything = sweep(r.kernel, r.sweep.points, r.kernel.metrics)  # all rows
    members = r.selection.members[r.selection.chosen]
    expected, _ = refit(everything, members, "udcg", result.header.constraints)
    assert r.written == expected
    assert result.config().policy_params() == r.sweep.points[expected]
    # on these 51 queries the refit differs from the calibration-only choice
    assert r.written_params != r.chosen_params


def test_the_choice_states_its_one_standard_error_bar(notes: EvalSet) -> None:
    """The bar a simpler family must reach: the best family's cross-validated mean less
    its standard error (udcg: higher is better), and every family within it is no simpler
    than the one chosen."""
    s = calibrate(notes).recommended.selection
    assert s is not None and s.folds >= 2
    assert s.bar == pytest.approx(s.cv_mean[s.best] - s.cv_se[s.best])
    within = [j for j, m in enumerate(s.cv_mean) if s.cv_feasible[j] and m >= s.bar - 1e-12]
    assert s.chosen == min(within)


def test_each_sequence_is_tested_at_its_bonferroni_share() -> None:
    g = GuaranteeResult(0.9, 0.95, ("top-k", "threshold"), None, 10, 0.5, 0.5, 0, 0.5, 3)
    assert g.test_level == pytest.approx(0.025)
    assert replace(g, paths=()).test_level == pytest.approx(0.05)


def test_a_choice_worse_than_top_k_on_held_out_is_not_written(tmp_path: Path) -> None:
    es = adversarial(90, 0, 0.3)
    result = calibrate(
        es, objective="utility", constraints=["evidence_recall>=0.0"], split=Split(seed=0)
    )
    r = result.recommended
    assert not is_plain_top_k(r.chosen_params)  # chosen on the calibration queries
    assert r.comparison.verdict("utility") == "worse"
    assert r.fallback is not None and "worse than plain" in r.fallback
    assert is_plain_top_k(r.written_params)  # top-k written instead
    path = result.save_config(tmp_path / "g.toml")
    cfg = GuardConfig.from_file(path)
    assert cfg.policy_params() == r.written_params and "fallback" in cfg.provenance
    stop = calibrate(
        es,
        objective="utility",
        constraints=["evidence_recall>=0.0"],
        split=Split(seed=0),
        check=Check(on_worse="stop"),
    )
    with pytest.raises(ConfigError, match="on_worse='stop'"):
        stop.save_config(tmp_path / "h.toml")
    assert not (tmp_path / "h.toml").exists()


def test_rule_families_and_fold_counts() -> None:
    assert rule_family(PolicyParams(max_k=3)) == (0, "top-k")
    assert rule_family(PolicyParams(max_k=3, relative_threshold=0.5)) == (1, "threshold")
    assert rule_family(PolicyParams(max_k=3, cut=CutRule.GAP)) == (1, "gap")
    assert (fold_count(100), fold_count(7), fold_count(3)) == (5, 3, 0)


def test_a_chosen_baseline_is_not_compared_with_itself(notes: EvalSet) -> None:
    result = calibrate(notes, constraints=["evidence_recall>=0.8"], runs=["bm25"])
    r = result.recommended
    assert r.chosen_is_baseline
    assert "nothing to compare" in result.why()
    assert "baseline itself" not in describe_point(r.chosen_params)
    assert "note" in result.provenance(r)["heldout_check"]


def test_grades_from_the_cli_decide_what_counts_as_evidence(tmp_path: Path) -> None:
    # every query: d1 grade 1 (rank 1), d2 grade 2 (rank 2), d3 unjudged (rank 3);
    # --max-k 1 leaves one setting, top-1, which keeps d1 on every query
    folder = tmp_path / "graded"
    (folder / "runs").mkdir(parents=True)
    qrels = [f"q{i} 0 d{i}_{r} {g}" for i in range(20) for r, g in ((1, 1), (2, 2))]
    run = [f"q{i} Q0 d{i}_{r} {r} {1 - r / 10} x" for i in range(20) for r in (1, 2, 3)]
    (folder / "qrels.txt").write_text("\n".join(qrels) + "\n")
    (folder / "runs" / "r.trec").write_text("\n".join(run) + "\n")
    base = ["calibrate", str(folder), "--no-report", "--min-recall", "0", "--folds", "0"]
    base += ["--max-k", "1"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a.toml")])
    assert res.exit_code == 0, res.output
    graded = [*base, "--out", str(tmp_path / "b.toml"), "--relevant-grade", "2"]
    res = CliRunner().invoke(app, [*graded, "--partial-grade", "1"])
    assert res.exit_code == 0, res.output
    a = GuardConfig.from_file(tmp_path / "a.toml").provenance["metrics"]
    b = GuardConfig.from_file(tmp_path / "b.toml").provenance["metrics"]
    assert a["passages"] == b["passages"] == 1.0
    # grade >= 1 is evidence: d1 is 1 of the 2 relevant candidates; grade >= 2: d1 is
    # not evidence, d2 (the only one) is not kept
    assert (a["evidence_recall"], b["evidence_recall"]) == (0.5, 0.0)
    # utility: d1 counts +1 as relevant, +0.5 as partially relevant
    assert (a["utility"], b["utility"]) == (1.0, 0.5)
