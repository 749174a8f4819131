"""With callbacks and event handlers on, every adapter sends and returns what it did
before issue 39 made the payloads lazy (payloads_golden.json, captured from that code),
on the sync and the async paths."""

from __future__ import annotations

import json
import warnings

import haystack
import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode

from ragguard import ContextGuard, GuardConfig, Reason, Selection
from tests.adapters.payloads import GOLDEN, Fixed, as_json, capture


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
def test_payloads_and_metadata_are_those_of_the_eager_code(run_async: bool) -> None:
    golden = json.loads(GOLDEN.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = as_json(capture(run_async))
    for guard, frameworks in golden.items():
        for framework, expected in frameworks.items():
            assert got[guard][framework] == expected, (guard, framework)


@pytest.mark.usefixtures("untraced")
def test_without_a_listener_no_payload_and_no_dropped_decision_is_built() -> None:
    """Nothing listens (no callback handler, no event handler): every adapter hands back
    the kept documents with their decisions, and never reads the dropped ones'."""
    seen: list[Selection] = []
    config = GuardConfig(max_k=2, relative_threshold=0.1, score_kind="similarity")
    guard = ContextGuard(config, on_selection=seen.append)
    rows = [(f"d{i}", f"passage {i}", 0.9 - 0.1 * i) for i in range(6)]
    lc = [Document(id=i, page_content=t, metadata={"score": s}) for i, t, s in rows]
    nodes = [NodeWithScore(node=TextNode(id_=i, text=t), score=s) for i, t, s in rows]
    hs = [haystack.Document(id=i, content=t, score=s) for i, t, s in rows]
    kept = [
        [d.metadata["ragguard"]["rank"] for d in guard.wrap(Fixed(docs=lc)).invoke("q")],
        [d.metadata["ragguard"]["rank"] for d in guard.as_compressor().compress_documents(lc, "q")],
        [
            n.node.metadata["ragguard"]["rank"]
            for n in guard.as_postprocessor().postprocess_nodes(nodes, query_str="q")
        ],
        [d.meta["ragguard"]["rank"] for d in guard.as_haystack().run("q", hs)["documents"]],
    ]
    assert kept == [[0, 1]] * 4
    assert len(seen) == 4 and not any("decisions" in vars(s) for s in seen)
    assert [d.reason for d in seen[0].dropped] == [Reason.OVER_MAX_K] * 4  # still there


def test_metadata_of_plain_values_is_copied_not_shared() -> None:
    """Metadata holding only str / int / float / bool / None is copied without a deep
    copy; editing what an adapter returned still never changes the caller's objects."""
    guard = ContextGuard(GuardConfig(max_k=2, score_kind="similarity"))
    meta = {"source": "a.txt", "page": 3, "ok": True, "none": None}
    lc = [Document(id="a", page_content="t", metadata={**meta, "score": 0.9})]
    nodes = [NodeWithScore(node=TextNode(id_="a", text="t", metadata=dict(meta)), score=0.9)]
    hs = [haystack.Document(id="a", content="t", score=0.9, meta=dict(meta))]
    out = [
        guard.wrap(Fixed(docs=lc)).invoke("q")[0].metadata,
        guard.as_postprocessor().postprocess_nodes(nodes, query_str="q")[0].node.metadata,
        guard.as_haystack().run("q", hs)["documents"][0].meta,
    ]
    for got in out:
        got["source"] = "changed"
        got["ragguard"]["kept"] = "changed"
    assert lc[0].metadata == {**meta, "score": 0.9}
    assert nodes[0].node.metadata == meta and hs[0].meta == meta


def test_an_answer_conflict_reaches_the_metadata_with_its_answers() -> None:
    """With the answers detector, each member's metadata carries the line an LLM prompt
    can quote, with how many passages back each answer."""
    guard = ContextGuard(
        GuardConfig(
            conflicts="flag",
            conflict_detector="answers",
            conflict_answer_similarity=0.2,
            relative_threshold=0.0,
        )
    )
    texts = [
        "The cathedral was founded in 1990 by the bishop of the town.",
        "Records of the town show the cathedral founded in 1992 by its bishop.",
        "According to the town, the bishop founded the cathedral in January 1990.",
    ]
    docs = [
        Document(id=i, page_content=t, metadata={"score": 0.9 - 0.05 * n})
        for n, (i, t) in enumerate(zip("abc", texts, strict=True))
    ]
    out = guard.as_compressor().compress_documents(docs, "When was the cathedral founded?")
    meta = [d.metadata["ragguard"] for d in out]
    assert [m["verdict"] for m in meta] == ["conflict"] * 3
    assert {line for m in meta for line in m["conflicts"]} == {
        "the sources disagree: 1990 (2) vs 1992 (1)"
    }
