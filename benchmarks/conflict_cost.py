"""What does the conflict stage cost on its worst input, and on an ordinary one?

The worst input is audit case TM-02: 200 candidates that are near-copies of one passage
of 2,000 words, each with its own number in the middle, through ``ContextGuard(
score_kind="similarity", max_k=200, relative_threshold=0.0, conflicts="flag")``. Every
pair is comparable and conflicts, so nothing the prefilter does sets a pair aside: the
cost is bounded by :data:`ragguard.conflicts.MAX_PAIRS` (the 50 best-ranked passages are
compared with each other, and the guard warns that the 150 below were not). Before the
bound, ``select()`` aligned all 19,900 pairs word by word in Python: 23 to 44 s on this
kind of machine.

The ordinary input is the same 200 candidates with the default ``max_k=5``: the stage
compares the 5 kept passages (10 pairs).

For each, ``select()`` with ``conflicts="flag"`` is timed next to ``select()`` with
``conflicts="off"`` (the difference is the stage's cost: shingling and comparing the kept
passages). Candidates are built once, outside the timed region; every call is on a fresh
guard, so the shingle sets are built on every call as in a real request. Figures are the
median and the maximum of per-call ``time.perf_counter`` timings, measured interleaved
(off, flag, off, flag, ...) after one warm-up call. The script always exits 0: it is a
report, not a test.

Run: ``python benchmarks/conflict_cost.py`` (``--quick`` for a fast smoke run).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Sequence

import numpy as np

import ragguard
from ragguard import Candidate, ContextGuard, Selection
from ragguard.conflicts import MAX_PAIRS, compared_passages

CANDIDATES = 200
WORDS = 2_000
GOAL_S = 2.0


def near_copies(n: int, words: int, seed: int = 3) -> list[Candidate]:
    """Audit case TM-02: ``n`` copies of one passage of ``words`` random words, copy
    ``i`` with the number ``1000 + i`` in the middle, ranked in input order."""
    rnd = random.Random(seed)
    base = [f"w{rnd.randrange(3000)}" for _ in range(words)]
    mid = words // 2
    texts = [" ".join([*base[:mid], str(1000 + i), *base[mid + 1 :]]) for i in range(n)]
    return [Candidate(f"d{i}", t, 1 - i / 2000) for i, t in enumerate(texts)]


def timed(cands: list[Candidate], max_k: int, conflicts: str) -> tuple[float, Selection]:
    guard = ContextGuard(
        score_kind="similarity", max_k=max_k, relative_threshold=0.0, conflicts=conflicts
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pair cap's warning: reported below
        start = time.perf_counter()
        selection = guard.select("q", cands)
        return time.perf_counter() - start, selection


def measure(cands: list[Candidate], max_k: int, rounds: int) -> dict[str, list[float]]:
    timed(cands, max_k, "off")
    timed(cands, max_k, "flag")  # warm-up
    out: dict[str, list[float]] = {"off": [], "flag": []}
    for _ in range(rounds):
        for mode in ("off", "flag"):
            out[mode].append(timed(cands, max_k, mode)[0])
    return out


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--candidates", type=int, default=CANDIDATES)
    parser.add_argument("--words", type=int, default=WORDS, help="words per passage")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls per row (TM-02)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 10 for max_k=5")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    small_rounds = 10 if args.quick else 50

    print(
        f"ragguard {ragguard.__version__}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, {platform.machine()}"
    )
    cands = near_copies(args.candidates, args.words)
    n = len(cands)
    print(
        f"{n} candidates, near-copies of one passage of {args.words:,} words (audit TM-02); "
        f"MAX_PAIRS = {MAX_PAIRS:,}"
    )
    _, selection = timed(cands, n, "flag")
    (group,) = selection.conflicts
    said = selection.warnings[0] if selection.warnings else "-"
    print(
        f"  max_k={n}: {len(selection.kept)} kept, {compared_passages(n)} compared with each "
        f"other, one conflict group of {len(group.members)}, verdict "
        f"{selection.verdict.value}; warning: {said}"
    )
    rows = [(n, rounds), (5, small_rounds)]
    medians: dict[int, float] = {}
    print(f"\n{'case':<28}{'conflicts off':>16}{'conflicts flag':>16}{'max flag':>12}{'stage':>12}")
    for max_k, r in rows:
        got = measure(cands, max_k, r)
        off, flag = statistics.median(got["off"]), statistics.median(got["flag"])
        medians[max_k] = flag
        label = f"max_k={max_k} ({r} calls each)"
        print(
            f"{label:<28}{fmt(off):>16}{fmt(flag):>16}{fmt(max(got['flag'])):>12}"
            f"{fmt(flag - off):>12}"
        )
    ok = medians[n] <= GOAL_S
    print(
        f"\n  {'PASS' if ok else 'FAIL'}: select() on {n} near-copies of {args.words:,} words "
        f"with conflicts='flag' and max_k={n}: median {fmt(medians[n])} (goal <= "
        f"{GOAL_S:g} s; 23-44 s before the bound); max_k=5: {fmt(medians[5])}"
    )
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("conflict_cost"):
        sys.exit(main())
