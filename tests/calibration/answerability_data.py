"""Eval sets with unanswerable queries, shared by the answerability tests of the library
and of the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ragguard import Candidate


def random_rows(seed: int, n: int = 160) -> list[dict[str, Any]]:
    """JSONL records: a quarter unanswerable (judged, nothing relevant); the rest with a
    relevant candidate that usually, not always, scores best."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        q = f"q{i:03d}"
        docs = {f"{q}-d{j}": round(float(rng.uniform(0.2, 0.65)), 4) for j in range(5)}
        rec: dict[str, Any] = {"query_id": q, "query": f"question {i}"}
        if i % 4 == 0:
            rec["relevant"], rec["not_relevant"] = [], [f"{q}-d0", f"{q}-d1"]
        else:
            docs[f"{q}-d0"] = round(float(rng.uniform(0.6, 0.95)), 4)
            rec["relevant"], rec["not_relevant"] = [f"{q}-d0"], [f"{q}-d1"]
        rec["candidates"] = [{"id": d, "score": s, "text": f"text of {d}"} for d, s in docs.items()]
        records.append(rec)
    return records


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def candidates_of(record: dict[str, Any]) -> list[Candidate]:
    return [Candidate(c["id"], c["text"], c["score"]) for c in record["candidates"]]


RAMDOCS_UNANSWERABLE = (
    Path(__file__).resolve().parents[2] / "examples" / "ramdocs" / "unanswerable" / "evalset.jsonl"
)


def unanswerable_only(path: Path) -> Path:
    """The lines of ``examples/ramdocs/unanswerable/evalset.jsonl`` whose ``relevant`` is
    empty (101 queries, none answerable), written to ``path``."""
    lines = [
        line
        for line in RAMDOCS_UNANSWERABLE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not json.loads(line).get("relevant")
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path
