"""examples/nq: the committed files load through the real loader and agree with each other.

No model is needed. The last test rebuilds the pool, the question sample and the BM25 run
from the shared source file with ``examples/nq/build.py`` and compares them with the
committed files; it is skipped where that file is absent.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from ragguard.calibration import evaluate, load_evalset
from tests.doc_checks import load_script

ROOT = Path(__file__).resolve().parent.parent
NQ = ROOT / "examples" / "nq"
RUNS = {"bm25": NQ / "runs" / "bm25.trec", "dense-minilm": NQ / "runs" / "dense-minilm.trec"}
N_QUERIES = 300
N_PASSAGES = 2600
TOP_N = 20


def corpus_ids() -> list[str]:
    with (NQ / "corpus.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line)["id"] for line in f if line.strip()]


def evalset_rows() -> list[dict[str, object]]:
    with (NQ / "evalset.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def trec_lines(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8") as f:
        return [line.split() for line in f if line.strip()]


def test_loads_with_both_runs_without_problems() -> None:
    evalset = load_evalset(NQ / "evalset.jsonl", runs=RUNS, strict=True)
    assert len(evalset.queries) == N_QUERIES
    assert sorted(evalset.runs) == sorted(RUNS)
    assert not evalset.report.problems
    for run in evalset.runs.values():
        assert set(run.candidates) == set(evalset.queries)
        for ranked in run.candidates.values():
            assert 1 <= len(ranked) <= TOP_N
    dense = evalset.runs["dense-minilm"]
    assert all(len(ranked) == TOP_N for ranked in dense.candidates.values())
    for name in RUNS:
        result = evaluate(evalset, name, metrics=["recall@10", "mrr"])
        assert 0.9 < result["recall@10"] <= 1.0
        assert 0.8 < result["mrr"] <= 1.0


def test_labels() -> None:
    ids = set(corpus_ids())
    rows = evalset_rows()
    assert len(rows) == N_QUERIES
    assert len({row["query_id"] for row in rows}) == N_QUERIES
    n_distractors = 0
    for row in rows:
        relevant = row["relevant"]
        assert isinstance(relevant, dict)
        grades = Counter(relevant.values())
        assert grades[5] == 1  # the question's own gold passage
        assert set(grades) <= {5, 3}
        distractors = row.get("distractors", [])
        assert isinstance(distractors, list)
        assert not set(distractors) & set(relevant)
        assert set(relevant) | set(distractors) <= ids
        assert row["answers"]
        n_distractors += len(distractors)
    assert n_distractors > 0


def test_corpus_and_runs_agree() -> None:
    ids = corpus_ids()
    assert len(ids) == N_PASSAGES
    assert len(set(ids)) == N_PASSAGES
    known = set(ids)
    queries = {row["query_id"] for row in evalset_rows()}
    for tag, path in RUNS.items():
        lines = trec_lines(path)
        assert all(len(fields) == 6 for fields in lines)
        assert {fields[2] for fields in lines} <= known
        assert {fields[0] for fields in lines} == queries
        assert {fields[5] for fields in lines} == {tag}
        assert {fields[1] for fields in lines} == {"Q0"}
        per_query: dict[str, list[tuple[int, float]]] = {}
        for q, _, _, rank, score, _ in lines:
            per_query.setdefault(q, []).append((int(rank), float(score)))
        for ranked in per_query.values():
            assert [r for r, _ in ranked] == list(range(1, len(ranked) + 1))
            scores = [s for _, s in ranked]
            assert scores == sorted(scores, reverse=True)


def test_license_travels_with_the_data() -> None:
    text = (NQ / "LICENSE-nq-open-oracle").read_text(encoding="utf-8")
    assert "MIT License" in text
    assert "LICENSE-nq-open-oracle" in (NQ / "README.md").read_text(encoding="utf-8")


def load_build() -> ModuleType:
    return load_script(NQ / "build.py", "nq_build")


def test_build_reproduces_pool_sample_and_bm25_run(tmp_path: Path) -> None:
    build = load_build()
    source = build.DEFAULT_SOURCE.resolve()
    if not source.exists():
        pytest.skip(f"source file not here: {source}")
    rows, pool = build.read_source(source)
    assert [p.id for p in pool] == corpus_ids()
    questions = build.select_questions(rows, N_QUERIES, 0)
    assert [q.id for q in questions] == [row["query_id"] for row in evalset_rows()]
    out = tmp_path / "bm25.trec"
    build.write_trec(build.bm25_run(pool, questions), out, "bm25")
    assert out.read_text(encoding="utf-8") == RUNS["bm25"].read_text(encoding="utf-8")
