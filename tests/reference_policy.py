"""A deliberately plain, loop-by-loop implementation of the selection policy.

Written from the rules in ragguard.policy's docstring (and, for autocut, from the
algorithm Weaviate documents), without numpy, to check the vectorised implementation
against an independent expectation.
"""

from __future__ import annotations

import math
import re

from ragguard.policy import CutRule, PolicyParams, Reason


def _gap_keep(vals: list[float], p: PolicyParams) -> int:
    n = len(vals)
    window = n if p.gap_window is None else min(n, p.gap_window)
    best, best_j = 0.0, None
    for j in range(window - 1):
        gap = vals[j] - vals[j + 1]
        if gap > best:
            best, best_j = gap, j
    return n if best_j is None else min(best_j + 1 + p.gap_buffer, n)


def _autocut_keep(vals: list[float], p: PolicyParams) -> int:
    n = len(vals)
    if n <= 1 or vals[-1] == vals[0]:
        return n
    diff = [(vals[i] - vals[0]) / (vals[-1] - vals[0]) - i / (n - 1) for i in range(n)]
    jumps = 0
    for i in range(1, n):
        if i == n - 1:
            is_jump = diff[i] > diff[i - 1] and (i < 2 or diff[i] > diff[i - 2])
        else:
            is_jump = diff[i] > diff[i - 1] and diff[i] > diff[i + 1]
        if is_jump:
            jumps += 1
            if jumps >= p.autocut_jumps:
                return i
    return n


def reference_select(
    scores: list[float | None], p: PolicyParams
) -> tuple[list[int], dict[int, Reason]]:
    """Return (kept input positions in order, {dropped position: reason})."""
    valid = [(s, i) for i, s in enumerate(scores) if s is not None and math.isfinite(s)]
    invalid = [i for i, s in enumerate(scores) if s is None or not math.isfinite(s)]
    valid.sort(key=lambda pair: (-pair[0], pair[1]))
    vals = [s for s, _ in valid]
    n = len(vals)

    keep_thr = keep_floor = keep_eu = keep_cut = n
    if p.score_rules:
        if p.relative_threshold > 0 and n and vals[0] > 0:
            keep_thr = sum(1 for v in vals if v >= p.relative_threshold * vals[0])
        if p.min_score is not None:
            keep_floor = sum(1 for v in vals if v >= p.min_score)
        if p.expected_utility is not None:
            g, d = p.expected_utility.gain, p.expected_utility.penalty
            keep_eu = sum(1 for v in vals if v * g > (1 - v) * d)
        if p.cut is CutRule.GAP:
            keep_cut = _gap_keep(vals, p)
        elif p.cut is CutRule.AUTOCUT:
            keep_cut = _autocut_keep(vals, p)

    m = min(keep_thr, keep_floor, keep_eu, keep_cut)
    m = max(m, min(p.min_k, n))
    m = min(m, p.max_k)
    if p.score_rules and p.min_evidence is not None and not (n and vals[0] >= p.min_evidence):
        # not enough evidence: nothing is kept, whatever min_k says; invalid scores keep
        # their own reason unless keep_invalid would have kept them
        abstain: dict[int, Reason] = {i: Reason.INSUFFICIENT_EVIDENCE for _, i in valid}
        for i in invalid:
            abstain[i] = Reason.INSUFFICIENT_EVIDENCE if p.keep_invalid else Reason.INVALID_SCORE
        return [], abstain
    kept = [i for _, i in valid[:m]]
    dropped: dict[int, Reason] = {}
    for j, (_, i) in enumerate(valid[m:], start=m):
        if j >= keep_thr:
            dropped[i] = Reason.BELOW_RELATIVE_THRESHOLD
        elif j >= keep_floor:
            dropped[i] = Reason.BELOW_MIN_SCORE
        elif j >= keep_eu:
            dropped[i] = Reason.BELOW_EXPECTED_UTILITY
        elif j >= keep_cut:
            dropped[i] = Reason.AUTOCUT if p.cut is CutRule.AUTOCUT else Reason.SCORE_GAP
        else:
            dropped[i] = Reason.OVER_MAX_K
    for i in invalid:
        if p.keep_invalid and len(kept) < p.max_k:
            kept.append(i)
        else:
            dropped[i] = Reason.OVER_MAX_K if p.keep_invalid else Reason.INVALID_SCORE
    return kept, dropped


def _shingles(text: str, size: int = 3) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    if len(words) < size:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def reference_stages(
    kept: list[int],
    texts: list[str],
    tokens: list[int],
    threshold: float | None,
    max_tokens: int | None,
) -> tuple[list[int], dict[int, Reason], dict[int, int]]:
    """The stages after the cut, from ragguard.stages' docstring: near-duplicates of a
    kept, higher-ranked passage (word 3-shingle Jaccard >= threshold), then the budget
    filled greedily in rank order, skipping what does not fit.

    Returns (still kept, {dropped position: reason}, {near-duplicate: position it repeats}).
    """
    dropped: dict[int, Reason] = {}
    partner: dict[int, int] = {}
    survivors: list[int] = []
    for i in kept:
        mine = _shingles(texts[i])
        match = None
        if threshold is not None and mine:
            for j in survivors:
                theirs = _shingles(texts[j])
                if theirs and len(mine & theirs) / len(mine | theirs) >= threshold:
                    match = j
                    break
        if match is None:
            survivors.append(i)
        else:
            dropped[i] = Reason.NEAR_DUPLICATE
            partner[i] = match
    if max_tokens is None:
        return survivors, dropped, partner
    final: list[int] = []
    used = 0
    for i in survivors:
        if used + tokens[i] <= max_tokens:
            final.append(i)
            used += tokens[i]
        else:
            dropped[i] = Reason.OVER_TOKEN_BUDGET
    return final, dropped, partner
