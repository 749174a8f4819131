"""examples/notes as a BEIR folder, shared by the tests of the loaders and of the command
line."""

from __future__ import annotations

import json
from pathlib import Path

NOTES = Path(__file__).resolve().parents[2] / "examples" / "notes"


def notes_as_beir(root: Path, depth: int | None = None, *, distractors: bool = False) -> Path:
    """examples/notes as a BEIR folder: corpus.jsonl with ``_id``, queries.jsonl,
    qrels/test.tsv with the graded relevant documents and the distractors judged 0 (or,
    with ``distractors``, as known distractors: every other one graded -1 in the qrels,
    the rest in distractors.tsv), and the runs in runs/ (each query's first ``depth``
    candidates, or all)."""
    folder = root / ("notes-beir-distractors" if distractors else "notes-beir")
    (folder / "qrels").mkdir(parents=True)
    corpus = [json.loads(x) for x in (NOTES / "corpus.jsonl").read_text().splitlines() if x]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d["id"], "title": d["title"], "text": d["text"]}) + "\n"
                for d in corpus)
    )  # fmt: skip
    queries, qrels, known = [], ["query-id\tcorpus-id\tscore"], ["query-id\tcorpus-id"]
    for line in (NOTES / "evalset.jsonl").read_text().splitlines():
        item = json.loads(line)
        queries.append(json.dumps({"_id": item["query_id"], "text": item["query"]}) + "\n")
        qrels += [f"{item['query_id']}\t{d}\t{g}" for d, g in item["relevant"].items()]
        for i, d in enumerate(item.get("distractors", [])):
            if not distractors:
                qrels.append(f"{item['query_id']}\t{d}\t0")
            elif i % 2:
                qrels.append(f"{item['query_id']}\t{d}\t-1")
            else:
                known.append(f"{item['query_id']}\t{d}")
    (folder / "queries.jsonl").write_text("".join(queries))
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    if distractors:
        (folder / "distractors.tsv").write_text("\n".join(known) + "\n")
    (folder / "runs").mkdir()
    for run in (NOTES / "runs").glob("*.trec"):
        lines = run.read_text().splitlines(keepends=True)
        kept = [x for x in lines if depth is None or int(x.split()[3]) <= depth]
        (folder / "runs" / run.name).write_text("".join(kept))
    return folder
