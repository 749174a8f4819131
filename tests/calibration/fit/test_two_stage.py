"""Two-stage calibration: rerank scores cached on disk, the probability map, one sweep
over top_n x rerank cut x max_k, and a config with which the runtime guard does exactly
what calibration measured."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sqlite3
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragguard import Candidate, ConfigError, ContextGuard, GuardConfig, RagguardError, RerankWarning
from ragguard.calibration import (
    Check,
    EvalSet,
    RerankGrid,
    RerankSearch,
    Search,
    Stages,
    calibrate,
)
from ragguard.calibration.fit import rerank_scores
from ragguard.calibration.fit.rerank_scores import read_rerank_run
from ragguard.calibration.report import build_report, format_number
from ragguard.errors import EvalSetError
from ragguard.policy import CutRule
from ragguard.rerank import load_reranker
from tests.calibration.two_stage_data import (
    BROKEN,
    N_CANDS,
    N_QUERIES,
    Breaking,
    make_data,
    oracle,
    text_noise,
)


class Counting:
    """``oracle`` behind a call counter."""

    score_kind = "logit"

    def __init__(self) -> None:
        self.pairs = 0

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        self.pairs += len(texts)
        return oracle(query, texts)


GRID = RerankGrid(top_n=(4, 8))


@pytest.fixture(scope="module")
def data() -> tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]]:
    return make_data()


def run_calibration(
    es: EvalSet,
    texts: dict[str, str],
    cache: Path,
    *,
    search: Search | None = None,
    check: Check | None = None,
    **kw: Any,
) -> Any:
    """calibrate() with a second stage: ``kw`` holds the fields of ``RerankSearch`` (the
    oracle reranker, ``cache``, ``GRID`` unless given) and calibrate's other keywords."""
    rerank = {"reranker": oracle, "cache_dir": cache, "grid": GRID}
    rerank |= {k: kw.pop(k) for k in list(kw) if k in RerankSearch.__dataclass_fields__}
    rerank_search = RerankSearch(**rerank)
    return calibrate(
        es,
        search=search or Search(max_k=5),
        check=check or Check(n_bootstrap=50),
        rerank=rerank_search,
        passages=texts,
        **kw,
    )


def test_config_enables_the_stage_and_the_guard_reproduces_calibration(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, texts, run = data
    result = run_calibration(es, texts, tmp_path / "cache")
    two = result.rerank  # type: ignore[attr-defined]
    assert two is not None
    path = result.save_config(tmp_path / "guard.toml")  # type: ignore[attr-defined]
    config = GuardConfig.from_file(path)
    assert config.rerank.enabled and config.rerank.top_n == two.top_n
    assert config.rerank.probability_map == two.stage.probability_map
    assert config.rerank.external is not None and config.rerank.external.endswith(":oracle")
    assert config.provenance["rerank"]["cache_key"] == two.stage.scores.cache_key
    # the file records the held-out calibration quality of the probabilities
    for key, value in (
        ("brier_raw", two.stage.brier_raw),
        ("brier_mapped", two.stage.brier_mapped),
        ("ece_raw", two.stage.reliability_raw.ece),
        ("ece_mapped", two.stage.reliability_mapped.ece),
    ):
        assert config.provenance["rerank"][key] == pytest.approx(value, rel=1e-5)
    # a callable is recorded, never imported: the guard asks for it
    with pytest.raises(ConfigError, match="reranker="):
        ContextGuard(config)
    guard = ContextGuard(config, reranker=oracle)
    kernel = two.kernel
    for row, qid in enumerate(kernel.arrays.qids):
        cands = [Candidate(d, texts[d], s) for d, s in run[qid].items()]
        sel = guard.select(es.queries[qid].text or "", cands)
        expected = kernel.arrays.doc_ids(row)[: int(two.chosen_kept[row])]
        assert [c.id for c in sel.kept] == expected


# a budget of 12 tokens holds one of these passages (7-8 tokens each), never two
STAGES = {"max_tokens": 12, "token_counter": "chars:4", "near_duplicate_threshold": 0.8}


@pytest.mark.parametrize(
    ("stages", "failing"),
    [({}, False), (STAGES, False), ({}, True), (STAGES, True)],
    ids=["cut only", "budget and near-dups", "failed calls", "failed calls, budget"],
)
def test_brute_force_select_over_the_grid_equals_the_sweep(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]],
    tmp_path: Path,
    stages: dict[str, object],
    failing: bool,
) -> None:
    """Every (third) point of the grid, query by query, against the guard; ``failing``:
    the calls of three queries fail (a NaN), and the guard fails them open."""
    es, texts, run = data
    reranker = Breaking("nan") if failing else oracle
    result = run_calibration(
        es,
        texts,
        tmp_path / "cache",
        profile="medical",
        reranker=reranker,
        stages=Stages(**stages),  # type: ignore[arg-type]
    )
    two = result.rerank  # type: ignore[attr-defined]
    assert bool(two.stage.failures) == failing
    kernels = dict(zip(two.space.top_n, two.space.kernels, strict=True))
    rows = list(enumerate(kernels[4].arrays.qids))
    points = [(two.space.top_n_of(i), p) for i, p in enumerate(two.sweep.points)]
    for i, (top_n, p) in enumerate(points):
        if i % 3:  # every third point keeps the test quick; the grid's rules all occur
            continue
        settings = {
            "profile": "medical",
            "score_kind": "similarity",
            "max_k": p.max_k,
            "min_k": p.min_k,
            "relative_threshold": p.relative_threshold,
            "cut": p.cut,
            "gap_buffer": p.gap_buffer,
            "autocut_jumps": p.autocut_jumps,
            "rerank": {
                "enabled": True,
                "top_n": top_n,
                "score_kind": "logit",
                "relative_threshold": p.relative_threshold,
                "min_score": p.min_score,
                "expected_utility": p.expected_utility is not None,
                "probability_map": two.stage.probability_map,
            },
            **stages,
        }
        guard = ContextGuard(GuardConfig(**settings), reranker=reranker)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RerankWarning)  # the failed calls, failed open
            kept = [
                len(
                    guard.select(
                        es.queries[q].text or "",
                        [Candidate(d, texts[d], s) for d, s in run[q].items()],
                    ).kept
                )
                for _, q in rows
            ]
        assert kept == two.sweep.kept[i].tolist(), (top_n, p)
    if stages:  # every setting ran with the stages, and the budget binds
        assert all(p.max_tokens == 12 for _, p in points)
        assert int(two.sweep.kept.max()) == 1
        assert any(p.max_k > 1 for _, p in points)
    rules = {p.cut for _, p in points} | {p.expected_utility is not None for _, p in points}
    assert {CutRule.GAP, CutRule.AUTOCUT, True} <= rules


def test_second_run_is_served_by_the_disk_cache(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, texts, _ = data
    counting = Counting()
    first = run_calibration(es, texts, tmp_path / "cache", reranker=counting)
    assert counting.pairs == N_QUERIES * N_CANDS
    assert first.rerank.stage.scores.n_computed == N_QUERIES * N_CANDS  # type: ignore[attr-defined]
    second = run_calibration(
        es,
        texts,
        tmp_path / "cache",
        reranker=counting,
        objective="utility",
        search=Search(max_k=3),
    )
    assert counting.pairs == N_QUERIES * N_CANDS  # no scoring at all
    assert second.rerank.stage.scores.n_computed == 0  # type: ignore[attr-defined]
    assert second.rerank.stage.scores.n_cached == N_QUERIES * N_CANDS  # type: ignore[attr-defined]
    # without a cache every pair is scored again
    run_calibration(es, texts, tmp_path / "cache", reranker=counting, cache_dir=None)
    assert counting.pairs == 2 * N_QUERIES * N_CANDS


def test_reranker_sees_through_look_alikes_on_held_out_queries(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, texts, _ = data
    two = run_calibration(es, texts, tmp_path / "cache").rerank  # type: ignore[attr-defined]
    c = two.against_retrieval
    assert c.split == "held-out" and c.n_queries == 12
    assert c.guarded["distractor_rate"].mean < c.baseline["distractor_rate"].mean
    assert c.guarded["udcg"].mean > c.baseline["udcg"].mean
    # the map is fitted on the calibration queries and improves the Brier score held out
    assert two.stage.brier_mapped < two.stage.brier_raw
    assert two.stage.reliability_mapped.ece < two.stage.reliability_raw.ece


def test_reranked_lists_keep_the_retrieval_labels_and_utilities(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Each top_n's reranked list is the retrieval list's first top_n, reordered: every
    candidate keeps its labels and its utility on the retrieval ranking, and the ideal
    ranking of the normalised metrics is the retrieval one, given utilities and
    abstention probabilities of documents the reranker never sees included."""
    base, texts, run = data
    es = EvalSet.from_dicts(
        {q: dict(base.labels[q].grades) for q in run},
        {"dense": run},
        queries={q: base.queries[q].text or "" for q in run},
        utilities={q: {f"{q}-d{c}": 0.25 * c - 1.0 for c in (0, 6, 7)} for q in run},
        no_response={q: {f"{q}-d{c}": 0.1 * c for c in (1, 5)} for q in run},
    )
    result = run_calibration(
        es, texts, tmp_path / "cache", search=Search(max_k=5, metrics=["udcg_ndcg@3"])
    )
    retrieval = result.run("dense").arrays  # type: ignore[attr-defined]
    two = result.rerank  # type: ignore[attr-defined]
    for top_n, kernel in zip(two.space.top_n, two.space.kernels, strict=True):
        arrays = kernel.arrays
        assert np.array_equal(arrays.ideal_utilities, retrieval.ideal_utilities)
        assert np.array_equal(arrays.n_evidence, retrieval.n_evidence)
        for row in range(arrays.n_queries):
            ids = arrays.doc_ids(row)
            ranked = retrieval.doc_ids(row)
            assert sorted(ids) == sorted(ranked[: min(top_n, int(retrieval.n_valid[row]))])
            at = [ranked.index(d) for d in ids]
            for name in ("utility", "grades", "distractor", "judged"):
                want = getattr(retrieval, name)[row, at].tolist()
                assert getattr(arrays, name)[row, : len(ids)].tolist() == want, name
            # ranked by the mapped probability, highest first
            p = arrays.scores[row, : len(ids)]
            assert (np.diff(p) <= 0).all()


def test_precomputed_rerank_run_gives_the_same_choice(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, texts, run = data
    lines = []
    for qid, cands in run.items():
        docs = list(cands)
        for rank, (doc, score) in enumerate(
            zip(docs, oracle("", [texts[d] for d in docs]), strict=True)
        ):
            lines.append(f"{qid} Q0 {doc} {rank + 1} {score!r} judge")
    path = tmp_path / "judge.trec"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EvalSetError, match="--rerank-score-kind"):
        read_rerank_run(path, None)
    scores = read_rerank_run(path, "logit")
    by_file = run_calibration(es, texts, tmp_path / "c", reranker=None, scores=scores)
    by_call = run_calibration(es, texts, tmp_path / "c")
    a, b = by_file.rerank, by_call.rerank  # type: ignore[attr-defined]
    assert (a.top_n, a.written_params) == (b.top_n, b.written_params)
    assert a.stage.probability_map == b.stage.probability_map
    assert by_file.config().rerank.external == f"run:{path}"  # type: ignore[attr-defined]


def test_missing_passage_texts_are_named(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, _, _ = data
    with pytest.raises(EvalSetError, match=r"needs texts, but 320 are missing.*--corpus"):
        run_calibration(es, {}, tmp_path / "cache")


def test_isotonic_map_is_stored_and_applied(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    es, texts, _ = data
    result = run_calibration(es, texts, tmp_path / "cache", probability_map="isotonic")
    pmap = result.config().rerank.probability_map  # type: ignore[attr-defined]
    assert pmap is not None and pmap.method == "isotonic"
    assert all(b >= a for a, b in zip(pmap.y, pmap.y[1:], strict=False))


def test_load_reranker_names_a_callable_or_a_model() -> None:
    r = load_reranker("tests.calibration.two_stage_data:oracle")
    assert r is oracle
    from ragguard.rerank import CrossEncoderReranker

    ce = load_reranker("cross-encoder/ms-marco-MiniLM-L6-v2")
    assert isinstance(ce, CrossEncoderReranker) and not ce.loaded
    from ragguard.errors import RerankModelError

    with pytest.raises(RerankModelError, match="no attribute"):
        load_reranker("tests.calibration.two_stage_data:nothing_here")


def test_report_compares_the_stages_and_shows_the_reliability_diagram(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    es, texts, _ = data
    res = run_calibration(es, texts, tmp_path / "cache")
    two = res.rerank  # type: ignore[attr-defined]
    report = build_report(res)  # type: ignore[arg-type]
    md = report.markdown()
    section = md.split("# Two stages: retrieval, then the reranker", 1)[1].splitlines()
    header = next(line for line in section if line.startswith("| metric | plain top-k"))
    assert "retrieval only" in header and "two-stage" in header
    udcg = next(line for line in section if line.startswith("| udcg |"))
    cells = [c.strip() for c in udcg.strip("|").split("|")]
    # each column is the held-out mean of the comparison it names, with its verdict
    assert cells[1].startswith(format_number(two.comparison.baseline["udcg"].mean))
    assert cells[2].startswith(format_number(two.against_retrieval.baseline["udcg"].mean))
    assert cells[3].startswith(format_number(two.against_retrieval.guarded["udcg"].mean))
    assert cells[5] == two.against_retrieval.verdict("udcg")
    assert cells[7] == two.comparison.verdict("udcg")
    raw, mapped = format_number(two.stage.brier_raw), format_number(two.stage.brier_mapped)
    brier = f"| Brier score | {raw} | {mapped} |"
    assert brier in md
    assert "reliability.png" in {f.name for f in report.figures}
    # a calibration without a reranker has no such section
    plain = build_report(
        calibrate(
            es,
            search=Search(max_k=5),
            check=Check(n_bootstrap=50),
        )
    )
    assert "Two stages" not in plain.markdown()


def test_a_real_cross_encoder_from_the_config_reproduces_calibration(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """The built-in CrossEncoder path end to end: calibrate with a local model folder,
    then a guard built from the written config alone (no reranker=) loads the same model
    and keeps what calibration measured, query by query."""
    pytest.importorskip("sentence_transformers")
    from tests.rerank_models import IDENTITY, build_cross_encoder

    es, texts, run = data
    q0 = es.queries["q00"].text or ""
    # answers score high for the designed query; every other pair gets the model's own
    # deterministic score, which is what calibration and the guard must agree on
    logits = {texts[d]: (4.0 if "answer" in texts[d] else -4.0) for d in run["q00"]}
    model = build_cross_encoder(tmp_path / "ce", q0, logits, activation=IDENTITY)
    result = calibrate(
        es,
        search=Search(max_k=5),
        check=Check(n_bootstrap=50),
        rerank=RerankSearch(
            reranker=load_reranker(str(model)), grid=GRID, cache_dir=tmp_path / "cache"
        ),
        passages=texts,
    )
    two = result.rerank
    assert two is not None and two.stage.scores.model == str(model)
    config = GuardConfig.from_file(result.save_config(tmp_path / "guard.toml"))
    assert config.rerank.model == str(model) and config.rerank.external is None
    guard = ContextGuard(config)  # builds and loads the CrossEncoder named in the config
    kernel = two.kernel
    for row, qid in enumerate(kernel.arrays.qids):
        cands = [Candidate(d, texts[d], s) for d, s in run[qid].items()]
        sel = guard.select(es.queries[qid].text or "", cands)
        assert [c.id for c in sel.kept] == kernel.arrays.doc_ids(row)[: int(two.chosen_kept[row])]


# --------------------------------------------------------------------------- failures
# The score cache, failed rerank calls and precomputed rerank runs: every failure is one
# typed line, a failed call is never cached and is swept as the runtime selects.


def _cache_file(cache: Path) -> Path:
    (path,) = cache.glob("*.sqlite")
    return path


def _cached_values(path: Path) -> list[object]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [row[0] for row in db.execute("SELECT score FROM scores")]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_cache_file_is_one_line_naming_it_and_the_fix(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]],
    tmp_path: Path,
    damage: str,
) -> None:
    """Audit TS-34 (a cache file overwritten with text) and TS-35 (cut in half)."""
    es, texts, _ = data
    cache = tmp_path / "cache"
    run_calibration(es, texts, cache)
    path = _cache_file(cache)
    if damage == "garbage":
        path.write_text("not a database\n")
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RagguardError) as info:
        run_calibration(es, texts, cache)
    message = str(info.value)
    assert isinstance(info.value, OSError) and "\n" not in message
    assert str(path) in message
    assert "delete it or give --rerank-cache another folder" in message


def _unwritable(folder: Path) -> Path:
    """``folder``, made so that no file can be created in it (chmod; chattr +i as root),
    or skip the test where neither works."""
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK) and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True)
    try:
        (folder / "probe").touch()
    except OSError:
        return folder
    (folder / "probe").unlink()
    pytest.skip("cannot make a folder unwritable here")


def test_a_cache_folder_that_cannot_be_written_is_named(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-36: a cache folder that cannot be created, or created in, is one line
    naming the folder."""
    es, texts, _ = data
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    with pytest.raises(RagguardError) as info:
        run_calibration(es, texts, blocker / "cache")
    assert str(blocker / "cache") in str(info.value)
    assert "--rerank-cache" in str(info.value)
    folder = _unwritable(tmp_path / "read-only")
    try:
        with pytest.raises(RagguardError) as info:
            run_calibration(es, texts, folder)
        assert str(folder) in str(info.value) and "--rerank-cache" in str(info.value)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
        folder.chmod(0o755)


def test_a_locked_cache_waits_a_bounded_time_then_names_the_file(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    es, texts, _ = data
    cache = tmp_path / "cache"
    run_calibration(es, texts, cache)
    path = _cache_file(cache)
    monkeypatch.setattr(rerank_scores, "CACHE_LOCK_TIMEOUT_S", 0.5)
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")  # another calibration writing
    try:
        started = time.monotonic()
        with pytest.raises(RagguardError, match="locked") as info:
            run_calibration(es, texts, cache)
        assert 0.5 <= time.monotonic() - started < 30
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    finally:
        other.rollback()
        other.close()
    # once the other writer is done, the cache serves again
    again = run_calibration(es, texts, cache)
    assert again.rerank.stage.scores.n_computed == 0  # type: ignore[attr-defined]


def test_cached_values_that_are_not_finite_scores_are_computed_again(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-41 (text where a score belongs) and TS-40's legacy: NULL (how older
    versions stored NaN) and infinity are never served; those pairs are scored again."""
    es, texts, _ = data
    cache = tmp_path / "cache"
    counting = Counting()
    first = run_calibration(es, texts, cache, reranker=counting)
    path = _cache_file(cache)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE scores SET score = 'abc' WHERE rowid % 7 = 0")
        db.execute("UPDATE scores SET score = NULL WHERE rowid % 7 = 1")
        db.execute("UPDATE scores SET score = 9e999 WHERE rowid % 7 = 2")  # +inf
        (bad,) = db.execute("SELECT count(*) FROM scores WHERE rowid % 7 < 3").fetchone()
    assert bad > 0
    second = run_calibration(es, texts, cache, reranker=counting)
    assert counting.pairs == N_QUERIES * N_CANDS + bad
    assert second.rerank.stage.scores.n_computed == bad  # type: ignore[attr-defined]
    a, b = first.rerank, second.rerank  # type: ignore[attr-defined]
    assert (a.top_n, a.written_params) == (b.top_n, b.written_params)
    assert a.stage.probability_map == b.stage.probability_map
    values = _cached_values(path)
    assert len(values) == N_QUERIES * N_CANDS
    assert all(isinstance(v, float) and math.isfinite(v) for v in values)


@pytest.mark.parametrize("how", ["nan", "inf", "short", "raise"])
def test_a_failed_rerank_call_is_swept_as_the_runtime_fails_open(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]],
    tmp_path: Path,
    how: str,
) -> None:
    """Audit TS-08 (some NaN), TS-09 (some +inf): the runtime stage fails a call on one
    unusable score (or a wrong count, or an exception) and selects on retrieval scores
    (fail_open); calibration sweeps those queries so, says how many failed and why, and
    the written config's guard keeps on every query what calibration measured."""
    es, texts, run = data
    breaking = Breaking(how)
    result = run_calibration(es, texts, tmp_path / "cache", reranker=breaking)
    two = result.rerank  # type: ignore[attr-defined]
    assert two.fallback is None
    assert two.stage.failures is not None and "\n" not in two.stage.failures
    assert two.stage.failures.startswith(f"{len(BROKEN)} of {N_QUERIES} rerank calls failed")
    expected = {
        "nan": "not a finite number (nan)",
        "inf": "not a finite number (inf)",
        "short": "scores of shape (7,) for 8 passages",
        "raise": "raised ConnectionError: the rerank service is down",
    }[how]
    assert expected in two.stage.failures
    broken_ids = {q for q in es.qids if es.queries[q].text in BROKEN}
    assert all(set(ids) == broken_ids for ids in two.stage.failed.values())
    config = GuardConfig.from_file(result.save_config(tmp_path / "guard.toml"))  # type: ignore[attr-defined]
    guard = ContextGuard(config, reranker=breaking)
    kernel = two.kernel
    for row, qid in enumerate(kernel.arrays.qids):
        cands = [Candidate(d, texts[d], s) for d, s in run[qid].items()]
        query = es.queries[qid].text or ""
        if qid in broken_ids:
            with pytest.warns(RerankWarning, match="selected on retrieval scores"):
                sel = guard.select(query, cands)
            assert sel.rerank is not None and sel.rerank.failed
        else:
            sel = guard.select(query, cands)
        assert [c.id for c in sel.kept] == kernel.arrays.doc_ids(row)[: int(two.written_kept[row])]


def test_a_failed_call_is_never_cached_and_is_scored_again(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-40: a NaN from a transient failure is not stored, so the next run scores
    those pairs again and succeeds without a failure."""
    es, texts, _ = data
    cache = tmp_path / "cache"
    breaking = Breaking("nan")
    run_calibration(es, texts, cache, reranker=breaking)
    good = (N_QUERIES - len(BROKEN)) * N_CANDS
    values = _cached_values(_cache_file(cache))
    assert len(values) == good
    assert all(isinstance(v, float) and math.isfinite(v) for v in values)
    breaking.broken = False  # the service is back
    before = breaking.pairs
    again = run_calibration(es, texts, cache, reranker=breaking)
    two = again.rerank  # type: ignore[attr-defined]
    assert breaking.pairs - before == len(BROKEN) * N_CANDS
    scores = two.stage.scores
    assert scores.n_computed == len(BROKEN) * N_CANDS and scores.n_cached == good
    assert two.stage.failures is None and not any(two.stage.failed.values())
    assert len(_cached_values(_cache_file(cache))) == N_QUERIES * N_CANDS


def test_a_reranker_that_fails_on_every_call_is_named_as_failing(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-07: every score NaN is a failing reranker, not an id mismatch."""
    es, texts, _ = data

    def allnan(query: str, texts: Sequence[str]) -> list[float]:
        return [math.nan] * len(texts)

    allnan.score_kind = "logit"  # type: ignore[attr-defined]
    with pytest.raises(RagguardError) as info:
        run_calibration(es, texts, tmp_path / "cache", reranker=allnan)
    message = str(info.value)
    assert f"{N_QUERIES} of {N_QUERIES} rerank calls failed" in message
    assert "not a finite number (nan)" in message and "match" not in message
    assert not list((tmp_path / "cache").glob("*.sqlite")) or not _cached_values(
        _cache_file(tmp_path / "cache")
    )


def _rerank_run(
    path: Path,
    run: dict[str, dict[str, float]],
    texts: dict[str, str],
    *,
    score: Callable[[float], str] = repr,
    skip: Callable[[str, int], bool] = lambda qid, rank: False,
) -> Path:
    """The oracle's scores of every run candidate as a TREC run file."""
    lines = []
    for qid, cands in run.items():
        docs = list(cands)
        for rank, (doc, value) in enumerate(
            zip(docs, oracle("", [texts[d] for d in docs]), strict=True)
        ):
            if not skip(qid, rank):
                lines.append(f"{qid} Q0 {doc} {rank + 1} {score(value)} judge")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_rerank_run_missing_whole_queries_is_an_error_naming_them(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-25: half the queries have no row in the rerank run."""
    es, texts, run = data
    path = _rerank_run(tmp_path / "half.trec", run, texts, skip=lambda q, r: int(q[1:]) >= 20)
    scores = read_rerank_run(path, "logit")
    with pytest.raises(EvalSetError) as info:
        run_calibration(es, texts, tmp_path / "c", reranker=None, scores=scores)
    message = str(info.value)
    assert "20 of 40 queries" in message and "q20, q21, q22" in message
    assert "\n" not in message


def test_unusable_rows_of_a_rerank_run_are_counted_and_swept_as_failed_calls(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Audit TS-31: NaN scores and repeated rows of a rerank run are reported in one
    line. A candidate without a usable score among the top_n a setting sends to the
    reranker is what a failed call is at runtime: that query is swept on retrieval
    scores at that depth (and deeper), reranked above it."""
    es, texts, run = data
    path = _rerank_run(tmp_path / "judge.trec", run, texts)
    lines = path.read_text().splitlines()
    nan_at = {f"q05 Q0 {list(run['q05'])[6]}", f"q11 Q0 {list(run['q11'])[1]}"}
    lines = [
        " ".join([*line.split()[:4], "nan", "judge"]) if " ".join(line.split()[:3]) in nan_at
        else line
        for line in lines
    ]  # fmt: skip
    lines.append(lines[0])  # a repeated row
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="ragguard"):
        scores = read_rerank_run(path, "logit")
    notes = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "2 scores that are not finite numbers" in notes[0]
    assert "1 repeated row" in notes[0] and str(path) in notes[0]
    two = run_calibration(es, texts, tmp_path / "c", reranker=None, scores=scores).rerank  # type: ignore[attr-defined]
    assert two.stage.failed == {4: ("q11",), 8: ("q05", "q11")}
    failures = two.stage.failures
    assert failures is not None and "q05" in failures and "\n" not in failures


def test_logits_declared_probabilities_are_an_error_not_a_clip(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Audit TS-27: scores about -4..5 declared probabilities."""
    _, texts, run = data
    path = _rerank_run(tmp_path / "logits.trec", run, texts)
    with pytest.raises(EvalSetError) as info:
        read_rerank_run(path, "probability")
    message = str(info.value)
    assert str(path) in message and "outside [0, 1]" in message
    assert "--rerank-score-kind logit" in message and "\n" not in message


def test_a_calibrated_map_raises_no_logit_warning_on_unit_interval_scores(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Issue 21 item 7: a reranker that declares logits but returns scores in [0, 1] (a
    cosine, say) gets a fitted map, and the map, not a sigmoid, reads its scores: the
    guard built from the written config does not warn "every one lies in [0, 1]"
    (pytest turns every warning into an error)."""
    es, texts, run = data

    def cosine(query: str, texts: Sequence[str]) -> list[float]:
        return [float(1.0 / (1.0 + math.exp(-s / 4.0))) for s in oracle(query, texts)]

    cosine.score_kind = "logit"  # type: ignore[attr-defined]
    result = run_calibration(es, texts, tmp_path / "cache", reranker=cosine)
    config = GuardConfig.from_file(result.save_config(tmp_path / "guard.toml"))  # type: ignore[attr-defined]
    assert config.rerank.enabled and config.rerank.probability_map is not None
    guard = ContextGuard(config, reranker=cosine)
    for qid in es.qids[:5]:
        cands = [Candidate(d, texts[d], s) for d, s in run[qid].items()]
        sel = guard.select(es.queries[qid].text or "", cands)
        assert sel.kept and not sel.warnings


def test_a_reranker_that_ranks_the_wrong_way_gets_no_map(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """Issue 21 item 5: scores that fall as relevance rises would fit a decreasing map
    (Platt slope < 0), which keeps the worst passages; calibration says so instead."""
    es, texts, _ = data

    def backwards(query: str, texts: Sequence[str]) -> list[float]:
        return [-s for s in oracle(query, texts)]

    backwards.score_kind = "logit"  # type: ignore[attr-defined]
    for method in ("platt", "isotonic"):
        with pytest.raises(EvalSetError, match="do not rise with relevance") as info:
            run_calibration(
                es, texts, tmp_path / "cache", reranker=backwards, probability_map=method
            )
        assert "\n" not in str(info.value)


def test_a_second_stage_with_no_clear_difference_says_why_it_is_written(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """A weak reranker (+1 for an answer under noise 4 wide): on the held-out queries no
    clear difference from retrieval only. The config holds it, and one line, the same
    in the provenance, the JSON document and the report, says why, with an interval
    that agrees with its verdict."""
    import re

    from ragguard.calibration.report.summary import result_document

    es, texts, _ = data

    def weak(query: str, passages: Sequence[str]) -> list[float]:
        return [(1.0 if "answer" in t else 0.0) + 4.0 * text_noise(t) for t in passages]

    weak.score_kind = "logit"  # type: ignore[attr-defined]
    result = run_calibration(
        es, texts, tmp_path / "cache", reranker=weak, check=Check(n_bootstrap=200)
    )
    two = result.rerank  # type: ignore[attr-defined]
    assert two.against_retrieval.verdict("udcg") == "no clear difference" and two.fallback is None
    w = result.written_setting()  # type: ignore[attr-defined]
    assert w.two_stage is two and w.setting == two.describe(two.written)
    assert w.stage.startswith("written: no clear difference from retrieval only")
    low, high = map(float, re.search(r"\[([^,]+), ([^\]]+)\]", w.stage).groups())
    assert low <= 0 <= high
    config = result.config()  # type: ignore[attr-defined]
    assert config.rerank.enabled and config.rerank.top_n == two.top_n
    assert config.provenance["setting"] == w.setting
    assert config.provenance["second_stage"] == w.stage
    doc = result_document(result)  # type: ignore[arg-type]
    assert doc["recommended"]["second_stage"] == w.stage
    md = build_report(result, plots=False).markdown()  # type: ignore[arg-type]
    assert f"Second stage {w.stage}." in md


def test_a_second_stage_that_misses_a_constraint_retrieval_meets_is_left_off(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path
) -> None:
    """The reranker reads only the top 4 of 8 candidates, so some evidence never reaches
    it: no two-stage setting reaches evidence recall 0.99, which top-8 on retrieval
    meets. The config held the two-stage setting anyway and its provenance said the
    constraint was met (it checked the retrieval-only setting)."""
    es, texts, run = data
    # evidence a top-4 list can hold, by hand: relevant passages among the 4 best
    # retrieval scores over the relevant passages among all 8
    reachable = np.mean(
        [
            len(set(list(run[q])[:4]) & set(es.labels[q].grades)) / len(es.labels[q].grades)
            for q in es.qids
        ]
    )
    assert reachable < 0.99
    result = run_calibration(
        es, texts, tmp_path / "cache", search=Search(max_k=8),
        constraints=["evidence_recall>=0.99"], grid=RerankGrid(top_n=(4,)),
    )  # fmt: skip
    config = result.config()  # type: ignore[attr-defined]
    assert not config.rerank.enabled and config.max_k == 8
    assert config.provenance["constraints_met"] is True and result.unmet() == []  # type: ignore[attr-defined]
    w = result.written_setting()  # type: ignore[attr-defined]
    assert w.two_stage is None and w.setting == "top-8"
    assert (
        w.stage.startswith("left off: rerank top-4") and "misses evidence_recall>=0.99" in w.stage
    )


def _as_files(
    es: EvalSet, texts: dict[str, str], run: dict[str, dict[str, float]], root: Path, fmt: str
) -> tuple[Path, dict[str, object]]:
    """The data of :func:`make_data` written as ``fmt``, texts in the files; the path to
    load and the loader's options."""
    root.mkdir(parents=True)
    rows = []
    for qid in es.qids:
        rel = sorted(es.labels[qid].grades)
        cands = [{"id": d, "score": s, "text": texts[d]} for d, s in run[qid].items()]
        row = {"query_id": qid, "query": es.queries[qid].text, "relevant": rel, "candidates": cands}
        if fmt == "jsonl-careful":  # graded labels: read line by line
            row["relevant"] = dict.fromkeys(rel, 1)
        rows.append(row)
    if fmt.startswith("jsonl"):
        path = root / "eval.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path, {}
    if fmt == "udcg":
        examples = [
            {"example_id": r["query_id"], "question": r["query"], "passages": [
                {"doc_id": c["id"], "text": c["text"], "is_relevant": c["id"] in r["relevant"]}
                for c in r["candidates"]
            ]} for r in rows
        ]  # fmt: skip
        path = root / "eval.json"
        path.write_text(json.dumps(examples))
        return path, {}
    path = root / "beir"
    (path / "qrels").mkdir(parents=True)
    (path / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in texts.items())
    )
    (path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": r["query_id"], "text": r["query"]}) + "\n" for r in rows)
    )
    (path / "qrels" / "test.tsv").write_text(
        "".join(f"{r['query_id']}\t{d}\t1\n" for r in rows for d in r["relevant"])
    )
    runs = root / "dense.trec"
    runs.write_text(
        "".join(
            f"{q} Q0 {d} {i} {s} dense\n"
            for q, c in run.items()
            for i, (d, s) in enumerate(c.items(), 1)
        )
    )
    return path, {"runs": runs}


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl-careful", "udcg", "beir"])
def test_calibration_takes_texts_from_the_loaded_set_never_from_the_file_again(
    data: tuple[EvalSet, dict[str, str], dict[str, dict[str, float]]], tmp_path: Path, fmt: str
) -> None:
    """The reranker and the stages after the cut read the texts the loader read: with
    the eval-set file gone after loading, the calibration is the one made with it."""
    from ragguard.calibration import load_evalset

    path, options = _as_files(*data, tmp_path / "data", fmt)
    loaded = load_evalset(path, **options)  # type: ignore[arg-type]
    settings: dict[str, Any] = {
        "rerank": RerankSearch(reranker=oracle, cache_dir=None, grid=RerankGrid(top_n=(4,))),
        "search": Search(max_k=4),
        "check": Check(n_bootstrap=20),
        "stages": Stages(max_tokens=20, near_duplicate_threshold=0.9),
    }
    expected = calibrate(load_evalset(path, **options), **settings)  # type: ignore[arg-type]
    assert expected.rerank is not None  # texts were found: the reranker ran
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    got = calibrate(loaded, **settings)  # type: ignore[arg-type]

    def setting(result: object) -> dict[str, object]:  # provenance: file hashes, times
        return result.config().model_dump(exclude={"provenance"})  # type: ignore[attr-defined,no-any-return]

    assert setting(got) == setting(expected)
    assert got.rerank is not None
    assert got.rerank.stage.scores.scores == expected.rerank.stage.scores.scores
