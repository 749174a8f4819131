"""The stages after the cut in the sweep, run with the runtime's own code: causal stages reorder
each row so the survivors come first; ``conflicts="drop"`` is not causal (it drops both members
once the partner is inside the cut), so its tables are per cut (``CutContexts``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.data.evalset import EvalSet
from ragguard.conflicts import Pair, conflict_stage, find_conflicts, merge_pairs
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import (
    DEFAULT_ANSWER_SIMILARITY,
    DEFAULT_CONFLICT_SIMILARITY,
    ConflictDetector,
    ConflictMode,
    PolicyParams,
)
from ragguard.stages import Shingles, StageState, run_stages, shingles, start_state
from ragguard.tokens import DEFAULT_TOKEN_COUNTER, TokenCounter, token_counter

I = NDArray[np.intp]  # noqa: E741
B = NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class CutContexts:
    """Per query and cut ``m = 0..width``, the context stages that are not causal leave
    (``conflicts="drop"``), over the rows ``PassageStages.compact`` returns."""

    sizes: I
    rows: I
    keep: B

    def arranged(self, part: EvalArrays, lo: int, cuts: I) -> tuple[EvalArrays, I]:
        """Rows ``lo:lo + len(cuts)`` (``part``, a slice of the compacted arrays) with
        each row's context at its cut ``cuts[i]`` first, in rank order, and the context
        sizes: a metric at those sizes is the metric of the kept context."""
        hi = lo + cuts.size
        sizes = self.sizes[np.arange(lo, hi), cuts]
        a, b = np.searchsorted(self.rows, [lo, hi])
        if a == b:
            return part, sizes
        local = self.rows[a:b] - lo
        n = part.shape[1]
        width = self.keep.shape[2]
        perm = np.broadcast_to(np.arange(n), (cuts.size, n)).copy()
        keep = self.keep[np.arange(a, b), cuts[local]]  # (rows, width)
        group = np.ones((local.size, n), dtype=np.intp)
        group[:, :width][keep] = 0
        perm[local] = np.argsort(group, axis=1, kind="stable")
        return part.reordered(np.where(part.present, perm, -1)), sizes


@dataclass(frozen=True, eq=False)
class Compacted:
    """What ``PassageStages.compact`` makes of a run's ranked rows."""

    arrays: EvalArrays
    through: I
    order: I
    contexts: CutContexts | None

    def context(self, row: int, column: int) -> list[int]:
        """The ranked positions of the passages row ``row`` keeps at table column
        ``column`` (its cut's, ``through``), in rank order."""
        c = self.contexts
        if c is not None:
            e = int(np.searchsorted(c.rows, row))
            if e < c.rows.size and c.rows[e] == row:
                return np.flatnonzero(c.keep[e, column]).tolist()
            column = int(c.sizes[row, column])
        return self.order[row, :column].tolist()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PassageStages:
    """The stages' settings and the texts they read, for one run's ranked candidates."""

    near_duplicate_threshold: float | None
    max_tokens: int | None
    counter: TokenCounter | None
    texts: Sequence[Sequence[str]] = ()
    lookup: Callable[[str, str], str | None] | None = None
    evalset: EvalSet | None = None
    conflicts: ConflictMode = ConflictMode.OFF
    conflict_similarity: float = DEFAULT_CONFLICT_SIMILARITY
    sets: Sequence[Sequence[Shingles]] | None = None
    pairs: Sequence[Sequence[Pair]] | None = None
    conflict_detector: ConflictDetector = ConflictDetector.NEAR_COPY
    conflict_answer_similarity: float = DEFAULT_ANSWER_SIMILARITY
    answer_pairs: Sequence[Sequence[Pair]] = ()  # found by the sweep (StageSweep.kernel)

    def for_run(self, arrays: EvalArrays, width: int) -> PassageStages:
        """These stages with the texts of ``arrays``' first ``width`` ranked candidates."""
        assert self.lookup is not None
        return replace(
            self, texts=_texts_of(self.evalset, arrays, width, self.lookup), sets=None, pairs=None
        )

    def params(self, p: PolicyParams) -> PolicyParams:
        """``p`` with these stages on."""
        return replace(
            p,
            near_duplicate_threshold=self.near_duplicate_threshold,
            max_tokens=self.max_tokens,
            conflicts=self.conflicts,
            conflict_similarity=self.conflict_similarity,
            conflict_detector=self.conflict_detector,
            conflict_answer_similarity=self.conflict_answer_similarity,
        )

    def check(self, p: PolicyParams) -> None:
        """Raise unless setting ``p`` runs exactly these stages."""
        if self.params(p) != p or p.keep_invalid:
            raise ConfigError(
                "every setting swept with the stages after the cut must carry their settings "
                f"(near_duplicate_threshold={self.near_duplicate_threshold}, max_tokens="
                f"{self.max_tokens}, conflicts={self.conflicts.value}, conflict_similarity="
                f"{self.conflict_similarity:g}) and keep_invalid=False; got {p}"
            )

    def config_settings(self) -> dict[str, Any]:
        """The config fields that turn these stages on at runtime."""
        out: dict[str, Any] = {}
        if self.near_duplicate_threshold is not None:
            out["near_duplicate_threshold"] = self.near_duplicate_threshold
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
            out["token_counter"] = self.counter.spec if self.counter else DEFAULT_TOKEN_COUNTER
        if self.conflicts is not ConflictMode.OFF:
            out["conflicts"] = self.conflicts
            out["conflict_similarity"] = self.conflict_similarity
            out["conflict_detector"] = self.conflict_detector
            out["conflict_answer_similarity"] = self.conflict_answer_similarity
        return out

    def compact(self, arrays: EvalArrays, width: int) -> Compacted:
        """The rows reordered so the stages' survivors come first, with the table column of each cut
        and, for stages that are not causal (``conflicts="drop"``), the context of every cut (the
        table's columns are then the cuts themselves)."""
        q = arrays.n_queries
        depth = np.minimum(arrays.n_valid, width)
        cols = np.arange(width)
        positions = np.where(cols[None, :] < depth[:, None], cols[None, :], -1)
        mode = self.conflicts
        sets = None
        if self.near_duplicate_threshold is not None or mode is not ConflictMode.OFF:
            sets = self.sets
            if sets is None:
                sets = [[shingles(t) for t in self.texts[r][: int(depth[r])]] for r in range(q)]
        tokens = None
        if self.max_tokens is not None:
            assert self.counter is not None
            tokens = np.zeros((q, width), dtype=np.int64)
            for r in range(q):
                d = int(depth[r])
                tokens[r, :d] = self.counter.count(list(self.texts[r][:d]))
        params = PolicyParams(
            max_k=max(width, 1),
            near_duplicate_threshold=self.near_duplicate_threshold,
            max_tokens=self.max_tokens,
        )
        counter = self.counter.spec if self.counter else ""
        state = start_state(positions)
        pairs: list[list[Pair]] = []
        if mode is not ConflictMode.OFF:
            assert sets is not None
            pairs = self._pairs(sets, depth)
            if mode is not ConflictMode.DROP:  # causal: applied once over the width
                state, _, _ = conflict_stage(
                    state,
                    texts=self.texts,
                    shingles=sets,
                    similarity=self.conflict_similarity,
                    mode=mode,
                    pairs=pairs,
                )
        state = run_stages(state, params, shingles=sets, tokens=tokens, counter=counter)
        kept = state.kept
        through = np.zeros((q, width + 1), dtype=np.intp)
        through[:, 1:] = np.cumsum(kept, axis=1)
        contexts = None
        if mode is ConflictMode.DROP:
            assert sets is not None
            rows = np.array([r for r in range(q) if pairs[r]], dtype=np.intp)
            kept[rows] = False  # rows with a conflict stay in ranked order
            keep = self._per_cut(rows, positions, pairs, sets, tokens, params, counter)
            sizes = through.copy()
            sizes[rows] = keep.sum(axis=2)
            contexts = CutContexts(sizes, rows, keep)
            through = np.broadcast_to(np.arange(width + 1), (q, width + 1)).copy()
        n = arrays.shape[1]
        group = np.ones((q, n), dtype=np.intp)
        group[:, :width][kept] = 0
        perm = np.argsort(group, axis=1, kind="stable")
        moved = arrays.reordered(np.where(arrays.present, perm, -1))
        return Compacted(moved, through, perm, contexts)

    def _pairs(self, sets: Sequence[Sequence[Shingles]], depth: I) -> list[list[Pair]]:
        """Each row's conflicting pairs among its first ``depth`` candidates."""
        s = self.conflict_similarity
        kind = self.conflict_detector
        if kind is not ConflictDetector.NEAR_COPY:  # the sweep found the pairs (kernel)
            a = self.conflict_answer_similarity
            answered = [[p for p in row if p.similarity >= a] for row in self.answer_pairs]
            if kind is ConflictDetector.ANSWERS:
                return answered
            assert self.pairs is not None
            near = [[p for p in row if p.similarity >= s] for row in self.pairs]
            return [merge_pairs(n, x) for n, x in zip(near, answered, strict=True)]
        if self.pairs is not None:
            return [[p for p in row if p.similarity >= s] for row in self.pairs]
        return [
            find_conflicts(self.texts[r][: int(depth[r])], sets[r], similarity=s)
            for r in range(depth.size)
        ]

    def _per_cut(
        self,
        rows: I,
        positions: I,
        pairs: Sequence[Sequence[Pair]],
        sets: Sequence[Sequence[Shingles]],
        tokens: NDArray[np.int64] | None,
        params: PolicyParams,
        counter: str,
    ) -> B:
        """(E, width + 1, width): for each of ``rows``, what the runtime's stages keep of
        the first ``m`` ranked candidates, for every cut ``m`` (one stage state row per
        row and cut; the pairs among the first ``m`` are the row's pairs inside them)."""
        width = positions.shape[1]
        cuts = width + 1
        if rows.size == 0:
            return np.zeros((0, cuts, width), dtype=bool)
        m = np.tile(np.arange(cuts), rows.size)  # (E * cuts,)
        r = np.repeat(rows, cuts)
        stacked = np.where(np.arange(width)[None, :] < m[:, None], positions[r], -1)
        state: StageState = start_state(stacked)
        order = r.tolist()
        inside = [[p for p in pairs[i] if p.b < c] for i, c in zip(order, m.tolist(), strict=True)]
        state, _, _ = conflict_stage(
            state,
            texts=[self.texts[i] for i in order],
            shingles=[sets[i] for i in order],
            similarity=self.conflict_similarity,
            mode=self.conflicts,
            pairs=inside,  # a row's pairs among the first m
        )
        state = run_stages(
            state,
            params,
            shingles=[sets[i] for i in order],
            tokens=None if tokens is None else tokens[r],
            counter=counter,
        )
        out: B = state.kept.reshape(rows.size, cuts, width)
        return out


def _texts_of(
    evalset: EvalSet | None,
    arrays: EvalArrays,
    width: int,
    lookup: Callable[[str, str], str | None],
) -> list[list[str]]:
    texts: list[list[str]] = []
    missing: list[tuple[str, str]] = []
    for row, qid in enumerate(arrays.qids):
        docs = arrays.doc_ids(row)[: min(int(arrays.n_valid[row]), width)]
        row_texts = []
        for d in docs:
            t = lookup(qid, d)
            if t is None:
                missing.append((qid, d))
                t = ""
            row_texts.append(t)
        texts.append(row_texts)
    if missing:
        qid, doc = missing[0]
        raise EvalSetError(
            f"the stages after the cut (token budget, near-duplicates, conflicts) read "
            f"passage texts, but "
            f"{len(missing)} ranked candidates have none (e.g. passage {doc!r} of query "
            f"{qid!r}); put the texts in the eval set, in a corpus.jsonl beside it, or "
            "pass --corpus",
            path=evalset.source if evalset is not None else None,
        )
    return texts


def passage_stages(
    evalset: EvalSet,
    *,
    max_tokens: int | None,
    token_counter_spec: str = DEFAULT_TOKEN_COUNTER,
    near_duplicate_threshold: float | None,
    passages: Mapping[str, str] | None = None,
    conflicts: bool = False,
) -> PassageStages | None:
    """The stages to sweep with, texts still to read per run (``PassageStages.for_run``), or
    ``None`` when both are off (and ``conflicts``, a conflict stage to sweep over them, is not asked
    for)."""
    if max_tokens is None and near_duplicate_threshold is None and not conflicts:
        return None
    PolicyParams(  # the runtime's own checks of the values
        max_k=1, max_tokens=max_tokens, near_duplicate_threshold=near_duplicate_threshold
    )
    counter = token_counter(token_counter_spec) if max_tokens is not None else None
    lookup = evalset.with_texts(passages=passages).texts.get
    return PassageStages(
        near_duplicate_threshold, max_tokens, counter, lookup=lookup, evalset=evalset
    )
