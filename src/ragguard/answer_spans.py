"""Answer-bearing spans: where a passage answers the question. The question's type (who,
when, how many, which sport...) says which candidate answers count; the passage's
sentence that shares most of the question's words holds them, and the candidate nearest
to a word of the question's predicate ("born", "population") is the passage's answer,
normalised so that equal answers compare equal (docs/guides/conflicts.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum

MAX_CHARS = 100_000
"""The most characters of one passage read for its answer (its beginning): bounds the cost
of a megabyte passage."""

ANSWER_OVERLAP = 0.3
"""The least share of the question's content words a sentence holds to bear an answer
(chosen by hand on the first 125 RAMDocs development questions)."""

_SENTENCE_WORDS = 60
"""A text without sentence boundaries is read in windows of this many words."""


class AnswerType(StrEnum):
    """The kind of answer a question asks for."""

    DATE = "date"
    NUMBER = "number"
    NAME = "name"
    SPORT = "sport"
    POSITION = "position"
    GENRE = "genre"
    MEDIUM = "medium"


# the closed lists of lower-case answers, by the question's noun (an agent noun maps to
# its sport: a golfer plays golf)
_LOWER: dict[AnswerType, dict[str, str]] = {
    AnswerType.SPORT: {
        **{
            s: s
            for s in (
                "football", "soccer", "golf", "tennis", "cricket", "rugby", "rugby union",
                "rugby league", "baseball", "basketball", "ice hockey", "hockey", "volleyball",
                "boxing", "chess", "darts", "snooker", "cycling", "swimming", "athletics",
                "wrestling", "skiing", "cross-country skiing", "speed skating", "handball",
                "badminton", "rowing", "weightlifting", "american football", "lacrosse",
                "water polo", "motorsport", "sailing", "fencing", "gymnastics", "judo",
            )
        },
        "golfer": "golf", "footballer": "football", "cricketer": "cricket",
        "boxer": "boxing", "cyclist": "cycling", "swimmer": "swimming", "skier": "skiing",
        "wrestler": "wrestling", "rower": "rowing", "fencer": "fencing",
        "gymnast": "gymnastics", "weightlifter": "weightlifting",
    },
    AnswerType.POSITION: {
        s: s
        for s in (
            "goalkeeper", "defender", "midfielder", "forward", "striker", "winger",
            "quarterback", "linebacker", "running back", "wide receiver", "tight end",
            "pitcher", "catcher", "shortstop", "outfielder", "infielder", "point guard",
            "shooting guard", "center", "centre", "guard", "fullback", "halfback", "prop",
            "hooker", "flanker", "lock", "scrum-half", "fly-half", "wing", "goaltender",
            "defenceman", "defenseman",
        )
    },
    AnswerType.GENRE: {
        s: s
        for s in (
            "rock", "pop", "jazz", "blues", "country", "folk", "hip hop", "rap", "reggae",
            "metal", "heavy metal", "punk", "soul", "classical", "opera", "electronic",
            "comedy", "drama", "thriller", "horror", "documentary", "western", "musical",
            "romance", "science fiction", "fantasy", "action", "animation", "crime",
        )
    },
    AnswerType.MEDIUM: {
        s: s
        for s in (
            "film", "novel", "play", "album", "single", "song", "series", "radio", "opera",
            "video game", "poem", "poetry", "painting", "sculpture", "musical", "television",
            "comic", "manga", "short story",
        )
    },
}  # fmt: skip

# the question's noun after what / which, and the type it asks for
_NOUNS: dict[str, AnswerType] = {
    "year": AnswerType.DATE, "date": AnswerType.DATE, "day": AnswerType.DATE,
    "birthday": AnswerType.DATE,
    "population": AnswerType.NUMBER, "number": AnswerType.NUMBER, "area": AnswerType.NUMBER,
    "length": AnswerType.NUMBER, "height": AnswerType.NUMBER, "size": AnswerType.NUMBER,
    "age": AnswerType.NUMBER, "income": AnswerType.NUMBER, "capacity": AnswerType.NUMBER,
    "sport": AnswerType.SPORT, "position": AnswerType.POSITION, "genre": AnswerType.GENRE,
    "medium": AnswerType.MEDIUM,
}  # fmt: skip
_NAME_NOUNS = frozenset((
    "country", "city", "state", "town", "county", "party", "war", "river", "channel", "name",
    "capital", "nationality", "team", "club", "company", "author", "artist", "director",
    "language", "operator", "location",
))  # fmt: skip
_STOP = frozenset((
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "by", "with", "from", "and", "or",
    "is", "are", "was", "were", "be", "been", "did", "does", "do", "what", "which", "who",
    "whom", "whose", "when", "where", "why", "how", "many", "much", "that", "this", "it",
    "its", "his", "her", "their", "as", "into", "about", "associated", "known", "located",
))  # fmt: skip
# question words a passage writes otherwise ("birth date" -> "born")
_SAME = {"birth": "born", "death": "died", "die": "died", "directors": "directed"}

_MONTHS = {m: i + 1 for i, m in enumerate((
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
))}  # fmt: skip
_MON = "|".join([*_MONTHS, *(m[:3] for m in _MONTHS if len(m) > 3), "sept"])
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNITS = (
    r"km ?2|km²|sq(?:uare)? ?(?:km|kilometres|kilometers|miles|mi)|km|kilometres|kilometers|"
    r"mi|miles|m|metres|meters|ft|feet|cc|kg|%|percent|years|laps|acres|hectares|ha"
)
_DATE = re.compile(
    rf"\b(?:(\d{{1,2}})(?:st|nd|rd|th)? ({_MON})\.? (\d{{3,4}})"  # 5 January 1990
    rf"|({_MON})\.? (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{3,4}})"  # January 5, 1990
    rf"|({_MON})\.? (\d{{3,4}})"  # January 1990
    r"|(\d{3,4})(?: ?(BC|BCE|AD))?)\b",  # 1990, 112 BC
    re.IGNORECASE,
)
_NUMBER = re.compile(rf"(?<![\w.,])(\$)?({_NUM})(?: ?({_UNITS})\b)?", re.IGNORECASE)
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{1,80})[\"\u201d]")
_CAP = r"[A-Z][\w'\u2019.-]*"
_NAME = re.compile(rf"{_CAP}(?:(?: (?:of|the|de|da|del|van|von|la|le|du|bin))* {_CAP})*")
_YEAR = re.compile(r"1\d{3}|20\d{2}")
_WORD = re.compile(r"[\w'\u2019-]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"\u201c(])|\n+")


def question_type(question: str) -> AnswerType | None:
    """The type of answer ``question`` asks for; ``None`` when it names none (a yes/no
    question, "what is X?", "why")."""
    low = _WORD.findall(question.lower())
    if not low:
        return None
    text = " ".join(low)
    if re.search(r"\bhow (many|much|long|tall|far|high|big|old|large)\b", text):
        return AnswerType.NUMBER
    if re.search(r"\bwhen\b", text):
        return AnswerType.DATE
    for i, w in enumerate(low):
        if w in ("what", "which"):
            # the noun after it, past "is the", an adjective ("political party")
            for n in low[i + 1 : i + 6]:
                if n in _NOUNS:
                    return _NOUNS[n]
                if n in _NAME_NOUNS:
                    return AnswerType.NAME
    if re.search(r"\b(who|whom|whose|where)\b", text):
        return AnswerType.NAME
    if re.search(r"\b(what|which)\b.*\b(of|in|did|does|was|is)\b", text) and re.search(
        r"\bthe \w+ of\b", text
    ):
        return AnswerType.NAME  # "what is the capital of X"
    return None


def _stem(word: str) -> str:
    word = _SAME.get(word, word)
    return word[:5]


def _content(question: str) -> tuple[frozenset[str], frozenset[str]]:
    """The question's content word stems, and those of its predicate (the lower-case ones)."""
    every, predicate = set(), set()
    for w in _WORD.findall(question):
        low = w.lower()
        if low in _STOP or (low in _NOUNS and _NOUNS[low] is not AnswerType.NUMBER):
            continue
        every.add(_stem(low))
        if w[:1].islower() and not w[:1].isdigit():
            predicate.add(_stem(low))
    return frozenset(every), frozenset(predicate)


def _sentences(text: str) -> list[str]:
    """``text``'s sentences; a long run without boundaries in windows of words."""
    out: list[str] = []
    for part in _SENTENCE.split(text[:MAX_CHARS]):
        words = part.split(" ")
        if len(words) <= 2 * _SENTENCE_WORDS:
            out.append(part)
            continue
        out += [
            " ".join(words[i : i + _SENTENCE_WORDS]) for i in range(0, len(words), _SENTENCE_WORDS)
        ]
    return out


def normalise_answer(text: str) -> str:
    """``text`` as an answer that compares equal to the same answer written otherwise:
    lower case, no leading preposition, article or "about", dates as ``1990-01-05`` /
    ``1990-01`` / ``1990``, numbers without thousands separators, ``km 2`` as ``km²``, no
    count noun ("people").

    Args:
        text: a short answer (a span of a passage, or a model's answer).

    Returns:
        The normalised answer (``""`` for an empty or blank one).

    Example:
        >>> normalise_answer("5 January 1990") == normalise_answer("January 5, 1990")
        True
    """
    t = " ".join(str(text).split()).strip(" .,;:!?\"'\u201c\u201d()")
    t = re.sub(r"^(?:in|on|at|by|since|from)\s+", "", t, flags=re.I)  # a model's "in 1992"
    date = _DATE.fullmatch(t)
    if date:
        return _date(date)
    low = re.sub(r"^(?:the|a|an|about|approximately|around|some|over)\s+", "", t.lower())
    num = _NUMBER.fullmatch(re.sub(r"\s+(?:people|inhabitants|residents|persons)$", "", low))
    if num:
        return _number(num)
    return low


def _date(m: re.Match[str]) -> str:
    d, mon, y, mon2, d2, y2, mon3, y3, year, era = m.groups()
    if year:
        era = (era or "").upper().replace("BCE", "BC")
        return f"{int(year)} BC" if era == "BC" else str(int(year))
    if mon3:
        return f"{int(y3)}-{_month(mon3):02d}"
    day, month, yr = (d, mon, y) if mon else (d2, mon2, y2)
    return f"{int(yr)}-{_month(month):02d}-{int(day):02d}"


def _month(name: str) -> int:
    low = name.lower().rstrip(".")
    return next(v for k, v in _MONTHS.items() if k.startswith(low[:3]))


def _number(m: re.Match[str]) -> str:
    dollar, num, unit = m.groups()
    value = num.replace(",", "")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    unit = (unit or "").lower()
    unit = re.sub(r"^(?:km ?2|sq(?:uare)? ?(?:km|kilometres|kilometers))$", "km²", unit)
    unit = {"percent": "%", "metres": "m", "meters": "m", "feet": "ft", "miles": "mi"}.get(
        unit, unit
    )
    return ("$" if dollar else "") + value + (" " + unit if unit else "")


def _candidates(sentence: str, kind: AnswerType, question: str) -> list[tuple[int, str]]:
    """``(word offset, normalised answer)`` of each candidate of ``kind`` in ``sentence``,
    those the question itself holds left out."""
    spans: list[tuple[int, int, str]] = []
    if kind is AnswerType.DATE:
        spans = [(m.start(), m.end(), _date(m)) for m in _DATE.finditer(sentence)]
    elif kind is AnswerType.NUMBER:
        taken = [(m.start(), m.end()) for m in _DATE.finditer(sentence) if not m.group(9)]
        spans = [
            (m.start(), m.end(), _number(m))
            for m in _NUMBER.finditer(sentence)
            if not any(a <= m.start() < b for a, b in taken)
        ]
    elif kind is AnswerType.NAME:
        if not re.match(r"\W*who", question, re.IGNORECASE):  # a title answers what, not who
            spans = [(m.start(), m.end(), m.group(1).lower()) for m in _QUOTED.finditer(sentence)]
        # a capitalised first word of a sentence is no name by itself
        spans += [
            (m.start(), m.end(), m.group().lower().rstrip("."))
            for m in _NAME.finditer(sentence)
            if m.start() or " " in m.group()
        ]
    else:
        low = sentence.lower()
        for word, answer in _LOWER[kind].items():
            spans += [
                (m.start(), m.end(), answer) for m in re.finditer(rf"\b{re.escape(word)}\b", low)
            ]
    q = question.lower()
    out = []
    for start, _, answer in spans:
        if not answer or answer in q or answer.strip(" .") in _STOP:
            continue
        out.append((sentence.count(" ", 0, start), answer))
    return out


def passage_answer(question: str, text: str, *, overlap: float) -> str | None:
    """The normalised answer ``text`` gives to ``question``: in its sentence sharing most of
    the question's content words (at least the share ``overlap``; ties to the first), the
    candidate of the question's type nearest to a word of its predicate. ``None`` when the
    question has no type, no sentence shares enough words or none holds a candidate.

    Args:
        question: the question (``State.query``).
        text: the passage.
        overlap: the least share of the question's content words the sentence holds.

    Returns:
        The normalised answer, or ``None``.
    """
    return passage_answers(question, [text], overlap=overlap)[0]


def agree(a: str, b: str) -> bool:
    """Whether two normalised answers can be the same answer: equal, one date within the
    other (``1990`` and ``1990-01-05``), or one name's words within the other's."""
    if a == b:
        return True
    if a[:4].isdigit() and b[:4].isdigit():
        return a.startswith(b + "-") or b.startswith(a + "-")
    wa, wb = set(a.split()), set(b.split())
    return bool(wa) and bool(wb) and (wa <= wb or wb <= wa) and not (a[:1] + b[:1]).isdigit()


def passage_answers(question: str, texts: Sequence[str], *, overlap: float) -> list[str | None]:
    """[`passage_answer`][ragguard.answer_spans.passage_answer] of each of ``texts``, the
    question read once."""
    kind = question_type(question)
    every, predicate = _content(question)
    if kind is None or not every:
        return [None] * len(texts)
    return [
        _answer(question, kind, every, predicate, t, overlap) if isinstance(t, str) else None
        for t in texts
    ]


def _answer(
    question: str,
    kind: AnswerType,
    every: frozenset[str],
    predicate: frozenset[str],
    text: str,
    overlap: float,
) -> str | None:
    """``passage_answer`` of one passage, the question's type and content words given."""
    scored: list[tuple[float, int, str]] = []
    for i, sentence in enumerate(_sentences(text)):
        stems = {_stem(w.lower()) for w in _WORD.findall(sentence)}
        share = len(every & stems) / len(every)
        if share >= overlap:
            scored.append((-share, i, sentence))
    for _, _, sentence in sorted(scored)[:2]:
        found = _candidates(sentence, kind, question)
        if not found:
            continue
        words = [_stem(w.lower()) for w in sentence.split(" ")]
        anchors = [i for i, w in enumerate(words) if any(w.startswith(p) for p in predicate)]
        if not anchors:
            return found[0][1]
        # a number question's answer is rarely a year ("at the 2010 census")
        return min(
            found,
            key=lambda c: (
                _YEAR.fullmatch(c[1]) is not None and kind is AnswerType.NUMBER,
                min(abs(c[0] - a) for a in anchors),
            ),
        )[1]
    return None
