"""annotate(): outputs the loader and the metrics read, resumption, relevance sources."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ragguard.calibration import evaluate, load_evalset
from ragguard.calibration.annotate import (
    AnnotationError,
    Annotator,
    Outputs,
    Pair,
    Relevance,
    RelevanceJudge,
    annotate,
)
from ragguard.calibration.data.utility import UtilityRules
from tests.calibration.annotate.conftest import FakeEstimator


def _authors_probs(udcg_dir: Path) -> dict[tuple[str, str], float]:
    """(question, passage text) -> the authors' no_res_prob for Llama-3.2-3B."""
    data = json.loads((udcg_dir / "dataset_with_scores.json").read_text())
    return {
        (ex["question"], p["text"]): p["models_info"]["meta-llama/Llama-3.2-3B-Instruct"][
            "no_res_prob"
        ]
        for ex in data
        for p in ex["passages"]
    }


def test_udcg_from_annotated_output_matches_the_authors_file(
    udcg_dir: Path, udcg_expected: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Annotating the authors' sample with their own probabilities, then reading our
    output back, gives the UDCG values in their result file: the output format, the
    loader and the metric agree end to end."""
    probs = _authors_probs(udcg_dir)
    est = FakeEstimator(lambda pair: probs[(pair.question, pair.passage)], model_id="llama-3b")
    summary = annotate(
        udcg_dir / "sample_dataset.json",
        est,
        outputs=Outputs(out=tmp_path / "u.jsonl", udcg_out=tmp_path / "u.json"),
    )
    assert (summary.pairs, summary.computed, summary.reused) == (15, 15, 0)
    llama = "meta-llama/Llama-3.2-3B-Instruct"
    want = {ex["example_id"]: ex["udcg"][llama] for ex in udcg_expected}
    for path in (tmp_path / "u.jsonl", tmp_path / "u.json"):
        es = load_evalset(path)
        got = evaluate(es, metrics=["udcg(gamma=0.333)"], per_query=True)["udcg(gamma=0.333)"]
        assert got == pytest.approx(want, abs=1e-12)
    authors = json.loads((tmp_path / "u.json").read_text())
    assert (
        authors[0]["passages"][0]["models_info"]["llama-3b"]["no_res_prob"]
        == probs[(authors[0]["question"], authors[0]["passages"][0]["text"])]
    )


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def small_evalset(tmp_path: Path) -> Path:
    return _write_jsonl(
        tmp_path / "eval.jsonl",
        [
            {
                "query_id": "q1",
                "query": "What was my deadlift PR?",
                "answers": ["500 lb"],
                "relevant": {"pr": 2},
                "distractors": ["squat"],
                "num_relevant": 1,
                "metadata": {"topic": "training"},
                "candidates": [
                    {"id": "squat", "score": 0.9, "text": "Squat PR: 405 lb."},
                    {"id": "pr", "score": 0.8, "text": "Deadlift PR: 500 lb on March 2."},
                    {"id": "diet", "score": 0.3, "text": "Ate 3000 kcal."},
                ],
            },
            {
                "query_id": "q2",
                "query": "When is the gym closed?",
                "relevant": ["hours"],
                "not_relevant": ["holidays"],
                "candidates": [
                    {"id": "hours", "score": 2.0, "text": "Closed on Sundays."},
                    {"id": "holidays", "score": 1.0, "text": "Open on holidays."},
                ],
            },
        ],
    )


def _p(pair: Pair) -> float:
    return (len(pair.passage) % 7) / 10.0


def test_output_utilities_are_r_times_one_minus_p(small_evalset: Path, tmp_path: Path) -> None:
    out = tmp_path / "u.jsonl"
    annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    q1 = rows[0]
    texts = {c["id"]: c["text"] for c in q1["candidates"]}
    for doc, relevant in (("pr", True), ("squat", False), ("diet", False)):
        p = (len(texts[doc]) % 7) / 10.0
        assert q1["no_response"][doc] == p
        assert q1["utilities"][doc] == pytest.approx((1 if relevant else -1) * (1 - p))
    # labels, answers, scores and the user's metadata are kept; the model is recorded
    assert q1["relevant"] == {"pr": 2} and q1["distractors"] == ["squat"]
    assert q1["answers"] == ["500 lb"] and q1["num_relevant"] == 1
    assert [c["score"] for c in q1["candidates"]] == [0.9, 0.8, 0.3]
    assert q1["metadata"]["topic"] == "training"
    info = q1["metadata"]["annotate"]
    assert info["model"] == "fake-llm"
    assert info["relevance"] == {"squat": "label", "pr": "label", "diet": "unjudged"}
    es = load_evalset(out)
    assert es.labels["q1"].no_response["squat"] == q1["no_response"]["squat"]
    # the metric reads the annotated utilities: hand-computed UDCG, gamma = 1/3
    got = evaluate(es, metrics=["udcg"], per_query=True)["udcg"]
    for row in rows:
        u = [row["utilities"][c["id"]] for c in row["candidates"]]
        x = (sum(v for v in u if v > 0) + sum(v for v in u if v < 0) / 3) / len(u)
        assert got[row["query_id"]] == pytest.approx(1 / (1 + math.exp(-x)))


def test_relevance_follows_the_utility_rules(small_evalset: Path, tmp_path: Path) -> None:
    out = tmp_path / "u.jsonl"
    annotate(
        small_evalset,
        FakeEstimator(lambda _: 0.25),
        outputs=Outputs(out=out),
        relevance=Relevance(rules=UtilityRules(3)),
    )
    q1 = json.loads(out.read_text().splitlines()[0])
    assert q1["utilities"]["pr"] == -0.75  # grade 2 < relevant_grade 3: R = -1


def test_interrupted_run_resumes_without_recomputing(small_evalset: Path, tmp_path: Path) -> None:
    class Interrupting(FakeEstimator):
        def estimate(self, pairs):  # type: ignore[no-untyped-def]
            for n, item in enumerate(super().estimate(pairs)):
                if n == 2:
                    raise KeyboardInterrupt
                yield item

    out = tmp_path / "u.jsonl"
    with pytest.raises(KeyboardInterrupt):
        annotate(small_evalset, Interrupting(_p), outputs=Outputs(out=out))
    assert not out.exists()
    progress = Path(f"{out}.progress")
    assert len(progress.read_text().splitlines()) == 2  # both finished results saved

    rest = FakeEstimator(_p)
    summary = annotate(small_evalset, rest, outputs=Outputs(out=out))
    assert (summary.computed, summary.reused) == (3, 2)
    assert len(rest.asked) == 3
    reference = tmp_path / "ref.jsonl"
    annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=reference))
    assert out.read_text() == reference.read_text()

    again = FakeEstimator(_p)
    assert (
        annotate(small_evalset, again, outputs=Outputs(out=out)).reused == 5 and again.asked == []
    )


def test_a_cut_off_progress_line_is_dropped_and_recomputed(
    small_evalset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "u.jsonl"
    annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=out))
    progress = Path(f"{out}.progress")
    lines = progress.read_text().splitlines(keepends=True)
    progress.write_text("".join(lines[:-1]) + lines[-1][:20])  # killed mid-write
    est = FakeEstimator(_p)
    with caplog.at_level(logging.WARNING):
        summary = annotate(small_evalset, est, outputs=Outputs(out=out))
    assert "incomplete last line" in caplog.text
    assert (summary.computed, summary.reused) == (1, 4)
    assert all(json.loads(line) for line in progress.read_text().splitlines())


def test_other_settings_or_texts_are_not_reused(small_evalset: Path, tmp_path: Path) -> None:
    out = tmp_path / "u.jsonl"
    annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=out))
    assert (
        annotate(small_evalset, FakeEstimator(_p, version=2), outputs=Outputs(out=out)).computed
        == 5
    )
    text = small_evalset.read_text().replace("Ate 3000 kcal.", "Ate 2500 kcal.")
    small_evalset.write_text(text)
    assert annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=out)).computed == 1
    assert (
        annotate(small_evalset, FakeEstimator(_p), outputs=Outputs(out=out, fresh=True)).computed
        == 5
    )


class _FakeJudgeModel:
    """Grades a passage relevant when it contains the first reference answer."""

    model_id = "judge-llm"

    def __init__(self, reply: str | None = None) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def settings(self) -> dict[str, object]:
        return {"model": "judge-llm"}

    def generate(self, prompts):  # type: ignore[no-untyped-def]
        for i, prompt in enumerate(prompts):
            self.prompts.append(prompt)
            if self.reply is not None:
                yield i, self.reply
                continue
            doc = prompt.split("Document: ")[-1].split("\n```")[0]
            answer = prompt.split("Acceptable answers list: ['")[-1].split("'")[0]
            grade = "A" if answer in doc else "B"
            yield i, f'```json\n{{"motivation": "checked", "grade": "{grade}"}}\n```'


def test_unlabelled_candidates_are_judged_and_marked(tmp_path: Path) -> None:
    evalset = _write_jsonl(
        tmp_path / "eval.jsonl",
        [
            {
                "query_id": "q1",
                "query": "What was my deadlift PR?",
                "answers": ["500 lb"],
                "relevant": [],
                "candidates": [
                    {"id": "a", "text": "Deadlift PR: 500 lb."},
                    {"id": "b", "text": "Squat PR: 405 lb."},
                ],
            }
        ],
    )
    out = tmp_path / "u.jsonl"
    gen = _FakeJudgeModel()
    summary = annotate(
        evalset,
        FakeEstimator(lambda _: 0.5),
        outputs=Outputs(out=out, udcg_out=tmp_path / "u.json"),
        relevance=Relevance(judge=RelevanceJudge(gen)),
    )
    assert summary.judged == 2 and len(gen.prompts) == 2
    assert "Acceptable answers list: ['500 lb']" in gen.prompts[0]
    row = json.loads(out.read_text())
    assert row["relevant"] == {"a": 1} and row["not_relevant"] == ["b"]
    assert row["utilities"] == {"a": 0.5, "b": -0.5}
    info = row["metadata"]["annotate"]
    assert info["relevance"] == {"a": "judge", "b": "judge"}
    assert info["judge_model"] == "judge-llm"
    authors = json.loads((tmp_path / "u.json").read_text())
    assert [(p["is_relevant"], p["relevance_source"]) for p in authors[0]["passages"]] == [
        (True, "judge"),
        (False, "judge"),
    ]
    # judgements are saved too: a re-run asks the judge nothing
    gen2 = _FakeJudgeModel()
    annotate(
        evalset,
        FakeEstimator(lambda _: 0.5),
        outputs=Outputs(out=out),
        relevance=Relevance(judge=RelevanceJudge(gen2)),
    )
    assert gen2.prompts == []


def test_ungradable_judge_replies_are_left_out_and_retried(tmp_path: Path) -> None:
    evalset = _write_jsonl(
        tmp_path / "eval.jsonl",
        [{"query_id": "q", "query": "Q?", "candidates": [{"id": "a", "text": "A."}]}],
    )
    out = tmp_path / "u.jsonl"
    judge = RelevanceJudge(_FakeJudgeModel(reply="I think it is fine."))
    summary = annotate(
        evalset,
        FakeEstimator(lambda _: 0.5),
        outputs=Outputs(out=out),
        relevance=Relevance(judge=judge),
    )
    assert (summary.pairs, summary.judge_failures) == (0, 1)
    assert "utilities" not in json.loads(out.read_text())


def test_unjudged_policies(small_evalset: Path, tmp_path: Path) -> None:
    out = tmp_path / "u.jsonl"
    s = annotate(
        small_evalset,
        FakeEstimator(_p),
        outputs=Outputs(out=out),
        relevance=Relevance(unjudged="skip"),
    )
    assert (s.pairs, s.skipped) == (4, 1)
    assert "diet" not in json.loads(out.read_text().splitlines()[0])["utilities"]
    with pytest.raises(AnnotationError, match="needs a judge"):
        annotate(
            small_evalset,
            FakeEstimator(_p),
            outputs=Outputs(out=out),
            relevance=Relevance(unjudged="judge"),
        )


def test_texts_from_a_corpus_and_missing_texts(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    run = tmp_path / "bm25.run"
    run.write_text("q1 Q0 d1 1 3.5 bm25\nq1 Q0 d2 2 1.5 bm25\n")
    with pytest.raises(AnnotationError, match="2 candidates have no passage text"):
        annotate(qrels, FakeEstimator(_p), outputs=Outputs(out=tmp_path / "u.jsonl"), runs=run)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"_id": "d1", "title": "Hours", "text": "Closed Sundays."}\n{"id": "d2", "text": "x"}\n'
    )
    with pytest.raises(AnnotationError, match="queries have no text"):
        annotate(
            qrels,
            FakeEstimator(_p),
            outputs=Outputs(out=tmp_path / "u.jsonl"),
            runs=run,
            corpus=corpus,
        )


def test_queries_from_a_beir_folder(tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "Hours", "text": "Closed Sundays."}\n{"_id": "d2", "text": "x"}\n'
    )
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "When is it closed?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    run = tmp_path / "run.json"
    run.write_text('{"q1": {"d1": 0.9, "d2": 0.4}}')
    est = FakeEstimator(lambda _: 0.0)
    annotate(beir, est, outputs=Outputs(out=tmp_path / "u.jsonl"), runs=run)
    assert [p.passage for p in est.asked] == ["Hours\nClosed Sundays.", "x"]
    assert est.asked[0].question == "When is it closed?"
    es = load_evalset(tmp_path / "u.jsonl")
    assert dict(es.labels["q1"].utilities) == {"d1": 1.0, "d2": -1.0}


class _WrongIndex(FakeEstimator):
    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        yield len(pairs) + 5, 0.5


def test_estimator_results_are_checked(small_evalset: Path, tmp_path: Path) -> None:
    with pytest.raises(AnnotationError, match="not a probability"):
        annotate(
            small_evalset, FakeEstimator(lambda _: 1.5), outputs=Outputs(out=tmp_path / "u.jsonl")
        )
    with pytest.raises(AnnotationError, match="not a probability"):
        annotate(
            small_evalset, FakeEstimator(lambda _: True), outputs=Outputs(out=tmp_path / "u.jsonl")
        )
    with pytest.raises(AnnotationError, match="result for index 10 of 5 inputs"):
        annotate(small_evalset, _WrongIndex(_p), outputs=Outputs(out=tmp_path / "u.jsonl"))


def test_wrong_arguments_are_annotation_errors(small_evalset: Path, tmp_path: Path) -> None:
    """Issue 11: each mistake is a typed error that names it, before any work is done."""
    est, out = FakeEstimator(_p), tmp_path / "u.jsonl"
    es = load_evalset(small_evalset)
    with pytest.raises(AnnotationError, match="when evalset is a path"):
        annotate(es, est, outputs=Outputs(out=out), runs=tmp_path / "bm25.run")
    with pytest.raises(AnnotationError, match="unjudged must be"):
        annotate(
            small_evalset,
            est,
            outputs=Outputs(out=out),
            relevance=Relevance(unjudged="ask"),  # type: ignore[arg-type]
        )
    with pytest.raises(AnnotationError, match="no run named 'bm25'; runs: default"):
        annotate(small_evalset, est, outputs=Outputs(out=out), only_runs=["bm25"])
    assert est.asked == []


def test_unwritable_outputs_are_named_before_any_work(small_evalset: Path, tmp_path: Path) -> None:
    est = FakeEstimator(_p)
    folder = tmp_path / "results"
    folder.mkdir()
    with pytest.raises(
        AnnotationError,
        match=r"results is a folder; an annotate output is a file: give a file name$",
    ):
        annotate(small_evalset, est, outputs=Outputs(out=folder))
    with pytest.raises(AnnotationError, match=r"results is a folder"):
        annotate(small_evalset, est, outputs=Outputs(out=tmp_path / "u.jsonl", udcg_out=folder))
    with pytest.raises(AnnotationError, match=r"results is a folder"):
        annotate(
            small_evalset, est, outputs=Outputs(out=tmp_path / "u.jsonl", progress_file=folder)
        )
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(
        AnnotationError,
        match=r"cannot write an annotate output to .*: .*a-file is a file, not a folder",
    ):
        annotate(small_evalset, est, outputs=Outputs(out=blocker / "sub" / "u.jsonl"))
    with pytest.raises(
        AnnotationError,
        match=r"cannot write an annotate output to .*: .*a-file is a file, not a folder",
    ):
        annotate(
            small_evalset,
            est,
            outputs=Outputs(out=tmp_path / "u.jsonl", udcg_out=blocker / "u.json"),
        )
    assert est.asked == []
    assert not list(tmp_path.glob("*.progress")) and not (tmp_path / "u.jsonl").exists()


def test_an_output_that_is_an_input_is_refused_before_any_work(
    small_evalset: Path, tmp_path: Path
) -> None:
    """``annotate eval.jsonl --out eval.jsonl`` would replace the eval set it reads."""
    before = small_evalset.read_bytes()
    est = FakeEstimator(_p)
    for outputs in (
        {"out": small_evalset},
        {"out": tmp_path / "u.jsonl", "udcg_out": small_evalset},
        {"out": tmp_path / "u.jsonl", "progress_file": small_evalset},
    ):
        with pytest.raises(AnnotationError, match=r"annotate output .*eval\.jsonl.* input"):
            annotate(small_evalset, est, outputs=Outputs(**outputs))  # type: ignore[arg-type]
    assert est.asked == [] and small_evalset.read_bytes() == before
    assert not (tmp_path / "u.jsonl").exists()


def test_a_progress_file_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    from ragguard.calibration.annotate._store import ProgressStore

    with pytest.raises(AnnotationError, match=r"cannot use the progress file .*: Is a directory"):
        ProgressStore(tmp_path)


def test_an_eval_set_whose_file_is_gone_is_annotated_from_its_loaded_texts(
    tmp_path: Path,
) -> None:
    """annotate() takes passage texts, JSONL metadata and UDCG examples from the loaded
    set: it never reads the eval-set file again."""
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"query_id": "q1", "query": "When?", "relevant": ["d1"],
                    "candidates": [{"id": "d1", "score": 2, "text": "Closed Sundays."},
                                   {"id": "d2", "score": 1}],
                    "metadata": {"topic": "hours", "n": [1, None]}}) + "\n"
    )  # fmt: skip
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d2", "title": "Misc", "text": "x"}\n')
    es = load_evalset(src)
    src.unlink()
    est = FakeEstimator(lambda _: 0.25)
    annotate(es, est, outputs=Outputs(out=tmp_path / "u.jsonl"), passages={"d9": "unused"})
    assert [p.passage for p in est.asked] == ["Closed Sundays.", "Misc\nx"]
    line = json.loads((tmp_path / "u.jsonl").read_text())
    assert [c.get("text") for c in line["candidates"]] == ["Closed Sundays.", "Misc\nx"]
    assert {k: v for k, v in line["metadata"].items() if k != "annotate"} == {
        "topic": "hours",
        "n": [1, None],
    }
    # the corpus beside the eval set is one of its inputs: never an output
    with pytest.raises(AnnotationError, match=r"corpus\.jsonl, which writing there would"):
        annotate(es, est, outputs=Outputs(out=tmp_path / "corpus.jsonl"))
    examples = [{"example_id": "e1", "question": "Q?", "extra": [1], "passages": [
        {"doc_id": "a", "title": "T", "text": "alpha", "is_relevant": True},
    ]}]  # fmt: skip
    udcg = tmp_path / "sub" / "ex.json"
    udcg.parent.mkdir()
    udcg.write_text(json.dumps(examples))
    es = load_evalset(udcg)
    udcg.unlink()
    annotate(es, est, outputs=Outputs(out=tmp_path / "e.jsonl", udcg_out=tmp_path / "e.json"))
    written = json.loads((tmp_path / "e.json").read_text())
    examples[0]["passages"][0]["models_info"] = {"fake-llm": {"no_res_prob": 0.25}}  # type: ignore[index]
    assert written == examples  # the authors' example kept whole, the estimate added
    assert est.asked[-1].passage == "T\nalpha"


def test_the_annotator_writes_what_annotate_writes(small_evalset: Path, tmp_path: Path) -> None:
    """Annotator(option objects).run is what annotate(option objects) runs: the same files."""
    rules = UtilityRules(3)
    annotate(
        small_evalset,
        FakeEstimator(_p),
        outputs=Outputs(out=tmp_path / "a.jsonl", udcg_out=tmp_path / "a.json"),
        relevance=Relevance(rules=rules),
    )
    annotator = Annotator(
        estimator=FakeEstimator(_p),
        outputs=Outputs(out=tmp_path / "b.jsonl", udcg_out=tmp_path / "b.json"),
        relevance=Relevance(rules=rules),
    )
    summary = annotator.run(load_evalset(small_evalset), inputs=[small_evalset])
    assert summary.progress == tmp_path / "b.jsonl.progress"
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    # an output that would replace an input is refused before anything is computed
    refused = Annotator(estimator=FakeEstimator(_p), outputs=Outputs(out=small_evalset))
    with pytest.raises(AnnotationError, match="replace"):
        refused.run(load_evalset(small_evalset))
