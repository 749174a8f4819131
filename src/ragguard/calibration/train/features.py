"""The signals ``train-reranker`` computes for every pair it scores
(``ragguard.trained.Signals``), with progress lines, and the fusion head: a logistic
regression over them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragguard._optional import require
from ragguard.calibration.train.choice import F64, Candidate, aucs
from ragguard.calibration.train.pairs import Pair, PairTexts, ValidationQuery
from ragguard.errors import EvalSetError
from ragguard.trained import Lexical, Signals

Progress = Callable[[str], None]
PROGRESS_EVERY_S = 30.0  # between two progress lines of a long step


@dataclass(frozen=True)
class Features:
    """The signals' names, the base's column, a matrix per validation query, the training
    pairs' matrix and targets, and the lexical statistics behind them."""

    lexical: Lexical
    names: list[str]
    base_col: int
    val_x: list[F64]
    train_x: F64
    y: F64


def signal_matrices(
    signals: Signals,
    data: PairTexts,
    pairs: Sequence[Pair],
    val: Sequence[ValidationQuery],
    say: Progress,
) -> tuple[list[F64], F64]:
    """The signals of each validation query's candidates, and of the training pairs."""
    by_query: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_query.setdefault(p.qid, []).append(i)
    groups = [(v.qid, [data.text(v.qid, d) for d in v.docs]) for v in val]
    groups += [
        (qid, [data.text(pairs[i].text_qid, pairs[i].doc) for i in rows])
        for qid, rows in by_query.items()
    ]
    n_scored = sum(len(docs) for _, docs in groups)
    say(f"computing {len(signals.names)} signals for {n_scored} (query, passage) pairs")
    _embed(signals, [t for qid, docs in groups for t in (data.query(qid), *docs)], say)
    ticker = Ticker("signals", n_scored, "pairs", say)
    xs = []
    for qid, docs in groups:
        xs.append(signals.matrix(data.query(qid), docs))
        ticker.add(len(docs))
    ticker.close()
    train_x = np.zeros((len(pairs), len(signals.names)))
    for rows, x in zip(by_query.values(), xs[len(val) :], strict=True):
        train_x[rows] = x
    return xs[: len(val)], train_x


def fit_fusion(x: F64, target: F64, seed: int) -> dict[str, Any]:
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


def fusion_scores(head: Mapping[str, Any], x: F64) -> F64:
    z = (x - np.asarray(head["mean"])) / np.asarray(head["scale"])
    out: F64 = z @ np.asarray(head["coef"]) + float(head["intercept"])
    return out


def untrained(val: Sequence[ValidationQuery], feats: Features, base_note: str) -> list[Candidate]:
    """The base, then each other signal on its own, with their validation AUCs."""
    cands = []
    others = (k for k in range(len(feats.names)) if k != feats.base_col)
    for j in [feats.base_col, *others]:
        d, o = aucs(val, [x[:, j] for x in feats.val_x])
        if j == feats.base_col:
            cands.append(Candidate("base", "base", d, o, note=base_note))
        else:
            cands.append(Candidate(feats.names[j], "input", d, o))
    return cands


class Ticker:
    """Progress lines for a long step of ``total`` ``unit``: one every ``every`` seconds
    (default ``PROGRESS_EVERY_S``; none for a step that ends sooner), then a last one."""

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
        """Count ``n`` more units done."""
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
        """The last line, when a line was said."""
        if self.lines:
            took = self.clock() - self.start
            self.say(f"  {self.what}: {self.total:,} {self.unit} in {_duration(took)}")


def _embed(signals: Signals, texts: Sequence[str], say: Progress, chunk: int = 256) -> None:
    """Embed the distinct ``texts`` into the signals' cache, in big batches."""
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
