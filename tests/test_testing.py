"""ragguard.testing: the guard's behaviour checked with the fakes users get."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.retrievers import BaseRetriever as LangChainRetriever
from llama_index.core.base.base_retriever import BaseRetriever as LlamaIndexRetriever

from ragguard import (
    Candidate,
    ConfigError,
    ContextGuard,
    GuardConfig,
    Reason,
    RerankError,
    Selection,
)
from ragguard._optional import install_hint
from ragguard.testing import (
    FakeReranker,
    assert_selection,
    fake_langchain_retriever,
    fake_llamaindex_retriever,
)

PASSAGES = [
    ("squat", "squat PR 405 lb, no deadlift today", 0.92),
    ("pr", "deadlift PR: pulled 500 lb for a single", 0.90),
    ("goal", "goal: a 500 lb deadlift", 0.85),
    ("oats", "overnight oats with banana", 0.30),
    ("none", "a passage the store gave no score", None),
]


def test_both_frameworks_cut_the_same_known_scores_the_same_way() -> None:
    seen: list[Selection] = []
    guard = ContextGuard(
        GuardConfig(max_k=2, relative_threshold=0.5, score_kind="similarity"),
        on_selection=seen.append,
    )
    # by hand: bar 0.5 x 0.92 = 0.46 drops oats; the score-less passage is dropped with a
    # reason; three pass the bar, max_k=2 keeps the first two
    expected = {
        "kept": ["squat", "pr"],
        "dropped": {
            "goal": Reason.OVER_MAX_K,
            "oats": Reason.BELOW_RELATIVE_THRESHOLD,
            "none": Reason.INVALID_SCORE,
        },
    }
    lc = fake_langchain_retriever(PASSAGES)
    assert isinstance(lc, LangChainRetriever)
    assert [d.id for d in guard.wrap(lc).invoke("q1")] == ["squat", "pr"]
    assert_selection(seen[-1], **expected)  # type: ignore[arg-type]
    assert [d.id for d in asyncio.run(guard.wrap(lc).ainvoke("q2"))] == ["squat", "pr"]
    assert_selection(seen[-1], **expected)  # type: ignore[arg-type]
    assert lc.queries == ["q1", "q2"]  # type: ignore[attr-defined]

    li = fake_llamaindex_retriever(PASSAGES)
    assert isinstance(li, LlamaIndexRetriever)
    assert [n.node.node_id for n in guard.wrap(li).retrieve("q3")] == ["squat", "pr"]
    assert_selection(seen[-1], **expected)  # type: ignore[arg-type]
    assert li.queries == ["q3"]  # type: ignore[attr-defined]


def test_the_rerank_stage_reorders_and_sees_only_the_top_n() -> None:
    """The distractor ranks first by retrieval; a reranker that reads the texts puts the
    answer first and the distractor below the bar."""
    reranker = FakeReranker(
        {
            "squat PR 405 lb, no deadlift today": 0.05,
            "deadlift PR: pulled 500 lb for a single": 0.95,
            "goal: a 500 lb deadlift": 0.40,
        }
    )
    seen: list[Selection] = []
    config = GuardConfig(
        max_k=3,
        relative_threshold=0.3,
        score_kind="similarity",
        rerank={"enabled": True, "top_n": 3},
    )
    guard = ContextGuard(config, reranker=reranker, on_selection=seen.append)
    docs = guard.wrap(fake_langchain_retriever(PASSAGES)).invoke("when was my deadlift PR")
    # by hand: bar 0.3 x 0.95 = 0.285 keeps pr (0.95) and goal (0.40), drops squat (0.05);
    # oats and the score-less passage never reach the reranker (top_n=3 by retrieval)
    assert [d.id for d in docs] == ["pr", "goal"]
    assert_selection(
        seen[-1],
        kept=["pr", "goal"],
        dropped={
            "squat": Reason.BELOW_RELATIVE_THRESHOLD,
            "oats": Reason.NOT_RERANKED,
            "none": Reason.INVALID_SCORE,
        },
    )
    ((query, texts),) = reranker.calls
    assert query == "when was my deadlift PR" and len(texts) == 3
    assert "overnight oats with banana" not in texts


def test_a_reranker_without_a_score_for_a_text_fails_closed() -> None:
    rerank = {"enabled": True, "on_failure": "fail_closed"}
    config = GuardConfig(score_kind="similarity", rerank=rerank)
    guard = ContextGuard(config, reranker=FakeReranker({}))
    with pytest.raises(RerankError, match="no score for the text"):
        guard.wrap(fake_llamaindex_retriever(PASSAGES[:1])).retrieve("q")
    with pytest.raises(ConfigError, match="use one of 'logit', 'probability'"):
        FakeReranker({}, score_kind="similarity")
    with pytest.raises(ConfigError, match="use one of 'logit', 'probability'"):
        FakeReranker({}, score_kind="cosine")


def test_assert_selection_lists_every_difference() -> None:
    guard = ContextGuard(max_k=2, relative_threshold=0.5, score_kind="similarity")
    selection = guard.select("q", [Candidate(i, score=s) for i, _, s in PASSAGES])
    assert_selection(selection, kept=["squat", "pr"])  # only what is asked is checked
    with pytest.raises(AssertionError) as info:
        assert_selection(
            selection,
            kept=["pr", "squat"],
            dropped={"goal": "over_max_k", "squat": "below_relative_threshold"},
        )
    message = str(info.value)
    assert "kept:\n  expected ['pr', 'squat']\n  actual   ['squat', 'pr']" in message
    assert "dropped 'squat':\n  expected below_relative_threshold\n  actual   kept" in message
    assert "dropped 'oats':\n  expected not dropped\n  actual   below_relative_threshold" in (
        message
    )
    assert "dropped 'goal'" not in message  # as expected
    assert re.search(r"dropped \{goal: over_max_k; oats: below_relative_threshold", message)


def test_fakes_name_their_extra_when_the_framework_is_missing() -> None:
    code = """
import sys
sys.modules["langchain_core"] = None
from ragguard import MissingDependencyError
from ragguard.testing import fake_langchain_retriever
try:
    fake_langchain_retriever([])
except MissingDependencyError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert install_hint("langchain") in out.stdout


def test_the_docs_example_runs() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "operations" / "testing.md"
    code = re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert code is not None and "assert_selection(" in code.group(1)
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), "docs/operations/testing.md", "exec"), namespace)
    seen = namespace["seen"]
    assert isinstance(seen, list) and [c.id for c in seen[-1].kept] == ["a", "b"]
