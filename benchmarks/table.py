"""Regenerate the benchmarks table from the figures in ``benchmarks/results/*.json``.

One row per benchmark: what it measures and its goal (fixed, below), and from its JSON
file the latest figure, the machine and load it was measured on, and the command. The
table is written between the markers ``<!-- results-table:start -->`` and
``<!-- results-table:end -->`` of ``benchmarks/README.md`` and ``docs/benchmarks/index.md``.

    python benchmarks/table.py            # rewrite both tables
    python benchmarks/table.py --check    # exit 1 when a table is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
START, END = "<!-- results-table:start -->", "<!-- results-table:end -->"
REQUIRED = ("benchmark", "headline", "machine", "load", "command")

# benchmark -> (what it measures, goal); the figures come from results/<benchmark>.json
BENCHMARKS: dict[str, tuple[str, str]] = {
    "guard_overhead": (
        "latency `ContextGuard.select()` adds to a request, next to a hand-written baseline "
        "and a real vector-store search, and what each framework adapter adds",
        "median < 100 us on 100 candidates; < 5% of a 20-result search; each adapter adds "
        "<= 1.5x select() on 20 candidates",
    ),
    "metrics_speed": (
        "`evaluate()` from Python dicts next to pytrec_eval and ranx, values checked equal",
        ">= 3x pytrec_eval and >= 10x ranx (`full`); >= 1.5x pytrec_eval (`realistic`, `issue24`)",
    ),
    "sweep_speed": (
        "the calibration sweep over a grid of settings, next to ranx one setting at a time",
        "200 settings x 21 metrics on 100,000 queries < 30 s",
    ),
    "annotate_throughput": (
        "passages per second of `ragguard annotate` (SmolLM2-135M GGUF on CPU)",
        "a figure per backend and device (GPU row still missing)",
    ),
    "rerank_throughput": (
        "pairs per second through the guard's rerank stage next to `CrossEncoder.predict`",
        "the stage within 5% of `predict`",
    ),
    "context_quality": (
        "what each method hands the LLM on held-out queries: top-k, LangChain and "
        "LlamaIndex filters, label-free cuts, the calibrated guard",
        "the calibrated guard beats every fixed method on UDCG at equal or better evidence recall",
    ),
    "two_stage": (
        "two-stage calibration (rerank) against retrieval-only calibration and plain top-k "
        "on held-out queries",
        "a gain in held-out UDCG over retrieval-only calibration",
    ),
    "train_reranker": (
        "whether `ragguard train-reranker` writes a scorer that beats its base, and the "
        "guard with it",
        "AUC gain over the base with a 95% interval above 0",
    ),
    "calibrate_scale": (
        "`ragguard calibrate` end to end on large synthetic TREC files: wall time and peak "
        "memory, next to pandas + pytrec_eval for one setting",
        ">= 1x the reference and < 1 GB per 100,000 x 100; 1,000,000 x 100 in < 5 min and < 10 GB",
    ),
    "conflicts": (
        "conflict detection and answerability floors on RAMDocs held-out questions",
        ">= 60% of misinformation grouped, <= 10% of correct documents; >= 60% of "
        "unanswerable caught at <= 10% answerable lost",
    ),
    "conflict_cost": (
        '`select()` with `conflicts="flag"` on 200 near-copies of 2,000 words (audit TM-02: '
        "`max_k=200`, every pair comparable) and with the default `max_k=5`",
        "<= 2 s with `max_k=200`",
    ),
    "default_constraint": (
        "held-out UDCG and passages kept of `ragguard calibrate`'s default config against "
        "every fixed top-k, on nq-open-oracle questions with several relevant passages",
        "the default config within 0.01 UDCG of the best top-k (chosen on the calibration "
        "queries) and far fewer passages than `--min-recall 0.8`",
    ),
    "label_free": (
        "held-out UDCG of a config calibrated on `ragguard synth`'s questions (no model, "
        "no labels) against one calibrated on real labelled questions and top-4, on "
        "nq-open-oracle and on `examples/nq` (real labels with distractors); synth's speed",
        "within 0.015 UDCG of the real-label config and >= top-4; 1,000 queries from "
        "10,000 passages < 30 s",
    ),
    "drift": (
        "the drift watch (`monitor=True`): false alarms on streams resampled from the "
        "calibration queries, time to catch a scorer swap, `select()` overhead",
        "<= 1 false alarm in 20 streams of 300; a swap caught within 200 selections in 5 of "
        "5 streams; monitor on <= 1.15x off",
    ),
    "domains": (
        "`calibrate --by domain` (one config per domain, routed at runtime) against the "
        "global config on held-out queries of five nq question types, notes and ramdocs",
        "per-domain at least as good as global on every domain, better where domains differ",
    ),
    "floors": (
        "the two label-free floors on held-out data: `--noise-floor ALPHA`'s admitted share "
        "of random unrelated passages (examples/nq, nq-open-oracle), and in-scope-only "
        "`--max-false-abstain X`'s in-scope loss and evidence-free sets caught (ramdocs "
        "noise-only, nq on-topic empty sets) next to the labelled floor",
        "the stated ALPHA holds on held-out random passages (within its bound); held-out "
        "in-scope loss within X on average",
    ),
}


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def load(name: str) -> dict[str, Any]:
    """The latest figures of ``name``; every key of ``REQUIRED`` is checked."""
    path = RESULTS / f"{name}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in REQUIRED if not doc.get(key)]
    if missing or doc["benchmark"] != name:
        raise ValueError(f"{path}: missing {missing} or benchmark is not {name!r}")
    return doc


def table(link_prefix: str) -> str:
    """The Markdown table; ``link_prefix`` leads from the page to the benchmark pages."""
    rows = [
        "| benchmark | what it measures | goal | latest figure | machine and load | command |",
        "|---|---|---|---|---|---|",
    ]
    for name, (measures, goal) in BENCHMARKS.items():
        doc = load(name)
        where = f"{_cell(doc['machine'])}; {_cell(doc['load'])}"
        rows.append(
            f"| [{name}]({link_prefix}{name}.md) | {measures} | {goal} | "
            f"{_cell(doc['headline'])} | {where} | `{_cell(doc['command'])}` |"
        )
    return "\n".join(rows) + "\n"


TARGETS = {
    ROOT / "benchmarks" / "README.md": "../docs/benchmarks/",
    ROOT / "docs" / "benchmarks" / "index.md": "",
}


def render(text: str, link_prefix: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(link_prefix)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, prefix in TARGETS.items():
        text = path.read_text(encoding="utf-8")
        new = render(text, prefix)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        names = ", ".join(str(p) for p in stale)
        print(f"out of date: {names} (run python benchmarks/table.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
