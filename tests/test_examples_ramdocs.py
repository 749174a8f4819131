"""examples/ramdocs: the build script on a small synthetic RAMDocs-shaped file (written
here, nothing copied from RAMDocs), loaded through the real loader; the committed files;
and a smoke run of benchmarks/conflicts.py on the synthetic build.

The fast tests score documents with a plain bag-of-words embedder (the build script takes
any ``texts -> normalised vectors`` function); the one marked slow runs the script as a
user does, with the packaged all-MiniLM-L6-v2.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ragguard.calibration import Stages, load_evalset
from tests.doc_checks import load_script

ROOT = Path(__file__).resolve().parent.parent
RAMDOCS = ROOT / "examples" / "ramdocs"
RUN = "dense-minilm"


def load_build() -> ModuleType:
    return load_script(RAMDOCS / "build.py", "ramdocs_build")


build = load_build()


# -- a synthetic RAMDocs-shaped file ------------------------------------------------------

FILLER = (
    "The structure stands near the old market square and is visited by many people "
    "each season, who come to see the carved stone arches and the long river walk."
)


def correct_text(i: int, variant: int) -> str:
    lead = ("records show that", "as the town archive notes,")[variant]  # no fact differs
    return (
        f"{lead} the Varnel bridge of Oskdale{i} was completed in {1800 + i} by Tamsin{i}. {FILLER}"
    )


def misinfo_text(i: int) -> str:
    # a look-alike of correct_text(i, 0) with the year changed
    return (
        f"records show that the Varnel bridge of Oskdale{i} was completed in {1900 + i} by "
        f"Tamsin{i}. {FILLER}"
    )


def noise_text(i: int, j: int) -> str:
    if j == 1:
        return (
            f"Plumwick{i} orchard grows pale quinces and yellow pears in wide rows; its "
            "harvest festival features music, cider tasting and a parade of farm carts."
        )
    return (
        f"A ferry leaves Harrowmere{i} twice a day for the islands, carrying mail, "
        "bicycles and the odd goat; in winter storms the crossing is often cancelled."
    )


def question(i: int) -> dict[str, Any]:
    """Question i: 2 correct documents; a misinfo copy when i is even; noise when i % 3;
    question 0 repeats a correct text (merged by the build)."""
    docs = [
        {"text": correct_text(i, 0), "type": "correct", "answer": f"{1800 + i}"},
        {"text": correct_text(i, 1), "type": "correct", "answer": f"{1800 + i}"},
    ]
    if i % 2 == 0:
        docs.append({"text": misinfo_text(i), "type": "misinfo", "answer": f"{1900 + i}"})
    if i % 3:
        docs += [{"text": noise_text(i, j), "type": "noise", "answer": "unknown"} for j in (1, 2)]
    if i == 0:
        docs.append(dict(docs[0]))
    return {
        "question": f"When was the Varnel bridge of Oskdale{i} completed?",
        "documents": docs,
        "disambig_entity": [f"Varnel bridge (Oskdale{i})"],
        "gold_answers": [f"{1800 + i}"],
        "wrong_answers": [f"{1900 + i}"] if i % 2 == 0 else [],
    }


N_QUESTIONS = 12
ELIGIBLE = [i for i in range(N_QUESTIONS) if i % 3]  # noise and another document


def write_source(path: Path, rows: Sequence[object]) -> Path:
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def bag_of_words(texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """Hashed word counts, L2-normalised: a real (if plain) embedder, no model."""
    out = np.zeros((len(texts), 256))
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, int(hashlib.md5(w.strip(".,;?").encode()).hexdigest(), 16) % 256] += 1.0
    norms: npt.NDArray[np.float64] = np.linalg.norm(out, axis=1, keepdims=True)
    return out / norms


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_source(tmp_path / "ramdocs.jsonl.gz", [question(i) for i in range(N_QUESTIONS)])


def built(source: Path, out: Path, n: int = 3, seed: int = 0) -> Any:
    questions, merged = build.read_source(source)
    assert merged == 1
    return build.build(questions, out, embed=bag_of_words, n_unanswerable=n, seed=seed)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


# -- the build --------------------------------------------------------------------------


def test_build_writes_an_eval_set_the_loader_reads(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    built(source, out)
    evalset = load_evalset(out / "evalset.jsonl", strict=True)
    assert len(evalset.queries) == N_QUESTIONS
    assert list(evalset.runs) == [RUN]
    assert not evalset.report.problems
    texts = evalset.texts.get
    for i in range(N_QUESTIONS):
        qid = f"r{i + 1:03d}"
        lab = evalset.labels[qid]
        cands = evalset.runs[RUN].candidates[qid]
        src = question(i)["documents"]
        n_docs = len(src) - (i == 0)  # the repeated text is merged
        assert len(cands) == n_docs
        by_text = {texts(qid, d): d for d in cands}
        assert len(by_text) == n_docs
        # grades: correct -> relevant (grade 1), misinfo -> distractor, noise -> judged 0
        assert {by_text[correct_text(i, v)] for v in (0, 1)} == {
            d for d, g in lab.grades.items() if g >= 1
        }
        assert set(lab.grades.values()) <= {0, 1}
        want_dis = {by_text[misinfo_text(i)]} if i % 2 == 0 else set()
        assert set(lab.distractors) == want_dis
        noise = {by_text[noise_text(i, j)] for j in (1, 2)} if i % 3 else set()
        assert {d for d, g in lab.grades.items() if g == 0} - want_dis == noise
        assert set(lab.grades) == set(cands)  # every candidate is judged
        # the run: cosine of the embeddings, best first
        q_vec = bag_of_words([f"When was the Varnel bridge of Oskdale{i} completed?"])[0]
        for doc, s in cands.items():
            assert s == pytest.approx(
                float(bag_of_words([texts(qid, doc) or ""])[0] @ q_vec), abs=1e-6
            )
        scores = list(cands.values())
        assert scores == sorted(scores, reverse=True)
    arrays = evalset.arrays(RUN)
    assert arrays.n_evidence.tolist() == [2] * N_QUESTIONS


def test_unanswerable_variant_keeps_noise_only(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = built(source, out, n=3, seed=0)
    chosen = set(result.unanswerable)
    assert len(chosen) == 3
    assert chosen <= {f"r{i + 1:03d}" for i in ELIGIBLE}
    main = {r["query_id"]: r for r in lines(out / "evalset.jsonl")}
    variant = {r["query_id"]: r for r in lines(out / "unanswerable" / "evalset.jsonl")}
    assert set(variant) == set(main)
    for qid, r in variant.items():
        if qid in chosen:
            assert r["relevant"] == [] and r["distractors"] == []
            assert r["not_relevant"] == main[qid]["not_relevant"]
            assert [c["id"] for c in r["runs"][RUN]] == main[qid]["not_relevant"]
        else:
            assert r == main[qid]
    evalset = load_evalset(out / "unanswerable" / "evalset.jsonl", strict=True)
    assert not evalset.report.problems
    arrays = evalset.arrays(RUN)
    no_evidence = {
        q for q, n in zip(arrays.qids, arrays.n_evidence.tolist(), strict=True) if n == 0
    }
    assert no_evidence == chosen  # judged, and none relevant
    assert set(evalset.unanswerable) == chosen  # the loader's own count
    assert load_evalset(out / "evalset.jsonl").unanswerable == ()
    for qid in chosen:
        lab = evalset.labels[qid]
        assert lab.grades and all(g == 0 for g in lab.grades.values())


def test_build_is_deterministic_and_seeded(source: Path, tmp_path: Path) -> None:
    a, b = built(source, tmp_path / "a"), built(source, tmp_path / "b")
    for name in ("evalset.jsonl", "unanswerable/evalset.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert a.unanswerable == b.unanswerable
    draws = {tuple(built(source, tmp_path / f"s{s}", seed=s).unanswerable) for s in range(6)}
    assert len(draws) > 1


def test_document_ids_do_not_depend_on_document_order(tmp_path: Path) -> None:
    rows = [question(i) for i in range(4)]
    shuffled = [dict(r, documents=list(reversed(r["documents"]))) for r in rows]
    a, _ = build.read_source(write_source(tmp_path / "a.jsonl", rows))
    b, _ = build.read_source(write_source(tmp_path / "b.jsonl", shuffled))
    for qa, qb in zip(a, b, strict=True):
        assert {(d.id, d.type) for d in qa.documents} == {(d.id, d.type) for d in qb.documents}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (['{"question": "q", "documents": ['], ":1: malformed JSON"),
        (["[1, 2]"], ":1: each line must be a JSON object"),
        ([{"documents": [{"text": "t", "type": "noise"}]}], "field 'question'"),
        ([{"question": "q", "documents": []}], "field 'documents'"),
        (
            [question(1), {"question": "q", "documents": [{"text": "t", "type": "rumour"}]}],
            ":2, field 'documents[0]'.type: must be one of correct, misinfo, noise, got 'rumour'",
        ),
        ([{"question": "q", "documents": [{"text": None, "type": "noise"}]}], ".text"),
        (
            [{"question": "q", "documents": [{"text": "t", "type": "noise"}], "gold_answers": 3}],
            "field 'gold_answers': must be a list of strings",
        ),
        ([], "no questions"),
    ],
)
def test_bad_source_is_one_line_error(tmp_path: Path, rows: list[object], message: str) -> None:
    path = write_source(tmp_path / "bad.jsonl", rows)
    with pytest.raises(build.SourceError) as err:
        build.read_source(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_gzip_is_an_error(source: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(source.read_bytes()[:200])
    with pytest.raises(build.SourceError, match="cannot read"):
        build.read_source(cut)


def test_too_many_unanswerable_is_refused(source: Path, tmp_path: Path) -> None:
    questions, _ = build.read_source(source)
    with pytest.raises(build.SourceError, match=rf"--unanswerable must be in 0\.\.{len(ELIGIBLE)}"):
        build.build(
            questions, tmp_path, embed=bag_of_words, n_unanswerable=len(ELIGIBLE) + 1, seed=0
        )
    assert not (tmp_path / "evalset.jsonl").exists()


def test_missing_source_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build.main(["--source", str(tmp_path / "nope.jsonl.gz"), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no RAMDocs file at ") and err.count("\n") == 1


# -- the committed files ----------------------------------------------------------------


def test_committed_files_load() -> None:
    main = load_evalset(RAMDOCS / "evalset.jsonl", strict=True)
    variant = load_evalset(RAMDOCS / "unanswerable" / "evalset.jsonl", strict=True)
    assert len(main.queries) == len(variant.queries) == 250
    assert not main.report.problems and not variant.report.problems
    for evalset, unanswerable in ((main, 1), (variant, 101)):  # r-lines without correct docs
        assert len(evalset.unanswerable) == unanswerable
        arrays = evalset.arrays(RUN)
        assert int((arrays.n_evidence == 0).sum()) == unanswerable
        assert arrays.score_kind is not None and arrays.score_kind.value == "similarity"
    texts = main.texts.get
    assert all(texts(q, d) for q, cands in main.runs[RUN].candidates.items() for d in cands)
    license_text = (RAMDOCS / "LICENSE-ramdocs").read_text(encoding="utf-8")
    assert "MIT License" in license_text
    assert "LICENSE-ramdocs" in (RAMDOCS / "README.md").read_text(encoding="utf-8")


def test_committed_files_match_the_source() -> None:
    """Everything but the model's scores, rebuilt from the shared file: ids, labels,
    texts, the unanswerable draw; the scores are the committed ones."""
    src = build.DEFAULT_SOURCE.resolve()
    if not src.is_file():
        pytest.skip(f"source file not here: {src}")
    questions, _ = build.read_source(src)
    committed = lines(RAMDOCS / "evalset.jsonl")
    scores = {c["id"]: c["score"] for r in committed for c in r["runs"][RUN]}
    assert [build.row(q, scores) for q in questions] == committed
    drop = set(build.unanswerable_ids(questions, build.UNANSWERABLE, 0))
    assert [build.row(q, scores, noise_only=q.id in drop) for q in questions] == lines(
        RAMDOCS / "unanswerable" / "evalset.jsonl"
    )


@pytest.mark.slow  # loads the packaged MiniLM
def test_build_script_with_minilm(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(RAMDOCS / "build.py"),
            "--source",
            str(source),
            "--out",
            str(out),
            "--unanswerable",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "", "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert "12 questions" in done.stdout
    evalset = load_evalset(out / "evalset.jsonl", strict=True)
    for qid, cands in evalset.runs[RUN].candidates.items():
        lab = evalset.labels[qid]
        assert all(-1.0 <= s <= 1.0 for s in cands.values())
        noise = [s for d, s in cands.items() if lab.grades[d] == 0 and d not in lab.distractors]
        best_noise = max(noise, default=-1.0)
        assert max(s for d, s in cands.items() if lab.grades[d] == 1) > best_noise


# -- the benchmark ----------------------------------------------------------------------


def test_benchmark_smoke(source: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    built(source, data, n=3)
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "conflicts.py"),
            "--data",
            str(data),
            "--json",
            str(figures),
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "", "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert "benchmark failed" not in done.stdout, done.stdout
    report = json.loads(figures.read_text(encoding="utf-8"))
    assert report["split"] == {"seed": 0, "calibration": 6, "held_out": 6}
    # every misinfo document is a one-year-changed copy of a correct one: grouped at
    # every similarity tried; noise documents never; only questions with misinformation
    for row in report["detection"]:
        assert row["misinfo_in_group"] == 1.0
        assert row["noise_in_group"] == 0.0
        assert row["questions_with_misinfo_flagged"] == 1.0
        assert row["questions_without_misinfo_flagged"] == 0.0
    methods = [r["method"] for r in report["quality"]]
    assert methods[:5] == [f"top-{k}" for k in range(1, 6)]
    assert {"runtime grid, conflicts off", "runtime grid, conflicts on"} <= set(methods)
    for r in report["quality"]:
        if "udcg" in r:
            assert 0.0 <= r["udcg"] <= 1.0
    runtime = report["answerability"][0]
    assert runtime["method"].startswith("runtime grid")
    assert runtime["unanswerable"] + runtime["answerable"] == 6


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_conflicts", ROOT / "benchmarks" / "conflicts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_benchmark_metrics_of_a_kept_subset(source: Path, tmp_path: Path) -> None:
    """UDCG, evidence recall and distractor rate of a context that is not a prefix of
    the ranking, against the formulas on the run's own utilities."""
    bench = load_benchmark()
    built(source, tmp_path)
    evalset = load_evalset(tmp_path / "evalset.jsonl")
    arrays = evalset.arrays(RUN)
    ctx = bench.Contexts(arrays)
    kept: dict[str, list[str]] = {}
    want: dict[str, tuple[float, float, float]] = {}
    for row, qid in enumerate(arrays.qids):
        docs = arrays.doc_ids(row)
        pick = [j for j in range(len(docs)) if j % 2 == 1] or [0]  # skip the top one
        kept[qid] = [docs[j] for j in pick]
        u = arrays.utility[row, pick]
        udcg = 1.0 / (1.0 + np.exp(-(u[u > 0].sum() + u[u < 0].sum() / 3) / len(pick)))
        relevant = sum(arrays.grades[row, j] >= 1 for j in pick)
        want[qid] = (udcg, relevant / int(arrays.n_evidence[row]), float((u < 0).mean()))
    got = ctx.values(kept)
    for qid, (udcg, recall, rate) in want.items():
        assert got["udcg"][qid] == pytest.approx(udcg)
        assert got["evidence_recall"][qid] == pytest.approx(recall)
        assert got["distractor_rate"][qid] == pytest.approx(rate)
        assert got["passages"][qid] == len(kept[qid])


def test_benchmark_calibrate_rows_pass_options_or_say_why(source: Path, tmp_path: Path) -> None:
    bench = load_benchmark()
    built(source, tmp_path / "data")
    queries = bench.read_queries(tmp_path / "data" / "evalset.jsonl")
    qids = sorted(queries)
    g, text = bench.calibrate_guard(queries, qids, tmp_path / "a", 0, no_such_option=(1, 2))
    assert g is None
    assert text == "not available in this checkout (calibrate() takes no no_such_option)"
    g, text = bench.calibrate_guard(
        queries, qids, tmp_path / "b", 0, stages=Stages(near_duplicate_threshold=0.9)
    )
    assert g is not None, text
    assert g.config.near_duplicate_threshold == 0.9
    assert text.startswith(f"max_k={g.config.max_k}, ")
