"""Instructions per ``ContextGuard.select()`` call, counted by valgrind (callgrind).

Wall-clock timings of microsecond calls on a shared virtual machine drift by 2x from one
minute to the next (see ``guard_overhead.py``); instruction counts do not: the same code,
inputs and interpreter give the same count, whatever else the machine is doing. This
script counts, for each scenario, the instructions of ``N`` calls minus those of ``M``
calls (so the interpreter's start-up, imports and warm-up cancel out) divided by
``N - M``. Hash randomisation is off in the counted processes (``PYTHONHASHSEED=0``), so
two runs give the same figures:

* ``baseline-20`` / ``baseline-100``: the plain-Python selection of ``guard_overhead.py``
  (sort descending, keep scores >= 0.7 x top, cap at 5);
* ``select-20`` / ``select-100``: ``select()`` with ``max_k=5, relative_threshold=0.7``
  on seeded random similarity scores (as ``guard_overhead.py``);
* ``dropped-20`` / ``dropped-100``: the same followed by ``selection.dropped``;
* ``stages-off-20`` / ``stages-on-20`` (and ``-100``): ``max_k=10,
  relative_threshold=0.5`` without and with ``max_tokens=300`` and
  ``near_duplicate_threshold=0.8``, on the 40-120-word texts of ``guard_overhead.py``.

Give ``--src`` other ragguard source trees (a ``src`` folder of another checkout) to count
the same scenarios there, e.g. before and after a change. Needs ``valgrind`` on the PATH;
takes a few minutes (every count runs Python under valgrind).

Run: ``python benchmarks/guard_instructions.py [--src OTHER/src ...] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = (
    "baseline-20",
    "select-20",
    "dropped-20",
    "baseline-100",
    "select-100",
    "dropped-100",
    "stages-off-20",
    "stages-on-20",
    "stages-off-100",
    "stages-on-100",
)


def scenario(name: str) -> Callable[[], object]:
    """The call a scenario repeats (built outside the counted calls)."""
    from ragguard import Candidate, ContextGuard, GuardConfig

    kind, n = name.rsplit("-", 1)
    rng = random.Random(0)
    if kind.startswith("stages"):
        sys.path.insert(0, str(HERE))
        from guard_overhead import make_text_candidates

        extra = {"max_tokens": 300, "near_duplicate_threshold": 0.8} if kind == "stages-on" else {}
        guard = ContextGuard(
            GuardConfig(max_k=10, relative_threshold=0.5, score_kind="similarity", **extra)
        )
        texts = make_text_candidates(int(n), 0)
        return lambda: guard.select("q", texts)
    cands = tuple(Candidate(f"d{i}", "t", rng.random()) for i in range(int(n)))
    if kind == "baseline":

        def baseline() -> object:
            idx = sorted(range(len(cands)), key=lambda i: -(cands[i].score or 0.0))
            top = cands[idx[0]].score or 0.0
            return [cands[i] for i in idx if (cands[i].score or 0.0) >= 0.7 * top][:5]

        return baseline
    guard = ContextGuard(max_k=5, relative_threshold=0.7, score_kind="similarity")
    if kind == "dropped":
        return lambda: guard.select("q", cands).dropped
    return lambda: guard.select("q", cands)


def child(name: str, calls: int) -> None:
    """Run inside valgrind: warm up, then ``calls`` calls."""
    call = scenario(name)
    for _ in range(50 + calls):
        call()


def count(src: Path, name: str, calls: int) -> int:
    """Instructions of one child process that makes ``calls`` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
        cmd += [__file__, "--child", name, str(calls)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        found = re.search(r"Collected : (\d+)", res.stderr)
        if found is None:
            raise RuntimeError(f"valgrind printed no count:\n{res.stderr[-2000:]}")
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument(
        "--src", action="append", type=Path, default=[], help="another src folder to count"
    )
    parser.add_argument("--calls", type=int, default=2000, help="counted calls (default 2000)")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed; nothing measured")
        return
    trees = [HERE.parent / "src", *args.src]
    figures: dict[str, dict[str, int]] = {}
    for tree in trees:
        per_call = {}
        for name in SCENARIOS:
            low, high = count(tree, name, 200), count(tree, name, 200 + args.calls)
            per_call[name] = (high - low) // args.calls
        figures[str(tree)] = per_call
    print(f"instructions per call (callgrind), {args.calls} counted calls per scenario")
    for tree, per_call in figures.items():
        print(f"\n{tree}")
        for name in SCENARIOS:
            print(f"  {name:<16} {per_call[name]:>12,}")
        print(
            "  ratios: select/baseline "
            f"{per_call['select-20'] / per_call['baseline-20']:.1f}x (20), "
            f"{per_call['select-100'] / per_call['baseline-100']:.1f}x (100); "
            f"dropped/select {per_call['dropped-20'] / per_call['select-20']:.2f}x (20), "
            f"{per_call['dropped-100'] / per_call['select-100']:.2f}x (100); "
            f"stages on/off {per_call['stages-on-20'] / per_call['stages-off-20']:.2f}x (20), "
            f"{per_call['stages-on-100'] / per_call['stages-off-100']:.2f}x (100)"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
