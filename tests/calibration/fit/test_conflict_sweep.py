"""The conflict stage in the calibration sweep (issue 23): every conflict setting swept
equals the runtime guard query by query (``drop``, which is not causal, included);
``calibrate`` chooses among them on the objective, writes ``drop`` only where it wins,
and the config it writes keeps what was measured; bad input fails in one line."""

from __future__ import annotations

import importlib
import math
import tomllib
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ragguard import Candidate, ConflictMode, ContextGuard, GuardConfig, ScoreWarning
from ragguard.calibration import (
    Check,
    EvalSet,
    Guarantee,
    RerankSearch,
    Search,
    Split,
    Stages,
    SweepGrid,
    calibrate,
)
from ragguard.calibration.fit.conflict_sweep import (
    StageKernels,
    conflict_detection,
    conflict_settings,
    stage_sweep,
)
from ragguard.calibration.fit.select import rule_family
from ragguard.calibration.fit.sweep import PASSAGES, SweepKernel, describe_point, sweep
from ragguard.calibration.report import build_report
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import (
    DEFAULT_ANSWER_SIMILARITY,
    DEFAULT_CONFLICT_SIMILARITY,
    ConflictDetector,
    CutRule,
    PolicyParams,
)
from tests.calibration.conftest import random_trec_data
from tests.calibration.sweep_reference import brute_force

LOW = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "the", "of"]
FACTS = ["1990", "2001", "3,559", "4,112", "Paris", "Bhatt", "Kapoor", "42"]
sweep_module = importlib.import_module("ragguard.calibration.fit.sweep")
NEAR = (ConflictDetector.NEAR_COPY, DEFAULT_ANSWER_SIMILARITY)  # a near-copy setting's tail
GRID = SweepGrid(max_k=(1, 3, 6), thresholds=(0.0, 0.5), cut_rules=((CutRule.GAP, 0),))


def texts_for(docs: set[str], seed: int) -> dict[str, str]:
    """Random passages of 4..24 words, a fifth of them facts (numbers, names); half of
    them copies of an earlier one with one word changed: a fact (a conflict), a plain
    word (a near-duplicate, no conflict) or an inserted ``not`` (a conflict)."""
    rng = np.random.default_rng(seed)
    out: dict[str, str] = {}
    ordered = sorted(docs)
    for d in ordered:
        if out and rng.random() < 0.5:
            words = out[ordered[int(rng.integers(0, len(out)))]].split()
            i = int(rng.integers(0, len(words)))
            r = rng.random()
            if r < 0.6:
                words[i] = str(rng.choice(FACTS))
            elif r < 0.8:
                words[i] = str(rng.choice(LOW))
            else:
                words.insert(i, "not")
        else:
            n = int(rng.integers(4, 25))
            words = [
                str(rng.choice(FACTS)) if rng.random() < 0.2 else str(rng.choice(LOW))
                for _ in range(n)
            ]
        out[d] = " ".join(words)
    return out


def random_set(seed: int, n_queries: int = 60) -> tuple[EvalSet, dict[str, str]]:
    qrels, run = random_trec_data(seed, n_queries=n_queries, pool=40, max_cands=14)
    docs = {d for cands in run.values() for d in cands}
    distractors = {q: [d for d, g in labels.items() if g <= 0][:2] for q, labels in qrels.items()}
    es = EvalSet.from_dicts(qrels, {"r": run}, distractors=distractors)
    return es, texts_for(docs, seed)


def kernel_for(
    es: EvalSet,
    texts: dict[str, str],
    mode: str,
    similarity: float,
    *,
    max_tokens: int | None = None,
    near: float | None = None,
    width: int = 6,
) -> tuple[SweepKernel, tuple[PolicyParams, ...]]:
    """One conflict setting's kernel (with the other stages when given) and the grid's
    points under it."""
    found = stage_sweep(
        es, max_tokens=max_tokens, near_duplicate_threshold=near, conflicts=[mode],
        conflict_similarities=[similarity], passages=texts,
    )  # fmt: skip
    assert found is not None
    arrays = es.arrays("r")
    points = found.points(GRID.points())
    kernel = found.kernel(arrays, ["udcg", "recall", PASSAGES], width)
    assert isinstance(kernel, StageKernels) and len(kernel.blocks) == 1
    return kernel, points


def guard_kept(guard: ContextGuard, es: EvalSet, texts: dict[str, str], qid: str) -> list[str]:
    cands = [
        Candidate(d, texts.get(d, ""), None if math.isnan(s) else s)
        for d, s in es.runs["r"].candidates.get(qid, {}).items()
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoreWarning)
        return [c.id for c in guard.select(qid, cands).kept]


# --------------------------------------------------------------------------- runtime == sweep


@pytest.mark.parametrize("seed", [3, 5])
@pytest.mark.parametrize("mode", ["flag", "keep_first", "drop"])
@pytest.mark.parametrize("similarity", [0.3, 0.6])
@pytest.mark.parametrize(("max_tokens", "near"), [(None, None), (20, 0.6)])
def test_each_conflict_setting_equals_the_guard_query_by_query(
    seed: int, mode: str, similarity: float, max_tokens: int | None, near: float | None
) -> None:
    es, texts = random_set(seed)
    kernel, points = kernel_for(es, texts, mode, similarity, max_tokens=max_tokens, near=near)
    result = sweep(kernel, points, ["udcg", "recall"])
    values = brute_force(es, "r", points, list(es.qids), texts)
    np.testing.assert_allclose(result.column("udcg"), values[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column("recall"), values[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column(PASSAGES), values[:, 2], rtol=0, atol=1e-12)


@pytest.mark.parametrize("lazy", [False, True])
def test_drop_is_swept_exactly_where_it_is_not_causal(
    lazy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per query and cut: the passages the guard keeps under ``drop`` (the metrics of
    exactly that list), with the tables whole or computed chunk by chunk; and the data
    holds cuts where a longer cut keeps a passage the shorter one dropped or the reverse
    (what a prefix table cannot express)."""
    if lazy:
        monkeypatch.setattr(sweep_module, "TABLE_BUDGET", 0)
    es, texts = random_set(7, n_queries=80)
    kernel, _ = kernel_for(es, texts, "drop", 0.3, width=8)
    assert kernel.lazy is lazy
    arrays = es.arrays("r")
    not_nested = 0
    before: dict[str, set[str]] = {}  # what the cut one shorter kept
    for k in range(1, 9):
        params = PolicyParams(max_k=k, conflicts=ConflictMode.DROP, conflict_similarity=0.3)
        guard = ContextGuard(
            GuardConfig(
                score_kind="similarity",
                max_k=k,
                relative_threshold=0.0,
                conflicts="drop",
                conflict_similarity=0.3,
            )
        )
        assert guard.config.policy_params() == params
        cuts = kernel.cut(params)
        got = kernel.values(cuts, ["udcg", PASSAGES])
        for row, qid in enumerate(arrays.qids):
            kept = guard_kept(guard, es, texts, qid)
            u = dict(zip(arrays.doc_ids(row), arrays.utility[row].tolist(), strict=False))
            us = [u[d] for d in kept]
            pos, neg = sum(max(x, 0.0) for x in us), sum(min(x, 0.0) for x in us)
            udcg = 1.0 / (1.0 + math.exp(-(pos + neg / 3.0) / len(us))) if us else 0.0
            assert got[0, row] == pytest.approx(udcg, abs=1e-12), (qid, k, kept)
            assert got[1, row] == len(kept)
            ids = arrays.doc_ids(row)  # the very passages, in order
            assert [ids[j] for j in kernel.context(row, int(cuts[row]))] == kept
            not_nested += not before.get(qid, set()) <= set(kept)
            before[qid] = set(kept)
    assert not_nested > 0  # drop took back a passage a shorter cut kept


@pytest.mark.parametrize("mode", ["off", "flag", "keep_first", "drop"])
def test_the_kernel_names_the_passages_the_guard_keeps(mode: str) -> None:
    """Under the token budget and near-duplicates too: the kept ids of every query at
    every point (the report's examples print them)."""
    es, texts = random_set(13)
    kernel, points = kernel_for(es, texts, mode, 0.3, max_tokens=20, near=0.6)
    arrays = es.arrays("r")
    for p in points:
        guard = ContextGuard(
            GuardConfig(
                score_kind="similarity", max_k=p.max_k, relative_threshold=p.relative_threshold,
                cut=p.cut, max_tokens=20, near_duplicate_threshold=0.6, conflicts=p.conflicts,
                conflict_similarity=p.conflict_similarity, token_counter="chars:4",
            )
        )  # fmt: skip
        assert guard.config.policy_params() == p
        cuts = kernel.cut(p)
        for row, qid in enumerate(arrays.qids):
            ids = arrays.doc_ids(row)
            got = [ids[j] for j in kernel.context(row, int(cuts[row]))]
            assert got == guard_kept(guard, es, texts, qid), (describe_point(p), qid)


def test_several_conflict_settings_sweep_as_one_kernel() -> None:
    """``calibrate``'s kernel of every conflict setting: each point equals the guard,
    means over any rows (held-out, folds) equal those of its own setting's kernel."""
    es, texts = random_set(11)
    found = stage_sweep(
        es, max_tokens=None, near_duplicate_threshold=None,
        conflicts=["drop", "off", "keep_first", "flag"], conflict_similarities=[0.6, 0.3],
        passages=texts,
    )  # fmt: skip
    assert found is not None
    assert found.settings == conflict_settings(["off", "flag", "keep_first", "drop"], [0.3, 0.6])
    points = found.points(GRID.points())
    assert len(points) == len(GRID.points()) * 7
    kernel = found.kernel(es.arrays("r"), ["udcg", "recall", PASSAGES], 6)
    assert isinstance(kernel, StageKernels)
    rows = np.arange(0, 60, 3)
    groups = [rows, np.setdiff1d(np.arange(60), rows)]
    result = sweep(kernel, points, ["udcg", "recall"], groups=groups)
    values = brute_force(es, "r", points, list(es.qids), texts)
    np.testing.assert_allclose(result.column("udcg"), values[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.column(PASSAGES), values[:, 2], rtol=0, atol=1e-12)
    part = result.restricted(kernel, rows)
    subset = brute_force(es, "r", points, [es.qids[i] for i in rows], texts)
    np.testing.assert_allclose(part.column("udcg"), subset[:, 0], rtol=0, atol=1e-12)
    # a cut of one setting read by another is refused, not misread
    mixed = result.kept[[0, -1]].astype(np.intp)
    mixed[0, 0] = mixed[1, 0]
    with pytest.raises(EvalSetError, match="one conflict setting"):
        kernel.values(mixed)


# --------------------------------------------------------------------------- calibrate


def structured_set(*, drop_wins: bool, n: int = 60) -> tuple[EvalSet, dict[str, str]]:
    """Per query a unique relevant passage ``a`` and a passage ``b``; a near-copy ``c`` of
    ``b`` with one number changed; two unrelated passages.

    With ``drop_wins`` the copy is a known distractor retrieved above both relevant
    passages (``c, a, b, ...``): dropping the pair leaves ``a`` alone, which beats every
    cut (a cut cannot remove the top passage) and ``keep_first`` (which keeps ``c``).
    Without it, ``c`` is a second relevant version of ``b`` (``a, b, c, ...``): the
    pair is evidence, and dropping it loses."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    distractors: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    rng = np.random.default_rng(0)
    for i in range(n):
        q = f"q{i:03d}"
        words = [str(w) for w in rng.choice(LOW, size=14)]
        texts[f"{q}a"] = f"Report {i} on " + " ".join(rng.choice(LOW, size=12))
        texts[f"{q}b"] = f"In {1900 + i} the plant made {3000 + i} cars " + " ".join(words)
        texts[f"{q}c"] = f"In {1900 + i} the plant made {5000 + i} cars " + " ".join(words)
        texts[f"{q}x"] = "Unrelated " + " ".join(rng.choice(LOW, size=10))
        texts[f"{q}y"] = "Other " + " ".join(rng.choice(LOW, size=9))
        if drop_wins:
            run[q] = {f"{q}c": 0.9, f"{q}a": 0.88, f"{q}b": 0.86, f"{q}x": 0.4, f"{q}y": 0.3}
            qrels[q] = {f"{q}a": 1, f"{q}b": 1, f"{q}c": 0}
            distractors[q] = [f"{q}c"]
        else:
            run[q] = {f"{q}a": 0.9, f"{q}b": 0.88, f"{q}c": 0.86, f"{q}x": 0.4, f"{q}y": 0.3}
            qrels[q] = {f"{q}a": 1, f"{q}b": 1, f"{q}c": 1}
    return EvalSet.from_dicts(qrels, {"r": run}, distractors=distractors), texts


def test_drop_is_written_when_it_wins_and_the_config_keeps_what_was_measured(
    tmp_path: Path,
) -> None:
    es, texts = structured_set(drop_wins=True)
    result = calibrate(
        es,
        search=Search(max_k=5),
        split=Split(holdout=0.3, seed=0),
        check=Check(n_bootstrap=300),
        stages=Stages(conflicts=["off", "keep_first", "drop"], conflict_similarities=[0.5, 0.7]),
        passages=texts,
    )
    r = result.recommended
    assert r.baseline_params.conflicts is ConflictMode.OFF  # compared with plain top-k
    assert r.written_params.conflicts is ConflictMode.DROP
    assert r.comparison.verdict("udcg") == "better"
    assert r.selection is not None and r.selection.family.endswith("+conflicts=drop")
    setting = result.written_setting().setting
    assert "conflicts=drop@" in setting
    data = tomllib.loads(result.save_config(tmp_path / "ragguard.toml").read_text())
    assert data["conflicts"] == "drop"
    assert data["conflict_similarity"] == r.written_params.conflict_similarity
    assert data["provenance"]["setting"] == setting
    assert "conflicts=drop@0.5" in data["provenance"]["conflicts_swept"]
    guard = ContextGuard.from_file(tmp_path / "ragguard.toml")
    assert guard.config.policy_params() == r.written_params
    measured = r.kernel.values(r.written_kept, ["udcg", PASSAGES])
    arrays = es.arrays("r")
    for row, qid in enumerate(result.header.qids):
        kept = guard_kept(guard, es, texts, qid)
        assert f"{qid}c" not in kept  # the distractor never reaches the LLM
        assert measured[1, row] == len(kept)
        u = dict(zip(arrays.doc_ids(row), arrays.utility[row].tolist(), strict=False))
        us = [u[d] for d in kept]
        pos, neg = sum(max(x, 0.0) for x in us), sum(min(x, 0.0) for x in us)
        udcg = 1.0 / (1.0 + math.exp(-(pos + neg / 3.0) / len(us)))
        assert measured[0, row] == pytest.approx(udcg, abs=1e-12)


def test_drop_is_not_written_where_it_loses(tmp_path: Path) -> None:
    es, texts = structured_set(drop_wins=False)
    result = calibrate(
        es,
        search=Search(max_k=5),
        split=Split(holdout=0.3, seed=0),
        check=Check(n_bootstrap=300),
        stages=Stages(conflicts=["drop", "off"], conflict_similarities=[0.5]),
        passages=texts,
    )
    r = result.recommended
    assert r.chosen_params.conflicts is ConflictMode.OFF
    assert r.written_params.conflicts is ConflictMode.OFF
    data = tomllib.loads(result.save_config(tmp_path / "ragguard.toml").read_text())
    assert data["conflicts"] == "off"  # (the config's default, as every field is written)
    assert data["provenance"]["conflicts_swept"] == ["conflicts off", "conflicts=drop@0.5"]


def test_without_the_option_nothing_changes() -> None:
    es, _ = structured_set(drop_wins=True)
    plain = calibrate(
        es, search=Search(max_k=5), split=Split(holdout=0.3, seed=0), check=Check(n_bootstrap=200)
    )
    assert all(p.conflicts is ConflictMode.OFF for p in plain.recommended.sweep.points)
    assert not isinstance(plain.recommended.kernel, StageKernels)
    assert "conflicts_swept" not in plain.provenance()


# --------------------------------------------------------------------------- labels, families


def test_settings_are_swept_simplest_first_and_labelled() -> None:
    assert conflict_settings(["drop", "off", "keep_first"], [0.3, 0.7, 0.3]) == (
        (ConflictMode.OFF, DEFAULT_CONFLICT_SIMILARITY, *NEAR),
        (ConflictMode.KEEP_FIRST, 0.7, *NEAR),
        (ConflictMode.KEEP_FIRST, 0.3, *NEAR),
        (ConflictMode.DROP, 0.7, *NEAR),
        (ConflictMode.DROP, 0.3, *NEAR),
    )
    assert conflict_settings(["FLAG"]) == ((ConflictMode.FLAG, DEFAULT_CONFLICT_SIMILARITY, *NEAR),)
    assert conflict_settings([]) == ()
    p = PolicyParams(max_k=4, conflicts=ConflictMode.DROP, conflict_similarity=0.3)
    assert describe_point(p) == "top-4, conflicts=drop@0.3"
    assert describe_point(replace(p, relative_threshold=0.5)) == (
        "max_k=4, t=0.50, conflicts=drop@0.3"
    )
    assert describe_point(PolicyParams(max_k=4)) == "top-4"
    assert rule_family(p) == (1, "top-k+conflicts=drop")
    assert rule_family(replace(p, cut=CutRule.GAP)) == (2, "gap+conflicts=drop")
    assert rule_family(PolicyParams(max_k=4)) == (0, "top-k")


def test_stages_read_any_sequence_of_modes_and_similarities_as_a_list() -> None:
    as_lists = Stages(conflicts=["drop", "flag"], conflict_similarities=[0.5, 0.7])
    as_arrays = Stages(
        conflicts=np.array(["drop", "flag"]), conflict_similarities=np.array([0.5, 0.7])
    )
    assert as_arrays == as_lists
    assert conflict_settings(as_arrays.conflicts, as_arrays.conflict_similarities) == (
        conflict_settings(["drop", "flag"], [0.5, 0.7])
    )


@pytest.mark.parametrize(
    ("conflicts", "similarities", "match"),
    [
        (["prefer"], [], "metadata"),
        (["drop", "newest"], [], "unknown conflicts mode 'newest'"),
        (["drop"], [0.0], r"\(0, 1\]"),
        (["drop"], [1.5], r"\(0, 1\]"),
        (["drop"], [math.nan], r"\(0, 1\]"),
        (["drop"], [True], r"\(0, 1\]"),
        ([], [0.5], "pass the modes too"),
    ],
)
def test_bad_conflict_options_are_one_line_errors(
    conflicts: list[str], similarities: list[float], match: str
) -> None:
    es, texts = structured_set(drop_wins=True, n=6)
    with pytest.raises(ConfigError, match=match) as info:
        calibrate(
            es,
            stages=Stages(conflicts=conflicts, conflict_similarities=similarities),
            passages=texts,
        )
    assert "\n" not in str(info.value)


def test_missing_and_empty_texts_are_named() -> None:
    es, texts = structured_set(drop_wins=True, n=8)
    some = dict(list(texts.items())[:5])
    with pytest.raises(EvalSetError, match="have none") as info:
        calibrate(es, stages=Stages(conflicts=["drop"]), passages=some)
    assert "conflicts" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(EvalSetError, match="texts are empty"):
        calibrate(es, stages=Stages(conflicts=["drop"]), passages=dict.fromkeys(texts, " "))


def test_a_kernel_refuses_a_conflict_setting_it_did_not_sweep() -> None:
    es, texts = random_set(2)
    kernel, _ = kernel_for(es, texts, "drop", 0.5)
    with pytest.raises(ConfigError, match="was not swept"):
        kernel.cut(PolicyParams(max_k=3, conflicts=ConflictMode.DROP, conflict_similarity=0.4))
    assert isinstance(kernel, StageKernels)
    staged = kernel.blocks[0]
    with pytest.raises(ConfigError, match="conflicts=drop"):
        staged.cut(PolicyParams(max_k=3))  # the block's own kernel checks its stage


# --------------------------------------------------------------------------- detection


def test_detection_counts_by_hand() -> None:
    """Two queries of the structured set (distractor copy first), one clean query:
    flagged are the copy and the passage it copies, among the first max_k."""
    es, texts = structured_set(drop_wins=True, n=2)
    qrels = {q: dict(es.labels[q].grades) for q in es.qids}
    run = {q: dict(es.runs["r"].candidates[q]) for q in es.qids}
    qrels["clean"] = {"cleana": 1, "cleanb": 1}
    run["clean"] = {"cleana": 0.9, "cleanb": 0.8}
    texts = {**texts, "cleana": "A lone passage of words", "cleanb": "Nothing like it at all"}
    es = EvalSet.from_dicts(qrels, {"r": run}, distractors={q: [f"{q}c"] for q in es.qids})
    found = stage_sweep(
        es, max_tokens=None, near_duplicate_threshold=None, conflicts=["drop"], passages=texts
    )
    assert found is not None
    kernel = found.kernel(es.arrays("r"), ["udcg", PASSAGES], 5)
    assert isinstance(kernel, StageKernels)
    rows = np.arange(3)
    d = conflict_detection(kernel, rows, 0.5, 5)
    # first 5 of q000 and q001: c (distractor, -1), a, b (relevant), x, y; clean: a, b
    # (relevant); flagged: c and b of q000 and q001
    assert (d.candidates, d.positives, d.flagged, d.hits) == (12, 2, 4, 2)
    assert (d.precision, d.recall, d.relevant_rate) == (0.5, 1.0, 2 / 6)
    assert (d.queries, d.positive_queries, d.flagged_queries, d.query_hits) == (3, 2, 2, 2)
    assert (d.query_precision, d.query_recall, d.clean_flagged_rate) == (1.0, 1.0, 0.0)
    # among the first 2 only c and a are compared: no pair
    two = conflict_detection(kernel, rows, 0.5, 2)
    assert (two.flagged, two.positives) == (0, 2) and math.isnan(two.precision)
    assert two.recall == 0.0
    with pytest.raises(ConfigError, match="found at similarity"):
        conflict_detection(kernel, rows, 0.3, 5)


def test_the_report_shows_the_settings_and_detection() -> None:
    es, texts = structured_set(drop_wins=True)
    result = calibrate(
        es,
        search=Search(max_k=5),
        split=Split(holdout=0.3, seed=0),
        check=Check(n_bootstrap=200),
        stages=Stages(conflicts=["off", "drop"], conflict_similarities=[0.5, 0.7]),
        passages=texts,
    )
    md = build_report(result, plots=False).markdown()
    section = md[md.index("# Conflicting passages") :]
    assert "`prefer` is not swept" in section
    assert "| conflicts=drop@0.7 |" in section and "| conflicts off |" in section
    # the written top-3 under drop: held-out, 18 queries, c flagged with b among c, a, b
    written = result.recommended.written_params
    assert written.conflicts is ConflictMode.DROP and written.max_k == 3
    level = f"{written.conflict_similarity:g} (written)"
    line = next(x for x in section.splitlines() if x.startswith(f"| {level} | held-out"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:5] == ["held-out (18)", "36 / 54", "0.500", "1.000"]
    assert '`conflicts = "drop"`' in md
    # the examples show what drop kept: the unique relevant passage, the copy removed
    gained = md[md.index("## Gained most") : md.index("## Lost most")]
    row = next(x for x in gained.splitlines() if x.startswith("| `q"))
    q = row.split("`")[1]
    assert f"`{q}a` (+) |" in row and f"`{q}c` (known distractor, removed)" in row


# --------------------------------------------------------------------------- two stages


class Judge:
    """A reranker that reads the passage: the unique relevant one scores high, the
    copy and its original alike (it cannot tell them apart), the rest low, plus a
    fixed per-text noise; the call fails (raises) for the queries in ``broken``."""

    score_kind = "logit"

    def __init__(self, broken: frozenset[str] = frozenset()) -> None:
        self.broken = broken

    def __call__(self, query: str, texts: list[str]) -> list[float]:
        if query in self.broken:
            raise ConnectionError("the rerank service is down")
        noise = [(sum(map(ord, t)) % 97) / 97.0 for t in texts]
        return [
            (3.0 if t.startswith("Report") else 1.0 if t.startswith("In") else -2.0) + n
            for t, n in zip(texts, noise, strict=True)
        ]


@pytest.mark.parametrize("failing", [False, True], ids=["calls ok", "failed calls"])
def test_two_stages_sweep_the_conflict_settings_as_the_guard_runs_them(failing: bool) -> None:
    """Every (fourth) two-stage point under each conflict setting, query by query,
    against the guard with the reranker (``failing``: the calls of three queries fail,
    and the guard fails them open onto retrieval scores under the same stages)."""
    from ragguard.calibration import RerankGrid

    es, texts = structured_set(drop_wins=True, n=30)
    queries = {q: f"question {q}" for q in es.qids}
    es = EvalSet.from_dicts(
        {q: dict(es.labels[q].grades) for q in es.qids},
        {"r": {q: dict(es.runs["r"].candidates[q]) for q in es.qids}},
        distractors={q: [f"{q}c"] for q in es.qids},
        queries=queries,
    )
    judge = Judge(frozenset(list(queries.values())[:3]) if failing else frozenset())
    result = calibrate(
        es,
        search=Search(max_k=4),
        check=Check(n_bootstrap=50),
        stages=Stages(conflicts=["off", "drop"], conflict_similarities=[0.5]),
        rerank=RerankSearch(reranker=judge, grid=RerankGrid(top_n=(3, 5)), cache_dir=None),
        passages=texts,
    )
    two = result.rerank
    assert two is not None and two.stage is not None and bool(two.stage.failures) == failing
    assert {p.conflicts for p in two.sweep.points} == {ConflictMode.OFF, ConflictMode.DROP}
    for i, p in enumerate(two.sweep.points):
        if i % 4:
            continue
        top_n, kernel = two.space.top_n_of(i), two.space.kernel_of(i)
        assert isinstance(kernel, StageKernels)
        measured = kernel.values(two.sweep.kept[i], [PASSAGES])[0]
        config = GuardConfig(
            score_kind="similarity", max_k=p.max_k, min_k=p.min_k,
            relative_threshold=p.relative_threshold, cut=p.cut, gap_buffer=p.gap_buffer,
            autocut_jumps=p.autocut_jumps, conflicts=p.conflicts,
            conflict_similarity=p.conflict_similarity,
            rerank={
                "enabled": True, "top_n": top_n, "score_kind": "logit",
                "relative_threshold": p.relative_threshold, "min_score": p.min_score,
                "expected_utility": p.expected_utility is not None,
                "probability_map": two.stage.probability_map,
            },
        )  # fmt: skip
        guard = ContextGuard(config, reranker=judge)
        for row, qid in enumerate(kernel.arrays.qids):
            cands = [Candidate(d, texts[d], s) for d, s in es.runs["r"].candidates[qid].items()]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the failed calls, failed open
                kept = guard.select(queries[qid], cands).kept
            assert measured[row] == len(kept), (top_n, describe_point(p), qid)


def test_a_guarantee_certifies_each_conflict_setting_on_its_own_path() -> None:
    """One fixed sequence per conflict setting (Bonferroni over all): drop keeps ``a``
    alone (evidence recall 1/2), so only plain top-3 without it certifies 0.9."""
    es, texts = structured_set(drop_wins=True)
    result = calibrate(
        es,
        search=Search(max_k=5),
        split=Split(holdout=0.3, seed=0),
        check=Check(n_bootstrap=100),
        stages=Stages(conflicts=["off", "drop"], conflict_similarities=[0.5]),
        guarantee=Guarantee(recall=0.9),
        passages=texts,
    )
    g = result.recommended.guarantee
    assert g is not None and g.met
    assert set(g.paths) == {
        "top-k, conflicts off",
        "threshold, conflicts off",
        "top-k, conflicts=drop@0.5",
        "threshold, conflicts=drop@0.5",
    }
    assert describe_point(result.recommended.written_params) == "top-3"


# --------------------------------------------------------------------------- answers


def answers_set(n: int = 30) -> tuple[EvalSet, dict[str, str]]:
    """Per query "when was the cathedral of town i founded?": a relevant passage saying
    one year, a distractor in other words saying another (no near-copy of it), a second
    relevant passage agreeing with the first, and an unrelated one; a third of the
    queries have no distractor."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    queries: dict[str, str] = {}
    distractors: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    for i in range(n):
        q = f"q{i:03d}"
        town = f"Town{chr(65 + i % 26)}{i}"
        queries[q] = f"When was the cathedral of {town} founded?"
        texts[f"{q}a"] = f"The cathedral of {town} was founded in {1800 + i} by the bishop."
        texts[f"{q}b"] = f"According to {town}, the bishop founded its cathedral in {1800 + i}."
        year = 1800 + i if i % 3 == 0 else 1700 + i  # the same year: no conflict
        texts[f"{q}c"] = f"Records of {town} show the cathedral founded in {year} by its bishop."
        texts[f"{q}x"] = "Unrelated words about a market and its stalls."
        run[q] = {f"{q}c": 0.9, f"{q}a": 0.88, f"{q}b": 0.86, f"{q}x": 0.4}
        qrels[q] = {f"{q}a": 1, f"{q}b": 1, f"{q}c": 0 if i % 3 else 1}
        if i % 3:
            distractors[q] = [f"{q}c"]
    es = EvalSet.from_dicts(qrels, {"r": run}, distractors=distractors, queries=queries)
    return es, texts


def test_detectors_are_swept_with_their_thresholds_and_labelled() -> None:
    answers = (ConflictDetector.ANSWERS, DEFAULT_ANSWER_SIMILARITY)
    assert conflict_settings(["drop"], [0.5], ["both", "near-copy", "answers"], [0.2, 0.4]) == (
        (ConflictMode.DROP, 0.5, *NEAR),
        (ConflictMode.DROP, DEFAULT_CONFLICT_SIMILARITY, answers[0], 0.4),
        (ConflictMode.DROP, DEFAULT_CONFLICT_SIMILARITY, answers[0], 0.2),
        (ConflictMode.DROP, 0.5, ConflictDetector.BOTH, 0.4),
        (ConflictMode.DROP, 0.5, ConflictDetector.BOTH, 0.2),
    )
    p = PolicyParams(
        max_k=4,
        conflicts=ConflictMode.DROP,
        conflict_detector=ConflictDetector.BOTH,
        conflict_answer_similarity=0.2,
    )
    assert describe_point(p) == "top-4, conflicts=drop@0.5+answers 0.2"
    assert describe_point(replace(p, conflict_detector=ConflictDetector.ANSWERS)) == (
        "top-4, conflicts=drop@answers 0.2"
    )


@pytest.mark.parametrize(
    ("detectors", "answers", "match"),
    [
        (["similar"], [], "unknown conflict detector 'similar'; sweep some of: near-copy"),
        (["answers"], [1.5], r"a conflict answer similarity must be a number in \[0, 1\]"),
        ([], [0.2], "swept with the answers detector"),
    ],
)
def test_bad_detector_options_are_one_line_errors(
    detectors: list[str], answers: list[float], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        conflict_settings(["drop"], [], detectors, answers)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="pass the modes too"):
        conflict_settings([], [], ["answers"])


@pytest.mark.parametrize("detector", ["answers", "both"])
@pytest.mark.parametrize("mode", ["flag", "keep_first", "drop"])
def test_the_answers_detector_sweeps_as_the_guard_runs_it(detector: str, mode: str) -> None:
    """Every point under each detector: the kernel keeps what the guard keeps, query by
    query, with the query's own text."""
    es, texts = answers_set()
    found = stage_sweep(
        es, max_tokens=None, near_duplicate_threshold=None, conflicts=[mode],
        conflict_detectors=[detector], conflict_answer_similarities=[0.2], passages=texts,
    )  # fmt: skip
    assert found is not None
    arrays = es.arrays("r")
    points = found.points(GRID.points())
    kernel = found.kernel(arrays, ["udcg", PASSAGES], 6)
    assert isinstance(kernel, StageKernels) and any(kernel.answer_pairs)
    for p in points[::3]:
        guard = ContextGuard(
            GuardConfig(
                score_kind="similarity", max_k=p.max_k, relative_threshold=p.relative_threshold,
                cut=p.cut, gap_buffer=p.gap_buffer, conflicts=p.conflicts,
                conflict_detector=detector, conflict_answer_similarity=0.2,
            )
        )  # fmt: skip
        assert guard.config.policy_params() == p
        cuts = kernel.cut(p)
        for row, qid in enumerate(arrays.qids):
            ids = arrays.doc_ids(row)
            got = [ids[j] for j in kernel.context(row, int(cuts[row]))]
            cands = [Candidate(d, texts[d], s) for d, s in es.runs["r"].candidates[qid].items()]
            assert got == [c.id for c in guard.select(es.queries[qid].text, cands).kept]


def test_the_report_shows_detection_per_detector() -> None:
    es, texts = answers_set()
    result = calibrate(
        es,
        search=Search(max_k=5),
        split=Split(holdout=0.3, seed=0),
        check=Check(n_bootstrap=200),
        stages=Stages(
            conflicts=["off", "drop"],
            conflict_detectors=["near-copy", "answers"],
            conflict_answer_similarities=[0.2],
        ),
        passages=texts,
    )
    md = build_report(result, plots=False).markdown()
    section = md[md.index("# Conflicting passages") :]
    assert "| conflicts=drop@answers 0.2 |" in section and "| conflicts=drop@0.5 |" in section
    rows = {
        tuple(c.strip() for c in x.strip("|").split("|")[:2])
        for x in section.splitlines()
        if x.startswith("| 0.5") or x.startswith("| answers 0.2")
    }
    assert {r[0].removesuffix(" (written)") for r in rows} == {"0.5", "answers 0.2"}
    # the answers detector finds the distractors the near-copy one cannot (no near-copies)
    line = next(
        x for x in section.splitlines() if x.startswith("| answers 0.2") and "calibration" in x
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4] == "1.000"  # every distractor flagged (recall)
    near = next(x for x in section.splitlines() if x.startswith("| 0.5") and "calibration" in x)
    assert [c.strip() for c in near.strip("|").split("|")][2].startswith("0 /")
