"""Conflicting passages (ragguard.conflicts): detection on hand-made pairs with
hand-computed expectations, every ``conflicts`` mode through ContextGuard.select, and
hypothesis invariants against a brute-force reference written here."""

from __future__ import annotations

import asyncio
import copy
import math
import random
import re
import time
import warnings
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragguard import (
    Candidate,
    ConfigError,
    ConfigWarning,
    ContextGuard,
    GuardConfig,
    Reason,
    Selection,
    Verdict,
)
from ragguard.conflicts import (
    MAX_PAIRS,
    Conflict,
    ConflictMember,
    Pair,
    compared_passages,
    conflict_groups,
    differing_facts,
    find_conflicts,
    passage_words,
)
from ragguard.selecting import Stage, State
from ragguard.stages import UNSPACED, jaccard, shingles

# --- hand-made passages ----------------------------------------------------------------

PLANT = (
    "In {year} the {city} plant of the company built {cars} electric cars and employed "
    "about two thousand people on three shifts."
)
# 22 words for the shingles (3,559 is the two words 3 and 559): 20 word 3-shingles
AUSTIN = PLANT.format(year=2019, city="Austin", cars="3,559")
MORE_CARS = PLANT.format(year=2019, city="Austin", cars="4,112")
FREMONT = PLANT.format(year=2019, city="Fremont", cars="3,559")

DRUG = (
    "The drug is approved for children under twelve in the European Union since the "
    "spring of 2021."
)  # 17 words: 15 shingles
DRUG_NOT = DRUG.replace("is approved", "is not approved")
DRUG_KIDS = DRUG.replace("for children", "for kids")  # a reworded span, no fact
DRUG_YOUNG = DRUG.replace("for children", "for young children")  # an inserted adjective
UNRELATED = "Return shipping is free for members who order before noon on a weekday."


def pair_of(a: str, b: str, similarity: float = 0.5) -> list[Pair]:
    return find_conflicts([a, b], [shingles(a), shingles(b)], similarity=similarity)


def test_a_changed_number_is_a_conflict_with_the_spans_as_written() -> None:
    # 3,559 -> 4,112 changes words 9 and 10 of 22: the shingles starting at 7, 8, 9 and
    # 10 differ, so 16 of 20 are shared and the union holds 24: 16/24
    (p,) = pair_of(AUSTIN, MORE_CARS)
    assert (p.a, p.b) == (0, 1)
    assert p.similarity == pytest.approx(16 / 24)
    assert (p.spans_a, p.spans_b) == (("3,559",), ("4,112",))


def test_a_changed_name_is_a_conflict() -> None:
    # word 3 of 22 changes: 3 shingles differ, 17 shared, union 23
    (p,) = pair_of(AUSTIN, FREMONT)
    assert p.similarity == pytest.approx(17 / 23)
    assert (p.spans_a, p.spans_b) == (("Austin",), ("Fremont",))


def test_a_changed_date_is_a_conflict() -> None:
    # "4 March 2021" -> "14 June 2022": words 12-14 of 20 change, so the 5 shingles
    # touching them differ: 13 of 18 shared, union 23
    rule = (
        "The new visa rules for seasonal farm workers take effect on {} in every region of "
        "the country."
    )
    a, b = rule.format("4 March 2021"), rule.format("14 June 2022")
    (p,) = pair_of(a, b)
    assert p.similarity == pytest.approx(13 / 23)
    assert (p.spans_a, p.spans_b) == (("4 March 2021",), ("14 June 2022",))


def test_a_one_sided_negation_is_a_conflict() -> None:
    # "not" inserted after word 2 of 17: 2 shingles of DRUG lost, 3 new ones: 13 / 18
    (p,) = pair_of(DRUG, DRUG_NOT)
    assert p.similarity == pytest.approx(13 / 18)
    assert (p.spans_a, p.spans_b) == ((), ("not",))
    (q,) = pair_of(DRUG_NOT, DRUG)  # either order
    assert (q.spans_a, q.spans_b) == (("not",), ())


def test_a_negated_verb_in_place_of_another_is_a_conflict() -> None:
    owns = "The tenant owns the building on Main Street since the sale in 2015 by the city council."
    not_own = owns.replace("owns", "does not own")
    # a substitution ("owns" -> "does not own"), not an insertion: 12 shingles shared,
    # 15 + 17 - 12 = 20 in the union
    (p,) = pair_of(owns, not_own)
    assert p.similarity == pytest.approx(12 / 20)
    assert (p.spans_a, p.spans_b) == (("owns",), ("does not own",))
    # a contraction is a negation too: "doesn't own" vs "does own"
    (q,) = pair_of(owns.replace("owns", "does own"), owns.replace("owns", "doesn't own"))
    assert (q.spans_a, q.spans_b) == (("does",), ("doesn't",))


@pytest.mark.parametrize(
    "other",
    [
        DRUG,  # identical
        DRUG.lower().replace(".", ""),  # case and punctuation only
        DRUG_KIDS,  # a reworded span without a number, a name or a negation
        DRUG_YOUNG,  # an inserted word that is no negation
    ],
)
def test_the_same_facts_are_no_conflict(other: str) -> None:
    assert pair_of(DRUG, other, similarity=0.3) == []


def test_reordered_sentences_are_no_conflict() -> None:
    # the negated sentence moves from the front to the end: it is deleted on one side
    # and inserted on the other, word for word; nothing changed
    shop = "The shop on the corner of the market square opens at nine every weekday morning."
    first = "It is not open on Sundays. " + shop
    second = shop + " It is not open on Sundays."
    assert pair_of(first, second) == []
    # three sentences, the first and the last swapped (each one has a capital or a number)
    a = (
        "Entry is free. Its collection holds paintings and maps from many countries across "
        "the whole of Europe and Asia. Tickets cost 5 euros."
    )
    b = (
        "Tickets cost 5 euros. Its collection holds paintings and maps from many countries "
        "across the whole of Europe and Asia. Entry is free."
    )
    assert pair_of(a, b) == []
    # a moved sentence does not hide a fact changed elsewhere
    changed = second.replace("nine", "10")
    (p,) = pair_of(first, changed)
    assert (p.spans_a, p.spans_b) == (("nine",), ("10",))


def test_two_crops_of_one_page_are_no_conflict() -> None:
    page = [f"Part{i} not {i}" if i % 5 == 0 else f"word{i}" for i in range(40)]
    text = " ".join(page).split()
    # crop a: words 0..30, crop b: words 8..38 of the page's words; their heads and tails
    # (8 words each, holding numbers, capitals and "not") differ, the middle is shared
    a, b = " ".join(text[:31]), " ".join(text[8:39])
    sa, sb = shingles(a), shingles(b)
    shared = len(sa & sb)
    assert shared / len(sa | sb) >= 0.5
    assert pair_of(a, b) == []


def test_non_ascii_text() -> None:
    base = (
        "Der Vertrag wurde im Jahr 2020 in München von der Stadtverwaltung und dem "
        "Ministerium für Verkehr feierlich unterzeichnet."
    )
    # 18 words, word 7 changes: 13 shingles shared of 16, union 19
    (p,) = pair_of(base, base.replace("München", "Köln"))
    assert p.similarity == pytest.approx(13 / 19)
    assert (p.spans_a, p.spans_b) == (("München",), ("Köln",))
    wide = "\uff12\uff10\uff12\uff11"  # 2021 in full-width digits: digits too
    (q,) = pair_of(base, base.replace("2020", wide))
    assert q.spans_b == (wide,)


@pytest.mark.parametrize("similarity", [0.01, 0.5, 1.0])
def test_empty_whitespace_and_short_texts_never_conflict(similarity: float) -> None:
    texts = ["", "   \n\t ", "Paris 2019", "Paris 2020", "Paris 2020", "x"]
    # a text of fewer than 3 words is one shingle of its words: two such texts share
    # it only when they are the same words, which state the same facts
    assert find_conflicts(texts, [shingles(t) for t in texts], similarity=similarity) == []
    assert passage_words("   ").shown == ()


def test_only_active_columns_are_compared() -> None:
    texts = [AUSTIN, UNRELATED, MORE_CARS]
    sets = [shingles(t) for t in texts]
    assert [(p.a, p.b) for p in find_conflicts(texts, sets, similarity=0.5)] == [(0, 2)]
    assert find_conflicts(texts, sets, similarity=0.5, active=[True, True, False]) == []


def test_conflict_similarity_is_inclusive() -> None:
    assert pair_of(AUSTIN, MORE_CARS, similarity=16 / 24) != []
    assert pair_of(AUSTIN, MORE_CARS, similarity=16 / 24 + 1e-9) == []


def test_groups_are_connected_components() -> None:
    def p(a: int, b: int) -> Pair:
        return Pair(a, b, 0.6, (), ())

    assert conflict_groups(6, [p(2, 4), p(1, 3), p(0, 2)]) == [[0, 2, 4], [1, 3]]
    assert conflict_groups(3, []) == []
    # MORE_CARS and FREMONT differ in two places (7 shingles: 13/27 < 0.5), each is one
    # change away from AUSTIN: one group of three through AUSTIN
    texts = [MORE_CARS, AUSTIN, UNRELATED, FREMONT]
    pairs = find_conflicts(texts, [shingles(t) for t in texts], similarity=0.5)
    assert [(x.a, x.b) for x in pairs] == [(0, 1), (1, 3)]
    assert conflict_groups(4, pairs) == [[0, 1, 3]]


def test_describe_names_the_sources_and_what_differs() -> None:
    two = Conflict(
        (ConflictMember("a", 0, ("3,559",), True), ConflictMember("b", 4, ("4,112",), True)), 0.8
    )
    assert two.describe() == "sources 'a' and 'b' disagree: 3,559 vs 4,112"
    assert two.ids == ("a", "b")
    three = Conflict(
        (
            ConflictMember("a", 1, ("3,559", "Austin"), True),
            ConflictMember("b", 0, ("4,112",), False),
            ConflictMember("c", 3, (), True),
        ),
        0.7,
    )
    assert three.describe() == (
        "sources 'a', 'b' and 'c' disagree: 3,559; Austin vs 4,112 vs (nothing)"
    )


# --- every mode through ContextGuard.select -------------------------------------------------


def guard(mode: str = "off", **settings: object) -> ContextGuard:
    base: dict[str, object] = {
        "score_kind": "similarity",
        "max_k": 10,
        "relative_threshold": 0.0,
        "conflicts": mode,
    }
    return ContextGuard(GuardConfig(**{**base, **settings}))


def three(**metadata: dict[str, object]) -> list[Candidate]:
    """a (3,559) and b (4,112) conflict; x is unrelated."""
    return [
        Candidate("a", AUSTIN, 0.9, metadata.get("a", {})),
        Candidate("b", MORE_CARS, 0.8, metadata.get("b", {})),
        Candidate("x", UNRELATED, 0.7, metadata.get("x", {})),
    ]


def kept(sel: Selection) -> list[str]:
    return [c.id for c in sel.kept]


def reasons(sel: Selection) -> dict[str, Reason | None]:
    return {d.candidate.id: d.reason for d in sel.dropped}


def check_accounting(sel: Selection, n: int) -> None:
    assert len(sel.kept) + len(sel.dropped) == n
    assert sorted(d.index for d in sel.decisions) == list(range(n))
    assert [d.rank for d in sel.decisions] == list(range(n))
    assert all(d.reason is not None and d.message for d in sel.dropped)


def test_off_finds_nothing() -> None:
    sel = guard("off").select("q", three())
    assert kept(sel) == ["a", "b", "x"]
    assert sel.conflicts == () and sel.verdict is Verdict.ANSWERABLE


def test_flag_keeps_everything_and_reports_the_group() -> None:
    sel = guard("flag").select("q", three())
    assert kept(sel) == ["a", "b", "x"] and sel.dropped == []
    (group,) = sel.conflicts
    assert group.ids == ("a", "b")
    assert [(m.position, m.spans, m.kept) for m in group.members] == [
        (0, ("3,559",), True),
        (1, ("4,112",), True),
    ]
    assert group.similarity == pytest.approx(16 / 24)
    assert group.describe() == "sources 'a' and 'b' disagree: 3,559 vs 4,112"
    assert sel.verdict is Verdict.CONFLICT
    assert all(d.conflict_with == () for d in sel.decisions)


def test_drop_drops_every_member() -> None:
    sel = guard("drop").select("q", three())
    check_accounting(sel, 3)
    assert kept(sel) == ["x"]
    assert reasons(sel) == {"a": Reason.CONFLICT, "b": Reason.CONFLICT}
    by_id = {d.candidate.id: d for d in sel.dropped}
    assert by_id["a"].conflict_with == ("b",) and by_id["b"].conflict_with == ("a",)
    assert by_id["a"].message == (
        "conflicts with id 'b' at input position 1: 3,559 vs 4,112 (word 3-shingle "
        "similarity 0.667 >= conflict_similarity 0.5); conflicts='drop' drops every member "
        "of a conflict group"
    )
    assert [d.candidate.id for d in sel.decisions] == ["x", "a", "b"]  # kept first
    (group,) = sel.conflicts
    assert [m.kept for m in group.members] == [False, False]
    assert sel.verdict is Verdict.ANSWERABLE
    # a conflict dropping everything leaves nothing: insufficient
    only = guard("drop").select("q", three()[:2])
    assert kept(only) == [] and only.verdict is Verdict.INSUFFICIENT


def test_keep_first_keeps_the_better_ranked_member() -> None:
    # input order is not rank order: b is given first with the lower score
    cands = three()
    sel = guard("keep_first").select("q", [cands[1], cands[2], cands[0]])
    check_accounting(sel, 3)
    assert kept(sel) == ["a", "x"]
    (d,) = sel.dropped
    assert (d.candidate.id, d.reason, d.conflict_with) == ("b", Reason.CONFLICT, ("a",))
    assert d.message == (
        "conflicts with id 'a' at input position 2: 4,112 vs 3,559 (word 3-shingle "
        "similarity 0.667 >= conflict_similarity 0.5); conflicts='keep_first' keeps the "
        "better-ranked one"
    )
    assert sel.verdict is Verdict.ANSWERABLE
    assert [m.kept for m in sel.conflicts[0].members] == [True, False]


def test_keep_first_is_causal_along_the_kept_list() -> None:
    # a and c are the same text; b conflicts with both: b goes, c (whose only partner is
    # the dropped b) stays. drop removes the whole group.
    cands = [
        Candidate("a", AUSTIN, 0.9),
        Candidate("b", MORE_CARS, 0.8),
        Candidate("c", AUSTIN, 0.7),
    ]
    sel = guard("keep_first").select("q", cands)
    assert kept(sel) == ["a", "c"] and reasons(sel) == {"b": Reason.CONFLICT}
    assert sel.conflicts[0].ids == ("a", "b", "c")
    assert sel.verdict is Verdict.ANSWERABLE
    dropped = guard("drop").select("q", cands)
    assert kept(dropped) == [] and {d.conflict_with for d in dropped.dropped} == {
        ("b",),
        ("a", "c"),
    }
    # with the near-duplicate stage on as well, c then goes as a repeat of a
    both = guard("keep_first", near_duplicate_threshold=0.9).select("q", cands)
    assert kept(both) == ["a"]
    assert reasons(both) == {"b": Reason.CONFLICT, "c": Reason.NEAR_DUPLICATE}
    assert {d.candidate.id: d.duplicate_of for d in both.dropped}["c"] == "a"


@pytest.mark.parametrize(
    ("prefer", "meta", "winner"),
    [
        ("version", {"a": {"version": 1}, "b": {"version": 3}}, "b"),
        ("-version", {"a": {"version": 1}, "b": {"version": 3}}, "a"),
        # members without the key rank last, whichever the direction
        ("version", {"b": {"version": 1}}, "b"),
        ("-version", {"b": {"version": 1}}, "b"),
        ("version", {}, "a"),  # nobody has it: the best-ranked
        # ties go to the best-ranked member
        ("version", {"a": {"version": 2}, "b": {"version": 2}}, "a"),
        # dates as ISO strings compare as strings
        ("date", {"a": {"date": "2023-01-05"}, "b": {"date": "2024-03-01"}}, "b"),
        # None and NaN are no value: they rank last like a missing key
        ("version", {"a": {"version": None}, "b": {"version": 1}}, "b"),
        ("version", {"a": {"version": math.nan}, "b": {"version": 1}}, "b"),
        ("-version", {"a": {"version": math.nan}, "b": {"version": 1}}, "b"),
        ("version", {"a": {"version": 1}, "b": {"version": math.nan}}, "a"),
    ],
)
def test_prefer_keeps_the_member_with_the_preferred_value(
    prefer: str, meta: dict[str, dict[str, object]], winner: str
) -> None:
    sel = guard("prefer", conflict_prefer=prefer).select("q", three(**meta))
    check_accounting(sel, 3)
    loser = "b" if winner == "a" else "a"
    assert kept(sel) == [winner, "x"]
    (d,) = sel.dropped
    assert (d.candidate.id, d.reason, d.conflict_with) == (loser, Reason.CONFLICT, (winner,))
    assert f"conflicts with id {winner!r}" in d.message
    assert "conflicts='prefer' keeps the member with the preferred metadata value" in d.message
    assert sel.verdict is Verdict.ANSWERABLE


def test_prefer_in_a_group_of_three() -> None:
    # b (4,112) and d (Fremont) each conflict with a only; d has the greatest version
    cands = [
        Candidate("a", AUSTIN, 0.9, {"version": 1}),
        Candidate("b", MORE_CARS, 0.8, {"version": 2}),
        Candidate("d", FREMONT, 0.7, {"version": 3}),
    ]
    sel = guard("prefer", conflict_prefer="version").select("q", cands)
    assert kept(sel) == ["d"]
    by_id = {d.candidate.id: d for d in sel.dropped}
    assert by_id["a"].conflict_with == ("b", "d")
    assert "conflicts with id 'd'" in by_id["a"].message
    # b has no pair with d: its message names the member it conflicts with
    assert by_id["b"].conflict_with == ("a",)
    assert "conflicts with id 'a'" in by_id["b"].message
    (group,) = sel.conflicts
    assert [(m.id, m.spans, m.kept) for m in group.members] == [
        ("a", ("3,559", "Austin"), False),
        ("b", ("4,112",), False),
        ("d", ("Fremont",), True),
    ]


def test_prefer_values_that_cannot_be_compared_warn_once_and_keep_the_first() -> None:
    g = guard("prefer", conflict_prefer="version")
    cands = three(a={"version": "2"}, b={"version": 3})
    with pytest.warns(ConfigWarning, match=r"conflict_prefer='version': the values .*") as record:
        sel = g.select("q", cands)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert kept(sel) == ["a", "x"] and reasons(sel) == {"b": Reason.CONFLICT}
    assert any("cannot be compared" in w for w in sel.warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per guard
        again = g.select("q", cands)
    assert kept(again) == ["a", "x"]
    assert any("cannot be compared" in w for w in again.warnings)  # still listed


def test_only_passages_the_cut_kept_are_compared() -> None:
    sel = guard("flag", max_k=1).select("q", three())
    assert kept(sel) == ["a"] and sel.conflicts == () and sel.verdict is Verdict.ANSWERABLE
    sel = guard("drop", relative_threshold=0.9).select("q", three())
    assert kept(sel) == ["a"] and reasons(sel) == {
        "b": Reason.BELOW_RELATIVE_THRESHOLD,
        "x": Reason.BELOW_RELATIVE_THRESHOLD,
    }


@pytest.mark.parametrize("mode", ["flag", "drop", "keep_first", "prefer"])
def test_the_callers_candidates_are_never_mutated(mode: str) -> None:
    meta = {"a": {"version": [1], "tags": {"t"}}, "b": {"version": [3]}}
    sources = [{"doc": i} for i in range(3)]
    cands = [
        Candidate(c.id, c.text, c.score, c.metadata, source=s)
        for c, s in zip(three(**meta), sources, strict=True)
    ]
    snapshot = copy.deepcopy((cands, meta, sources))
    prefer = "version" if mode == "prefer" else None
    sel = guard(mode, conflict_prefer=prefer).select("q", cands)
    _ = sel.decisions, sel.conflicts
    assert (cands, meta, sources) == snapshot
    assert all(c is k for c, k in zip(cands, sel.candidates, strict=True))


def test_aselect_matches_select() -> None:
    g = guard("keep_first")
    sync = g.select("q", three())
    result = asyncio.run(g.aselect("q", three()))
    assert kept(result) == kept(sync) == ["a", "x"]
    assert result.conflicts == sync.conflicts and result.verdict is sync.verdict


def test_empty_whitespace_and_short_passages_through_the_guard() -> None:
    cands = [
        Candidate("e", "", 0.9),
        Candidate("w", "  \n", 0.8),
        Candidate("s1", "Paris 2019", 0.7),
        Candidate("s2", "Paris 2020", 0.6),
    ]
    sel = guard("drop").select("q", cands)
    assert kept(sel) == ["e", "w", "s1", "s2"]
    assert sel.conflicts == () and sel.verdict is Verdict.ANSWERABLE
    assert guard("flag").select("q", []).verdict is Verdict.INSUFFICIENT


# --- invariants against a brute-force reference ---------------------------------------------

POOL = [
    PLANT.format(year=y, city=c, cars=n)
    for y in (2019, 2020)
    for c in ("Austin", "Fremont")
    for n in ("3,559", "4,112")
] + [DRUG, DRUG_NOT, DRUG_KIDS, UNRELATED, "", "Paris 2019"]

rows = st.lists(
    st.tuples(
        st.sampled_from(range(len(POOL))),
        st.one_of(st.floats(0, 1, width=32), st.none()),
        st.sampled_from([None, 1, 2, 3, "missing"]),
    ),
    max_size=9,
)


def conflicting(a: str, b: str, similarity: float) -> bool:
    """The pair test alone, one pair at a time (no stage, no groups)."""
    return bool(find_conflicts([a, b], [shingles(a), shingles(b)], similarity=similarity))


def reference(
    order: Sequence[Candidate], mode: str, similarity: float, descending: bool
) -> list[str]:
    """What each mode keeps of the kept list ``order``, from the documented rules."""
    n = len(order)
    edge = [
        [i != j and conflicting(order[i].text, order[j].text, similarity) for j in range(n)]
        for i in range(n)
    ]
    if mode == "flag":
        return [c.id for c in order]
    if mode == "keep_first":
        out: list[int] = []
        for j in range(n):
            if not any(edge[i][j] for i in out):
                out.append(j)
        return [order[j].id for j in out]
    # groups: connected components, by a plain flood fill
    group = list(range(n))
    for i in range(n):
        seen, todo = {i}, [i]
        while todo:
            k = todo.pop()
            for j in range(n):
                if edge[k][j] and j not in seen:
                    seen.add(j)
                    todo.append(j)
        group[i] = min(seen)
    members = [j for j in range(n) if any(edge[j])]
    if mode == "drop":
        return [order[j].id for j in range(n) if j not in members]

    def value(j: int) -> float:
        v = order[j].metadata.get("version")
        if v is None:
            return -math.inf  # missing ranks last
        return float(v) if descending else -float(v)  # type: ignore[arg-type]

    winners = set()
    for g in {group[j] for j in members}:
        inside = [j for j in members if group[j] == g]
        winners.add(max(inside, key=lambda j: (value(j), -j)))  # ties: best-ranked
    return [order[j].id for j in range(n) if j not in members or j in winners]


@settings(max_examples=200, deadline=None)
@given(
    rows,
    st.sampled_from(["flag", "drop", "keep_first", "prefer"]),
    st.sampled_from([0.3, 0.5, 0.7]),
    st.booleans(),
    st.integers(1, 9),
)
def test_every_mode_equals_the_reference_and_keeps_its_invariants(
    data: list[tuple[int, float | None, object]],
    mode: str,
    similarity: float,
    descending: bool,
    max_k: int,
) -> None:
    cands = [
        Candidate(f"c{i}", POOL[t], s, {} if v == "missing" else {"version": v, "other": "x"})
        for i, (t, s, v) in enumerate(data)
    ]
    common: dict[str, object] = {"max_k": max_k, "conflict_similarity": similarity}
    prefer = ("" if descending else "-") + "version" if mode == "prefer" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scores rising along the input warn; not under test
        off = guard("off", **common).select("q", cands)
        sel = guard(mode, conflict_prefer=prefer, **common).select("q", cands)
    check_accounting(sel, len(cands))
    by_id = {c.id: c for c in cands}
    before = [by_id[c.id] for c in off.kept]
    assert kept(sel) == reference(before, mode, similarity, descending)
    if mode == "flag":
        assert kept(sel) == kept(off)
    # only the conflict stage dropped more than the cut did, each time with a partner
    # that the cut kept and that conflicts with it
    extra = {d.candidate.id for d in sel.dropped} - {d.candidate.id for d in off.dropped}
    for d in sel.dropped:
        if d.candidate.id in extra:
            assert d.reason is Reason.CONFLICT and d.conflict_with
            for other in d.conflict_with:
                assert other in kept(off)
                assert conflicting(d.candidate.text, by_id[other].text, similarity)
        else:
            assert d.reason is not Reason.CONFLICT and d.conflict_with == ()
    # the verdict says what the kept list holds
    pair = any(
        conflicting(a.text, b.text, similarity)
        for i, a in enumerate(sel.kept)
        for b in sel.kept[i + 1 :]
    )
    if mode != "flag":
        assert not pair
    expected = Verdict.INSUFFICIENT if not sel.kept else (
        Verdict.CONFLICT if pair else Verdict.ANSWERABLE
    )  # fmt: skip
    assert sel.verdict is expected
    # the groups: every conflicting pair of the cut's kept list is inside one group
    where = {m.id: g for g, group in enumerate(sel.conflicts) for m in group.members}
    for i, a in enumerate(before):
        for b in before[i + 1 :]:
            if conflicting(a.text, b.text, similarity):
                assert where[a.id] == where[b.id]
    for group in sel.conflicts:
        assert [m.kept for m in group.members] == [m.id in kept(sel) for m in group.members]


# --- scripts written without spaces (audit AT-07) ---------------------------------------

ZH = "2019年奥斯汀工厂生产了{}辆电动车\uff0c雇用了大约两千名员工。"  # \uff0c: a full-width comma
JA = "2019年にオースティン工場は{}台の電気自動車を生産した。"
TH = "ในปี 2019 โรงงานออสตินผลิตรถยนต์ไฟฟ้า {} คัน"


def test_chinese_near_copies_with_a_changed_number_conflict_through_the_guard() -> None:
    g = ContextGuard(score_kind="similarity", max_k=5, relative_threshold=0.5, conflicts="flag")
    cands = [Candidate("a", ZH.format(3559), 1.0), Candidate("b", ZH.format(4112), 0.95)]
    sel = g.select("q", cands)
    # each Han character is a word: 2019 年 奥 斯 汀 工 厂 生 产 了 N 辆 电 动 车 雇 用 了
    # 大 约 两 千 名 员 工 (25 words, 23 shingles); the 3 shingles holding N differ:
    # 20 shared, union 26
    assert sel.verdict is Verdict.CONFLICT
    (group,) = sel.conflicts
    assert group.similarity == pytest.approx(20 / 26)
    assert group.describe() == "sources 'a' and 'b' disagree: 3559 vs 4112"


@pytest.mark.parametrize("text", [ZH, JA, TH], ids=["chinese", "japanese", "thai"])
def test_unspaced_scripts_are_compared_character_by_character(text: str) -> None:
    (p,) = pair_of(text.format(3559), text.format(4112))
    assert (p.spans_a, p.spans_b) == (("3559",), ("4112",))
    # the same facts, or a changed word that is no number, are no conflict
    assert pair_of(text.format(3559), text.format(3559)) == []


def test_spans_in_unspaced_scripts_are_joined_as_written() -> None:
    a = passage_words("工厂生产了3,559辆电动车")
    assert a.shown == ("工", "厂", "生", "产", "了", "3,559", "辆", "电", "动", "车")
    b = passage_words("工厂生产了4,112台电动车")
    assert differing_facts(a, b) == (("3,559辆",), ("4,112台",))
    # Latin words keep their space
    assert differing_facts(
        passage_words("made 3,559 cars in Austin"), passage_words("made 4,112 trucks in Austin")
    ) == (("3,559 cars",), ("4,112 trucks",))


_GENERAL = re.compile(
    rf"\d+(?:[.,]\d+)*|[{UNSPACED}]|[^\W{UNSPACED}]+n['\u2019]t\b|[^\W{UNSPACED}]+"
)


@given(st.text(alphabet=st.sampled_from("aZn't 09,.-_\n\u2019é工了"), max_size=40) | st.text())
def test_passage_words_are_the_documented_tokens_on_ascii_and_other_text(text: str) -> None:
    """Numbers with separators, characters of scripts without spaces, n't contractions,
    other word runs (ASCII text goes through a faster expression: the same tokens)."""
    assert passage_words(text).shown == tuple(_GENERAL.findall(text))


# --- the cost bound (audit TM-02) --------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ("In 2019 they built cars", "In 2020 they built cars", (("2019",), ("2020",))),
        ("2019 was the year", "2020 was the year", (("2019",), ("2020",))),
        ("they built cars in 2019", "they built cars in 2020", (("2019",), ("2020",))),
        # one passage is the other plus more words: the common head takes all of the
        # shorter one and leaves no tail
        ("Rome 1 Rome", "Rome 1 Rome 1 Rome", ((), ())),
        ("Rome is Paris", "Rome is not Paris", ((), ("not",))),
        # the head and the tail overlap in the longer passage
        ("cars cars 5 cars cars", "cars cars 6 cars cars cars", (("5",), ("6 cars",))),
    ],
)
def test_the_common_head_and_tail_are_trimmed_exactly(
    x: str, y: str, expected: tuple[tuple[str, ...], tuple[str, ...]]
) -> None:
    assert differing_facts(passage_words(x), passage_words(y)) == expected


_WORDS = ["alpha", "beta", "gamma", "Delta", "not", "7", "8"]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(_WORDS), max_size=30), min_size=2, max_size=12),
    st.sampled_from([0.2, 0.3, 0.5, 0.7, 1.0]),
)
def test_the_prefilter_never_sets_aside_a_comparable_pair(
    passages: list[list[str]], similarity: float
) -> None:
    """Every pair whose exact shingle Jaccard reaches the level and whose words differ in
    a fact is found, with that similarity (a brute force over all pairs)."""
    texts = [" ".join(p) for p in passages]
    sets = [shingles(t) for t in texts]
    assert find_conflicts(texts, sets, similarity=similarity) == brute_force(texts, similarity)


def brute_force(texts: Sequence[str], similarity: float) -> list[Pair]:
    """The conflicting pairs by their definition, every pair compared."""
    sets = [shingles(t) for t in texts]
    out = []
    for a in range(len(texts)):
        for b in range(a + 1, len(texts)):
            sim = jaccard(sets[a], sets[b])
            if sim >= similarity:
                fa, fb = differing_facts(passage_words(texts[a]), passage_words(texts[b]))
                if fa or fb:
                    out.append(Pair(a, b, sim, fa, fb))
    return out


def test_long_passages_give_the_pairs_of_the_definition() -> None:
    """Passages of 400 words (their shared shingles are counted with numpy): copies of
    one passage with 0 to 120 words changed, so similarities spread across the level."""
    rnd = random.Random(5)
    vocabulary = [*_WORDS, *(f"w{i}" for i in range(300))]
    base = [rnd.choice(vocabulary) for _ in range(400)]
    texts = []
    for _ in range(20):
        copy = list(base)
        for _ in range(rnd.randrange(121)):
            copy[rnd.randrange(len(copy))] = rnd.choice(vocabulary)
        texts.append(" ".join(copy))
    sets = [shingles(t) for t in texts]
    assert sum(map(len, sets)) > 5_000
    found = find_conflicts(texts, sets, similarity=0.5)
    assert found == brute_force(texts, 0.5)
    assert 0 < len(found) < 190  # some pairs conflict, others are set aside


def near_copies(n: int, words: int) -> list[str]:
    """``n`` copies of one passage of ``words`` random words, each with its own number in
    the middle (the shape of audit case TM-02)."""
    rnd = random.Random(3)
    base = [f"w{rnd.randrange(3000)}" for _ in range(words)]
    mid = words // 2
    return [" ".join([*base[:mid], str(1000 + i), *base[mid + 1 :]]) for i in range(n)]


def test_the_pair_cap_compares_the_best_ranked_passages_whatever_follows() -> None:
    assert MAX_PAIRS == 1_225 and compared_passages(200) == 50 and compared_passages(50) == 50
    texts = near_copies(60, 40)
    sets = [shingles(t) for t in texts]
    pairs = find_conflicts(texts, sets, similarity=0.5)
    # every pair among the first 50, none with the 10 below them
    assert [(p.a, p.b) for p in pairs] == [(a, b) for a in range(50) for b in range(a + 1, 50)]
    assert pairs == find_conflicts(texts[:50], sets[:50], similarity=0.5)
    assert (pairs[0].spans_a, pairs[0].spans_b) == (("1000",), ("1001",))


def test_near_copies_beyond_the_pair_cap_are_grouped_and_the_cap_says_why() -> None:
    texts = near_copies(200, 300)
    cands = [Candidate(f"d{i}", t, 1 - i / 2000) for i, t in enumerate(texts)]
    g = guard("flag", max_k=200)
    with pytest.warns(ConfigWarning, match="compared the 50 best-ranked of the 200 kept"):
        sel = g.select("q", cands)
    assert sel.verdict is Verdict.CONFLICT and len(sel.kept) == 200
    (group,) = sel.conflicts
    assert group.ids == tuple(f"d{i}" for i in range(50))
    assert [m.spans for m in group.members] == [(str(1000 + i),) for i in range(50)]
    (message,) = sel.warnings
    assert "the 150 ranked below them were not checked" in message and "1,225 pairs" in message
    again = g.select("q", cands)  # warned once per guard, recorded on every selection
    assert again.warnings == sel.warnings
    # within the cap every passage is compared, and nothing is said
    sel = g.select("q", cands[:50])
    assert sel.warnings == () and sel.conflicts[0].ids == tuple(f"d{i}" for i in range(50))


# --- answer conflicts (conflict_detector) -----------------------------------------------

CATHEDRAL = "When was the cathedral founded?"
FOUNDED = [
    Candidate("a", "The cathedral was founded in 1990 by the bishop of the town.", 0.9),
    Candidate("b", "Records of the town show the cathedral founded in 1992 by its bishop.", 0.85),
    Candidate("c", "According to the town, the bishop founded the cathedral in January 1990.", 0.8),
]


def answers_guard(**overrides: object) -> ContextGuard:
    return ContextGuard(
        GuardConfig(
            conflicts=overrides.pop("conflicts", "flag"),
            conflict_detector=overrides.pop("conflict_detector", "answers"),
            conflict_answer_similarity=overrides.pop("conflict_answer_similarity", 0.2),
            relative_threshold=0.0,
            **overrides,
        )
    )


def test_passages_whose_answers_differ_conflict_though_they_are_no_near_copies() -> None:
    # no two of them share a word 3-shingle: the near-copy detector sees nothing
    assert (
        not ContextGuard(GuardConfig(conflicts="flag", relative_threshold=0.0))
        .select(CATHEDRAL, FOUNDED)
        .conflicts
    )
    sel = answers_guard().select(CATHEDRAL, FOUNDED)
    (group,) = sel.conflicts
    assert sel.verdict is Verdict.CONFLICT
    assert group.kind == "answers"
    assert group.ids == ("a", "b", "c")
    # January 1990 agrees with 1990: two passages back it
    assert dict(group.answers) == {"1990": ("a", "c"), "1992": ("b",)}
    assert group.describe() == "the sources disagree: 1990 (2) vs 1992 (1)"
    assert [m.spans for m in group.members] == [("1990",), ("1992",), ("1990-01",)]
    assert len({group, group}) == 1  # a group stays hashable, its answers a dict


def test_an_answer_conflict_drops_with_its_answers_in_the_message() -> None:
    sel = answers_guard(conflicts="keep_first").select(CATHEDRAL, FOUNDED)
    assert [c.id for c in sel.kept] == ["a", "c"]
    (dropped,) = sel.dropped
    assert dropped.reason is Reason.CONFLICT and dropped.conflict_with == ("a", "c")
    assert dropped.message.startswith(
        "conflicts with id 'a' at input position 0: answers 1992 vs 1990 to the query (word "
        "similarity "
    )
    assert "conflict_answer_similarity 0.2)" in dropped.message


def test_answer_conflicts_need_passages_about_one_subject() -> None:
    # word Jaccard of a and b is about 0.42: above it they are about different things
    assert not answers_guard(conflict_answer_similarity=0.9).select(CATHEDRAL, FOUNDED).conflicts


def test_a_question_with_no_type_has_no_answer_conflicts_and_says_so() -> None:
    guard = answers_guard()
    with pytest.warns(ConfigWarning, match="asks for no answer type"):
        sel = guard.select("Tell me about the cathedral.", FOUNDED)
    assert sel.conflicts == () and sel.verdict is Verdict.ANSWERABLE
    (line,) = sel.warnings
    assert line.startswith("conflicts: the query 'Tell me about the cathedral.' asks for no")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per guard; still in every selection
        assert guard.select("Why?", FOUNDED).warnings
        assert not guard.select(CATHEDRAL, FOUNDED).warnings  # a typed query: none


@pytest.mark.parametrize("query", [CATHEDRAL, "1990 1992", ""])
def test_hostile_passages_pass_the_answers_detector_within_a_time_bound(query: str) -> None:
    """20 candidates: no sentence boundary, a megabyte, numbers only, empty, one space,
    "nan", unspaced script, and agreeing / disagreeing ordinary ones."""
    hostile = [
        "the cathedral founded in 1990 " * 40_000,  # 1.2 MB, no boundary
        ("The cathedral was founded. " * 40_000) + "The cathedral was founded in 1992.",
        "1990 1992 " * 50_000,
        "",
        " ",
        "nan",
        "\u5927\u6559\u5802" * 300_000,
    ]
    cands = [Candidate(f"h{i}", t, 0.9 - 0.01 * i) for i, t in enumerate(hostile)]
    cands += [Candidate(c.id, c.text, 0.5 - 0.01 * i) for i, c in enumerate(FOUNDED)]
    cands += [Candidate(f"n{i}", f"Notes {i} on the cathedral.", 0.3) for i in range(10)]
    guard = answers_guard(conflict_detector="both", max_k=20)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)  # an untyped query says so
        sel = guard.select(query, cands)
    assert time.perf_counter() - start < 10.0
    assert len(sel.kept) == 20
    for group in sel.conflicts:
        assert all(isinstance(a, str) and a for a in group.answers)


def test_both_detectors_feed_one_group_with_the_kinds_recorded() -> None:
    cands = [
        Candidate("x", AUSTIN, 0.9),
        Candidate("y", MORE_CARS, 0.8),
        *FOUNDED,
    ]
    query = "How many electric cars did the Austin plant build in 2019?"
    sel = answers_guard(conflict_detector="both").select(query, cands)
    (group,) = sel.conflicts
    assert group.ids == ("x", "y") and group.kind == "near-copy+answers"
    assert dict(group.answers) == {"3559": ("x",), "4112": ("y",)}
    near = ContextGuard(GuardConfig(conflicts="flag", relative_threshold=0.0)).select(query, cands)
    assert [g.kind for g in near.conflicts] == ["near-copy"] and not near.conflicts[0].answers


class GivenAnswers(Stage):
    """An answerer stand-in: sets ``State.answers`` as the answerer stage does."""

    def __init__(self, answers: dict[int, str | None]) -> None:
        self.answers = answers

    def __call__(self, s: State, /) -> None:
        s.answers = dict(self.answers)


def test_a_model_s_answers_replace_the_answer_spans_where_given() -> None:
    guard = answers_guard()
    # before the conflict stage: the model says b's answer is 5 January 1990 (agrees),
    # gives none for a, and says nothing of c (its span: January 1990)
    at = next(i for i, st in enumerate(guard.stages) if type(st).__name__ == "Conflicts")
    guard.stages.insert(at, GivenAnswers({0: None, 1: "5 January 1990"}))
    assert answers_guard().select(CATHEDRAL, FOUNDED).conflicts  # the spans disagree
    assert guard.select(CATHEDRAL, FOUNDED).conflicts == ()
    guard.stages[at] = GivenAnswers({0: "1990", 1: "January 5, 1991", 2: float("nan")})  # type: ignore[dict-item]
    (group,) = guard.select(CATHEDRAL, FOUNDED).conflicts
    assert dict(group.answers) == {"1990": ("a",), "1991-01-05": ("b",)}


def test_an_unknown_detector_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="conflict_detector") as err:
        GuardConfig(conflict_detector="similar")
    assert "near-copy" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="conflict_answer_similarity"):
        GuardConfig(conflict_answer_similarity=float("nan"))
