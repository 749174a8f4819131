"""The rerank stage: real CrossEncoder path on tiny local models, the Reranker protocol,
top_n, failures, time budget, cache, threads, async, config."""

from __future__ import annotations

import asyncio
import copy
import math
import os
import pickle
import re
import sys
import threading
import time
import tomllib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Models are built locally; nothing may be downloaded. huggingface_hub and transformers
# read these when first imported, which happens in this module's fixtures.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragguard
from ragguard import (
    Candidate,
    ConfigError,
    ContextGuard,
    CrossEncoderReranker,
    GuardConfig,
    MissingDependencyError,
    Reason,
    RerankConfig,
    Reranker,
    RerankError,
    RerankModelError,
    RerankWarning,
    ScoreKind,
    ScoreWarning,
    Selection,
)
from ragguard.config import load_toml
from ragguard.policy import PolicyParams
from ragguard.rerank import ScoreCache
from tests.reference_policy import reference_select
from tests.rerank_models import LOGITS, PASSAGES, QUERY, build_cross_encoder, sigmoid

# How far two float32 forward passes of the same model on the same pairs may disagree.
# CrossEncoder.predict pads each batch to its longest pair, and the padded shape changes
# the order of float32 sums in attention and matmul kernels (which also differ between
# CPUs): scores of one pair at batch sizes 1, 4 and 32 differed by up to 1.5e-6 on a
# 2-core machine. float32 resolves about 1.2e-7 near 1.0, so 1e-5 (~80 ulps) keeps that
# noise out while any real difference (a wrong pair, a wrong activation, a logit/
# probability mix-up) is orders of magnitude larger.
FLOAT32_TOL = 1e-5


def passages() -> list[Candidate]:
    return [Candidate(cid, text, score) for cid, text, score, _ in PASSAGES]


def ids(items: Sequence[Candidate]) -> list[str]:
    return [c.id for c in items]


def reasons(sel: Selection) -> dict[str, Reason | None]:
    return {d.candidate.id: d.reason for d in sel.dropped}


def assert_nothing_lost(sel: Selection, n: int) -> None:
    """Every input has exactly one decision; every dropped one has a reason and a
    message; with the stage on, each candidate has a rerank output (possibly NaN) or a
    rerank reason, never both."""
    assert sorted(d.index for d in sel.decisions) == list(range(n))
    assert [d.rank for d in sel.decisions] == list(range(n))
    assert len(sel.kept) + len(sel.dropped) == n
    assert ids(sel.kept) == [d.candidate.id for d in sel.kept_decisions]
    assert all(d.reason is not None and d.message for d in sel.dropped)
    if sel.rerank is not None:
        for d in sel.decisions:
            assert (d.rerank_raw_score is None) != (d.rerank_reason is None), d
            if d.rerank_score is not None:
                assert d.rerank_raw_score is not None


class Recorder:
    """A test scorer through the Reranker protocol: logits from a table, calls recorded."""

    score_kind = "logit"

    def __init__(self, table: dict[str, float] | None = None, default: float = -9.0) -> None:
        self.table = LOGITS if table is None else table
        self.default = default
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        with self._lock:
            self.calls.append(list(texts))
        return [self.table.get(t, self.default) for t in texts]


def rerank_guard(
    reranker: Reranker | None = None, *, rerank: dict[str, Any] | None = None, **settings: Any
) -> ContextGuard:
    base: dict[str, Any] = {"score_kind": "similarity", "max_k": 3, "relative_threshold": 0.7}
    config = GuardConfig(**{**base, **settings}, rerank={"enabled": True, **(rerank or {})})
    return ContextGuard(config, reranker=reranker)


# --- the real CrossEncoder path ---------------------------------------------------------


def test_cross_encoder_reorders_and_cuts_distractors(logit_model: Path) -> None:
    plain = ContextGuard(score_kind="similarity", max_k=3, relative_threshold=0.7)
    assert ids(plain.select(QUERY, passages()).kept) == ["goal", "pr", "squat"]

    guard = rerank_guard(rerank={"model": str(logit_model), "top_n": 5, "relative_threshold": 0.5})
    sel = guard.select(QUERY, passages())
    # probabilities: pr .998, slow .818, goal .378, talk .269, squat .047; bar .5 x .998
    assert ids(sel.kept) == ["pr", "slow"]
    assert reasons(sel) == {
        "goal": Reason.BELOW_RELATIVE_THRESHOLD,
        "talk": Reason.BELOW_RELATIVE_THRESHOLD,
        "squat": Reason.BELOW_RELATIVE_THRESHOLD,
        "deload": Reason.NOT_RERANKED,
    }
    assert [d.candidate.id for d in sel.dropped] == ["goal", "talk", "squat", "deload"]
    for d in sel.decisions:
        cid, _, retrieval, logit = next(p for p in PASSAGES if p[0] == d.candidate.id)
        assert d.retrieval_score == pytest.approx(retrieval)
        if cid == "deload":
            assert d.rerank_score is None and d.rerank_reason is Reason.NOT_RERANKED
            continue
        assert d.rerank_raw_score == pytest.approx(logit, abs=1e-4)
        assert d.rerank_score == pytest.approx(sigmoid(logit), abs=1e-5)
        assert d.normalized_score == d.rerank_score
    assert "rerank probability 0.3775 < relative_threshold 0.5" in sel.dropped[0].message
    assert sel.rerank is not None and sel.rerank.score_kind is ScoreKind.LOGIT
    assert sel.rerank.reranker == str(logit_model)
    assert_nothing_lost(sel, len(PASSAGES))


def test_guard_scores_equal_cross_encoder_predict(prob_model: Path) -> None:
    """The stage's raw scores are what CrossEncoder.predict returns on the same pairs (an
    independent call of the library), whatever the batch size, up to float32 noise."""
    from sentence_transformers import CrossEncoder

    texts = [text for _, text, _, _ in PASSAGES] + ["run", "back tight today", "squat squat"]
    direct = CrossEncoder(str(prob_model), device="cpu").predict(
        [(QUERY, t) for t in texts], show_progress_bar=False
    )
    cands = [Candidate(f"c{i}", t, 1.0 - i / 100) for i, t in enumerate(texts)]
    for batch_size in (1, 4, 32):
        guard = rerank_guard(
            rerank={"model": str(prob_model), "top_n": 50, "batch_size": batch_size},
            max_k=20,
            relative_threshold=0.0,
        )
        sel = guard.select(QUERY, cands)
        assert sel.rerank is not None and sel.rerank.score_kind is ScoreKind.PROBABILITY
        got = {d.candidate.text: d.rerank_raw_score for d in sel.decisions}
        assert [got[t] for t in texts] == pytest.approx(direct.tolist(), abs=FLOAT32_TOL)
        # the ranking is by the model's score, not by retrieval (the closest two scores
        # are 4e-3 apart, far beyond float32 noise, so the order is not a coin toss)
        by_model = sorted(zip(-direct, texts, strict=True))
        assert [c.text for c in sel.kept] == [t for _, t in by_model]


def test_logit_and_probability_models_give_one_selection(
    logit_model: Path, prob_model: Path
) -> None:
    """The same weights, once returning logits and once probabilities: the stage reads
    which from the model's activation and maps both to the same probabilities."""
    logit_reranker = CrossEncoderReranker(str(logit_model), device="cpu")
    prob_reranker = CrossEncoderReranker(str(prob_model), device="cpu")
    assert not logit_reranker.loaded
    assert logit_reranker.score_kind is ScoreKind.LOGIT
    assert prob_reranker.score_kind is ScoreKind.PROBABILITY
    assert logit_reranker.loaded

    settings: dict[str, Any] = {
        "max_k": 5,
        "rerank": {"top_n": 6, "relative_threshold": 0.0, "min_score": 0.2},
    }
    a = rerank_guard(logit_reranker, **settings).select(QUERY, passages())
    b = rerank_guard(prob_reranker, **settings).select(QUERY, passages())
    # min_score 0.2 is a probability whatever the model returns: goal (logit -0.5,
    # p .378) and talk (logit -1.0, p .269) pass it; a cut at 0.2 on logits would not
    assert ids(a.kept) == ids(b.kept) == ["pr", "slow", "goal", "talk"]
    assert (
        reasons(a)
        == reasons(b)
        == {
            "deload": Reason.BELOW_MIN_SCORE,
            "squat": Reason.BELOW_MIN_SCORE,
        }
    )
    # sigmoid in float64 here vs in float32 inside predict
    assert [d.rerank_score for d in a.decisions] == pytest.approx(
        [d.rerank_score for d in b.decisions], abs=FLOAT32_TOL
    )
    raw = {d.candidate.id: (d.rerank_raw_score, e.rerank_raw_score) for d, e in
           zip(a.decisions, b.decisions, strict=True)}  # fmt: skip
    assert raw["pr"][0] == pytest.approx(6.0, abs=1e-4)  # a logit
    assert raw["pr"][1] == pytest.approx(sigmoid(6.0), abs=FLOAT32_TOL)  # a probability


def test_declaring_the_wrong_kind_warns_and_names_the_fix(
    logit_model: Path, prob_model: Path
) -> None:
    wrong = rerank_guard(rerank={"model": str(logit_model), "score_kind": "probability"})
    with pytest.warns(ScoreWarning, match=r"set rerank\.score_kind='logit'") as record:
        sel = wrong.select(QUERY, passages())
    assert record[0].filename == __file__
    assert any("rerank.score_kind='logit'" in w for w in sel.warnings)

    wrong = rerank_guard(rerank={"model": str(prob_model), "score_kind": "logit"})
    with pytest.warns(ScoreWarning, match=r"set rerank\.score_kind='probability'"):
        wrong.select(QUERY, passages())


def test_unloadable_model_fails_when_the_guard_is_built(tmp_path: Path) -> None:
    """A model that cannot load is a RerankModelError from the constructor, under either
    policy, and never a timeout: loading is not part of a rerank call's budget."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    for on_failure in ("fail_open", "fail_closed"):
        with pytest.raises(RerankModelError) as info:
            rerank_guard(rerank={"model": str(folder), "on_failure": on_failure, "timeout_ms": 1})
        message = str(info.value)
        assert f"cannot load cross-encoder model {str(folder)!r}" in message
        assert "timeout" not in message and "\n" not in message
        assert info.value.__cause__ is not None
        assert type(info.value.__cause__).__name__ in message


@pytest.mark.parametrize("spec", ["scorer/", "./scorer", "~/no-such-ragguard-model", "a/b/c"])
def test_a_model_path_that_does_not_exist_is_no_folder(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 12: a spec that can only be a path is not looked up on the Hub."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RerankModelError, match=f"^no folder {re.escape(spec)}:"):
        rerank_guard(rerank={"model": spec})
    with pytest.raises(RerankModelError, match=f"^no folder {re.escape(spec)}:"):
        CrossEncoderReranker(spec).load()
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(RerankModelError, match=f"^no folder {re.escape(missing)}:"):
        CrossEncoderReranker(missing).load()


def test_the_model_loads_with_the_guard_so_the_first_call_is_within_the_budget(
    logit_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The rerank guide's [rerank] example (with its timeout_ms) reranks from the first call,
    even when loading the model takes longer than the budget."""
    import sentence_transformers

    guide = Path(__file__).resolve().parents[1] / "docs" / "guides" / "rerank.md"
    section = guide.read_text(encoding="utf-8").split("\n## ", 1)[0]  # before two-stage
    (toml,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    budget_ms = tomllib.loads(toml)["rerank"]["timeout_ms"]
    path = tmp_path / "ragguard.toml"
    path.write_text(
        re.sub(r'(?m)^model = "[^"]*"', f"model = '{logit_model}'", toml), encoding="utf-8"
    )
    original = sentence_transformers.CrossEncoder

    class SlowToLoad(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            time.sleep(budget_ms / 1000 + 0.3)  # a model load that alone exceeds the budget
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(sentence_transformers, "CrossEncoder", SlowToLoad)
    guard = ContextGuard.from_file(path)
    assert isinstance(guard.reranker, CrossEncoderReranker) and guard.reranker.loaded
    assert guard.config.rerank.timeout_ms == budget_ms
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RerankWarning (ran past the budget) fails here
        sel = guard.select(QUERY, passages())
    assert sel.rerank is not None and not sel.rerank.failed
    assert ids(sel.kept) == ["pr", "slow"]  # probabilities .998, .818; bar .5 x .998


def test_a_model_with_several_outputs_is_refused(tmp_path: Path) -> None:
    path = build_cross_encoder(tmp_path / "nli", QUERY, {}, num_labels=3)
    with pytest.raises(RerankModelError, match="has 3 outputs per pair"):
        CrossEncoderReranker(str(path), device="cpu").load()


def test_bad_reranker_arguments_are_config_errors() -> None:
    for model in ("", "  ", None):
        with pytest.raises(ConfigError, match="model must be a Hugging Face name or a local"):
            CrossEncoderReranker(model)  # type: ignore[arg-type]
    for bad in (0, True, "32"):
        with pytest.raises(ConfigError, match="batch_size must be an int >= 1"):
            CrossEncoderReranker("any/model", batch_size=bad)  # type: ignore[arg-type]
    for kind in ("cosine", "distance", 3):
        with pytest.raises(ConfigError) as info:
            CrossEncoderReranker("any/model", score_kind=kind)  # type: ignore[arg-type]
        assert f"score_kind={kind!r} is not allowed; use one of 'logit', 'probability'" in str(
            info.value
        )


def test_missing_extra_is_reported_when_the_guard_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes `import sentence_transformers` fail, as when the extra is
    # not installed
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError, match=r"pip install .*\[rerank\]") as info:
        rerank_guard(rerank={"model": "any/model"})  # fail_open does not hide it
    assert "sentence_transformers" in str(info.value)
    # a reranker of your own needs no extra
    assert ids(rerank_guard(Recorder(), rerank={"top_n": 6}).select(QUERY, passages()).kept) == [
        "pr",
        "slow",
    ]


def test_model_loads_once_across_threads(prob_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sentence_transformers

    loads: list[str] = []
    original = sentence_transformers.CrossEncoder

    class Counting(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            loads.append(args[0])
            time.sleep(0.05)  # widen the window in which threads race to load
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(sentence_transformers, "CrossEncoder", Counting)
    reranker = CrossEncoderReranker(str(prob_model), device="cpu")
    barrier = threading.Barrier(8)
    models: list[object] = []

    def load() -> None:
        barrier.wait()
        models.append(reranker.load())

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [str(prob_model)]  # one load, however many threads ask at once
    assert len(models) == 8 and all(m is models[0] for m in models)
    assert rerank_guard(reranker).reranker is reranker and len(loads) == 1  # not again

    guard = rerank_guard(rerank={"model": str(prob_model)})
    assert len(loads) == 2  # when the guard was built, not in select()
    queries = [QUERY, "deadlift pr", "squat 405", "bench run", "what was my pr", "week"]
    expected = {q: guard.select(q, passages()) for q in queries}
    results: dict[tuple[int, int], Selection] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for k in range(6):
                q = queries[(worker + k) % len(queries)]
                results[(worker, k)] = guard.select(q, passages())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(loads) == 2  # the guard's model, shared by every thread
    for (worker, k), sel in results.items():
        want = expected[queries[(worker + k) % len(queries)]]
        assert ids(sel.kept) == ids(want.kept)
        assert [d.rerank_raw_score for d in sel.decisions] == pytest.approx(
            [d.rerank_raw_score for d in want.decisions], abs=FLOAT32_TOL
        )


# --- the policy on rerank probabilities (a test scorer through the protocol) -------------


def test_plain_callable_through_the_protocol() -> None:
    seen: list[tuple[str, list[str]]] = []

    def api(query: str, texts: Sequence[str]) -> list[float]:
        seen.append((query, list(texts)))
        return [0.9 if "pulled" in t else 0.05 for t in texts]

    assert isinstance(api, Reranker)
    guard = rerank_guard(api, rerank={"score_kind": "probability", "top_n": 6})
    sel = guard.select(QUERY, passages())
    assert ids(sel.kept) == ["pr"]
    assert seen == [(QUERY, [t for _, t, _, _ in PASSAGES])]  # retrieval order, one call
    assert sel.kept_decisions[0].rerank_score == 0.9
    assert (
        sel.rerank is not None
        and sel.rerank.reranker == "test_plain_callable_through_the_protocol.<locals>.api"
    )


def test_a_reranker_must_say_what_its_scores_are() -> None:
    def api(query: str, texts: Sequence[str]) -> list[float]:
        return [0.0] * len(texts)

    with pytest.raises(ConfigError, match=r"set rerank\.score_kind to 'logit'"):
        rerank_guard(api)
    api.score_kind = "distance"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="score_kind='distance'"):
        rerank_guard(api)
    api.score_kind = "logit"  # type: ignore[attr-defined]
    assert rerank_guard(api).reranker is api


def test_rerank_threshold_defaults_to_the_guards_and_can_differ() -> None:
    # probabilities: pr .998, slow .818, goal .378, talk .269, squat .047 (deload .119)
    inherit = rerank_guard(Recorder(), rerank={"top_n": 6}, max_k=5, relative_threshold=0.3)
    assert ids(inherit.select(QUERY, passages()).kept) == ["pr", "slow", "goal"]
    own = rerank_guard(
        Recorder(), rerank={"top_n": 6, "relative_threshold": 0.2}, max_k=5, relative_threshold=0.9
    )
    assert ids(own.select(QUERY, passages()).kept) == ["pr", "slow", "goal", "talk"]


def test_guard_min_score_is_not_applied_to_probabilities() -> None:
    """The guard's min_score is on the retrieval scale; rerank.min_score replaces it."""
    guard = rerank_guard(
        Recorder(), rerank={"top_n": 6, "relative_threshold": 0.0}, max_k=6, min_score=0.99
    )
    assert len(guard.select(QUERY, passages()).kept) == 6


def test_top_n_smaller_than_the_candidates_drops_the_rest() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer, rerank={"top_n": 2, "relative_threshold": 0.0}, max_k=5)
    sel = guard.select(QUERY, passages())
    assert scorer.calls == [[PASSAGES[0][1], PASSAGES[1][1]]]  # the best two by retrieval
    assert ids(sel.kept) == ["pr", "goal"]  # reordered by the reranker
    assert reasons(sel) == {c: Reason.NOT_RERANKED for c in ("squat", "slow", "talk", "deload")}
    assert "retrieval rank 3 is below rerank.top_n=2" in sel.dropped[0].message
    assert sel.rerank is not None and sel.rerank.not_reranked == (2, 3, 4, 5)
    assert_nothing_lost(sel, 6)


def test_top_n_keep_below_fills_up_to_max_k_in_retrieval_order() -> None:
    guard = rerank_guard(
        Recorder(), rerank={"top_n": 2, "beyond_top_n": "keep_below", "relative_threshold": 0.5}
    )
    sel = guard.select(QUERY, passages())
    # reranked: pr kept, goal (.378 < .5 x .998) dropped; then 2 slots in retrieval order
    assert ids(sel.kept) == ["pr", "squat", "slow"]
    assert reasons(sel) == {
        "goal": Reason.BELOW_RELATIVE_THRESHOLD,
        "talk": Reason.OVER_MAX_K,
        "deload": Reason.OVER_MAX_K,
    }
    below = sel.kept_decisions[1]
    assert below.rerank_reason is Reason.NOT_RERANKED and below.rerank_score is None
    assert below.normalized_score is None and below.retrieval_score == 0.80
    assert_nothing_lost(sel, 6)


def test_top_n_follows_the_retrieval_ranking_not_the_input_order() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer, rerank={"top_n": 2}, score_kind="distance")
    cands = [Candidate("far", "squat 405", 3.0), Candidate("near", "pulled", 0.1),
             Candidate("mid", "run", 0.5)]  # fmt: skip
    sel = guard.select(QUERY, cands)
    assert scorer.calls == [["pulled", "run"]]
    assert reasons(sel) == {"far": Reason.NOT_RERANKED, **reasons(sel)}


def test_unknown_retrieval_kind_reranks_in_input_order_without_warning() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer, rerank={"top_n": 3}, score_kind=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = guard.select(QUERY, [Candidate(c.id, c.text) for c in passages()])
    assert scorer.calls == [[t for _, t, _, _ in PASSAGES[:3]]]
    assert ids(sel.kept) == ["pr"]
    assert all(d.retrieval_score is None for d in sel.decisions)


def test_empty_input_calls_nothing() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer)
    sel = guard.select(QUERY, [])
    assert (sel.kept, sel.dropped, scorer.calls) == ([], [], [])
    assert asyncio.run(guard.aselect(QUERY, ())).kept == []
    assert scorer.calls == []


def test_invalid_retrieval_scores_follow_invalid_scores() -> None:
    cands = [*passages()[:3], Candidate("none", "pulled 500 lb for a single today", None)]
    scorer = Recorder({"pulled 500 lb for a single today": 9.0})
    sel = rerank_guard(scorer, rerank={"top_n": 10}).select(QUERY, cands)
    assert "pulled 500 lb for a single today" not in scorer.calls[0]
    assert reasons(sel)["none"] is Reason.INVALID_SCORE
    assert_nothing_lost(sel, 4)

    scorer = Recorder({"pulled 500 lb for a single today": 9.0})
    guard = rerank_guard(scorer, rerank={"top_n": 10}, invalid_scores="keep_last")
    sel = guard.select(QUERY, cands)
    assert scorer.calls[0][-1] == "pulled 500 lb for a single today"  # reranked last
    assert ids(sel.kept) == ["none"]  # and it is the answer
    assert_nothing_lost(sel, 4)


def test_nothing_to_rerank_calls_nothing() -> None:
    scorer = Recorder()
    with pytest.warns(ScoreWarning, match="every candidate's score is missing"):
        sel = rerank_guard(scorer).select(QUERY, [Candidate("a", "x"), Candidate("b", "y")])
    assert scorer.calls == [] and sel.kept == []
    assert {d.reason for d in sel.dropped} == {Reason.INVALID_SCORE}
    assert sel.rerank is not None and sel.rerank.positions == () and not sel.rerank.failed
    assert_nothing_lost(sel, 2)


def test_a_kind_declared_by_a_property_is_read_when_scores_arrive() -> None:
    class Declares(Recorder):
        kind = "logit"

        @property
        def score_kind(self) -> str:  # type: ignore[override]
            return self.kind

    scorer = Declares()
    guard = rerank_guard(scorer, rerank={"top_n": 6})
    assert ids(guard.select(QUERY, passages()).kept) == ["pr", "slow"]
    scorer.kind = "similarity"
    with pytest.raises(ConfigError, match="declares score_kind='similarity'"):
        guard.select(QUERY, passages())  # a configuration error, never failed open


@pytest.mark.parametrize("bad", ["one nan", "all nan", "one inf"])
def test_a_score_that_is_not_a_number_fails_the_stage(bad: str) -> None:
    """NaN or inf from the reranker (one is enough) is a failed stage: fail_open selects
    on retrieval scores with a warning, never an empty selection; fail_closed raises."""
    goal = PASSAGES[0][1]
    table = {"one nan": {goal: math.nan}, "all nan": {}, "one inf": {goal: math.inf}}[bad]
    scorer = Recorder(table, default=math.nan if bad == "all nan" else 2.0)
    plain = ContextGuard(score_kind="similarity", max_k=3, relative_threshold=0.7)
    expected = plain.select(QUERY, passages())

    guard = rerank_guard(scorer, rerank={"top_n": 3, "cache_size": 10})
    with pytest.warns(RerankWarning, match="not a finite number") as record:
        sel = guard.select(QUERY, passages())
    assert record[0].filename == __file__
    assert ids(sel.kept) == ids(expected.kept) == ["goal", "pr", "squat"]
    assert reasons(sel) == reasons(expected)
    assert {d.rerank_reason for d in sel.decisions} == {Reason.RERANK_FAILED}
    assert sel.rerank is not None and sel.rerank.failed
    n_bad = 3 if bad == "all nan" else 1
    assert f"for {n_bad} of 3 passages" in (sel.rerank.error or "")
    assert_nothing_lost(sel, 6)
    with pytest.warns(RerankWarning):
        guard.select(QUERY, passages())
    assert len(scorer.calls) == 2  # unusable scores were not cached

    closed = rerank_guard(scorer, rerank={"top_n": 3, "on_failure": "fail_closed"})
    with pytest.raises(RerankError, match="not a finite number"):
        closed.select(QUERY, passages())
    with pytest.raises(RerankError, match="not a finite number"):
        asyncio.run(closed.aselect(QUERY, passages()))


def test_duplicates_are_resolved_before_reranking() -> None:
    scorer = Recorder()
    cands = [*passages()[:2], Candidate("pr", "pulled 500 lb for a single today", 0.1)]
    sel = rerank_guard(scorer, rerank={"top_n": 10}).select(QUERY, cands)
    assert len(scorer.calls[0]) == 2
    assert reasons(sel)["pr"] is Reason.DUPLICATE_ID
    assert sel.decisions[-1].rerank_reason is Reason.NOT_RERANKED


def test_inputs_are_never_mutated_and_selections_pickle() -> None:
    cands = passages()
    snapshot = copy.deepcopy(cands)
    scorer = Recorder()
    sel = rerank_guard(scorer, rerank={"top_n": 4}).select(QUERY, cands)
    _ = sel.decisions
    assert cands == snapshot
    for clone in (pickle.loads(pickle.dumps(sel)), copy.deepcopy(sel)):
        assert ids(clone.kept) == ids(sel.kept)
        assert [(d.candidate.id, d.reason, d.rerank_score) for d in clone.decisions] == [
            (d.candidate.id, d.reason, d.rerank_score) for d in sel.decisions
        ]


@settings(max_examples=150, deadline=None)
@given(
    retrieval=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=12),
    # half-integer logits: ties stay exact ties (they test tie-breaking) and no two
    # sigmoid implementations disagree by one ulp on near-ties
    logits=st.lists(st.integers(-24, 24).map(lambda k: k / 2), min_size=12, max_size=12),
    top_n=st.integers(1, 14),
    max_k=st.integers(1, 6),
    min_k=st.integers(0, 1),
    threshold=st.floats(0, 1),
    min_score=st.one_of(st.none(), st.floats(0, 1)),
    keep_below=st.booleans(),
    min_evidence=st.one_of(st.none(), st.sampled_from([0.2, 0.5, 0.8, 0.95])),
)
def test_stage_matches_a_plain_python_reference(
    retrieval: list[float],
    logits: list[float],
    top_n: int,
    max_k: int,
    min_k: int,
    threshold: float,
    min_score: float | None,
    keep_below: bool,
    min_evidence: float | None,
) -> None:
    n = len(retrieval)
    table = {f"t{i}": logits[i] for i in range(n)}
    cands = [Candidate(f"d{i}", f"t{i}", s) for i, s in enumerate(retrieval)]
    guard = rerank_guard(
        Recorder(table),
        max_k=max_k,
        min_k=min_k,
        min_evidence=min_evidence,
        rerank={
            "top_n": top_n,
            "relative_threshold": threshold,
            "min_score": min_score,
            "beyond_top_n": "keep_below" if keep_below else "drop",
        },
    )
    with warnings.catch_warnings():
        # random logits may all lie in [0, 1], random similarities may ascend: both
        # contradict their declared kind and warn, which is not what this test checks
        warnings.simplefilter("ignore", ScoreWarning)
        sel = guard.select("q", cands)

    # reference: rank by retrieval (stable), rerank the top_n, cut on probabilities
    by_retrieval = sorted(range(n), key=lambda i: -retrieval[i])
    top, below = by_retrieval[:top_n], by_retrieval[top_n:]
    probs = [sigmoid(logits[i]) for i in top]
    params = PolicyParams(max_k=max_k, min_k=min_k, relative_threshold=threshold,
                          min_score=min_score, min_evidence=min_evidence)  # fmt: skip
    kept_local, dropped_local = reference_select(list(probs), params)
    kept = [top[j] for j in kept_local]
    expected_reasons = {top[j]: r for j, r in dropped_local.items()}
    # min_evidence reads the best rerank probability: below it nothing is kept, not
    # even the candidates below top_n
    abstained = min_evidence is not None and max(probs) < min_evidence
    room = max_k - len(kept) if keep_below and not abstained else 0
    kept += below[:room]
    for i in below[room:]:
        expected_reasons[i] = (
            (Reason.INSUFFICIENT_EVIDENCE if abstained else Reason.OVER_MAX_K)
            if keep_below
            else Reason.NOT_RERANKED
        )

    assert [int(c.id[1:]) for c in sel.kept] == kept
    assert {d.index: d.reason for d in sel.dropped} == expected_reasons
    assert_nothing_lost(sel, n)


# --- failures and the time budget --------------------------------------------------------


def broken(query: str, texts: Sequence[str]) -> list[float]:
    raise ConnectionError("rerank API unreachable")


broken.score_kind = "probability"  # type: ignore[attr-defined]


def test_fail_open_returns_the_retrieval_selection_with_reasons() -> None:
    plain = ContextGuard(score_kind="similarity", max_k=3, relative_threshold=0.7)
    expected = plain.select(QUERY, passages())
    guard = rerank_guard(broken)  # on_failure defaults to fail_open
    with pytest.warns(RerankWarning, match="ConnectionError: rerank API unreachable") as record:
        sel = guard.select(QUERY, passages())
    assert record[0].filename == __file__
    assert ids(sel.kept) == ids(expected.kept) == ["goal", "pr", "squat"]
    assert reasons(sel) == reasons(expected)
    assert all(d.rerank_reason is Reason.RERANK_FAILED for d in sel.decisions)
    assert all(d.rerank_score is None for d in sel.decisions)
    assert sel.kept_decisions[0].message == "kept on retrieval score (rerank failed)"
    assert sel.rerank is not None and sel.rerank.failed
    assert "rerank API unreachable" in (sel.rerank.error or "")
    assert any("fail_open" in w for w in sel.warnings)
    assert_nothing_lost(sel, 6)


def test_fail_open_does_not_read_the_rerank_floor_on_retrieval_scores() -> None:
    """min_evidence is on the rerank probability scale when the stage is on: after a
    failed call the guard cuts on retrieval scores as without the floor (a floor of
    0.99 would empty every similarity-scored selection here), and says so."""
    plain = ContextGuard(score_kind="similarity", max_k=3, relative_threshold=0.7)
    guard = rerank_guard(broken, min_evidence=0.99)
    with pytest.warns(RerankWarning, match="min_evidence=0.99 is on the rerank probability"):
        sel = guard.select(QUERY, passages())
    assert ids(sel.kept) == ids(plain.select(QUERY, passages()).kept) == ["goal", "pr", "squat"]
    assert sel.verdict == "answerable"
    assert Reason.INSUFFICIENT_EVIDENCE not in {d.reason for d in sel.decisions}


def test_fail_closed_raises_with_the_cause() -> None:
    guard = rerank_guard(broken, rerank={"on_failure": "fail_closed"})
    with pytest.raises(RerankError, match="rerank API unreachable") as info:
        guard.select(QUERY, passages())
    assert isinstance(info.value.__cause__, ConnectionError)
    assert isinstance(info.value, RuntimeError)


def test_wrong_number_of_scores_is_a_failure() -> None:
    def short(query: str, texts: Sequence[str]) -> list[float]:
        return [1.0]

    guard = rerank_guard(short, rerank={"score_kind": "logit", "on_failure": "fail_closed"})
    with pytest.raises(RerankError, match="one score per passage"):
        guard.select(QUERY, passages())

    def words(query: str, texts: Sequence[str]) -> list[str]:
        return ["relevant"] * len(texts)

    guard = rerank_guard(words, rerank={"score_kind": "logit"})
    with pytest.warns(RerankWarning, match="returned list that is not a list of numbers"):
        sel = guard.select(QUERY, passages())
    assert ids(sel.kept) == ["goal", "pr", "squat"]


class Stuck:
    """A reranker that blocks until released: slow without sleeping in the test."""

    score_kind = "logit"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        self.started.set()
        self.release.wait(10)
        self.finished.set()
        return [0.0] * len(texts)


def test_a_blocking_reranker_is_abandoned_and_fails_open() -> None:
    stuck = Stuck()
    guard = rerank_guard(stuck, rerank={"timeout_ms": 30})
    try:
        with pytest.warns(RerankWarning, match=r"ran past rerank\.timeout_ms=30"):
            sel = guard.select(QUERY, passages())
        # select() returned while the reranker was still inside its call
        assert stuck.started.is_set() and not stuck.finished.is_set()
        assert ids(sel.kept) == ["goal", "pr", "squat"]  # the retrieval selection
        assert {d.rerank_reason for d in sel.decisions} == {Reason.RERANK_FAILED}
    finally:
        stuck.release.set()


def test_slow_reranker_fails_closed() -> None:
    stuck = Stuck()
    guard = rerank_guard(stuck, rerank={"timeout_ms": 30, "on_failure": "fail_closed"})
    try:
        with pytest.raises(RerankError, match=r"timeout_ms=30") as info:
            guard.select(QUERY, passages())
        assert isinstance(info.value.__cause__, TimeoutError)
    finally:
        stuck.release.set()


def test_a_fast_reranker_within_the_budget_is_used() -> None:
    guard = rerank_guard(Recorder(), rerank={"timeout_ms": 60_000, "top_n": 6})
    assert ids(guard.select(QUERY, passages()).kept) == ["pr", "slow"]


# --- async ---------------------------------------------------------------------------------


def test_aselect_runs_the_reranker_off_the_event_loop() -> None:
    class NeedsTheLoop(Recorder):
        """Blocks, as a model call does, until a task on the event loop releases it:
        run on the loop's thread it could never be released."""

        def __init__(self) -> None:
            super().__init__()
            self.started = threading.Event()
            self.released = threading.Event()
            self.thread: int | None = None

        def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
            self.thread = threading.get_ident()
            self.started.set()
            if not self.released.wait(10):
                raise RuntimeError("the event loop was blocked while the reranker ran")
            return super().__call__(query, texts)

    scorer = NeedsTheLoop()
    guard = rerank_guard(scorer, rerank={"top_n": 6, "on_failure": "fail_closed"})

    async def main() -> Selection:
        async def release_when_called() -> None:
            while not scorer.started.is_set():
                await asyncio.sleep(0.001)
            scorer.released.set()  # runs only if the loop is free while the reranker works

        task = asyncio.create_task(release_when_called())
        sel = await guard.aselect(QUERY, passages())
        await task
        return sel

    sel = asyncio.run(main())
    assert scorer.thread is not None and scorer.thread != threading.get_ident()
    assert ids(sel.kept) == ids(guard.select(QUERY, passages()).kept) == ["pr", "slow"]


def test_aselect_time_budget_and_failure_policy() -> None:
    stuck = Stuck()
    try:
        open_guard = rerank_guard(stuck, rerank={"timeout_ms": 30})

        async def caller() -> Selection:
            return await open_guard.aselect(QUERY, passages())

        with pytest.warns(RerankWarning, match="timeout_ms=30") as record:
            sel = asyncio.run(caller())
        assert record[0].filename == __file__  # the line that awaited aselect()
        assert sel.rerank is not None and sel.rerank.failed
        closed = rerank_guard(stuck, rerank={"timeout_ms": 30, "on_failure": "fail_closed"})
        with pytest.raises(RerankError):
            asyncio.run(closed.aselect(QUERY, passages()))
        with pytest.raises(RerankError, match="unreachable"):
            asyncio.run(
                rerank_guard(broken, rerank={"on_failure": "fail_closed"}).aselect(
                    QUERY, passages()
                )
            )
    finally:
        stuck.release.set()


# --- cache ---------------------------------------------------------------------------------


def test_cache_is_off_by_default() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer)
    guard.select(QUERY, passages())
    sel = guard.select(QUERY, passages())
    assert len(scorer.calls) == 2
    assert sel.rerank is not None and sel.rerank.cache_hits == 0


def test_cache_reuses_scores_and_stays_bounded() -> None:
    scorer = Recorder()
    guard = rerank_guard(scorer, rerank={"top_n": 3, "cache_size": 2})
    first = guard.select(QUERY, passages())
    a, b, c = (t for _, t, _, _ in PASSAGES[:3])
    assert scorer.calls == [[a, b, c]]
    # room for 2: the least recently used (a) was evicted
    second = guard.select(QUERY, passages())
    assert scorer.calls[1] == [a]
    assert second.rerank is not None and second.rerank.cache_hits == 2
    assert ids(second.kept) == ids(first.kept)
    assert [d.rerank_score for d in second.decisions] == [d.rerank_score for d in first.decisions]
    # another query is another key
    guard.select("another query", passages())
    assert scorer.calls[2] == [a, b, c]


def test_score_cache_is_an_lru() -> None:
    cache = ScoreCache(2)
    cache.put_many("q", ["a", "b"], [1.0, 2.0])
    assert cache.get_many("q", ["a"]) == [1.0]  # a is now the most recent
    cache.put_many("q", ["c"], [3.0])
    assert cache.get_many("q", ["a", "b", "c"]) == [1.0, None, 3.0]
    assert len(cache) == 2
    for bad in (0, True, 2.5):
        with pytest.raises(ConfigError, match="max_size must be an int >= 1"):
            ScoreCache(bad)  # type: ignore[arg-type]


# --- configuration -------------------------------------------------------------------------


def test_rerank_config_round_trips_through_toml(tmp_path: Path) -> None:
    config = GuardConfig(
        score_kind="distance",
        rerank={
            "enabled": True, "model": "BAAI/bge-reranker-base", "device": "cpu",
            "batch_size": 8, "max_length": 256, "top_n": 30, "beyond_top_n": "keep_below",
            "score_kind": "probability", "relative_threshold": 0.4, "min_score": 0.2,
            "timeout_ms": 250, "on_failure": "fail_closed", "cache_size": 1000,
        },
    )  # fmt: skip
    path = config.save(tmp_path / "ragguard.toml")
    assert "[rerank]" in path.read_text()
    again = GuardConfig.from_file(path)
    assert again.model_dump() == config.model_dump()
    assert again.rerank == config.rerank
    assert again.source_of("rerank") == f"file {path}"


def test_a_config_without_rerank_saves_no_rerank_table(tmp_path: Path) -> None:
    path = GuardConfig().save(tmp_path / "ragguard.toml")
    assert "rerank" not in load_toml(path)
    assert GuardConfig.from_file(path).rerank == RerankConfig()


def test_rerank_environment_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ragguard.toml"
    path.write_text('[rerank]\nmodel = "my/model"\ntop_n = 10\n', encoding="utf-8")
    monkeypatch.setenv("RAGGUARD_RERANK__ENABLED", "1")
    monkeypatch.setenv("RAGGUARD_RERANK__TOP_N", "7")
    config = GuardConfig.from_file(path)
    assert (config.rerank.enabled, config.rerank.top_n, config.rerank.model) == (
        True,
        7,
        "my/model",
    )


@pytest.mark.parametrize(
    ("rerank", "expected"),
    [
        ({"top_n": 0}, "rerank.top_n=0 (argument): Input should be greater than or equal to 1"),
        ({"score_kind": "distance"}, "returns 'logit' (most cross-encoders) or 'probability'"),
        ({"min_score": 2.0}, "rerank.min_score=2.0"),
        ({"on_failure": "ignore"}, "Input should be 'fail_open' or 'fail_closed'"),
        ({"topn": 5}, "unknown key 'rerank.topn' (argument); allowed keys: enabled, model"),
    ],
)
def test_invalid_rerank_values_are_named(rerank: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig(rerank=rerank)
    assert expected in str(info.value)


def test_invalid_rerank_value_in_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ragguard.toml"
    path.write_text("[rerank]\nbatch_size = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(f"rerank.batch_size=0 (file {path})")):
        GuardConfig.from_file(path)


def test_a_reranker_passed_while_the_stage_is_off() -> None:
    with pytest.raises(ConfigError, match="RAGGUARD_RERANK__ENABLED=1"):
        ContextGuard(GuardConfig(score_kind="similarity"), reranker=Recorder())
    # explicitly off (a kill switch): accepted, and not called
    scorer = Recorder()
    config = GuardConfig(score_kind="similarity", rerank={"enabled": False})
    guard = ContextGuard(config, reranker=scorer)
    assert guard.reranker is None
    guard.select(QUERY, passages())
    assert scorer.calls == []


def test_rerank_off_leaves_decisions_without_rerank_fields() -> None:
    sel = ContextGuard(score_kind="similarity", max_k=2).select(QUERY, passages())
    assert sel.rerank is None
    for d in sel.decisions:
        assert d.retrieval_score == d.normalized_score
        assert (d.rerank_score, d.rerank_raw_score, d.rerank_reason) == (None, None, None)


def test_the_rerank_guide_example_runs() -> None:
    guide = Path(__file__).resolve().parents[1] / "docs" / "guides" / "rerank.md"
    section = guide.read_text(encoding="utf-8").split("\n## ", 1)[0]  # before two-stage
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/guides/rerank.md", "exec"), namespace)
    selection = namespace["selection"]
    assert isinstance(selection, Selection)
    assert ids(selection.kept) == ["log-03-02"]


# --- the registry that saved pipelines name rerankers from ------------------------------


def registry_reranker(query: str, texts: Sequence[str]) -> list[float]:
    return [1.0] * len(texts)


def test_register_reranker_defaults_to_the_import_path_and_looks_up_by_identity() -> None:
    from ragguard.rerank import registered_name

    name = f"{__name__}.registry_reranker"
    assert ragguard.registered_reranker(name) is None
    assert ragguard.register_reranker(registry_reranker) is registry_reranker
    try:
        assert ragguard.registered_reranker(name) is registry_reranker
        assert registered_name(registry_reranker) == name
        other = lambda q, t: [0.0] * len(t)  # noqa: E731
        ragguard.register_reranker(other, name=name)  # a name is replaced
        assert ragguard.registered_reranker(name) is other
        assert registered_name(registry_reranker) is None
    finally:
        ragguard.unregister_reranker(name)
    assert ragguard.registered_reranker(name) is None
    ragguard.unregister_reranker(name)  # nothing there: nothing happens


def test_register_reranker_refuses_what_cannot_be_named_or_called() -> None:
    with pytest.raises(ConfigError, match=r"has no import path.*name='\.\.\.'"):
        ragguard.register_reranker(lambda q, t: [1.0] * len(t))
    with pytest.raises(ConfigError, match="callable as reranker"):
        ragguard.register_reranker("os.system", name="shell")
    for name in ("", " ", 3):
        with pytest.raises(ConfigError, match="name must be a non-empty string"):
            ragguard.register_reranker(registry_reranker, name=name)  # type: ignore[arg-type]
    assert ragguard.registered_reranker("shell") is None
