"""The answerer stage (issue 38): each kept passage's short answer from an answerer the
user passes in, batched, cached, time-limited, failing open with the reason recorded."""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ragguard import (
    AnswerStage,
    AnswerWarning,
    Candidate,
    ConfigError,
    ContextGuard,
    MissingDependencyError,
    Selection,
)
from ragguard.select_stages import Conflicts, Cut

QUERY = "When did the bridge open?"
# the cut keeps a, b, c, e (score >= 0.5 x the top with relative_threshold 0.5); d is dropped
PASSAGES = [
    Candidate("a", "The bridge opened in 1990 after six years.", 0.9),
    Candidate("b", "Opened to traffic in 1992, the bridge spans the river.", 0.8),
    Candidate("c", "The river is wide here.", 0.7),
    Candidate("d", "Unrelated text about 1950.", 0.1),
    Candidate("e", "   ", 0.6),
]
YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


class Years:
    """The first year in each passage, or None; records every call (texts, thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.threads: list[int] = []

    def __call__(self, query: str, texts: Sequence[str]) -> list[str | None]:
        self.calls.append((query, list(texts)))
        self.threads.append(threading.get_ident())
        return [m.group() if (m := YEAR.search(t)) else None for t in texts]


def guard_with(answerer: Any, **options: Any) -> ContextGuard:
    guard = ContextGuard(score_kind="similarity", relative_threshold=0.5, max_k=10)
    AnswerStage(answerer, **options).add_to(guard.stages)
    return guard


def plain_selection() -> Selection:
    """The same call on a guard without an answerer stage."""
    return ContextGuard(score_kind="similarity", relative_threshold=0.5, max_k=10).select(
        QUERY, PASSAGES
    )


def test_each_kept_passage_gets_its_answer_by_input_position() -> None:
    years = Years()
    sel = guard_with(years).select(QUERY, PASSAGES)
    # kept order; d (dropped by the cut) is not asked; e (blank) is not asked and has None
    assert list(sel.answers or {}) == [0, 1, 2, 4]
    assert sel.answers == {0: "1990", 1: "1992", 2: None, 4: None}
    assert years.calls == [(QUERY, [PASSAGES[i].text for i in (0, 1, 2)])]
    # the answerer adds answers and changes nothing else
    plain = plain_selection()
    assert sel.kept == plain.kept and sel.warnings == () and plain.answers is None
    assert [d.message for d in sel.decisions] == [d.message for d in plain.decisions]


def test_answers_are_stripped_and_an_empty_one_is_none() -> None:
    sel = guard_with(lambda q, texts: ["  1990 \n", "", "none"]).select(QUERY, PASSAGES)
    assert sel.answers == {0: "1990", 1: None, 2: "none", 4: None}


def test_add_to_puts_the_stage_right_after_the_cut_before_conflicts() -> None:
    guard = ContextGuard(score_kind="similarity", conflicts="flag", max_tokens=100)
    stage = AnswerStage(Years())
    stage.add_to(guard.stages)
    kinds = [type(s) for s in guard.stages]
    at = kinds.index(AnswerStage)
    assert kinds[at - 1] is Cut and kinds[at + 1] is Conflicts
    with pytest.raises(ConfigError, match=r"already hold an answerer stage") as twice:
        AnswerStage(Years()).add_to(guard.stages)
    assert "\n" not in str(twice.value)
    with pytest.raises(ConfigError, match=r"needs a guard's stages.*pass guard\.stages"):
        AnswerStage(Years()).add_to([])


def test_passages_go_in_batches_and_answers_come_from_the_cache() -> None:
    years = Years()
    texts = [Candidate(f"p{i}", f"Opened in {1990 + i}.", 1.0) for i in range(5)]
    guard = guard_with(years, batch_size=2)
    first = guard.select(QUERY, texts)
    assert [len(t) for _, t in years.calls] == [2, 2, 1]
    assert first.answers == {i: str(1990 + i) for i in range(5)}
    again = guard.select(QUERY, texts)
    assert len(years.calls) == 3 and again.answers == first.answers  # all from the cache
    guard.select("another query", texts[:1])  # the key is (query, passage)
    assert years.calls[-1] == ("another query", [texts[0].text])
    # cached None answers are answers too: not asked again
    nothing = [Candidate("x", "no year here", 1.0)]
    guard.select(QUERY, nothing)
    n = len(years.calls)
    assert guard.select(QUERY, nothing).answers == {0: None} and len(years.calls) == n


def test_the_cache_keeps_a_digest_of_each_passage_not_the_passage() -> None:
    years = Years()
    stage = AnswerStage(years)
    guard = ContextGuard(score_kind="similarity")
    stage.add_to(guard.stages)
    huge = [Candidate("huge", "word " * 200_000 + "in 1990", 1.0)]  # 1 MB
    assert guard.select(QUERY, huge).answers == guard.select(QUERY, huge).answers == {0: "1990"}
    assert len(years.calls) == 1
    assert stage.cache is not None and [len(p) for _, p in stage.cache._data] == [32]


def test_the_cache_is_bounded_and_can_be_turned_off() -> None:
    years = Years()
    texts = [Candidate(f"p{i}", f"Opened in {1990 + i}.", 1.0) for i in range(3)]
    guard = guard_with(years, cache_size=2)
    guard.select(QUERY, texts)
    guard.select(QUERY, texts[:1])  # evicted (least recently used): asked again
    assert years.calls[-1] == (QUERY, [texts[0].text])
    off = Years()
    guard = guard_with(off, cache_size=0)
    guard.select(QUERY, texts)
    guard.select(QUERY, texts)
    assert len(off.calls) == 2


def test_an_async_answerer_is_awaited_by_aselect_and_run_by_select() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    years = Years()

    async def answer(query: str, texts: Sequence[str]) -> list[str | None]:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return years(query, texts)

    expected = {0: "1990", 1: "1992", 2: None, 4: None}

    async def in_a_loop() -> Selection:
        sel = await guard_with(answer, batch_size=2, cache_size=0).aselect(QUERY, PASSAGES)
        assert loops and all(lp is asyncio.get_running_loop() for lp in loops)  # this loop
        return sel

    assert asyncio.run(in_a_loop()).answers == expected
    assert [len(t) for _, t in years.calls] == [2, 1]
    assert guard_with(answer).select(QUERY, PASSAGES).answers == expected


def test_an_object_with_an_async_call_is_awaited() -> None:
    class Remote:
        async def __call__(self, query: str, texts: Sequence[str]) -> list[str | None]:
            return ["x"] * len(texts)

    sel = asyncio.run(guard_with(Remote()).aselect(QUERY, PASSAGES))
    assert sel.answers == {0: "x", 1: "x", 2: "x", 4: None}


def test_aselect_runs_a_plain_answerer_off_the_event_loop_thread() -> None:
    years = Years()
    sel = asyncio.run(guard_with(years).aselect(QUERY, PASSAGES))
    assert sel.answers == {0: "1990", 1: "1992", 2: None, 4: None}
    assert years.threads and years.threads[0] != threading.get_ident()


def test_nothing_kept_asks_nothing() -> None:
    years = Years()
    sel = guard_with(years).select(QUERY, [])
    assert sel.answers is None and years.calls == []


def _raises(query: str, texts: Sequence[str]) -> list[str | None]:
    raise ValueError("model exploded")


async def _async_raises(query: str, texts: Sequence[str]) -> list[str | None]:
    raise ValueError("model exploded")


def _coroutine_from_plain_call(query: str, texts: Sequence[str]) -> Any:
    return _async_raises(query, texts)


FAILURES: list[tuple[str, Callable[[str, Sequence[str]], Any], str]] = [
    ("raises", _raises, r"answerer '_raises' raised ValueError: model exploded"),
    ("async raises", _async_raises, r"raised ValueError: model exploded"),
    ("too few", lambda q, t: ["1990"], r"returned 1 answers for 3 passages; it must return one"),
    ("too many", lambda q, t: [None] * 9, r"returned 9 answers for 3 passages"),
    ("int item", lambda q, t: [1990, None, None], r"returned int '1990' for passage 1 of 3"),
    ("NaN item", lambda q, t: ["a", math.nan, None], r"returned float 'nan' for passage 2 of 3"),
    ("bytes item", lambda q, t: [b"1990", None, None], r"returned bytes"),
    ("a str", lambda q, t: "1990", r"returned str, not a list of answers"),
    ("None", lambda q, t: None, r"returned NoneType, not a list of answers"),
    ("a dict", lambda q, t: {0: "1990"}, r"returned dict, not a list of answers"),
    ("a coroutine", _coroutine_from_plain_call, r"returned a coroutine.*declare it with async"),
]


@pytest.mark.parametrize(
    ("answerer", "message"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
@pytest.mark.parametrize("mode", ["select", "aselect"])
def test_a_failing_answerer_fails_open_with_the_reason(
    answerer: Callable[[str, Sequence[str]], Any], message: str, mode: str
) -> None:
    guard = guard_with(answerer)
    with pytest.warns(AnswerWarning, match=message) as warned:
        if mode == "select":
            sel = guard.select(QUERY, PASSAGES)
        else:
            sel = asyncio.run(guard.aselect(QUERY, PASSAGES))
    assert len(warned) == 1 and "\n" not in str(warned[0].message)
    assert sel.answers is None
    assert len(sel.warnings) == 1
    assert sel.warnings[0].startswith("answerer stage failed, selected without answers: ")
    assert re.search(message, sel.warnings[0])
    assert sel.kept == plain_selection().kept


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: a hanging answerer's thread then ends."""
    event = threading.Event()
    yield event
    event.set()


@pytest.mark.parametrize("mode", ["select", "aselect"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_answerer_past_the_time_limit_fails_open(
    release: threading.Event, mode: str, kind: str
) -> None:
    def hangs(query: str, texts: Sequence[str]) -> list[str | None]:
        release.wait(10)
        return ["late"] * len(texts)

    async def ahangs(query: str, texts: Sequence[str]) -> list[str | None]:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return ["late"] * len(texts)

    guard = guard_with(hangs if kind == "sync" else ahangs, timeout_ms=50)
    with pytest.warns(AnswerWarning, match=r"ran past timeout_ms=50$"):
        if mode == "select":
            sel = guard.select(QUERY, PASSAGES)
        else:
            sel = asyncio.run(guard.aselect(QUERY, PASSAGES))
    assert sel.answers is None and sel.kept == plain_selection().kept


def test_a_missing_dependency_is_a_configuration_error_not_a_failure() -> None:
    def needs_an_extra(query: str, texts: Sequence[str]) -> list[str | None]:
        raise MissingDependencyError('pip install "ragguard-context[endpoint]"')

    with pytest.raises(MissingDependencyError, match="endpoint"):
        guard_with(needs_an_extra).select(QUERY, PASSAGES)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"answerer": "not code"}, r"answerer must be callable .* got str"),
        ({"answerer": None}, r"answerer must be callable .* got NoneType"),
        ({"timeout_ms": 0}, r"timeout_ms must be a number of milliseconds > 0.*got 0"),
        ({"timeout_ms": -5}, r"timeout_ms .* got -5"),
        ({"timeout_ms": math.nan}, r"timeout_ms .* got nan"),
        ({"timeout_ms": math.inf}, r"timeout_ms .* got inf"),
        ({"timeout_ms": True}, r"timeout_ms .* got True"),
        ({"timeout_ms": "500"}, r"timeout_ms .* got '500'"),
        ({"batch_size": 0}, r"batch_size must be an int >= 1, got 0"),
        ({"batch_size": 2.0}, r"batch_size must be an int >= 1, got 2.0"),
        ({"batch_size": True}, r"batch_size must be an int >= 1, got True"),
        ({"cache_size": -1}, r"cache_size must be an int >= 0, got -1"),
    ],
)
def test_bad_settings_are_one_clear_line(options: dict[str, Any], message: str) -> None:
    answerer = options.pop("answerer", Years())
    with pytest.raises(ConfigError, match=message) as raised:
        AnswerStage(answerer, **options)
    assert "\n" not in str(raised.value)


def test_a_model_s_answers_group_passages_the_spans_cannot_tell_apart() -> None:
    """The answerer stage feeds the conflict stage's answers detector: two passages with
    no date in their text conflict once a model answers 1990 for one and 1992 for the
    other (issue 38, end to end)."""
    question = "When was the cathedral founded?"
    passages = [
        Candidate("a", "The cathedral was founded by the bishop of the town after the flood.", 0.9),
        Candidate(
            "b", "Records of the town show the cathedral founded by its bishop after a fire.", 0.8
        ),
    ]

    def answerer(query: str, texts: Sequence[str]) -> list[str | None]:
        assert query == question
        return ["1990" if "flood" in t else "in 1992" for t in texts]

    config = {"conflicts": "flag", "conflict_detector": "answers", "relative_threshold": 0.0}
    assert ContextGuard(**config).select(question, passages).conflicts == ()  # no spans
    guard = ContextGuard(**config)
    AnswerStage(answerer).add_to(guard.stages)
    for selection in (
        guard.select(question, passages),
        asyncio.run(guard.aselect(question, passages)),
    ):
        (group,) = selection.conflicts
        assert dict(group.answers) == {"1990": ("a",), "1992": ("b",)}
        assert selection.verdict.value == "conflict"
        assert "1990 (1) vs 1992 (1)" in group.describe()
