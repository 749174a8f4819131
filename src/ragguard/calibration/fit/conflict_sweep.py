"""Sweeping the conflict stage: every setting of the grid under every ``conflicts`` x
detector x threshold setting, one kernel each (``StageKernels`` shows them as one); pairs are
found once per query and detector, at the lowest threshold swept. ``prefer`` is not swept."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.answer_spans import ANSWER_OVERLAP, passage_answers
from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.fit.sweep import F64, Cuts, I, SweepKernel, conflict_threshold, cut_dtype
from ragguard.calibration.fit.sweep_stages import PassageStages, passage_stages
from ragguard.conflicts import Pair, answer_conflicts, find_conflicts
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import (
    DEFAULT_ANSWER_SIMILARITY,
    DEFAULT_CONFLICT_SIMILARITY,
    ConflictDetector,
    ConflictMode,
    PolicyParams,
)
from ragguard.stages import shingles
from ragguard.tokens import DEFAULT_TOKEN_COUNTER

ConflictSetting = tuple[ConflictMode, float, ConflictDetector, float]
"""``(conflicts, conflict_similarity, conflict_detector, conflict_answer_similarity)`` of a
swept setting (a detector's unused threshold at its default)."""

_OFF: ConflictSetting = (
    ConflictMode.OFF,
    DEFAULT_CONFLICT_SIMILARITY,
    ConflictDetector.NEAR_COPY,
    DEFAULT_ANSWER_SIMILARITY,
)

SWEPT_MODES: tuple[ConflictMode, ...] = (
    ConflictMode.OFF,
    ConflictMode.FLAG,
    ConflictMode.KEEP_FIRST,
    ConflictMode.DROP,
)
"""The modes the sweep can try, simplest first (the order settings are swept in)."""

_PREFER = (
    "conflicts='prefer' keeps the member with the greatest value of a metadata key that "
    'eval sets do not carry, so it cannot be swept; set conflicts = "prefer" and '
    "conflict_prefer in the config by hand"
)


def conflict_settings(
    conflicts: Sequence[str | ConflictMode],
    similarities: Sequence[float] = (),
    detectors: Sequence[str | ConflictDetector] = (),
    answer_similarities: Sequence[float] = (),
) -> tuple[ConflictSetting, ...]:
    """The conflict settings to sweep, in sweep order: modes simplest first (off, flag, keep_first,
    drop), each with every detector (default near-copy: near-copy, answers, both) at every
    threshold from the highest (fewest conflicts) to the lowest (``both``: every pair of
    them); ``off`` once."""
    if not conflicts:
        if similarities or detectors or answer_similarities:
            raise ConfigError(
                "conflict similarities are swept with the conflict stage: pass the modes "
                "too (--conflicts off,keep_first,drop)"
            )
        return ()
    modes: set[ConflictMode] = set()
    for c in conflicts:
        try:
            mode = ConflictMode(str(c).strip().lower())
        except ValueError:
            raise ConfigError(
                f"unknown conflicts mode {c!r}; sweep some of: "
                + ", ".join(m.value for m in SWEPT_MODES)
            ) from None
        if mode is ConflictMode.PREFER:
            raise ConfigError(_PREFER)
        modes.add(mode)
    sims: set[float] = set()
    for s in similarities or (DEFAULT_CONFLICT_SIMILARITY,):
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0.0 < s <= 1.0:
            raise ConfigError(
                f"a conflict similarity must be a number in (0, 1] (a word 3-shingle "
                f"Jaccard similarity), got {s!r}"
            )
        sims.add(float(s))
    kinds: set[ConflictDetector] = set()
    for d in detectors or (ConflictDetector.NEAR_COPY,):
        try:
            kinds.add(ConflictDetector(str(d).strip().lower()))
        except ValueError:
            raise ConfigError(
                f"unknown conflict detector {d!r}; sweep some of: "
                + ", ".join(k.value for k in ConflictDetector)
            ) from None
    answers: set[float] = set()
    for a in answer_similarities or (DEFAULT_ANSWER_SIMILARITY,):
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0.0 <= a <= 1.0:
            raise ConfigError(
                f"a conflict answer similarity must be a number in [0, 1] (a word Jaccard "
                f"similarity), got {a!r}"
            )
        answers.add(float(a))
    near = sorted(sims, reverse=True)
    if answer_similarities and kinds == {ConflictDetector.NEAR_COPY}:
        raise ConfigError(
            "conflict answer similarities are swept with the answers detector: pass the "
            "detectors too (--conflict-detectors answers,both)"
        )
    levels = sorted(answers, reverse=True)
    by_detector = {
        ConflictDetector.NEAR_COPY: [(s, DEFAULT_ANSWER_SIMILARITY) for s in near],
        ConflictDetector.ANSWERS: [(DEFAULT_CONFLICT_SIMILARITY, a) for a in levels],
        ConflictDetector.BOTH: [(s, a) for s in near for a in levels],
    }
    out: list[ConflictSetting] = []
    for mode in SWEPT_MODES:
        if mode not in modes:
            continue
        if mode is ConflictMode.OFF:
            out.append(_OFF)
            continue
        for kind in ConflictDetector:
            if kind in kinds:
                out += [(mode, s, kind, a) for s, a in by_detector[kind]]
    return tuple(out)


def setting_of(params: PolicyParams) -> ConflictSetting:
    """The conflict setting of ``params`` (``off`` at the default similarity: its level
    is not used)."""
    if params.conflicts is ConflictMode.OFF:
        return _OFF
    return (
        params.conflicts,
        params.conflict_similarity,
        params.conflict_detector,
        params.conflict_answer_similarity,
    )


_NEAR = (ConflictDetector.NEAR_COPY, ConflictDetector.BOTH)
_ANSWERS = (ConflictDetector.ANSWERS, ConflictDetector.BOTH)


def similarity_levels(settings: Sequence[ConflictSetting]) -> tuple[float, ...]:
    """The similarities ``settings`` compare near-copies at, highest first (the default
    when only ``off`` is swept: detection is still reported at it; none when every
    setting swept reads answers only)."""
    on = [s for s in settings if s[0] is not ConflictMode.OFF]
    levels = {s[1] for s in on if s[2] in _NEAR}
    if on and not levels:
        return ()
    return tuple(sorted(levels or {DEFAULT_CONFLICT_SIMILARITY}, reverse=True))


def answer_levels(settings: Sequence[ConflictSetting]) -> tuple[float, ...]:
    """The answer similarities ``settings`` read, highest first (none without the answers
    detector)."""
    on = [s for s in settings if s[0] is not ConflictMode.OFF and s[2] in _ANSWERS]
    return tuple(sorted({s[3] for s in on}, reverse=True))


def describe_threshold(setting: ConflictSetting) -> str:
    """``0.5``, ``answers 0.4``, ``0.5+answers 0.4``: a setting's detector and threshold."""
    return conflict_threshold(*setting[1:])


def describe_conflicts(setting: ConflictSetting) -> str:
    """``conflicts off``, ``conflicts=drop@0.5``, ``conflicts=drop@answers 0.4``: a conflict
    setting in words (the label ``describe_point`` appends)."""
    if setting[0] is ConflictMode.OFF:
        return "conflicts off"
    return f"conflicts={setting[0].value}@{describe_threshold(setting)}"


# --------------------------------------------------------------------------- kernels


class StageKernels(SweepKernel):
    """One kernel per conflict setting over the same run, seen as one kernel."""

    def __init__(
        self,
        arrays: EvalArrays,
        blocks: Sequence[SweepKernel],
        settings: Sequence[ConflictSetting],
        *,
        max_cut: int,
        pairs: Sequence[Sequence[Pair]],
        answer_pairs: Sequence[Sequence[Pair]] = (),
    ) -> None:
        if not blocks or len(blocks) != len(settings):
            raise ConfigError("a kernel of conflict settings needs one kernel per setting")
        self.arrays = arrays
        self.blocks = tuple(blocks)
        self.settings = tuple(settings)
        self.metrics = blocks[0].metrics
        self.width = blocks[0].width
        self.stages = blocks[0].stages
        self.lazy = any(b.lazy for b in blocks)
        self.stride = max_cut + 1
        self.pairs = pairs
        self.answer_pairs = answer_pairs

    def block_of(self, params: PolicyParams) -> int:
        """The index of ``params``' conflict setting."""
        try:
            return self.settings.index(setting_of(params))
        except ValueError:
            raise ConfigError(
                f"{describe_conflicts(setting_of(params))} was not swept; the kernel holds "
                + ", ".join(map(describe_conflicts, self.settings))
            ) from None

    def _rows_of(self, kept: NDArray[np.integer[Any]]) -> tuple[I, I]:
        """Each row's block, and the rows' cuts within their blocks."""
        k = np.asarray(kept, dtype=np.intp)
        if k.shape[-1] == 0:
            return np.zeros(k.shape[0], dtype=np.intp), k
        block = k // self.stride
        lo, hi = block.min(axis=1), block.max(axis=1)
        if (lo != hi).any() or (lo < 0).any() or (hi >= len(self.blocks)).any():
            raise EvalSetError(
                f"kept must hold one conflict setting's cuts per row: ints in "
                f"[b * {self.stride}, b * {self.stride} + {self.width}] for a block b < "
                f"{len(self.blocks)}"
            )
        return lo, k - (lo * self.stride)[:, None]

    def cuts(self, points: Sequence[PolicyParams]) -> Cuts:
        """(P, Q) each setting's cuts, in its block (see the class docstring)."""
        kept = np.empty(
            (len(points), self.n_queries), dtype=cut_dtype(len(self.blocks) * self.stride - 1)
        )
        members: dict[int, list[int]] = {}
        for i, p in enumerate(points):
            members.setdefault(self.block_of(p), []).append(i)
        for b, idx in members.items():
            sub = self.blocks[b].cuts([points[i] for i in idx]).astype(np.intp)
            kept[idx] = sub + b * self.stride
        return kept

    def cut(self, params: PolicyParams) -> I:
        """(Q,) the cuts of ``params``, in its block."""
        b = self.block_of(params)
        out: I = self.blocks[b].cut(params) + b * self.stride
        return out

    def context(self, row: int, kept: int) -> list[int]:
        """As ``SweepKernel.context``, in the cut's own block."""
        b = int(kept) // self.stride
        if not 0 <= b < len(self.blocks):
            raise EvalSetError(f"{kept} is no conflict setting's cut (stride {self.stride})")
        return self.blocks[b].context(row, int(kept) - b * self.stride)

    def values(self, kept: NDArray[np.integer[Any]], metrics: Sequence[str] | None = None) -> F64:
        """As ``SweepKernel.values``, each row of cuts read from its own block."""
        k = np.asarray(kept, dtype=np.intp)
        ks = k.reshape(-1, k.shape[-1]) if k.ndim else k.reshape(1, 1)
        block, local = self._rows_of(ks)
        n_m = len(self.metrics if metrics is None else metrics)
        out = np.empty((ks.shape[0], n_m, ks.shape[1]))
        for b in np.unique(block).tolist():
            rows = block == b
            out[rows] = self.blocks[b].values(local[rows], metrics)
        return out if k.ndim == 2 else out[0]

    def group_sums(
        self, kept: Cuts, part: I, n_groups: int, weight: F64 | None = None
    ) -> tuple[F64, F64]:
        """As ``SweepKernel.group_sums``, each row of cuts read from its own block."""
        block, local = self._rows_of(kept)
        shape = (n_groups, kept.shape[0], len(self.metrics))
        sums, counts = np.zeros(shape), np.zeros(shape)
        for b in np.unique(block).tolist():
            rows = np.flatnonzero(block == b)
            sub = local[rows].astype(kept.dtype)
            s, c = self.blocks[b].group_sums(sub, part, n_groups, weight)
            sums[:, rows], counts[:, rows] = s, c
        return sums, counts


# --------------------------------------------------------------------------- the sweep


@dataclass(frozen=True)
class StageSweep:
    """The stages after the cut that ``calibrate`` sweeps: the token budget and the near-duplicate
    control at their one setting, the conflict stage at each of ``settings`` (none: not swept)."""

    base: PassageStages
    settings: tuple[ConflictSetting, ...] = ()

    def points(self, points: Sequence[PolicyParams]) -> tuple[PolicyParams, ...]:
        """``points`` with the stages on: under each conflict setting in turn (all of
        the first setting's points, then the next's)."""
        staged = [self.base.params(p) for p in points]
        if not self.settings:
            return tuple(staged)
        return tuple(
            replace(
                p,
                conflicts=mode,
                conflict_similarity=sim,
                conflict_detector=kind,
                conflict_answer_similarity=answer,
            )
            for mode, sim, kind, answer in self.settings
            for p in staged
        )

    def is_base(self, params: PolicyParams) -> bool:
        """Whether ``params`` runs the base conflict setting (or none is swept)."""
        return not self.settings or setting_of(params) == self.settings[0]

    def kernel(self, arrays: EvalArrays, metrics: Sequence[str], width: int) -> SweepKernel:
        """The sweep kernel of ``arrays`` with these stages (texts read here): a ``StageKernels``
        when conflicts are swept."""
        run = self.base.for_run(arrays, width)
        if not self.settings:
            return SweepKernel(arrays, metrics, width, stages=run)
        depth = np.minimum(arrays.n_valid, width).tolist()
        texts = [list(t[:d]) for t, d in zip(run.texts, depth, strict=True)]
        if any(texts) and not any(t.strip() for row in texts for t in row):
            raise EvalSetError(
                f"conflict detection compares passage texts, but all "
                f"{sum(map(len, texts))} ranked candidates' texts are empty; put the texts "
                "in the eval set, in a corpus.jsonl beside it, or pass --corpus",
                path=self.base.evalset.source if self.base.evalset is not None else None,
            )
        built = {t: shingles(t) for t in {t for row in texts for t in row}}  # each text once
        sets = [[built[t] for t in row] for row in texts]
        levels, answered = similarity_levels(self.settings), answer_levels(self.settings)
        pairs = [
            find_conflicts(row, row_sets, similarity=levels[-1]) if levels else []
            for row, row_sets in zip(texts, sets, strict=True)
        ]
        answer_pairs: list[list[Pair]] = []
        if answered:
            queries = self.base.evalset.queries if self.base.evalset is not None else {}
            for qid, row in zip(arrays.qids, texts, strict=True):
                query = queries[qid].text if qid in queries else None
                answers = passage_answers(query or "", row, overlap=ANSWER_OVERLAP)
                answer_pairs.append(answer_conflicts(row, answers, similarity=answered[-1]))
        shared = replace(run, sets=sets, pairs=pairs, answer_pairs=answer_pairs)
        blocks = []
        for mode, sim, kind, answer in self.settings:
            setting = replace(
                shared,
                conflicts=mode,
                conflict_similarity=sim,
                conflict_detector=kind,
                conflict_answer_similarity=answer,
            )
            blocks.append(SweepKernel(arrays, metrics, width, stages=setting))
        return StageKernels(
            arrays, blocks, self.settings, max_cut=width, pairs=pairs, answer_pairs=answer_pairs
        )

    def paths(
        self,
        points: Sequence[PolicyParams],
        paths_of: Callable[[Sequence[PolicyParams]], Mapping[str, Sequence[int]]],
    ) -> dict[str, list[int]]:
        """A recall guarantee's fixed sequences (``paths_of(points)``) for each conflict
        setting apart, named with it: along each, only the cut changes."""
        if len(self.settings) < 2:
            return {k: list(v) for k, v in paths_of(points).items()}
        out: dict[str, list[int]] = {}
        for setting in self.settings:
            idx = [i for i, p in enumerate(points) if setting_of(p) == setting]
            for name, path in paths_of([points[i] for i in idx]).items():
                out[f"{name}, {describe_conflicts(setting)}"] = [idx[j] for j in path]
        return out


def stage_sweep(
    evalset: EvalSet,
    *,
    max_tokens: int | None,
    near_duplicate_threshold: float | None,
    conflicts: Sequence[str | ConflictMode] = (),
    conflict_similarities: Sequence[float] = (),
    token_counter_spec: str = DEFAULT_TOKEN_COUNTER,
    passages: Mapping[str, str] | None = None,
    conflict_detectors: Sequence[str | ConflictDetector] = (),
    conflict_answer_similarities: Sequence[float] = (),
) -> StageSweep | None:
    """The stages after the cut to sweep with (``None`` when all are off): the conflict settings
    swept over ``passage_stages``; checked, and the token counter built, before any sweep."""
    settings = conflict_settings(
        conflicts, conflict_similarities, conflict_detectors, conflict_answer_similarities
    )
    base = passage_stages(
        evalset,
        max_tokens=max_tokens,
        token_counter_spec=token_counter_spec,
        near_duplicate_threshold=near_duplicate_threshold,
        passages=passages,
        conflicts=bool(settings),
    )
    return None if base is None else StageSweep(base, settings)


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class ConflictDetection:
    """How conflict detection at one similarity finds labelled distractors, on a set of queries,
    among each query's first ``max_k`` ranked candidates."""

    similarity: float
    max_k: int
    queries: int
    candidates: int
    positives: int
    flagged: int
    hits: int
    relevant: int
    relevant_flagged: int
    positive_queries: int
    flagged_queries: int
    query_hits: int

    @staticmethod
    def _ratio(a: int, b: int) -> float:
        return a / b if b else math.nan

    @property
    def precision(self) -> float:
        """Flagged candidates that are positive (NaN when none is flagged)."""
        return self._ratio(self.hits, self.flagged)

    @property
    def recall(self) -> float:
        """Positive candidates that are flagged (NaN when none is positive)."""
        return self._ratio(self.hits, self.positives)

    @property
    def relevant_rate(self) -> float:
        """Relevant candidates that are flagged (kept out under ``drop``)."""
        return self._ratio(self.relevant_flagged, self.relevant)

    @property
    def query_precision(self) -> float:
        """Flagged queries that hold a positive candidate."""
        return self._ratio(self.query_hits, self.flagged_queries)

    @property
    def query_recall(self) -> float:
        """Queries with a positive candidate that are flagged."""
        return self._ratio(self.query_hits, self.positive_queries)

    @property
    def clean_flagged_rate(self) -> float:
        """Queries without a positive candidate that are flagged anyway."""
        return self._ratio(
            self.flagged_queries - self.query_hits, self.queries - self.positive_queries
        )


def conflict_detection(
    kernel: StageKernels,
    rows: I,
    similarity: float,
    max_k: int,
    detector: ConflictDetector = ConflictDetector.NEAR_COPY,
    answer_similarity: float = DEFAULT_ANSWER_SIMILARITY,
) -> ConflictDetection:
    """Detection by ``detector`` at ``similarity`` (near-copies) and ``answer_similarity``
    (answers) on query ``rows``, among each query's first ``max_k`` ranked candidates (at
    most the kernel's width), against the labels of the kernel's run (see
    ``ConflictDetection``)."""
    for found, level, at in (
        (_NEAR, similarity_levels(kernel.settings), similarity),
        (_ANSWERS, answer_levels(kernel.settings), answer_similarity),
    ):
        if detector in found and (not level or at < level[-1]):
            low = f"found at similarity >= {level[-1]:g}, not {at:g}" if level else "not swept"
            raise ConfigError(f"the {detector.value} pairs were {low}")
    if not 1 <= max_k <= max(kernel.width, 1):
        raise ConfigError(f"max_k must be in [1, {kernel.width}], got {max_k}")
    arrays = kernel.arrays
    width = max(kernel.width, 1)
    counts = np.zeros(10, dtype=np.int64)  # in ConflictDetection's order
    for r in np.asarray(rows, dtype=np.intp).tolist():
        depth = min(int(arrays.n_valid[r]), max_k)
        u = arrays.utility[r, :depth]
        positive = (u < 0) | arrays.distractor[r, :depth]
        relevant = u > 0
        flagged = np.zeros(width, dtype=bool)
        near = kernel.pairs[r] if detector in _NEAR else ()
        answered = kernel.answer_pairs[r] if detector in _ANSWERS else ()
        for pairs, at in ((near, similarity), (answered, answer_similarity)):
            for p in pairs:
                if p.similarity >= at and p.b < depth:
                    flagged[p.a] = flagged[p.b] = True
        f = flagged[:depth]
        sums = [1, depth, positive.sum(), f.sum(), (f & positive).sum(), relevant.sum()]
        counts += np.array(
            [*sums, (f & relevant).sum(), positive.any(), f.any(), f.any() & positive.any()]
        )
    return ConflictDetection(similarity, max_k, *counts.tolist())
