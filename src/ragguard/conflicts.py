"""Conflicting passages: near-copies (word 3-shingle Jaccard >= ``conflict_similarity``)
whose aligned words differ in a span carrying a fact (a number, a capitalised word, a
one-sided negation), and passages whose answers to the question differ
(``ragguard.answer_spans``); the rules and the modes: docs/guides/conflicts.md."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from itertools import pairwise

import numpy as np

from ragguard.answer_spans import MAX_CHARS, agree
from ragguard.answer_spans import normalise_answer as normalise_answer
from ragguard.policy import CODES, KEPT, ConflictDetector, ConflictMode, Reason
from ragguard.stages import SHINGLE_WORDS, UNSPACED, Shingles, StageState, words

NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nor", "neither", "without", "cannot", "nobody", "nothing"}
)

# numbers keep their separators (3,559 / 2.5 / 1,000,000), a character of a script
# written without spaces is a word, a contraction with n't stays one word (doesn't, or
# with a typographic apostrophe); other words are \w+ runs
_TOKEN = re.compile(rf"\d+(?:[.,]\d+)*|[{UNSPACED}]|[^\W{UNSPACED}]+n['\u2019]t\b|[^\W{UNSPACED}]+")
_ASCII_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|\w+n't\b|\w+")  # the same on ASCII, faster
_UNSPACED = re.compile(f"[{UNSPACED}]")
_NEGATED = re.compile(r"n['\u2019]t$")

MAX_SPAN = 6
"""Longer differing spans are different regions of a text, not a changed fact."""

MAX_PAIRS = 1_225
"""The most pairs one call compares (every pair among the 50 best-ranked passages): it
bounds the cost and depends only on the count, so the calibration sweep sees the same pairs."""

_NUMPY_FROM = 5_000  # shingles in all of the compared passages: count shared ones with numpy

MOVED_WORDS = 3
"""A differing span this long that the other side holds elsewhere moved (no changed fact);
shorter ones never count as moved (a moved ``not`` changes the meaning)."""


@dataclass(frozen=True, slots=True)
class PassageWords:
    shown: tuple[str, ...]
    low: tuple[str, ...]


def passage_words(text: str) -> PassageWords:
    """The words of ``text``: numbers with their separators, else ``\\w+`` runs."""
    shown = tuple((_ASCII_TOKEN if text.isascii() else _TOKEN).findall(text))
    return PassageWords(shown, tuple(map(str.lower, shown)))


def _is_fact(word: str) -> bool:
    return any(ch.isdigit() for ch in word) or word[:1].isupper()


def _negation(words: Sequence[str]) -> bool:
    return any(w.lower() in NEGATIONS or _NEGATED.search(w) for w in words)


@dataclass(frozen=True, slots=True)
class Pair:
    """One conflicting pair: columns ``a`` < ``b``, their similarity and differing spans
    (``kind`` answers: their word similarity and their answers)."""

    a: int
    b: int
    similarity: float
    spans_a: tuple[str, ...]
    spans_b: tuple[str, ...]
    kind: ConflictDetector = ConflictDetector.NEAR_COPY


def _join(words: Sequence[str]) -> str:
    """A span's words as one string, with no space next to a character of an unspaced script."""
    out = words[0]
    for prev, word in pairwise(words):
        glued = _UNSPACED.match(prev[-1]) or _UNSPACED.match(word[0])
        out += word if glued else " " + word
    return out


def _common_head(a: Sequence[str], b: Sequence[str]) -> int:
    """How many words ``a`` and ``b`` share at their start, by halving (slices compare in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # a[:lo] == b[:lo]; the answer is at most hi
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def differing_facts(x: PassageWords, y: PassageWords) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The spans of ``x`` and of ``y`` that differ and carry a fact (both empty when none do)."""
    out_x: list[str] = []
    out_y: list[str] = []
    a, b = x.low, y.low
    # the common head and tail are equal: align only what lies between (near-copies
    # that differ in one figure align in microseconds, however long they are)
    head = _common_head(a, b)
    rest = min(len(a), len(b)) - head  # the tail may not overlap the head
    tail = _common_head(a[len(a) - rest :][::-1], b[len(b) - rest :][::-1]) if rest else 0
    matcher = SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail], False)
    ops = [
        (head + i1, head + i2, head + j1, head + j2)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]
    gone = {a[i1:i2] for i1, i2, _, _ in ops if i2 - i1 >= MOVED_WORDS}
    came = {b[j1:j2] for _, _, j1, j2 in ops if j2 - j1 >= MOVED_WORDS}
    for i1, i2, j1, j2 in ops:
        sx, sy = x.shown[i1:i2], y.shown[j1:j2]
        if len(sx) > MAX_SPAN or len(sy) > MAX_SPAN:
            continue  # a different passage region, not a changed fact
        moved_x = not sx or (len(sx) >= MOVED_WORDS and x.low[i1:i2] in came)
        moved_y = not sy or (len(sy) >= MOVED_WORDS and y.low[j1:j2] in gone)
        if moved_x and moved_y:
            continue  # reordered text: each side is the other side of another span
        if sx and sy:  # a substitution: a fact on either side, or a one-sided negation
            fact = (
                any(map(_is_fact, sx)) or any(map(_is_fact, sy)) or _negation(sx) != _negation(sy)
            )
        else:  # an insertion: only a negation changes what the text says
            fact = _negation(sx or sy)
        if fact:
            if sx:
                out_x.append(_join(sx))
            if sy:
                out_y.append(_join(sy))
    return tuple(out_x), tuple(out_y)


def compared_passages(n: int) -> int:
    """How many of ``n`` ranked passages fit in ``MAX_PAIRS`` (the best-ranked ones)."""
    return min(n, (1 + math.isqrt(1 + 8 * MAX_PAIRS)) // 2)


def _shared_counter(sets: Sequence[Shingles]) -> Callable[[int, list[int]], list[int]]:
    """``shared(k, above)``: how many shingles passage ``k`` shares with each of ``above``;
    from ``_NUMPY_FROM`` shingles in all, a numpy gather instead of set intersections."""
    if sum(map(len, sets)) < _NUMPY_FROM:
        return lambda k, above: [len(sets[k] & sets[i]) for i in above]
    # equal shingles, equal numbers (the numbering follows the sets' iteration order:
    # the counts do not depend on it)
    number = {t: i for i, t in enumerate(frozenset().union(*sets))}
    keys = [np.fromiter(map(number.__getitem__, s), np.int64, len(s)) for s in sets]
    member = np.zeros(len(number), dtype=bool)  # the shingles of passage k

    def shared(k: int, above: list[int]) -> list[int]:
        member[keys[k]] = True
        counts = [int(np.count_nonzero(member[keys[i]])) for i in above]
        member[keys[k]] = False
        return counts

    return shared


def find_conflicts(
    texts: Sequence[str],
    sets: Sequence[Shingles],
    *,
    similarity: float,
    active: Sequence[bool] | None = None,
) -> list[Pair]:
    """Every conflicting pair (by ``(a, b)``) among the first ``compared_passages`` active
    columns; pairs whose set sizes cannot reach ``similarity`` are never aligned."""
    cols = [j for j in range(len(sets)) if active is None or active[j]]
    cols = cols[: compared_passages(len(cols))]
    mine = [sets[c] for c in cols]
    sizes = [len(s) for s in mine]
    shared = _shared_counter(mine)
    words: dict[int, PassageWords] = {}
    same: dict[str, str] = {}  # one object per word: slices compare by identity first

    def of(j: int) -> PassageWords:
        w = words.get(j)
        if w is None:
            w = passage_words(texts[j])
            w = words[j] = PassageWords(w.shown, tuple(map(same.setdefault, w.low, w.low)))
        return w

    out: list[Pair] = []
    for k in range(1, len(cols)):
        nb = sizes[k]
        if not nb:
            continue  # no words: comparable with nothing
        # Jaccard <= min / max of the sizes
        above = [i for i in range(k) if min(sizes[i], nb) >= similarity * max(sizes[i], nb)]
        if not above:
            continue
        for i, inter in zip(above, shared(k, above), strict=True):
            sim = inter / (sizes[i] + nb - inter)  # as stages.jaccard computes it
            if sim < similarity:
                continue
            fa, fb = differing_facts(of(cols[i]), of(cols[k]))
            if fa or fb:
                out.append(Pair(cols[i], cols[k], sim, fa, fb))
    out.sort(key=lambda p: (p.a, p.b))
    return out


def answer_conflicts(
    texts: Sequence[str],
    answers: Sequence[str | None],
    *,
    similarity: float,
    active: Sequence[bool] | None = None,
) -> list[Pair]:
    """Every pair (by ``(a, b)``) among the first ``compared_passages`` active columns whose
    normalised answers both exist and disagree (``answer_spans.agree``) and whose texts'
    word sets have a Jaccard similarity >= ``similarity`` (about the same subject)."""
    cols = [j for j in range(len(texts)) if active is None or active[j]]
    cols = [j for j in cols[: compared_passages(len(cols))] if answers[j]]
    sets = {j: frozenset(words(texts[j][:MAX_CHARS])) for j in cols}
    out: list[Pair] = []
    for n, k in enumerate(cols):
        for i in cols[:n]:
            ai, ak = answers[i], answers[k]
            assert ai is not None and ak is not None
            if agree(ai, ak):
                continue
            union = len(sets[i] | sets[k])
            sim = len(sets[i] & sets[k]) / union if union else 0.0
            if sim >= similarity:
                out.append(Pair(i, k, sim, (ai,), (ak,), ConflictDetector.ANSWERS))
    out.sort(key=lambda p: (p.a, p.b))
    return out


def merge_pairs(near: Sequence[Pair], answered: Sequence[Pair]) -> list[Pair]:
    """Both detectors' pairs by ``(a, b)``; a pair both found is the near-copy one, of
    kind ``both``."""
    both = {(p.a, p.b) for p in answered}
    out = [replace(p, kind=ConflictDetector.BOTH) if (p.a, p.b) in both else p for p in near]
    seen = {(p.a, p.b) for p in near}
    out += [p for p in answered if (p.a, p.b) not in seen]
    return sorted(out, key=lambda p: (p.a, p.b))


@dataclass(frozen=True, slots=True)
class ConflictMember:
    """One passage of a conflict group.

    Attributes:
        id: the candidate's id.
        position: its input position.
        spans: the spans of its text that differ from the other members (as written).
        kept: whether it reached the LLM.
    """

    id: str
    position: int
    spans: tuple[str, ...]
    kept: bool


@dataclass(frozen=True, slots=True)
class Conflict:
    """A group of passages that nearly repeat each other but differ in facts, or whose
    answers to the question differ.

    Attributes:
        members: the members, best-ranked first.
        similarity: the highest similarity of a conflicting pair in the group (word
            3-shingle Jaccard; word Jaccard for a pair found by its answers).
        answers: each normalised answer the members give to the question, with the ids
            of the members giving it, the answer most members give first (empty when the
            answers detector found no pair in the group).
        kind: the detectors that found its pairs: ``near-copy``, ``answers`` or
            ``near-copy+answers``.
    """

    members: tuple[ConflictMember, ...]
    similarity: float
    answers: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    kind: str = ConflictDetector.NEAR_COPY.value

    @property
    def ids(self) -> tuple[str, ...]:
        """The members' ids, best-ranked first."""
        return tuple(m.id for m in self.members)

    def describe(self) -> str:
        """One line an application can hand to the LLM or a log.

        Example:
            >>> Conflict((ConflictMember("a", 0, ("3,559",), True),
            ...           ConflictMember("b", 4, ("4,112",), True)), 0.8).describe()
            "sources 'a' and 'b' disagree: 3,559 vs 4,112"

            With the answers detector: ``the sources disagree: 1990 (2) vs 1992 (1)``.
        """
        if self.answers:
            counts = [f"{a} ({len(ids)})" for a, ids in self.answers.items()]
            return "the sources disagree: " + " vs ".join(counts)
        names = [repr(m.id) for m in self.members]
        who = ", ".join(names[:-1]) + " and " + names[-1]
        what = " vs ".join("; ".join(m.spans) or "(nothing)" for m in self.members)
        return f"sources {who} disagree: {what}"


def conflict_groups(n: int, pairs: Sequence[Pair]) -> list[list[int]]:
    """Connected components of the pairs, each sorted, ordered by first column."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for p in pairs:
        ra, rb = root(p.a), root(p.b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for p in pairs:
        for c in (p.a, p.b):
            g = groups.setdefault(root(c), [])
            if c not in g:
                g.append(c)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
"""The value of a passage that lacks the ``conflict_prefer`` key (ranks last)."""

_CONFLICT = CODES[Reason.CONFLICT]


def _no_value(value: object) -> bool:
    """Whether ``value`` is missing, ``None`` or NaN (differs from itself)."""
    if value is MISSING or value is None:
        return True
    try:
        return bool(value != value)
    except Exception:  # a value whose comparison raises is a value; _preferred decides
        return False


def _preferred(group: Sequence[int], values: Sequence[object], descending: bool) -> int | None:
    """The member of ``group`` with the greatest (``descending``) or smallest value, those
    without one last, ties to the best-ranked; ``None`` when values cannot be compared."""
    have = [c for c in group if not _no_value(values[c])]
    if not have:
        return group[0]
    best = have[0]
    try:
        for c in have[1:]:
            v, b = values[c], values[best]
            if (v > b) if descending else (v < b):  # type: ignore[operator]
                best = c
    except Exception:  # int vs str, Decimal NaN, an object whose comparison raises
        return None
    return best


def conflict_stage(
    state: StageState,
    *,
    texts: Sequence[Sequence[str]],
    shingles: Sequence[Sequence[Shingles]],
    similarity: float,
    mode: ConflictMode,
    prefer: Sequence[Sequence[object]] | None = None,
    descending: bool = True,
    pairs: Sequence[Sequence[Pair]] | None = None,
) -> tuple[StageState, list[list[Pair]], list[int]]:
    """Find the conflicting pairs among each row's kept passages (unless ``pairs`` are
    given, as the calibration sweep does) and apply ``mode``: ``flag`` keeps all, ``drop``
    drops every member of a group, ``keep_first`` drops a passage conflicting with a kept,
    higher-ranked one, ``prefer`` keeps each group's member with the preferred value (a
    group whose values cannot be compared falls back to ``keep_first``).

    Returns the new state, each row's pairs and the rows whose values were incomparable."""
    reasons, partner, sim = state.reasons.copy(), state.partner.copy(), state.similarity.copy()
    all_pairs: list[list[Pair]] = []
    incomparable: list[int] = []
    for q in range(reasons.shape[0]):
        if pairs is None:
            active = (reasons[q] == KEPT).tolist()
            row = find_conflicts(texts[q], shingles[q], similarity=similarity, active=active)
        else:
            row = list(pairs[q])
        all_pairs.append(row)
        if not row or mode is ConflictMode.FLAG:
            continue
        best_sim = {(p.a, p.b): p.similarity for p in row}
        keep_first = mode is ConflictMode.KEEP_FIRST
        drops = _keep_first(row) if keep_first else []
        for group in () if keep_first else conflict_groups(reasons.shape[1], row):
            if mode is ConflictMode.DROP:
                drops += [(c, next(_partners(c, row))) for c in group]
                continue
            assert prefer is not None
            winner = _preferred(group, prefer[q], descending)
            if winner is None:
                incomparable.append(q)
                drops += _keep_first([p for p in row if p.a in group])
                continue
            for c in group:
                if c != winner:
                    pair = (min(c, winner), max(c, winner))
                    drops.append((c, winner if pair in best_sim else next(_partners(c, row))))
        for c, other in drops:
            reasons[q, c], partner[q, c] = _CONFLICT, other
            sim[q, c] = best_sim.get((min(c, other), max(c, other)), np.nan)
    new = replace(state, reasons=reasons, partner=partner, similarity=sim)
    return new, all_pairs, incomparable


def _partners(c: int, pairs: Sequence[Pair]) -> Iterator[int]:
    for p in pairs:
        if p.a == c:
            yield p.b
        elif p.b == c:
            yield p.a


def _keep_first(pairs: Sequence[Pair]) -> list[tuple[int, int]]:
    """(dropped, partner): each pair's later member, unless either is already dropped."""
    dropped: dict[int, int] = {}
    for p in sorted(pairs, key=lambda p: (p.b, p.a)):
        if p.b not in dropped and p.a not in dropped:
            dropped[p.b] = p.a
    return list(dropped.items())


_RULES = {
    ConflictMode.DROP: "conflicts='drop' drops every member of a conflict group",
    ConflictMode.KEEP_FIRST: "conflicts='keep_first' keeps the better-ranked one",
    ConflictMode.PREFER: "conflicts='prefer' keeps the member with the preferred metadata value",
}


def conflict_message(
    other: str, position: int, pair: Pair, mine_first: bool, threshold: float, mode: ConflictMode
) -> str:
    """Why the conflict stage dropped a passage (``mine_first``: it is ``pair.a``)."""
    mine, theirs = (pair.spans_a, pair.spans_b) if mine_first else (pair.spans_b, pair.spans_a)
    if pair.kind is ConflictDetector.ANSWERS:  # (a pair both detectors found: near-copy)
        return (
            f"conflicts with id {other!r} at input position {position}: answers "
            f"{mine[0]} vs {theirs[0]} to the query (word similarity {pair.similarity:.3g} >= "
            f"conflict_answer_similarity {threshold:g}); {_RULES.get(mode, '')}"
        )
    return (
        f"conflicts with id {other!r} at input position {position}: "
        f"{'; '.join(mine) or '(nothing)'} vs {'; '.join(theirs) or '(nothing)'} (word "
        f"{SHINGLE_WORDS}-shingle similarity {pair.similarity:.3g} >= conflict_similarity "
        f"{threshold:g}); {_RULES.get(mode, '')}"
    )
