"""The queries and training pairs of ``train-reranker``: calibrate's held-out queries are
never read; the rest split into training and validation queries; per training query its
positives, then negatives in a fixed order (``training_pairs``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.statistics import split_queries, validation_count
from ragguard.calibration.train.fine_tune import TextPair
from ragguard.errors import EvalSetError

NEGATIVE_KINDS = ("distractor", "judged", "same_query", "same_title", "random")


@dataclass(frozen=True)
class QuerySplit:
    """Query ids by role: ``train`` and ``validation`` (together calibrate's calibration
    split) and ``held_out`` (calibrate's held-out split: never read)."""

    train: tuple[str, ...]
    validation: tuple[str, ...]
    held_out: tuple[str, ...]


def split_for_training(
    evalset: EvalSet, holdout: float, validation: float, seed: int
) -> QuerySplit:
    """The held-out split of calibrate's ``Split(holdout=, seed=)``, and the rest cut into
    training and validation queries (drawn with ``default_rng([seed, 2])``)."""
    qids = evalset.qids
    calib, held = split_queries(len(qids), holdout, seed)
    if len(calib) < 2:
        raise EvalSetError(
            f"training needs at least 2 labelled queries outside the held-out split, got "
            f"{len(calib)}; add queries or lower --holdout"
        )
    n_val = validation_count(len(calib), validation)
    perm = np.random.default_rng([seed, 2]).permutation(len(calib))
    val = np.sort(calib[perm[:n_val]])
    train = np.sort(calib[perm[n_val:]])
    return QuerySplit(
        tuple(qids[i] for i in train), tuple(qids[i] for i in val), tuple(qids[i] for i in held)
    )


@dataclass(frozen=True)
class Pair:
    """One training pair; ``source``: the query under whose ids the passage's text is
    looked up, when not ``qid`` (UDCG files reuse passage ids across queries)."""

    qid: str
    doc: str
    target: float
    kind: str
    source: str = ""

    @property
    def text_qid(self) -> str:
        return self.source or self.qid


def run_names(evalset: EvalSet, run: Sequence[str] | str | None) -> list[str]:
    """The runs asked for (default every run of ``evalset``), each checked."""
    runs = list(evalset.runs) if run is None else [run] if isinstance(run, str) else list(run)
    for r in runs:
        if r not in evalset.runs:
            raise EvalSetError(f"no run named {r!r}; runs: {', '.join(evalset.runs) or 'none'}")
    return runs


def _ranked_candidates(evalset: EvalSet, qid: str, runs: Sequence[str]) -> list[str]:
    """The query's candidates over ``runs``, by best rank in any run (ties: run order)."""
    best: dict[str, tuple[int, int]] = {}
    for r, name in enumerate(runs):
        cands = evalset.runs[name].candidates.get(qid, {})
        order = sorted(cands, key=lambda d: -cands[d] if not math.isnan(cands[d]) else math.inf)
        for rank, doc in enumerate(order):
            key = (rank, r)
            if doc not in best or key < best[doc]:
                best[doc] = key
    return sorted(best, key=lambda d: best[d])


def training_pairs(
    evalset: EvalSet,
    qids: Sequence[str],
    *,
    runs: Sequence[str],
    has_text: Callable[[str, str], bool],
    title: Callable[[str, str], str | None] | None = None,
    same_query_negatives: int = 4,
    same_title_negatives: int = 2,
    random_negatives: int = 2,
    seed: int = 0,
) -> list[Pair]:
    """The training pairs of ``qids``, only passages with a text, per query: its relevant
    passages (target ``grade / highest grade``), its distractors, its passages judged not
    relevant, its ``same_query_negatives`` best-ranked unlabelled candidates over
    ``runs``, ``same_title_negatives`` passages sharing a title with a relevant one, and
    ``random_negatives`` others. Same-title and random negatives come from the passages
    of ``qids`` only, drawn with ``numpy.random.default_rng([seed, 3])``;
    ``title(qid, doc)`` gives a passage's title (``None``: no same-title negatives)."""
    top = max((g for lab in evalset.labels.values() for g in lab.grades.values()), default=1) or 1
    ranked_of = {q: _ranked_candidates(evalset, q, runs) for q in qids}
    owner: dict[str, str] = {}  # passage -> the first training query that names it
    for q in qids:
        for d in [*evalset.labels[q].grades, *ranked_of[q]]:
            owner.setdefault(d, q)
    pool = sorted(d for d, q in owner.items() if has_text(q, d))
    titled: dict[str, list[str]] = {}
    if title is not None:
        for d in pool:
            t = title(owner[d], d)
            if t:
                titled.setdefault(t, []).append(d)
    rng = np.random.default_rng([seed, 3])
    pairs: list[Pair] = []
    for qid in qids:
        lab = evalset.labels[qid]
        rel = [d for d, g in lab.grades.items() if g > 0 and has_text(qid, d)]
        if not rel:
            continue
        pairs += [Pair(qid, d, lab.grades[d] / top, "relevant") for d in rel]
        seen = set(lab.grades)
        pairs += [Pair(qid, d, 0.0, "distractor") for d in lab.distractors if has_text(qid, d)]
        judged = [d for d, g in lab.grades.items() if g <= 0 and d not in lab.distractors]
        pairs += [Pair(qid, d, 0.0, "judged") for d in judged if has_text(qid, d)]
        ranked = ranked_of[qid]
        unlabelled = [d for d in ranked if d not in seen and has_text(qid, d)]
        same_query = unlabelled[:same_query_negatives]
        pairs += [Pair(qid, d, 0.0, "same_query") for d in same_query]
        used = seen | set(same_query)
        if title is not None and same_title_negatives > 0:
            topics = {t for d in rel if (t := title(qid, d))}
            near = sorted({d for t in topics for d in titled.get(t, []) if d not in used})
            picks = [near[i] for i in sorted(rng.permutation(len(near))[:same_title_negatives])]
            pairs += [Pair(qid, d, 0.0, "same_title", owner[d]) for d in picks]
            used |= set(picks)
        own = used | set(ranked)
        others = [d for d in pool if d not in own]
        if others and random_negatives > 0:
            drawn = rng.choice(len(others), size=min(random_negatives, len(others)), replace=False)
            pairs += [Pair(qid, others[i], 0.0, "random", owner[others[i]]) for i in sorted(drawn)]
    return pairs


@dataclass(frozen=True)
class ValidationQuery:
    """A validation query's passages: relevant, labelled distractors, and the others."""

    qid: str
    relevant: tuple[str, ...]
    distractors: tuple[str, ...]
    others: tuple[str, ...]

    @property
    def docs(self) -> tuple[str, ...]:
        return self.relevant + self.distractors + self.others


def validation_queries(
    evalset: EvalSet,
    qids: Sequence[str],
    *,
    runs: Sequence[str],
    has_text: Callable[[str, str], bool],
) -> list[ValidationQuery]:
    """The validation queries with at least one relevant passage with a text."""
    out: list[ValidationQuery] = []
    for qid in qids:
        lab = evalset.labels[qid]
        rel = tuple(d for d, g in lab.grades.items() if g > 0 and has_text(qid, d))
        if not rel:
            continue
        dis = tuple(d for d in sorted(lab.distractors) if has_text(qid, d))
        rest = [d for d, g in lab.grades.items() if g <= 0 and d not in lab.distractors]
        rest += [d for d in _ranked_candidates(evalset, qid, runs) if d not in lab.grades]
        out.append(ValidationQuery(qid, rel, dis, tuple(d for d in rest if has_text(qid, d))))
    return out


def pair_counts(pairs: Sequence[Pair]) -> dict[str, int]:
    counts = {k: sum(p.kind == k for p in pairs) for k in ("relevant", *NEGATIVE_KINDS)}
    counts["total"] = len(pairs)
    return counts


class PairTexts:
    """The texts of the eval set's queries and passages, and of training pairs."""

    def __init__(self, evalset: EvalSet) -> None:
        self.evalset = evalset
        self.texts = evalset.texts

    def has_text(self, qid: str, doc: str) -> bool:
        return bool(self.texts.get(qid, doc))

    def query(self, qid: str) -> str:
        q = self.evalset.queries.get(qid)
        if q is None or not q.text:
            raise EvalSetError(f"query {qid!r} has no text; training reads query texts")
        return q.text

    def text(self, qid: str, doc: str) -> str:
        return self.texts.get(qid, doc) or ""

    def text_pairs(self, pairs: Sequence[Pair]) -> list[TextPair]:
        return [
            TextPair(p.qid, self.query(p.qid), self.text(p.text_qid, p.doc), p.target, p.kind)
            for p in pairs
        ]
