"""Conflicts and answerability on RAMDocs: does the conflict stage find the look-alikes that
disagree with the answer, does it improve the context, and does ``min_evidence`` catch
retrieved sets with nothing relevant in them? Every quality figure is on held-out queries.

Data: ``examples/ramdocs`` (``--data``; build it with ``examples/ramdocs/build.py``): 250
RAMDocs questions, documents labelled correct (relevant), misinfo (known distractor) and
noise (judged not relevant), each scored by the all-MiniLM-L6-v2 cosine with its question
(run ``dense-minilm``), and the unanswerable variant (``unanswerable/evalset.jsonl``: 100
seeded questions keep their noise documents only). The questions are split once
(``--seed``, ``--holdout`` 0.5, :func:`ragguard.calibration.split_queries`, the split
``calibrate`` draws) into calibration queries, where every setting is chosen, and
held-out queries, where every figure is measured; the variant uses the same split.

a. **Conflict detection.** The runtime guard with ``conflicts="flag"`` (relative threshold
   0) on each held-out question's documents, all of them (``max_k`` 100) or only the top
   ``--top`` (5, the guard's default ``max_k``) by MiniLM score, for ``conflict_similarity``
   in 0.3..0.7. Document level: the share of the compared misinfo / correct / noise
   documents that are in a conflict group, and the precision (misinfo among the grouped
   documents). Question level: the share of questions whose compared documents include
   misinformation that are flagged (a conflict group), the share of the others that are,
   and the precision.
b. **Context quality** (UDCG, evidence recall, distractor rate: ragguard's metrics, profile
   ``support``, on the contexts the runtime guard keeps): plain top-k (k = 1..5); the guard
   chosen by a **runtime grid** on the calibration queries (``max_k`` x
   ``relative_threshold``, conflicts off; and the same with ``conflicts`` in keep_first /
   drop x ``conflict_similarity`` 0.3..0.7; chosen on mean UDCG, ties to the first in grid
   order); and the guard written by ``ragguard.calibration.fit.calibrator`` on the calibration
   queries (objective UDCG, no recall floor), without and with its conflict sweep
   (``stages=Stages(conflicts=("off", "keep_first", "drop"),
   conflict_similarities=(0.3, 0.5, 0.7))``). Paired
   bootstrap intervals (2,000 resamples, 95%) of the differences that matter.
c. **Answerability** on the unanswerable variant: the share of unanswerable held-out
   queries caught (verdict ``insufficient``) and of answerable ones lost, at the floor
   ``min_evidence`` chosen on the calibration queries: the largest of 0.00, 0.01, ..., 0.99
   that loses at most 10% of the answerable calibration queries (on the runtime grid's
   conflicts-off setting), and the one
   ``calibrate(answerability=Answerability(max_false_abstain=0.1))`` writes.

d. **Detectors** (issue 38): ``conflict_detector`` near-copy (``conflict_similarity``
   0.3..0.7), answers and both (``conflict_answer_similarity`` 0.0..0.4, both with the
   near-copy default 0.5), each one's threshold chosen on the calibration questions (all
   documents compared; the most grouped misinfo - grouped correct + flagged questions with
   misinformation - flagged questions without), reported on the held-out ones as in a
   (all documents and top ``--top``). RGB-like near-copies: 200 NQ-open questions
   (``--nq``, ``../shared/data/nq-open-oracle``, seeded) whose gold passage holds a
   reference answer; the pool is the gold passage, its counterfactual twin (the answer
   span replaced by another question's answer of the same shape) and 3 other gold
   passages: caught when gold and twin share a group; a false alarm when the pool without
   the twin has a group. Cost: 100 NQ questions with 20 gold passages each (about 100
   words), ``select()`` with each detector minus ``select()`` with conflicts off, median and
   p90 over the calls (a fresh guard per call).

Run: ``python benchmarks/conflicts.py [--json FILE]`` (about 2 minutes on 2 cores;
``--detectors-only``: sections a and d, about 25 s). It always exits 0: it is a report,
not a test.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragguard import Candidate, ConfigWarning, ContextGuard, Selection
from ragguard.calibration import Answerability as AnswerabilityOption
from ragguard.calibration import Calibrator, Check, Split, Stages, calibrate, load_evalset
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.fit.statistics import bootstrap_means, split_queries
from ragguard.calibration.metrics import compute

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "ramdocs"
RUN = "dense-minilm"
HOLDOUT = 0.5
SIMILARITIES = (0.3, 0.4, 0.5, 0.6, 0.7)
ANSWER_SIMILARITIES = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
NQ = ROOT.parent / "shared" / "data" / "nq-open-oracle" / "nq-open-oracle.jsonl.gz"
TWINS = 200
COST_QUERIES = 100
TOP_KS = (1, 2, 3, 4, 5)
GRID_MAX_K = (1, 2, 3, 4, 5, 6, 8)
GRID_THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
GRID_MODES = ("keep_first", "drop")
FLOORS = tuple(round(0.01 * i, 2) for i in range(100))
MAX_LOSS = 0.1
CALIBRATE_CONFLICTS = {
    "conflicts": ("off", "keep_first", "drop"),
    "conflict_similarities": (0.3, 0.5, 0.7),
}
METRICS = ("udcg", "evidence_recall", "distractor_rate")
NOT_AVAILABLE = "not available in this checkout"
N_BOOTSTRAP = 2000


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Query:
    """One eval-set line: the query, its ranked candidates and each candidate's type."""

    id: str
    text: str
    candidates: tuple[Candidate, ...]
    types: Mapping[str, str]  # id -> correct / misinfo / noise
    line: str

    @property
    def answerable(self) -> bool:
        return "correct" in self.types.values()


def read_queries(path: Path) -> dict[str, Query]:
    """The eval set's queries with their ``dense-minilm`` candidates (texts included)."""
    out: dict[str, Query] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            types = {d: "correct" for d in row.get("relevant", [])}
            types.update({d: "misinfo" for d in row.get("distractors", [])})
            types.update({d: "noise" for d in row.get("not_relevant", [])})
            cands = tuple(
                Candidate(id=c["id"], text=c["text"], score=c["score"]) for c in row["runs"][RUN]
            )
            out[row["query_id"]] = Query(row["query_id"], row["query"], cands, types, line)
    return out


def guard(**settings: Any) -> ContextGuard:
    return ContextGuard(score_kind="similarity", **settings)


def select(
    g: ContextGuard, queries: Mapping[str, Query], qids: Iterable[str]
) -> dict[str, Selection]:
    return {q: g.select(queries[q].text, queries[q].candidates) for q in qids}


# --------------------------------------------------------------------------- a. detection


@dataclass
class Detection:
    compared: str
    similarity: float  # the detector's threshold
    detector: str = "near-copy"
    grouped: dict[str, int] = field(default_factory=dict)  # type -> documents in a group
    total: dict[str, int] = field(default_factory=dict)  # type -> documents compared
    flagged_with: int = 0
    with_misinfo: int = 0
    flagged_without: int = 0
    without_misinfo: int = 0

    def share(self, kind: str) -> float:
        return _ratio(self.grouped.get(kind, 0), self.total.get(kind, 0))

    @property
    def precision(self) -> float:
        return _ratio(self.grouped.get("misinfo", 0), sum(self.grouped.values()))

    @property
    def question_precision(self) -> float:
        return _ratio(self.flagged_with, self.flagged_with + self.flagged_without)

    def as_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "detector": self.detector,
            "conflict_similarity": self.similarity,
            "misinfo_in_group": self.share("misinfo"),
            "correct_in_group": self.share("correct"),
            "noise_in_group": self.share("noise"),
            "document_precision": self.precision,
            "documents": dict(self.total),
            "questions_with_misinfo_flagged": _ratio(self.flagged_with, self.with_misinfo),
            "questions_without_misinfo_flagged": _ratio(self.flagged_without, self.without_misinfo),
            "question_precision": self.question_precision,
            "questions_with_misinfo": self.with_misinfo,
            "questions_without_misinfo": self.without_misinfo,
        }


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def detection(
    queries: Mapping[str, Query],
    qids: Sequence[str],
    similarity: float,
    top: int | None,
    detector: str = "near-copy",
) -> Detection:
    """The detection figures of ``detector`` at ``similarity`` (its threshold: the answer
    similarity for the answers detector; ``both`` keeps the default near-copy one)."""
    threshold = (
        {"conflict_similarity": similarity}
        if detector == "near-copy"
        else {"conflict_detector": detector, "conflict_answer_similarity": similarity}
    )
    g = guard(max_k=top or 100, relative_threshold=0.0, conflicts="flag", **threshold)
    d = Detection("all" if top is None else f"top {top}", similarity, detector)
    for qid, sel in select(g, queries, qids).items():
        types = queries[qid].types
        grouped = {m for c in sel.conflicts for m in c.ids}
        kinds = [types[c.id] for c in sel.kept]
        for c in sel.kept:
            t = types[c.id]
            d.total[t] = d.total.get(t, 0) + 1
            d.grouped[t] = d.grouped.get(t, 0) + (c.id in grouped)
        if "misinfo" in kinds:
            d.with_misinfo += 1
            d.flagged_with += bool(sel.conflicts)
        else:
            d.without_misinfo += 1
            d.flagged_without += bool(sel.conflicts)
    return d


# --------------------------------------------------------------------------- b. metrics


class Contexts:
    """ragguard's metrics of any kept subset of each query's ranked candidates.

    The metrics read a prefix of each ranked row (``cut``); the conflict stage keeps a
    subset. As the calibration's stages do (``PassageStages.compact``), each row is
    reordered so the kept candidates come first, their utilities (computed on the run's
    own ranking) moving with them, and the cut is the number kept.
    """

    def __init__(self, arrays: EvalArrays) -> None:
        self.arrays = arrays
        self.row = {q: i for i, q in enumerate(arrays.qids)}
        self.docs = [arrays.doc_ids(r) for r in range(arrays.n_queries)]

    def values(self, kept: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
        """metric -> query id -> value, for the queries of ``kept``."""
        a = self.arrays
        keep = np.zeros(a.shape, dtype=np.bool_)
        for qid, ids in kept.items():
            r = self.row[qid]
            want = set(ids)
            keep[r, : len(self.docs[r])] = [d in want for d in self.docs[r]]
        perm = np.argsort(~keep, axis=1, kind="stable")
        ordered = a.reordered(np.where(a.present, perm, -1))
        cut = keep.sum(axis=1)
        rows = [self.row[q] for q in kept]
        out: dict[str, dict[str, float]] = {}
        for m in METRICS:
            v = compute(ordered, m, cut=cut)
            out[m] = {q: float(v[r]) for q, r in zip(kept, rows, strict=True)}
        out["passages"] = {q: float(cut[r]) for q, r in zip(kept, rows, strict=True)}
        return out

    def means(self, kept: Mapping[str, Sequence[str]]) -> dict[str, float]:
        return {m: _nanmean(list(v.values())) for m, v in self.values(kept).items()}


def _nanmean(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan


def kept_ids(selections: Mapping[str, Selection]) -> dict[str, list[str]]:
    return {q: [c.id for c in s.kept] for q, s in selections.items()}


@dataclass(frozen=True)
class Setting:
    max_k: int
    relative_threshold: float
    conflicts: str = "off"
    conflict_similarity: float = 0.5

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_k": self.max_k, "relative_threshold": self.relative_threshold}
        if self.conflicts != "off":
            out.update(conflicts=self.conflicts, conflict_similarity=self.conflict_similarity)
        return out

    def describe(self) -> str:
        text = f"max_k={self.max_k}, relative_threshold={self.relative_threshold:g}"
        if self.conflicts != "off":
            text += f", conflicts={self.conflicts}@{self.conflict_similarity:g}"
        return text


@dataclass(frozen=True)
class Grid:
    """The runtime grid's values."""

    max_k: Sequence[int] = GRID_MAX_K
    thresholds: Sequence[float] = GRID_THRESHOLDS
    similarities: Sequence[float] = SIMILARITIES

    def settings(self, modes: Sequence[str]) -> list[Setting]:
        out: list[Setting] = []
        for mode in modes:
            for sim in (0.5,) if mode == "off" else self.similarities:
                for k in self.max_k:
                    for t in self.thresholds:
                        out.append(Setting(k, t, mode, sim))
        return out


QUICK = Grid(max_k=(1, 3, 5), thresholds=(0.0, 0.7, 0.9), similarities=(0.3, 0.5, 0.7))


def choose(
    settings: Sequence[Setting],
    queries: Mapping[str, Query],
    qids: Sequence[str],
    ctx: Contexts,
) -> tuple[Setting, float, dict[Setting, float]]:
    """The setting with the highest mean UDCG on ``qids`` (ties: the first)."""
    scores: dict[Setting, float] = {}
    best: Setting | None = None
    for s in settings:
        scores[s] = ctx.means(kept_ids(select(guard(**s.settings()), queries, qids)))["udcg"]
        if best is None or scores[s] > scores[best]:
            best = s
    assert best is not None
    return best, scores[best], scores


def paired(
    a: Mapping[str, float], b: Mapping[str, float], rng: np.random.Generator
) -> dict[str, float]:
    """Mean of a - b over the shared queries and its 95% percentile bootstrap interval."""
    diff = np.array([[a[q] - b[q]] for q in a], dtype=np.float64)
    boot = bootstrap_means(diff, N_BOOTSTRAP, rng)[:, 0]
    lo, hi = np.nanquantile(boot, [0.025, 0.975])
    return {"mean": float(np.nanmean(diff)), "low": float(lo), "high": float(hi)}


# --------------------------------------------------------------------------- calibrate rows


def calibrate_guard(
    queries: Mapping[str, Query], qids: Sequence[str], folder: Path, seed: int, **options: Any
) -> tuple[ContextGuard | None, str]:
    """The guard ``calibrate(**options)`` writes from ``qids`` alone, or ``None`` and why."""
    accepted = {*inspect.signature(calibrate).parameters, *Calibrator.__dataclass_fields__}
    missing = [k for k in options if k not in accepted]
    if missing:
        return None, f"{NOT_AVAILABLE} (calibrate() takes no {', '.join(missing)})"
    folder.mkdir(parents=True, exist_ok=True)
    subset = folder / "evalset.jsonl"
    subset.write_text("".join(queries[q].line for q in qids), encoding="utf-8")
    try:
        result = calibrate(
            load_evalset(subset), split=Split(seed=seed), check=Check(n_bootstrap=200), **options
        )
        path = result.save_config(folder / "ragguard.toml", allow_unmet=True)
        g = ContextGuard.from_file(path)
    except Exception as exc:  # a report, not a test: say what failed and go on
        return None, f"failed: {type(exc).__name__}: {exc}"
    c = g.config
    text = f"max_k={c.max_k}, relative_threshold={c.relative_threshold:g}, cut={c.cut.value}"
    if c.conflicts.value != "off":
        text += f", conflicts={c.conflicts.value}@{c.conflict_similarity:g}"
    if c.min_evidence is not None:
        text += f", min_evidence={c.min_evidence:g}"
    return g, text


def options_text(options: Mapping[str, Any]) -> str:
    parts = []
    for k, v in options.items():
        flag = {"conflict_similarities": "conflict-similarity"}.get(k, k).replace("_", "-")
        value = ",".join(map(str, v)) if isinstance(v, tuple) else str(v)
        parts.append(f"--{flag} {value}")
    return " ".join(parts)


# --------------------------------------------------------------------------- c. answerability


@dataclass(frozen=True)
class Answerability:
    method: str
    floor: float | None
    caught: float
    lost: float
    n_unanswerable: int
    n_answerable: int
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "min_evidence": self.floor,
            "unanswerable_caught": self.caught,
            "answerable_lost": self.lost,
            "unanswerable": self.n_unanswerable,
            "answerable": self.n_answerable,
            "note": self.note,
        }


def abstention(
    g: ContextGuard, queries: Mapping[str, Query], qids: Sequence[str]
) -> tuple[float, float, int, int]:
    """(unanswerable caught, answerable lost, n unanswerable, n answerable) on ``qids``."""
    sels = select(g, queries, qids)
    insufficient = {q: s.verdict.value == "insufficient" for q, s in sels.items()}
    una = [q for q in qids if not queries[q].answerable]
    ans = [q for q in qids if queries[q].answerable]
    caught = _ratio(sum(insufficient[q] for q in una), len(una))
    lost = _ratio(sum(insufficient[q] for q in ans), len(ans))
    return caught, lost, len(una), len(ans)


def choose_floor(
    base: Setting, queries: Mapping[str, Query], qids: Sequence[str]
) -> tuple[float, float]:
    """The largest floor losing at most MAX_LOSS of the answerable ``qids``, and its loss."""
    chosen, loss = FLOORS[0], math.nan
    for f in FLOORS:
        _, lost, _, _ = abstention(guard(**base.settings(), min_evidence=f), queries, qids)
        if lost <= MAX_LOSS:
            chosen, loss = f, lost
    return chosen, loss


# --------------------------------------------------------------------------- report


def pct(x: float) -> str:
    return "   n/a" if math.isnan(x) else f"{100 * x:5.1f}%"


def num(x: float) -> str:
    return "  n/a" if math.isnan(x) else f"{x:.3f}"


def interval(d: Mapping[str, float]) -> str:
    return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


Out = Callable[[str], None]


def detection_section(
    queries: Mapping[str, Query], held: Sequence[str], top: int, out: Out
) -> list[dict[str, Any]]:
    """a. Conflict detection on the held-out questions."""
    out("")
    out(f"a. conflict detection on the {len(held)} held-out questions (runtime, conflicts=flag)")
    out(
        f"{'compared':<9}{'sim':>5}{'misinfo':>9}{'correct':>9}{'noise':>8}{'prec.':>8}"
        f"  |{'q. w/ misinfo':>14}{'q. without':>11}{'prec.':>8}"
    )
    found: list[Detection] = []
    for scope in (None, top):
        for sim in SIMILARITIES:
            d = detection(queries, held, sim, scope)
            found.append(d)
            x = d.as_dict()
            out(
                f"{d.compared:<9}{sim:>5.1f}{pct(d.share('misinfo')):>9}"
                f"{pct(d.share('correct')):>9}{pct(d.share('noise')):>8}{pct(d.precision):>8}"
                f"  |{pct(x['questions_with_misinfo_flagged']):>14}"
                f"{pct(x['questions_without_misinfo_flagged']):>11}"
                f"{pct(d.question_precision):>8}"
            )
    first = found[0]
    out(
        f"documents compared (all): {first.total.get('misinfo', 0)} misinfo, "
        f"{first.total.get('correct', 0)} correct, {first.total.get('noise', 0)} noise; "
        f"questions with misinformation: {first.with_misinfo} of {len(held)}"
    )
    out(
        "goals: misinfo in a group >= 60% with correct <= 10%; questions with "
        "misinformation flagged >= 70% with questions without <= 10%"
    )
    rows = [d.as_dict() for d in found]
    for scope_name in ("all", f"top {top}"):
        mine = [x for x in rows if x["compared"] == scope_name]
        docs_met = [
            x["conflict_similarity"]
            for x in mine
            if x["misinfo_in_group"] >= 0.6 and x["correct_in_group"] <= 0.1
        ]
        q_met = [
            x["conflict_similarity"]
            for x in mine
            if x["questions_with_misinfo_flagged"] >= 0.7
            and x["questions_without_misinfo_flagged"] <= 0.1
        ]
        out(
            f"  {scope_name}: document goal met at similarity "
            f"{', '.join(map(str, docs_met)) or 'none'}; question goal met at "
            f"{', '.join(map(str, q_met)) or 'none'}"
        )
    return rows


# --------------------------------------------------------------------------- d. detectors


def _score(x: Mapping[str, Any]) -> float:
    """What the detectors' thresholds are chosen on: grouped misinformation minus grouped
    correct documents, plus flagged questions with misinformation minus those without."""
    return (
        x["misinfo_in_group"]
        - x["correct_in_group"]
        + x["questions_with_misinfo_flagged"]
        - x["questions_without_misinfo_flagged"]
    )


def detectors_section(
    queries: Mapping[str, Query],
    cal: Sequence[str],
    held: Sequence[str],
    args: argparse.Namespace,
    out: Out,
) -> dict[str, Any]:
    """d. Each detector's threshold chosen on the calibration questions (all documents
    compared), reported on the held-out ones; near-copy twins from NQ; the cost."""
    out("")
    out(
        f"d. detectors: each one's threshold chosen on the {len(cal)} calibration questions "
        "(all documents; the most grouped misinfo - correct + flagged questions with - "
        f"without misinformation), reported on the {len(held)} held-out ones (conflicts=flag)"
    )
    grids = {
        "near-copy": SIMILARITIES,
        "answers": ANSWER_SIMILARITIES,
        "both": ANSWER_SIMILARITIES,
    }
    chosen: dict[str, float] = {}
    for name, grid in grids.items():
        scored = [
            (_score(detection(queries, cal, t, None, name).as_dict()), -i, t)
            for i, t in enumerate(grid)
        ]
        chosen[name] = max(scored)[2]
    out(
        f"{'detector':<10}{'thr.':>5}{'compared':>9}{'misinfo':>9}{'correct':>9}{'noise':>8}"
        f"  |{'q. w/ misinfo':>14}{'q. without':>11}"
    )
    rows = []
    for name, t in chosen.items():
        for scope in (None, args.top):
            x = detection(queries, held, t, scope, name).as_dict()
            rows.append(x)
            out(
                f"{name:<10}{t:>5.2f}{x['compared']:>9}{pct(x['misinfo_in_group']):>9}"
                f"{pct(x['correct_in_group']):>9}{pct(x['noise_in_group']):>8}"
                f"  |{pct(x['questions_with_misinfo_flagged']):>14}"
                f"{pct(x['questions_without_misinfo_flagged']):>11}"
            )
    out(
        "goals (issue 38): misinfo in a group >= 50% with correct <= 10%; questions with "
        "misinformation flagged >= 60% with the others <= 10%"
    )
    twins = twins_section(args.nq, chosen, args.seed, out)
    cost = cost_section(args.nq, chosen, args.seed, out)
    return {"chosen": chosen, "held_out": rows, "twins": twins, "cost": cost}


def nq_rows(path: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` NQ-open questions (seeded) whose gold passage holds a reference answer."""
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    rows = [r for r in rows if any(a in r["ctxs"][0]["text"] for a in r["answers"])]
    rng = np.random.default_rng(seed)
    return [rows[i] for i in rng.permutation(len(rows))[:n]]


def _shape(answer: str) -> tuple[bool, bool]:
    return any(ch.isdigit() for ch in answer), answer[:1].isupper()


def twins_section(
    path: Path, chosen: Mapping[str, float], seed: int, out: Out
) -> list[dict[str, Any]]:
    """RGB-like counterfactual twins: each NQ question's gold passage, its twin with the
    answer span replaced by another question's answer, and 3 other gold passages; and
    the same pool without the twin (a flag there is a false alarm)."""
    if not path.is_file():
        out(f"twins: {path} {NOT_AVAILABLE}")
        return []
    rows = nq_rows(path, TWINS, seed)
    pools = []
    for i, r in enumerate(rows):
        gold = r["ctxs"][0]["text"]
        answer = next(a for a in r["answers"] if a in gold)
        # another question's answer of the same shape (a number for a number, a name...)
        other = next(
            a
            for k in range(1, len(rows))
            for a in rows[(i + k) % len(rows)]["answers"]
            if _shape(a) == _shape(answer) and a != answer
        )
        twin = gold.replace(answer, other)
        rest = [rows[(i + k) % len(rows)]["ctxs"][0]["text"] for k in (2, 3, 4)]
        cands = [Candidate("gold", gold, 0.9), Candidate("twin", twin, 0.85)]
        cands += [Candidate(f"o{k}", t, 0.5 - 0.1 * k) for k, t in enumerate(rest)]
        pools.append((r["question"], cands))
    out(
        f"twins: {len(pools)} NQ-open questions, gold + counterfactual twin (answer span "
        "replaced) + 3 other gold passages; caught = gold and twin in one group; false "
        "alarm = a group in the pool without the twin"
    )
    found = []
    for name, t in chosen.items():
        g = guard(
            max_k=100,
            relative_threshold=0.0,
            conflicts="flag",
            **(
                {"conflict_similarity": t}
                if name == "near-copy"
                else {"conflict_detector": name, "conflict_answer_similarity": t}
            ),
        )
        caught = alarms = 0
        for q, cands in pools:
            sel = g.select(q, cands)
            caught += any({"gold", "twin"} <= set(c.ids) for c in sel.conflicts)
            alarms += bool(g.select(q, [cands[0], *cands[2:]]).conflicts)
        x = {
            "detector": name,
            "threshold": t,
            "caught": caught / len(pools),
            "false_alarms": alarms / len(pools),
        }
        found.append(x)
        caught_, alarms_ = pct(x["caught"]), pct(x["false_alarms"])
        out(f"  {name:<10}{t:>5.2f}: caught {caught_}, false alarms {alarms_}")
    return found


def cost_section(
    path: Path, chosen: Mapping[str, float], seed: int, out: Out
) -> list[dict[str, Any]]:
    """The conflict stage's cost at 20 candidates: each NQ question with its gold passage
    and 19 others', select() with each detector minus select() with conflicts off, per
    call (interleaved, a fresh guard per call so shingles and answers are built)."""
    if not path.is_file():
        out(f"cost: {path} {NOT_AVAILABLE}")
        return []
    rows = nq_rows(path, COST_QUERIES + 19, seed + 1)
    texts = [r["ctxs"][0]["text"] for r in rows]
    settings: dict[str, dict[str, Any]] = {"off": {"conflicts": "off"}}
    for name, t in chosen.items():
        settings[name] = {"conflicts": "flag"} | (
            {"conflict_similarity": t}
            if name == "near-copy"
            else {"conflict_detector": name, "conflict_answer_similarity": t}
        )
    times: dict[str, list[float]] = {k: [] for k in settings}
    for i in range(COST_QUERIES):
        q = rows[i]["question"]
        cands = [Candidate(f"d{k}", texts[i + k], 1 - k / 100) for k in range(20)]
        for name, st in settings.items():
            g = guard(max_k=20, relative_threshold=0.0, **st)
            start = time.perf_counter()
            g.select(q, cands)
            times[name].append(time.perf_counter() - start)
    off = np.array(times.pop("off"))
    found = []
    out(
        f"cost at 20 candidates ({COST_QUERIES} NQ questions, ~100 words each): select() "
        "with the detector minus select() with conflicts off"
    )
    for name, got in times.items():
        extra = np.array(got) - off
        x = {
            "detector": name,
            "median_ms": 1e3 * float(np.median(extra)),
            "p90_ms": 1e3 * float(np.quantile(extra, 0.9)),
            "off_median_ms": 1e3 * float(np.median(off)),
        }
        found.append(x)
        out(
            f"  {name:<10} median {x['median_ms']:.2f} ms, p90 {x['p90_ms']:.2f} ms "
            f"(select() with conflicts off: median {x['off_median_ms']:.2f} ms)"
        )
    return found


@dataclass
class Quality:
    """b. The held-out rows, per-query values by method, and the settings chosen."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def add(
        self,
        ctx: Contexts,
        method: str,
        setting: str,
        kept: Mapping[str, Sequence[str]] | None,
        note: str = "",
    ) -> None:
        row: dict[str, Any] = {"method": method, "setting": setting, "note": note}
        if kept is not None:
            vals = ctx.values(kept)
            self.per_query[method] = vals
            row.update({m: _nanmean(list(v.values())) for m, v in vals.items()})
        self.rows.append(row)


def quality_section(
    queries: Mapping[str, Query],
    ctx: Contexts,
    cal: Sequence[str],
    held: Sequence[str],
    args: argparse.Namespace,
    folder: Path,
    out: Out,
) -> tuple[dict[str, Any], Setting]:
    """b. Context quality; returns the figures and the runtime grid's conflicts-off
    setting (the base of the answerability floor)."""
    q = Quality()
    best_top: tuple[int, float] | None = None
    for k in TOP_KS:
        g = guard(max_k=k, relative_threshold=0.0)
        q.add(ctx, f"top-{k}", f"max_k={k}", kept_ids(select(g, queries, held)))
        cal_udcg = ctx.means(kept_ids(select(g, queries, cal)))["udcg"]
        if best_top is None or cal_udcg > best_top[1]:
            best_top = (k, cal_udcg)
    assert best_top is not None
    baseline = f"top-{best_top[0]}"
    # the reordering of Contexts against the metrics' own top-k windows (a self-check)
    for k in TOP_KS:
        want = compute(ctx.arrays, f"udcg@{k}")[[ctx.row[x] for x in held]]
        got = np.array([q.per_query[f"top-{k}"]["udcg"][x] for x in held])
        if not np.allclose(want, got, equal_nan=True):
            out(f"WARNING: top-{k} UDCG through the runtime differs from udcg@{k}")

    t0 = time.perf_counter()
    spec = QUICK if args.quick else Grid()
    off_grid, on_grid = spec.settings(("off",)), spec.settings(GRID_MODES)
    off, off_cal, _ = choose(off_grid, queries, cal, ctx)
    on, on_cal, on_scores = choose(on_grid, queries, cal, ctx)
    grid_s = time.perf_counter() - t0
    for name, setting in (("off", off), ("on", on)):
        kept = kept_ids(select(guard(**setting.settings()), queries, held))
        q.add(ctx, f"runtime grid, conflicts {name}", setting.describe(), kept)

    with_conflicts = f"calibrate {options_text(CALIBRATE_CONFLICTS)}"
    for method, sub, options in (
        ("calibrate", "plain", {}),
        (with_conflicts, "conflicts", {"stages": Stages(**CALIBRATE_CONFLICTS)}),
    ):
        g_cal, text = calibrate_guard(queries, cal, folder / sub, args.seed, **options)
        if g_cal is None:
            q.add(ctx, method, "", None, text)
        else:
            q.add(ctx, method, text, kept_ids(select(g_cal, queries, held)))

    out("")
    out(
        f"b. context quality on the {len(held)} held-out queries (profile support; settings "
        f"chosen on the {len(cal)} calibration queries, on mean UDCG)"
    )
    out(f"{'method':<40}{'udcg':>7}{'ev.rec':>8}{'distr.':>8}{'kept':>6}  setting")
    for r in q.rows:
        if "udcg" in r:
            out(
                f"{r['method']:<40}{num(r['udcg']):>7}{num(r['evidence_recall']):>8}"
                f"{num(r['distractor_rate']):>8}{r['passages']:>6.2f}  {r['setting']}"
            )
        else:
            out(f"{r['method']:<40}  {r['note']}")
    out(
        f"runtime grid: {len(off_grid)} settings without conflicts (calibration UDCG "
        f"{off_cal:.3f}), {len(on_grid)} with (calibration UDCG {on_cal:.3f}); "
        f"{grid_s:.0f} s"
    )
    best_any = max([off, *on_scores], key=lambda s: on_scores.get(s, off_cal))
    out(f"  over both grids the calibration queries choose: {best_any.describe()}")
    out(f"best plain top-k on the calibration queries: {baseline}")
    rng = np.random.default_rng(args.seed)
    diffs: dict[str, dict[str, float]] = {}
    for a, b in (
        ("runtime grid, conflicts on", "runtime grid, conflicts off"),
        ("runtime grid, conflicts off", baseline),
        ("runtime grid, conflicts on", baseline),
        ("calibrate", baseline),
        (with_conflicts, "calibrate"),
    ):
        if a in q.per_query and b in q.per_query:
            for m in ("udcg", "distractor_rate"):
                d = paired(q.per_query[a][m], q.per_query[b][m], rng)
                diffs[f"{a} - {b}: {m}"] = d
                out(f"  {a} - {b}: {m} {interval(d)}")
    figures = {
        "quality": q.rows,
        "quality_differences": diffs,
        "best_top_k": baseline,
        "grid_choice_over_both": best_any.describe(),
    }
    return figures, off


def answerability_section(
    queries: Mapping[str, Query],
    base: Setting,
    cal: Sequence[str],
    held: Sequence[str],
    seed: int,
    folder: Path,
    out: Out,
) -> list[dict[str, Any]]:
    """c. Catch / loss rates of the floor chosen on the calibration queries."""
    floor, cal_loss = choose_floor(base, queries, cal)
    caught, lost, n_una, n_ans = abstention(
        guard(**base.settings(), min_evidence=floor), queries, held
    )
    rows = [
        Answerability(
            f"runtime grid ({base.describe()})",
            floor,
            caught,
            lost,
            n_una,
            n_ans,
            f"calibration loss {cal_loss:.3f}",
        )
    ]
    method = f"calibrate --max-false-abstain {MAX_LOSS:g}"
    g_abs, text = calibrate_guard(
        queries,
        cal,
        folder / "abstain",
        seed,
        answerability=AnswerabilityOption(max_false_abstain=MAX_LOSS),
    )
    if g_abs is None:
        rows.append(Answerability(method, None, math.nan, math.nan, n_una, n_ans, text))
    else:
        caught, lost, n_una, n_ans = abstention(g_abs, queries, held)
        floor_set = g_abs.config.min_evidence
        rows.append(Answerability(method, floor_set, caught, lost, n_una, n_ans, text))
    cal_una = sum(not queries[x].answerable for x in cal)
    out("")
    out(
        f"c. answerability on the unanswerable variant: {n_una} unanswerable / {n_ans} "
        f"answerable held-out queries ({cal_una} / {len(cal) - cal_una} to calibrate on)"
    )
    out(f"{'method':<58}{'floor':>7}{'caught':>8}{'lost':>8}")
    for r in rows:
        if r.floor is None and math.isnan(r.caught):
            out(f"{r.method:<58}  {r.note}")
            continue
        floor_text = "none" if r.floor is None else f"{r.floor:.2f}"
        out(f"{r.method:<58}{floor_text:>7}{pct(r.caught):>8}{pct(r.lost):>8}")
    out("goal: unanswerable caught >= 60% at <= 10% answerable lost")
    return [r.as_dict() for r in rows]


def run(args: argparse.Namespace, out: Out) -> dict[str, Any]:
    started = time.perf_counter()
    data: Path = args.data
    queries = read_queries(data / "evalset.jsonl")
    qids = sorted(queries)
    cal_rows, held_rows = split_queries(len(qids), args.holdout, args.seed)
    cal = [qids[i] for i in cal_rows]
    held = [qids[i] for i in held_rows]
    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "data": str(data),
        "split": {"seed": args.seed, "calibration": len(cal), "held_out": len(held)},
    }
    out(
        f"conflicts: python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; data {data} ({len(qids)} questions), split seed {args.seed}: "
        f"{len(cal)} calibration / {len(held)} held-out queries"
    )
    out(f"command: {report['command']}")
    report["detection"] = detection_section(queries, held, args.top, out)
    with warnings.catch_warnings():  # an untyped query under the answers detector says so
        warnings.simplefilter("ignore", ConfigWarning)
        report["detectors"] = detectors_section(queries, cal, held, args, out)
    if args.detectors_only:
        return report
    ctx = Contexts(load_evalset(data / "evalset.jsonl").arrays(RUN))
    with tempfile.TemporaryDirectory(prefix="ragguard-conflicts-") as tmp:
        figures, base = quality_section(queries, ctx, cal, held, args, Path(tmp), out)
        report.update(figures)
        variant = read_queries(data / "unanswerable" / "evalset.jsonl")
        report["answerability"] = answerability_section(
            variant, base, cal, held, args.seed, Path(tmp), out
        )
    wall = time.perf_counter() - started
    out("")
    out(f"wall time {wall:.0f} s")
    report["wall_s"] = wall
    return report


def finite(x: Any) -> Any:
    """``x`` with every NaN as ``None`` (strict JSON)."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="built example folder")
    ap.add_argument("--seed", type=int, default=0, help="split and bootstrap seed (0)")
    ap.add_argument("--holdout", type=float, default=HOLDOUT, help="held-out share (0.5)")
    ap.add_argument("--top", type=int, default=5, help="top-k compared for conflicts (5)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--quick", action="store_true", help="a smaller runtime grid (smoke runs)")
    ap.add_argument("--nq", type=Path, default=NQ, help="nq-open-oracle.jsonl.gz (twins, cost)")
    ap.add_argument("--detectors-only", action="store_true", help="sections a and d only")
    args = ap.parse_args(argv)
    try:
        report = run(args, print)
    except Exception as exc:  # a report, not a test: always exit 0
        print(f"benchmark failed: {type(exc).__name__}: {exc}")
        return 0
    if args.json is not None:
        text = json.dumps(finite(report), indent=2, allow_nan=False, default=str)
        args.json.write_text(text + "\n", encoding="utf-8")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("conflicts"):
        sys.exit(main())
