"""An eval set with domains (JSONL, one run ``r``), for the tests of ``calibrate --by``."""

from __future__ import annotations

import json
from pathlib import Path


def _line(qid: str, domain: str | None, relevant: int) -> dict[str, object]:
    """A query with 6 candidates scored 1.0, 0.9, ...: the first ``relevant`` are relevant, the
    rest known distractors; with none relevant (unanswerable) scored 0.5, 0.45, ..."""
    docs = [f"{qid}-d{i}" for i in range(6)]
    top, step = (1.0, 0.1) if relevant else (0.5, 0.05)
    line: dict[str, object] = {
        "query_id": qid,
        "query": f"question {qid}",
        "relevant": {d: 1 for d in docs[:relevant]},
        "distractors": docs[relevant:],
        "runs": {"r": [{"id": d, "score": top - step * i} for i, d in enumerate(docs)]},
    }
    if domain is not None:
        line["domain"] = domain
    return line


def write_domains(
    tmp_path: Path,
    domains: dict[int, str] | None = None,
    n: int = 60,
    unanswerable: frozenset[int] = frozenset(),
) -> Path:
    """``n`` queries: the first 24 'precise' (one relevant passage, distractors below it), the
    rest 'broad' (three relevant passages), ``domains`` overriding some rows' domain; the rows
    ``unanswerable`` have no relevant passage."""
    path = tmp_path / "evalset.jsonl"
    with path.open("w") as f:
        for row in range(n):
            domain = "precise" if row < 24 else "broad"
            domain = (domains or {}).get(row, domain)
            f.write(
                json.dumps(
                    _line(
                        f"q{row:03d}",
                        domain,
                        0 if row in unanswerable else 1 if domain == "precise" else 3,
                    )
                )
                + "\n"
            )
    return path
