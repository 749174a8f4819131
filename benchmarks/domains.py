"""Per-domain calibration (issue 37): does ``calibrate --by domain`` give each domain a context
at least as good as the one global config, and better where the domains differ?

**Eval set.** One JSONL eval set made of the team's examples, each query tagged with its
domain, query and passage ids prefixed by their source (one run, ``dense-minilm``: the
all-MiniLM-L6-v2 cosine every example ships):

* ``examples/nq`` (300 NQ-open questions from nq-open-oracle, one gold passage each, hard
  negatives from the other questions' passages), split by question type into ``nq-who``,
  ``nq-when``, ``nq-where``, ``nq-what`` (what / which) and ``nq-other``;
* ``examples/notes`` (51 questions over personal notes, known distractors): ``notes``;
* ``examples/ramdocs`` (250 RAMDocs questions, several correct documents each, known
  misinformation): ``ramdocs``.

**Protocol**, per split seed (``--seeds``, holdout 0.5: the split ``calibrate`` draws): one
``Calibrator(objective="udcg", constraints=["evidence_coverage>=0.9"],
domains=Domains())`` fit, the default ``calibrate`` constraint; the global config is chosen on
the calibration half of all queries, each domain's on its calibration queries (its own
search, then the fallback rules: fewer than 4 calibration queries, or not clearly better
than the global choice on its calibration queries). On each domain's **held-out** queries the
script reports mean UDCG and evidence recall of the global choice and of the routed one (the
domain's own choice when it keeps one, else the global), with the paired bootstrap 95%
interval of the difference; both are the runtime policy's cuts (the sweep kernels that
``tests/calibration/fit/test_stages_sweep.py`` holds equal to ``ContextGuard``). Its
``own`` columns show the domain's own choice even where it fell back (what the fallback
avoided or gave up).

Run: ``python benchmarks/domains.py [--seeds 0 1 2] [--json FILE] [--record]`` (a few
seconds on 2 cores; ``--record`` writes ``benchmarks/results/domains.json``). It always
exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ragguard
from ragguard.calibration import Calibrator, Domains, EvalSet, Split, load_inputs

ROOT = Path(__file__).resolve().parent.parent
RUN = "dense-minilm"
METRICS = ("udcg", "evidence_recall")


def nq_type(question: str) -> str:
    """The question type of an NQ question: its wh-word (``what``/``which`` together)."""
    first = question.lower().split()[0] if question.strip() else ""
    if first in ("who", "when", "where"):
        return f"nq-{first}"
    if first in ("what", "which"):
        return "nq-what"
    return "nq-other"


def _lines(es: EvalSet, prefix: str, domain_of: Any) -> list[str]:
    """``es``'s queries as JSONL lines of one run, ids prefixed, with their domain."""
    out = []
    cands = es.runs[RUN].candidates
    for qid in es.qids:
        lab, query = es.labels[qid], es.queries[qid]
        relevant = {f"{prefix}:{d}": g for d, g in lab.grades.items() if g >= 1}
        distractors = sorted(f"{prefix}:{d}" for d in lab.distractors)
        judged = {f"{prefix}:{d}" for d, g in lab.grades.items() if g < 1}
        line = {
            "query_id": f"{prefix}:{qid}",
            "query": query.text or qid,
            "relevant": relevant,
            "distractors": distractors,
            "not_relevant": sorted(judged - set(distractors)),
            "domain": domain_of(query.text or ""),
            "runs": {
                RUN: [{"id": f"{prefix}:{d}", "score": s} for d, s in cands.get(qid, {}).items()]
            },
        }
        out.append(json.dumps(line) + "\n")
    return out


def build(folder: Path) -> Path:
    """The multi-domain eval set, written to ``folder/evalset.jsonl``."""
    path = folder / "evalset.jsonl"
    parts = [
        ("nq", load_inputs(ROOT / "examples" / "nq"), nq_type),
        ("notes", load_inputs(ROOT / "examples" / "notes"), lambda _: "notes"),
        ("ramdocs", load_inputs(ROOT / "examples" / "ramdocs"), lambda _: "ramdocs"),
    ]
    with path.open("w", encoding="utf-8") as f:
        for prefix, es, domain_of in parts:
            f.writelines(_lines(es, prefix, domain_of))
    return path


def measure(evalset: EvalSet, seed: int) -> dict[str, Any]:
    """One split: the global and per-domain choices and their held-out figures."""
    t = time.perf_counter()
    calibrator = Calibrator(
        objective="udcg",
        constraints=["evidence_coverage>=0.9"],
        split=Split(holdout=0.5, seed=seed),
        domains=Domains(),
    )
    res = calibrator.fit(evalset)
    seconds = time.perf_counter() - t
    assert res.domains is not None
    rows = []
    for d in res.domains.domains:
        row: dict[str, Any] = {
            "domain": d.name,
            "queries": d.queries,
            "calibration": d.calibration,
            "heldout": d.heldout,
            "own_setting": d.setting,
            "fallback": d.fallback,
        }
        c = d.against_global
        for m in METRICS:
            if c is None or m not in c.metrics:
                continue
            own, glob, diff = c.guarded[m], c.baseline[m], c.difference[m]
            routed = glob.mean if d.fallback is not None else own.mean
            row[m] = {
                "global": glob.mean,
                "own": own.mean,
                "routed": routed,
                "own_minus_global": [diff.mean, diff.low, diff.high],
            }
        rows.append(row)
    pooled = res.domains.pooled
    return {
        "seed": seed,
        "seconds": round(seconds, 2),
        "global_setting": res.written_setting().tested,
        "verdict": res.domains.verdict(),
        "pooled": None
        if pooled is None
        else {m: [pooled.difference[m].mean, pooled.difference[m].low, pooled.difference[m].high]
              for m in METRICS if m in pooled.metrics},
        "domains": rows,
    }  # fmt: skip


def _print(r: dict[str, Any]) -> None:
    print(f"\nseed {r['seed']}: global choice {r['global_setting']} ({r['seconds']} s)")
    heads = f"{'UDCG glob':>9} {'own':>6} {'routed':>6} {'ER glob':>8} {'own':>6} {'routed':>6}"
    print(f"{'domain':10} {'n (cal+held)':13} {'own setting':22} {heads}  fallback")
    for d in r["domains"]:
        u, e = d.get("udcg"), d.get("evidence_recall")
        figs = "".join(
            f" {x[k]:>{w}.3f}" if x else f" {'-':>{w}}"
            for x in (u, e)
            for k, w in (("global", 9 if x is u else 8), ("own", 6), ("routed", 6))
        )
        n = f"{d['queries']} ({d['calibration']}+{d['heldout']})"
        why = "no" if d["fallback"] is None else "yes: " + d["fallback"][:60]
        print(f"{d['domain']:10} {n:13} {d['own_setting'][:22]:22}{figs}  {why}")
    print(r["verdict"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        evalset = load_inputs(build(Path(tmp)))
    sizes = {name: len(q) for name, q in evalset.domains().items()}
    print(f"domains: {sizes} ({len(evalset.qids)} queries, run {RUN})")
    runs = [measure(evalset, s) for s in args.seeds]
    for r in runs:
        _print(r)

    def pairs(kept: bool, side: int) -> list[str]:
        """(domain, seed) pairs whose own UDCG is clearly better (``side`` 1) or worse (2)
        than global's on held-out queries, among those that kept (or fell back from) it."""
        return [
            f"{d['domain']}/{r['seed']}"
            for r in runs
            for d in r["domains"]
            if (d["fallback"] is None) == kept
            and "udcg" in d
            and (
                d["udcg"]["own_minus_global"][1] > 0
                if side == 1
                else d["udcg"]["own_minus_global"][2] < 0
            )
        ]

    n = sum(len(r["domains"]) for r in runs)
    kept = sum(d["fallback"] is None for r in runs for d in r["domains"])
    worse, better = pairs(True, 2), pairs(True, 1)
    print(
        f"\n{kept} of {n} (domain, seed) pairs keep their own setting; the fallback kept the "
        f"global config where the own choice was clearly worse on held-out UDCG on "
        f"{len(pairs(False, 2))} ({', '.join(pairs(False, 2)) or 'none'}) and clearly better "
        f"on {len(pairs(False, 1))} ({', '.join(pairs(False, 1)) or 'none'})"
    )
    print(
        f"{'PASS' if not worse else 'FAIL'} per-domain at least as good as global on every "
        f"domain: the routed config's held-out UDCG is clearly worse on {len(worse)} of {n} "
        f"(domain, seed) pairs ({', '.join(worse) or 'none'})"
    )
    print(
        f"{'PASS' if better else 'FAIL'} better where the domains differ: clearly better on "
        f"{len(better)} of {n} ({', '.join(better) or 'none'}); the rest within noise or "
        "fallen back"
    )
    report = {
        "benchmark": "domains",
        "sizes": sizes,
        "runs": runs,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "ragguard": ragguard.__version__,
        },
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    from recorded import recording  # --record: benchmarks/results/NAME.json

    with recording("domains"):
        sys.exit(main())
