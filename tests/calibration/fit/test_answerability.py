"""Answerability: ``min_evidence`` calibrated by Learn-then-Test on the calibration
queries (``calibrate(..., max_false_abstain=X)``), checked on held-out ones, and a
written config with which the runtime guard abstains exactly where calibration said."""

from __future__ import annotations

import json
import math
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard import Candidate, ContextGuard, GuardConfig, RerankWarning, Verdict
from ragguard.calibration import (
    Answerability,
    CalibrationResult,
    Calibrator,
    Check,
    EvalSet,
    Guarantee,
    RerankGrid,
    RerankSearch,
    Search,
    Split,
    Stages,
    SweepGrid,
    calibrate,
    load_evalset,
)
from ragguard.calibration.fit.answerability import (
    MAX_FLOORS,
    candidate_floors,
    fit_floor,
    fit_in_scope,
    floor_above,
    needed_answerable,
)
from ragguard.calibration.fit.statistics import split_queries
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import Reason
from ragguard.profiles import BUILTIN_PROFILES
from tests.calibration.answerability_data import (
    candidates_of,
    random_rows,
    unanswerable_only,
    write_jsonl,
)
from tests.calibration.two_stage_data import BROKEN, Breaking, oracle

# --- helpers ----------------------------------------------------------------------------


def tops_data(
    answerable: list[float], unanswerable: list[float]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Qrels and a run whose queries' best scores are the given ones: an answerable
    query's best candidate is relevant (a second one, 0.05 lower, is not); an
    unanswerable query's two candidates are judged not relevant."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for kind, tops in (("a", answerable), ("u", unanswerable)):
        for i, top in enumerate(tops):
            q = f"{kind}{i:03d}"
            qrels[q] = {f"{q}-top": 1 if kind == "a" else 0, f"{q}-low": 0}
            run[q] = {f"{q}-top": top, f"{q}-low": round(top - 0.05, 6)}
    return qrels, run


# Hand-made (holdout 0): 100 answerable queries, 97 of them best at 0.9 and one each at
# 0.45, 0.55 and 0.75; six unanswerable ones best at 0.3, 0.5, 0.6, 0.7, 0.8 and 0.95.
# Floors tested: 0.3001, 0.5001, 0.6001, 0.7001, 0.8001, 0.9501, losing 0, 1, 2, 2, 3 and
# 100 of the 100 answerable queries. With X = 0.1 at 95% the HB p-values of the first
# five are below 0.05 (0.9^100 = 2.7e-5; e P(Bin(100, 0.1) <= 1, 2, 2, 3) = 8.7e-4,
# 5.3e-3, 5.3e-3, 0.021), the sixth is 1: the floor is 0.8001, catching 5 of the 6 and
# losing 3 of the 100. With X = 0.02 at 80%: 0.98^100 = 0.133 <= 0.2, but one loss gives
# min(exp(-100 h1(0.01, 0.02)), e P(Bin(100, 0.02) <= 1)) = 0.73 > 0.2: the floor is 0.3001.
HAND_ANSWERABLE = [0.9] * 97 + [0.45, 0.55, 0.75]
HAND_UNANSWERABLE = [0.3, 0.5, 0.6, 0.7, 0.8, 0.95]
HAND_FLOORS = [0.3001, 0.5001, 0.6001, 0.7001, 0.8001, 0.9501]


def hb_reference(k: int, n: int, alpha: float) -> float:
    """The Hoeffding-Bentkus p-value of ``k`` losses in ``n``, written out again with
    SciPy's binomial distribution."""
    stats = pytest.importorskip("scipy.stats")
    r = k / n
    a = min(r, alpha)
    h1 = (a * math.log(a / alpha) if a else 0.0) + (1 - a) * math.log((1 - a) / (1 - alpha))
    return min(1.0, math.exp(-n * h1), math.e * float(stats.binom.cdf(k, n, alpha)))


# --- the floors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "floor"),
    [
        (0.61234, 0.6124),
        (0.6, 0.6001),
        (0.59999, 0.6),
        (-0.25, -0.2499),
        (0.0, 0.0001),
        (23.456789, 23.46),
        (12345.6, 12350.0),
        (1e-7, 1.001e-7),
    ],
)
def test_floor_above_is_the_next_four_digit_number(top: float, floor: float) -> None:
    assert floor_above(top) == floor


def test_floor_above_catches_its_score_and_nothing_is_shorter_below() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [rng.uniform(-1, 1, 300), rng.uniform(0, 1e-3, 100), rng.uniform(1, 1e5, 100)]
    )
    for t in values.tolist():
        f = floor_above(t)
        assert f > t  # the policy abstains when top < floor: this floor catches t
        d = Decimal(repr(f))
        assert len(d.normalize().as_tuple().digits) <= 4
        step = Decimal(1).scaleb(d.adjusted() - 3)  # 4 significant digits
        assert float(d - step) <= t or d.adjusted() != Decimal(repr(float(d - step))).adjusted()
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ConfigError, match="finite"):
            floor_above(bad)


def test_candidate_floors_one_per_distinct_score_at_most_max_floors() -> None:
    floors = candidate_floors(np.array([0.5, math.nan, 0.3, 0.3, math.inf]))
    assert floors.tolist() == [0.3001, 0.5001]
    assert candidate_floors(np.array([math.nan])).size == 0
    values = np.arange(1000) / 1000 + 0.0005
    many = candidate_floors(values)
    assert many.size == MAX_FLOORS
    assert many[0] == floor_above(float(values[0])) and many[-1] == floor_above(float(values[-1]))
    assert (np.diff(many) > 0).all()


# --- Learn-then-Test --------------------------------------------------------------------


def test_fit_floor_hand_computed() -> None:
    floors = candidate_floors(np.array(HAND_UNANSWERABLE))
    assert floors.tolist() == HAND_FLOORS
    cert, floor, bound = fit_floor(
        np.array(HAND_ANSWERABLE), floors, max_false_abstain=0.1, confidence=0.95
    )
    assert cert.risks.tolist() == pytest.approx([0.0, 0.01, 0.02, 0.02, 0.03, 1.0])
    assert cert.certified == 5 and floor == 0.8001
    for p, k in zip(cert.p_values[:6].tolist(), (0, 1, 2, 2, 3, 100), strict=True):
        assert p == pytest.approx(hb_reference(k, 100, 0.1), rel=1e-9)
    assert 0.03 < bound <= 0.1
    cert, floor, _ = fit_floor(
        np.array(HAND_ANSWERABLE), floors, max_false_abstain=0.02, confidence=0.8
    )
    assert cert.certified == 1 and floor == 0.3001
    assert cert.p_values[1] == pytest.approx(hb_reference(1, 100, 0.02), rel=1e-9)
    assert cert.p_values[1] > 0.2 and np.isnan(cert.p_values[2:]).all()  # testing stopped


def test_certifying_needs_enough_answerable_queries() -> None:
    """With none lost the p-value is (1 - X)^n: 0.9^28 = 0.052 > 0.05, 0.9^29 = 0.047."""
    assert needed_answerable(0.1, 0.95) == 29
    assert needed_answerable(0.2, 0.8) == 8
    floors = np.array([0.5])
    assert fit_floor(np.full(28, 0.9), floors, max_false_abstain=0.1, confidence=0.95)[1] is None
    assert fit_floor(np.full(29, 0.9), floors, max_false_abstain=0.1, confidence=0.95)[1] == 0.5
    # a query without a valid score abstains under every floor: it is a loss
    tops = np.array([*[0.9] * 29, math.nan])
    assert fit_floor(tops, floors, max_false_abstain=0.1, confidence=0.95)[0].risks[0] == 1 / 30
    # no answerable query: nothing certified
    assert fit_floor(np.empty(0), floors, max_false_abstain=0.1, confidence=0.95)[1] is None


def test_the_guarantee_holds_over_many_draws() -> None:
    """Draw calibration sets from known distributions, calibrate, and compute the true
    share lost at the floor: it exceeds X in at most a share 1 - confidence of draws."""
    rng = np.random.default_rng(11)
    x, confidence, trials = 0.1, 0.9, 300
    violations = certified = 0
    for _ in range(trials):
        answerable = rng.uniform(0.3, 1.0, 80)  # true share lost at f: (f - 0.3) / 0.7
        unanswerable = rng.uniform(0.0, 0.7, 30)
        _, floor, bound = fit_floor(
            answerable, candidate_floors(unanswerable), max_false_abstain=x, confidence=confidence
        )
        if floor is None:
            continue
        certified += 1
        lost = float(np.mean(answerable < floor))
        assert lost <= x and lost <= bound  # the calibration queries themselves
        violations += min(max((floor - 0.3) / 0.7, 0.0), 1.0) > x
    assert certified > trials // 2
    assert violations / trials <= (1 - confidence) + 3 * math.sqrt(0.09 / trials)


# --- through calibrate ------------------------------------------------------------------


def hand_result(**kw: Any) -> CalibrationResult:
    qrels, run = tops_data(HAND_ANSWERABLE, HAND_UNANSWERABLE)
    es = EvalSet.from_dicts(qrels, {"r": run})
    options: dict[str, Any] = {"split": Split(holdout=0), "check": Check(n_bootstrap=200)}
    return calibrate(es, **(options | kw))


def test_calibrate_chooses_the_hand_computed_floor() -> None:
    res = hand_result(answerability=Answerability(max_false_abstain=0.1))
    a = res.answerability
    assert a is not None and a.met
    assert a.floor == 0.8001 and a.scale == "normalised retrieval score"
    assert a.calibration_unanswerable == 6 and a.calibration_answerable == 100
    assert a.calibration_caught == pytest.approx(5 / 6)
    assert a.calibration_lost == pytest.approx(0.03)
    assert a.split == "all queries (in-sample)"
    assert a.caught.mean == pytest.approx(5 / 6) and a.lost.mean == pytest.approx(0.03)
    assert a.caught.low <= a.caught.mean <= a.caught.high
    assert res.config().min_evidence == 0.8001
    prov = res.config().provenance
    assert prov["answerability"]["min_evidence"] == 0.8001
    assert prov["answerability"]["calibration"]["lost"] == pytest.approx(0.03)
    assert prov["queries"]["unanswerable"] == 6
    assert res.unmet() == []
    assert "0.8001" in a.statement() and "at most 0.1 of answerable" in a.statement()
    low = hand_result(
        answerability=Answerability(max_false_abstain=0.02, confidence=0.8)
    ).answerability
    assert low is not None and low.floor == 0.3001
    assert low.calibration_caught == pytest.approx(1 / 6) and low.calibration_lost == 0


def test_without_the_option_nothing_changes() -> None:
    """``min_evidence`` stays off unless asked for: no setting of the sweeps sets it."""
    res = hand_result()
    assert res.answerability is None
    cfg = res.config()
    assert cfg.min_evidence is None and "answerability" not in cfg.provenance
    assert all(p.min_evidence is None for p in SweepGrid().points())
    assert all(
        p.min_evidence is None for p in RerankGrid().points((1, 5), 1, BUILTIN_PROFILES["support"])
    )
    with_floor = hand_result(answerability=Answerability(max_false_abstain=0.1))
    # the floor is added to the setting, and the score reference sees its abstentions
    # (no score at the cut, nothing kept); everything else is the same
    a, b = res.config().model_dump(), with_floor.config().model_dump()
    for d in (a, b):
        d.pop("provenance")
    assert b.pop("min_evidence") == 0.8001 and a.pop("min_evidence") is None
    ref_a, ref_b = a.pop("reference"), b.pop("reference")
    assert ref_a["top"] == ref_b["top"] and ref_b["cut"]["n"] < ref_a["cut"]["n"]
    assert a == b


def test_no_certified_floor_is_not_met_and_writes_no_floor(tmp_path: Path) -> None:
    qrels, run = tops_data([0.9] * 28, [0.3, 0.5])
    es = EvalSet.from_dicts(qrels, {"r": run})
    res = calibrate(
        es,
        split=Split(holdout=0),
        check=Check(n_bootstrap=50),
        answerability=Answerability(max_false_abstain=0.1),
    )
    a = res.answerability
    assert a is not None and not a.met and a.floor is None
    (line,) = res.unmet()
    assert line.startswith("no min_evidence floor keeps the share of answerable queries")
    assert "at least 29 answerable calibration queries are needed" in line
    with pytest.raises(ConfigError, match="no min_evidence floor"):
        res.save_config(tmp_path / "a.toml")
    cfg = GuardConfig.from_file(res.save_config(tmp_path / "a.toml", allow_unmet=True))
    assert cfg.min_evidence is None
    assert cfg.provenance["answerability"]["met"] is False
    assert "at least 29" in cfg.provenance["answerability"]["shortfall"]
    assert not a.abstained.any()


@pytest.mark.parametrize("seed", [0, 1])
def test_shares_and_guarantee_by_an_independent_count(tmp_path: Path, seed: int) -> None:
    records = random_rows(seed)
    es = load_evalset(write_jsonl(tmp_path / "e.jsonl", records))
    res = calibrate(
        es,
        split=Split(seed=seed),
        check=Check(n_bootstrap=200),
        answerability=Answerability(max_false_abstain=0.1),
    )
    a = res.answerability
    assert a is not None and a.met and a.floor is not None
    best = {r["query_id"]: max(c["score"] for c in r["candidates"]) for r in records}
    unanswerable = {r["query_id"] for r in records if not r["relevant"]}
    qids = res.header.qids

    def split(rows: Any) -> tuple[list[bool], list[bool]]:
        ids = [qids[i] for i in rows.tolist()]
        return (
            [best[q] < a.floor for q in ids if q in unanswerable],
            [best[q] < a.floor for q in ids if q not in unanswerable],
        )

    caught, lost = split(res.header.heldout_rows)
    assert (a.heldout_unanswerable, a.heldout_answerable) == (len(caught), len(lost))
    assert a.caught.mean == pytest.approx(np.mean(caught))
    assert a.lost.mean == pytest.approx(np.mean(lost))
    for iv in (a.caught, a.lost):
        assert 0 <= iv.low <= iv.mean <= iv.high <= 1
    # the guarantee on the calibration queries: at most X lost, and the chosen floor is
    # the last of the leading floors whose HB p-value rejects "share lost > X"
    cal_caught, cal_lost = split(res.header.calibration_rows)
    assert a.calibration_lost == pytest.approx(np.mean(cal_lost)) and np.mean(cal_lost) <= 0.1
    assert a.calibration_caught == pytest.approx(np.mean(cal_caught))
    cal_ans = [
        best[qids[i]] for i in res.header.calibration_rows.tolist() if qids[i] not in unanswerable
    ]
    cal_un = [
        best[qids[i]] for i in res.header.calibration_rows.tolist() if qids[i] in unanswerable
    ]
    floors = sorted({floor_above(t) for t in cal_un})
    assert a.floors.tolist() == floors
    p = [hb_reference(sum(t < f for t in cal_ans), len(cal_ans), 0.1) for f in floors]
    chosen = floors.index(a.floor)
    assert all(v <= 0.05 for v in p[: chosen + 1])
    assert chosen == len(floors) - 1 or p[chosen + 1] > 0.05


BUDGET = {
    "stages": Stages(max_tokens=6, token_counter="chars:4"),
    "search": Search(grid=SweepGrid(max_k=(3,), thresholds=(0.0,), cut_rules=())),
}


@pytest.mark.parametrize("stages", [{}, BUDGET], ids=["cut", "token budget"])
def test_the_guard_with_the_written_config_abstains_where_calibration_said(
    tmp_path: Path, stages: dict[str, Any]
) -> None:
    """Every query through the guard the written config builds (with a token budget
    after the cut, too, that holds one of these 4-token passages, under a cap above 1):
    it abstains exactly on the rows calibration marked, keeps what the sweep counted,
    and the held-out counts are the reported shares."""
    records = random_rows(2)
    es = load_evalset(write_jsonl(tmp_path / "e.jsonl", records))
    res = calibrate(
        es,
        check=Check(n_bootstrap=100),
        answerability=Answerability(max_false_abstain=0.1),
        **stages,
    )
    if stages:
        w = res.written_setting()
        assert w.params.max_k > 1 and w.search.full.kept[w.index].max() == 1  # the budget binds
    a = res.answerability
    assert a is not None and a.met
    config = GuardConfig.from_file(res.save_config(tmp_path / "guard.toml"))
    assert config.min_evidence == a.floor and config.max_tokens == (
        stages["stages"].max_tokens if stages else None
    )
    guard = ContextGuard(config)
    w = res.written_setting()
    kept = np.where(a.abstained, 0, w.search.full.kept[w.index])
    by_id = {r["query_id"]: r for r in records}
    caught = lost = 0
    for row, qid in enumerate(res.header.qids):
        sel = guard.select(by_id[qid]["query"], candidates_of(by_id[qid]))
        abstained = sel.verdict is Verdict.INSUFFICIENT
        assert abstained == bool(a.abstained[row]), qid
        if abstained:
            assert {d.reason for d in sel.dropped} == {Reason.INSUFFICIENT_EVIDENCE}
        assert len(sel.kept) == kept[row], qid
        if row in set(res.header.heldout_rows.tolist()):
            caught += abstained and bool(a.unanswerable[row])
            lost += abstained and bool(a.answerable[row])
    assert caught == round(a.caught.mean * a.heldout_unanswerable)
    assert lost == round(a.lost.mean * a.heldout_answerable)


# --- in-scope queries only (no unanswerable one) ------------------------------------


def in_scope_result(tops: list[float], x: float = 0.1, **kw: Any) -> Any:
    qrels, run = tops_data(tops, [])
    es = EvalSet.from_dicts(qrels, {"r": run})
    option = Answerability(max_false_abstain=x, **kw)
    return calibrate(es, split=Split(holdout=0), check=Check(n_bootstrap=50), answerability=option)


def test_in_scope_queries_alone_give_the_conformal_floor() -> None:
    """No unanswerable query (a silver set, a query log declared in scope): 100 in-scope
    queries best at 0.01 .. 1.00; the floor is the j-th smallest, j the largest with
    P(Bin(100, 0.1) <= j - 1) <= 0.05 (SciPy: j = 5), so it loses 4 of the 100."""
    stats = pytest.importorskip("scipy.stats")
    j = max(i for i in range(1, 101) if stats.binom.cdf(i - 1, 100, 0.1) <= 0.05)
    assert j == 5
    res = in_scope_result([round(0.01 * i, 2) for i in range(1, 101)])
    a = res.answerability
    assert a is not None and a.met and a.in_scope_only
    assert a.floor == pytest.approx(0.01 * j) and a.calibration_lost == pytest.approx(0.04)
    # the exact upper bound: the p with P(Bin(100, p) <= 4) = 0.05, at most X
    assert stats.binom.cdf(j - 1, 100, a.lost_bound) == pytest.approx(0.05, abs=1e-6)
    assert a.lost_bound <= 0.1
    assert res.config().min_evidence == a.floor
    text = a.statement()
    assert "at most 0.1 of in-scope new queries abstain, with probability >= 95%" in text
    assert "exchangeable" in text and "not on-topic questions the corpus cannot answer" in text
    prov = res.config().provenance["answerability"]
    assert prov["method"].startswith("one-sided conformal")
    assert "in-scope" in prov["assumptions"]
    assert "loses 0.040 of the 100 answerable (in scope)" in a.calibration_line()


def test_the_in_scope_guarantee_holds_over_many_draws() -> None:
    """Uniform best scores: the share of new in-scope queries below the floor (the floor
    itself) exceeds X = 0.1 in at most 5% of 2000 calibration draws of 60 queries."""
    rng = np.random.default_rng(1)
    over = [
        (fit_in_scope(rng.random(60), max_false_abstain=0.1, confidence=0.95)[1] or 0.0) > 0.1
        for _ in range(2000)
    ]
    assert float(np.mean(over)) <= 0.05 + 0.012


def test_too_few_in_scope_queries_say_how_many_are_needed() -> None:
    res = in_scope_result([0.5] * 20)
    a = res.answerability
    assert a is not None and not a.met and res.config().min_evidence is None
    assert needed_answerable(0.1, 0.95) == 29
    assert "at least 29 answerable calibration queries with a score are needed" in a.shortfall()
    assert a.shortfall() in res.unmet()


# --- two stages ---------------------------------------------------------------------------


def two_stage_data(
    n: int = 80, low: frozenset[str] = frozenset()
) -> tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]]:
    """Retrieval scores cannot tell answers from look-alikes; the reranker (``oracle``)
    can. Every fourth query is unanswerable: only look-alikes, judged not relevant. The
    queries whose text is in ``low`` have retrieval scores below 0.1."""
    rng = np.random.default_rng(7)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    texts: dict[str, str] = {}
    queries: dict[str, str] = {}
    for q in range(n):
        qid = f"q{q:02d}"
        queries[qid] = f"question {q}"
        n_rel = 0 if q % 4 == 0 else int(rng.integers(1, 3))
        cands: dict[str, float] = {}
        for c in range(6):
            doc = f"{qid}-d{c}"
            texts[doc] = f"passage {doc} " + ("with the answer" if c < n_rel else "look alike")
            cands[doc] = round(float(rng.uniform(0.5, 0.9)), 3)
            if queries[qid] in low:
                cands[doc] /= 10
        qrels[qid] = {f"{qid}-d{c}": 1 if c < n_rel else 0 for c in range(3)}
        run[qid] = dict(sorted(cands.items(), key=lambda kv: -kv[1]))
    return EvalSet.from_dicts(qrels, {"dense": run}, queries=queries), texts, run


@pytest.mark.parametrize("failing", [False, True], ids=["reranked", "failed calls"])
def test_two_stage_floor_is_on_the_rerank_probability_and_the_guard_agrees(
    tmp_path: Path, failing: bool
) -> None:
    """With ``failing`` the calls of three answerable queries fail (a NaN) and their
    retrieval scores lie below 0.1: the guard then cuts on retrieval scores (fail_open)
    without reading the floor, which is on the rerank probability scale, and
    calibration counts them kept."""
    es, texts, run = two_stage_data(low=frozenset(BROKEN) if failing else frozenset())
    reranker = Breaking("nan") if failing else oracle
    res = calibrate(
        es,
        search=Search(max_k=4),
        check=Check(n_bootstrap=50),
        rerank=RerankSearch(
            reranker=reranker, grid=RerankGrid(top_n=(3, 6)), cache_dir=tmp_path / "cache"
        ),
        answerability=Answerability(max_false_abstain=0.2, confidence=0.8),
        passages=texts,
    )
    a = res.answerability
    w = res.written_setting()
    assert a is not None and w.two_stage is not None
    assert a.scale == "rerank probability" and a.met
    config = GuardConfig.from_file(res.save_config(tmp_path / "guard.toml"))
    assert config.rerank.enabled and config.min_evidence == a.floor
    two = w.two_stage
    broken = {q for q in es.qids if es.queries[q].text in BROKEN} if failing else set()
    assert two.stage is not None and two.top_n is not None
    assert set(two.stage.failed.get(two.top_n, ())) == broken
    guard = ContextGuard(config, reranker=reranker)
    kept = np.where(a.abstained, 0, w.search.full.kept[w.index])
    for row, qid in enumerate(res.header.qids):
        cands = [Candidate(d, texts[d], s) for d, s in run[qid].items()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RerankWarning)  # the failed calls, failed open
            sel = guard.select(es.queries[qid].text or "", cands)
        assert (sel.verdict is Verdict.INSUFFICIENT) == bool(a.abstained[row]), qid
        assert len(sel.kept) == kept[row], qid
    rows = [i for i, q in enumerate(res.header.qids) if es.queries[q].text in BROKEN]
    assert len(rows) == 3 and a.answerable[rows].all()
    assert np.isinf(a.top[rows]).all() == failing  # a failed call never abstains
    assert not a.abstained[rows].any()
    # the reranker tells answers apart: most unanswerable queries are caught, few lost
    assert a.calibration_caught >= 0.5 and a.calibration_lost <= 0.2


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0, 1, 1.5, -0.1, math.nan, math.inf, True, "0.1"])
def test_a_share_outside_zero_one_is_refused(x: Any) -> None:
    with pytest.raises(ConfigError, match=r"max_false_abstain\) must be a share in \(0, 1\)"):
        hand_result(answerability=Answerability(max_false_abstain=x))


def test_what_cannot_be_calibrated_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="cannot be combined with --guarantee"):
        hand_result(
            answerability=Answerability(max_false_abstain=0.1), guarantee=Guarantee(recall=0.9)
        )
    # the only unanswerable query drawn into the held-out part
    qrels, run = tops_data([0.9] * 40, [0.3])
    es = EvalSet.from_dicts(qrels, {"r": run})
    row = es.qids.index("u000")
    seed = next(s for s in range(100) if row in split_queries(len(es.qids), 0.3, s)[1])
    with pytest.raises(EvalSetError, match="all 1 unanswerable queries were drawn into the held"):
        calibrate(es, split=Split(seed=seed), answerability=Answerability(max_false_abstain=0.1))
    # no query with a relevant passage: nothing answerable bounds the share lost (CB-77)
    none_qrels, none_run = tops_data([], [0.3] * 40)
    es = EvalSet.from_dicts(none_qrels, {"r": none_run})
    with pytest.raises(EvalSetError, match="none of the 40 labelled queries has a relevant"):
        calibrate(es, answerability=Answerability(max_false_abstain=0.1))
    # a run without scores: min_evidence has nothing to read
    unscored = {q: {d: math.nan for d in c} for q, c in run.items()}
    es = EvalSet.from_dicts(qrels, {"r": unscored})
    with pytest.raises(ConfigError, match="it has no scores"):
        calibrate(
            es,
            split=Split(holdout=0),
            check=Check(n_bootstrap=20),
            answerability=Answerability(max_false_abstain=0.1),
        )


def test_a_set_with_no_answerable_query_is_refused_before_any_sweep(tmp_path: Path) -> None:
    """The 101 unanswerable ramdocs queries alone (issue 41, CB-77): the fit used to
    succeed and write a config without a floor; it refuses in one line, as it does for a
    set without unanswerable queries, and a query with no label at all changes nothing."""
    path = unanswerable_only(tmp_path / "all.jsonl")
    es = load_evalset(path)
    assert len(es.qids) == len(es.unanswerable) == 101
    calibrator = Calibrator(answerability=Answerability(max_false_abstain=0.1))
    with pytest.raises(EvalSetError) as caught:
        calibrator.fit(es)
    message = str(caught.value)
    assert "none of the 101 labelled queries has a relevant passage" in message
    assert "\n" not in message
    unjudged = {"query_id": "x", "query": "?", "relevant": [],
                "candidates": [{"id": "x-d0", "score": 0.5, "text": "t"}]}  # fmt: skip
    path.write_text(path.read_text() + json.dumps(unjudged) + "\n")
    es = load_evalset(path)
    assert len(es.qids) == 102 and len(es.unanswerable) == 101
    with pytest.raises(EvalSetError, match="none of the 102 labelled queries has a relevant"):
        calibrator.fit(es)
