"""Questions made from passages without a model (``METHODS``, deterministic for a seed):
each from one sampled passage, its one relevant document (a silver label); each JSONL
line's ``metadata.synth`` says how it was made."""

from __future__ import annotations

import json
import math
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragguard.calibration.synth.corpus import Corpus, Passage
from ragguard.errors import ConfigError, CorpusError

if TYPE_CHECKING:
    from ragguard.calibration.data.records import Run

METHODS = ("keyphrases", "cloze")
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOP = frozenset(  # words no query is built of
    "a about above after again against all also am an and any are as at be because been "  # noqa: SIM905
    "before being below between both but by can could did do does doing down during each "
    "few for from further had has have having he her here hers him his how i if in into "
    "is it its itself just may me might more most my no nor not now of off on once only "
    "or other our out over own same she should so some such than that the their them then "
    "there these they this those through to too under until up upon very was we were what "
    "when where which while who whom why will with would you your".split()
)


@dataclass(frozen=True)
class SynthQuery:
    """One synthetic query and the passage it was made from (its one relevant id)."""

    query_id: str
    query: str
    source: str


def _fold(text: str) -> str:
    """Lower-cased, accents dropped (``Tarnów`` -> ``tarnow``); other marks stay, so a
    dash still separates words."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_fold(text))


def _content(tokens: Iterable[str]) -> list[str]:
    return [t for t in tokens if t not in _STOP and len(t) > 1]


def _keyphrases(p: Passage, idf: dict[str, float], words: int) -> list[str]:
    """The ``words`` content words of highest tf-idf, in the passage's order."""
    terms = _content(_tokens(f"{p.title} {p.text}"))
    tf = Counter(terms)
    weight = {t: (1 + math.log(c)) * idf.get(t, 0.0) for t, c in tf.items()}
    top = set(sorted(weight, key=lambda t: (-weight[t], t))[:words])
    return [t for t in dict.fromkeys(terms) if t in top]


def _cloze(p: Passage, idf: dict[str, float], words: int) -> list[str]:
    """``what`` and the ``words`` words around the rarest word, taken out, of the sentence
    of highest summed idf among the first three."""
    sentences = [s for s in _SENTENCE.split(p.text.strip())[:3] if _content(_tokens(s))]
    if not sentences:
        return []
    best = max(sentences, key=lambda s: sum(idf.get(t, 0.0) for t in _content(_tokens(s))))
    tokens = _tokens(best)
    answer = max(_content(tokens), key=lambda t: (idf.get(t, 0.0), t))
    at = tokens.index(answer)
    rest = tokens[:at] + tokens[at + 1 :]
    start = max(0, min(at - words // 2, len(rest) - words))
    return ["what", *rest[start : start + words]]


_BUILD = {"keyphrases": _keyphrases, "cloze": _cloze}


def folded(text: str) -> str:
    """``text``'s words, lower-cased and accents dropped, one space apart: what two texts
    are compared by (a repeated passage, a query that copies its passage)."""
    return " ".join(_tokens(text))


def sample(corpus: Corpus, seed: int) -> list[Passage]:
    """The passages whose text no other passage repeats, in the order
    ``random.Random(seed)`` draws them: the order queries are made in.

    Raises:
        CorpusError: every passage's text is repeated by another passage.
    """
    seen = Counter(folded(p.text) for p in corpus.passages)
    unique = [p for p in corpus.passages if seen[folded(p.text)] == 1]
    if not unique:
        raise CorpusError(
            "every passage's text is repeated by another passage: a question made from one "
            "would have several sources; remove the duplicates"
        )
    return [unique[i] for i in random.Random(seed).sample(range(len(unique)), len(unique))]


def synthesize(
    corpus: Corpus, *, n: int = 100, seed: int = 0, method: str = "keyphrases", words: int = 8
) -> list[SynthQuery]:
    """Up to ``n`` distinct queries, one per passage sampled (``random.Random(seed)``)
    among the passages whose text no other passage repeats; a query equal to its
    passage's text, empty, or already made is skipped and the next passage tried.

    Raises:
        ConfigError: ``n`` or ``words`` below 1, or an unknown ``method``.
        CorpusError: every passage's text is repeated by another passage, or no
            passage gave a query.
    """
    if n < 1 or words < 1:
        raise ConfigError(f"synth: --n and words must be at least 1, got n={n}, words={words}")
    build = _BUILD.get(method)
    if build is None:
        raise ConfigError(f"synth: unknown method {method!r}; choose one of {', '.join(METHODS)}")
    passages = corpus.passages
    sampled = sample(corpus, seed)
    df: Counter[str] = Counter()
    for p in passages:
        df.update(set(_tokens(f"{p.title} {p.text}")))
    idf = {t: math.log(len(passages) / c) for t, c in df.items()}
    made: list[SynthQuery] = []
    queries: set[str] = set()
    for p in sampled:
        query = " ".join(build(p, idf, words))
        if not query or query in queries or query == folded(p.text):
            continue
        queries.add(query)
        made.append(SynthQuery(f"synth-{len(made) + 1:05d}", query, p.id))
        if len(made) == n:
            break
    if not made:
        raise CorpusError(
            "no passage gave a query other than its own text (passages of a few words?): "
            "give passages of a sentence or more"
        )
    return made


def write_evalset(
    queries: list[SynthQuery], path: str | Path, provenance: dict[str, Any], run: Run | None = None
) -> None:
    """Write ``queries`` as ragguard's JSONL eval set: the source passage relevant
    (grade 1), ``metadata.synth`` = ``provenance`` plus the source's id on every line;
    with ``run``, each query's candidates under ``runs.<run name>`` (a score that is
    missing or not finite: ``null``)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for q in queries:
            meta = {"synth": {**provenance, "source": q.source, "labels": "silver"}}
            row: dict[str, Any] = {
                "query_id": q.query_id,
                "query": q.query,
                "relevant": {q.source: 1},
            }
            if run is not None:
                cands = run.candidates.get(q.query_id, {})
                row["runs"] = {
                    run.name: [
                        {"id": d, "score": s if math.isfinite(s) else None}
                        for d, s in cands.items()
                    ]
                }
            fh.write(json.dumps({**row, "metadata": meta}, ensure_ascii=False) + "\n")
