"""The stages after the cut (near-duplicates, token budget) in the calibration sweep.

The sweep tabulates each metric at every context size of the ranked list, because the
cut keeps a prefix. The stages after the cut (:mod:`ragguard.stages`) keep a subset of
that prefix, but they are causal: the passages the stages keep among the first ``m``
ranked ones are the first of those they keep when run on the whole ranked list. So
:class:`PassageStages` runs the runtime's own :func:`ragguard.stages.run_stages` once
per query over the first ``width`` ranked candidates and

* reorders each row so the candidates the stages keep come first (in rank order); the
  metric tables are built on these rows, so context size ``c`` means "the first ``c``
  passages the stages keep";
* maps each cut ``m`` to the context the stages leave of it, ``c = survivors among the
  first m``.

Utilities stay with their candidates (computed on the run's own ranking, as without the
stages). Passage texts come from the eval set's sources
(:func:`ragguard.calibration.rerank_scores.passage_texts`: texts in the eval set, a
``corpus.jsonl`` beside it, ``--corpus`` files); token counts from the config's counter
(:mod:`ragguard.tokens`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.arrays import EvalArrays
from ragguard.calibration.evalset import EvalSet
from ragguard.errors import ConfigError, EvalSetError
from ragguard.policy import PolicyParams
from ragguard.stages import run_stages, shingles, start_state
from ragguard.tokens import DEFAULT_TOKEN_COUNTER, TokenCounter, token_counter

__all__ = ["PassageStages", "passage_stages"]

I = NDArray[np.intp]  # noqa: E741


@dataclass(frozen=True)
class PassageStages:
    """The stages' settings and the texts they read, for one run's ranked candidates.

    Attributes:
        near_duplicate_threshold: as ``GuardConfig.near_duplicate_threshold``.
        max_tokens: as ``GuardConfig.max_tokens``.
        counter: the token counter (``None`` without a budget).
        texts: per query row, the texts of its ranked candidates (at least the first
            ``width`` valid ones); set by :meth:`for_run`.
        lookup: ``(query id, passage id) -> text or None``, where :meth:`for_run` reads
            the texts.
        evalset: the eval set (named in errors).
    """

    near_duplicate_threshold: float | None
    max_tokens: int | None
    counter: TokenCounter | None
    texts: Sequence[Sequence[str]] = ()
    lookup: Callable[[str, str], str | None] | None = None
    evalset: EvalSet | None = None

    def for_run(self, arrays: EvalArrays, width: int) -> PassageStages:
        """These stages with the texts of ``arrays``' first ``width`` ranked candidates.

        Raises:
            EvalSetError: a candidate has no text.
        """
        assert self.lookup is not None
        return replace(self, texts=_texts_of(self.evalset, arrays, width, self.lookup))

    def params(self, p: PolicyParams) -> PolicyParams:
        """``p`` with these stages on."""
        return replace(
            p, near_duplicate_threshold=self.near_duplicate_threshold, max_tokens=self.max_tokens
        )

    def check(self, p: PolicyParams) -> None:
        """Raise unless setting ``p`` runs exactly these stages."""
        if self.params(p) != p or p.keep_invalid:
            raise ConfigError(
                "every setting swept with the stages after the cut must carry their settings "
                f"(near_duplicate_threshold={self.near_duplicate_threshold}, max_tokens="
                f"{self.max_tokens}) and keep_invalid=False; got {p}"
            )

    def config_settings(self) -> dict[str, Any]:
        """The config fields that turn these stages on at runtime."""
        out: dict[str, Any] = {}
        if self.near_duplicate_threshold is not None:
            out["near_duplicate_threshold"] = self.near_duplicate_threshold
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
            out["token_counter"] = self.counter.spec if self.counter else DEFAULT_TOKEN_COUNTER
        return out

    def compact(self, arrays: EvalArrays, width: int) -> tuple[EvalArrays, I]:
        """The rows reordered so the stages' survivors come first, and (Q, width + 1) the
        context size the stages leave of each cut ``0..width``."""
        q = arrays.n_queries
        depth = np.minimum(arrays.n_valid, width)
        cols = np.arange(width)
        positions = np.where(cols[None, :] < depth[:, None], cols[None, :], -1)
        sets = None
        if self.near_duplicate_threshold is not None:
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
        state = run_stages(
            start_state(positions), params, shingles=sets, tokens=tokens, counter=counter
        )
        kept = state.kept
        through = np.zeros((q, width + 1), dtype=np.intp)
        through[:, 1:] = np.cumsum(kept, axis=1)
        n = arrays.shape[1]
        group = np.ones((q, n), dtype=np.intp)
        group[:, :width][kept] = 0
        perm = np.argsort(group, axis=1, kind="stable")

        def moved(a: NDArray[Any]) -> NDArray[Any]:
            return np.take_along_axis(np.asarray(a), perm, axis=1)

        out = replace(
            arrays,
            grades=moved(arrays.grades),
            judged=moved(arrays.judged),
            distractor=moved(arrays.distractor),
            given_utility=moved(arrays.given_utility),
            no_response=moved(arrays.no_response),
        )
        utility = moved(arrays.utility)
        out.__dict__["utility"] = utility  # utilities of the run's own ranking, moved along
        return out, through


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
            f"the token budget and near-duplicate control read passage texts, but "
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
    corpus: Sequence[str | os.PathLike[str]] = (),
    passages: Mapping[str, str] | None = None,
) -> PassageStages | None:
    """The stages to sweep with, texts still to read per run (:meth:`PassageStages.for_run`),
    or ``None`` when both are off. The counter is built here, so a missing tokenizer
    fails before any sweep.

    Raises:
        ConfigError: a value out of range, a malformed counter.
        MissingDependencyError: the counter's package is not installed.
    """
    if max_tokens is None and near_duplicate_threshold is None:
        return None
    PolicyParams(  # the runtime's own checks of the values
        max_k=1, max_tokens=max_tokens, near_duplicate_threshold=near_duplicate_threshold
    )
    counter = token_counter(token_counter_spec) if max_tokens is not None else None
    from ragguard.calibration.rerank_scores import passage_texts

    lookup = passage_texts(evalset, corpus=corpus, passages=passages)
    return PassageStages(
        near_duplicate_threshold, max_tokens, counter, lookup=lookup, evalset=evalset
    )
