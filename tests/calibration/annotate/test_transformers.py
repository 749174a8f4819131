"""The transformers backend: first-token handling on a tiny model built here, and the
SmolLM2-135M GGUF file through transformers' GGUF loading (a plumbing test: a 135M
model is no useful annotator)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from ragguard.calibration import evaluate, load_evalset
from ragguard.calibration.annotate import (
    ABSTENTION_PROMPT,
    AnnotationError,
    Outputs,
    Pair,
    RelevanceJudge,
    TransformersEstimator,
    TransformersGenerator,
    abstention_token_ids,
    annotate,
)
from tests.calibration.annotate.tiny_llm import build_tiny_llm

ABSTENTION_STARTS = {"N", "ĠN", "NO", "ĠNO", "NO-"}


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-chat")
    build_tiny_llm(folder, chat=True)
    return folder


@pytest.fixture(scope="module")
def tiny_plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-plain")
    build_tiny_llm(folder, chat=False)
    return folder


PAIRS = [
    Pair("What is the capital of France?", "Paris is the capital of France."),
    Pair("Who wrote Hamlet?", "Bananas are rich in potassium, and NOT much else."),
    Pair("When?", "x"),
    Pair("What was my deadlift PR?", "Squat PR: 405 lb. Deadlift accessories only. " * 5),
]


def _reference_p(model: Any, tok: Any, ids: list[int]) -> float:
    """Next-token probability mass on the hand-listed abstention starts, unbatched."""
    wanted = [tok.convert_tokens_to_ids(t) for t in ABSTENTION_STARTS]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].double()
    return float(torch.softmax(logits, -1)[wanted].sum())


def test_abstention_tokens_are_every_prefix_token_and_only_those(tiny_chat: Path) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(tiny_chat)
    got = {tok.convert_ids_to_tokens(i) for i in abstention_token_ids(tok)}
    assert got == ABSTENTION_STARTS
    # the tokenizer splits the abstention, and the split depends on the leading space
    assert tok.tokenize("NO-RESPONSE")[:3] == ["NO", "-", "RE"]
    assert tok.tokenize(" NO-RESPONSE")[0] == "ĠNO"


@pytest.mark.parametrize("fixture", ["tiny_chat", "tiny_plain"])
def test_probability_matches_a_direct_computation(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    folder = request.getfixturevalue(fixture)
    est = TransformersEstimator(str(folder), batch_size=3)
    assert est.settings()["chat_template"] is (fixture == "tiny_chat")
    tok = est.tokenizer
    got = dict(est.estimate(PAIRS))
    assert sorted(got) == list(range(len(PAIRS)))
    for i, pair in enumerate(PAIRS):
        if fixture == "tiny_chat":
            ids = tok.apply_chat_template(
                ABSTENTION_PROMPT.messages(pair.question, pair.passage),
                add_generation_prompt=True,
                return_dict=False,
            )
            assert tok.decode(ids).endswith("Answer:<|im_end|>\n<|im_start|>assistant\n")
        else:
            ids = tok(ABSTENTION_PROMPT.plain(pair.question, pair.passage))["input_ids"]
            assert tok.decode(ids).endswith("\n\nAnswer:")
        assert est.prompt_ids(pair) == list(ids)
        assert got[i] == pytest.approx(_reference_p(est.model, tok, list(ids)), rel=1e-4, abs=1e-7)
    # every pair gets its own value, so the check above tells rows (and padding) apart
    assert len({round(p, 6) for p in got.values()}) == len(PAIRS)


def test_batches_with_padding_equal_single_rows(tiny_chat: Path) -> None:
    single = dict(TransformersEstimator(str(tiny_chat), batch_size=1).estimate(PAIRS))
    batched = dict(TransformersEstimator(str(tiny_chat), batch_size=4).estimate(PAIRS))
    assert batched == pytest.approx(single, rel=1e-4, abs=1e-7)


def test_max_length_keeps_the_end_of_the_prompt(tiny_chat: Path) -> None:
    est = TransformersEstimator(str(tiny_chat), max_length=40)
    full = TransformersEstimator(str(tiny_chat))
    got = dict(est.estimate(PAIRS[3:]))[0]
    ids = full.prompt_ids(PAIRS[3])[-40:]
    assert got == pytest.approx(_reference_p(full.model, full.tokenizer, ids), rel=1e-4)


def test_options_are_checked(tiny_plain: Path, tmp_path: Path) -> None:
    """Each mistake a user can make is an AnnotationError that names it (issue 11)."""
    with pytest.raises(AnnotationError, match="no chat template"):
        TransformersEstimator(str(tiny_plain), chat_template=True)
    with pytest.raises(AnnotationError, match="batch_size"):
        TransformersEstimator(str(tiny_plain), batch_size=0)
    with pytest.raises(AnnotationError, match="max_length"):
        TransformersEstimator(str(tiny_plain), max_length=2.5)
    with pytest.raises(AnnotationError, match="dtype"):
        TransformersEstimator(str(tiny_plain), dtype="float8")
    with pytest.raises(AnnotationError, match="device 'banana'"):
        TransformersEstimator(str(tiny_plain), device="banana")
    with pytest.raises(AnnotationError, match="cannot load the model"):
        TransformersEstimator(str(tmp_path / "no-such-model"))
    with pytest.raises(AnnotationError, match="no such GGUF file"):
        TransformersEstimator.from_gguf(tmp_path / "missing.gguf")
    with pytest.raises(AnnotationError, match="max_new_tokens"):
        TransformersGenerator(str(tiny_plain), max_new_tokens=0)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_plain))
    with pytest.raises(AnnotationError, match="pass the tokenizer"):
        TransformersEstimator(model)


# ---------------------------------------------------------------- SmolLM2-135M GGUF


QUESTIONS = [
    Pair("What is the capital of France?", "Paris is the capital and largest city of France."),
    Pair("What is the capital of France?", "Germany is a country in Central Europe."),
    Pair("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare."),
    Pair("Who wrote Hamlet?", "Bananas are rich in potassium."),
    Pair("When did Apollo 11 land on the Moon?", "Apollo 11 landed on July 20, 1969."),
]


@pytest.mark.slow  # the SmolLM2 GGUF model
def test_gguf_model_loads_and_gives_probabilities(smollm: TransformersEstimator) -> None:
    assert smollm.model_id == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smollm.settings()["backend"] == "gguf"
    tok = smollm.tokenizer
    starts = {tok.decode([i]) for i in smollm.token_ids}
    assert {"NO", " NO"} <= starts and all("NO-RESPONSE".startswith(s.strip()) for s in starts)
    got = dict(smollm.estimate(QUESTIONS))
    assert all(0.0 < p < 1.0 for p in got.values())
    # the same prompts alone give the same numbers (padding changes nothing)
    smollm.batch_size = 1
    try:
        assert dict(smollm.estimate(QUESTIONS)) == pytest.approx(got, rel=1e-4)
    finally:
        smollm.batch_size = 4
    # at least the probability of the one token the authors' code reads
    # (tokenizer.encode("NO-RESPONSE")[0] after the chat template)
    first = tok.encode("NO-RESPONSE", add_special_tokens=False)[0]
    for i, pair in enumerate(QUESTIONS):
        with torch.no_grad():
            ids = torch.tensor([smollm.prompt_ids(pair)])
            logits = smollm.model(ids, logits_to_keep=1).logits[0, -1]
        assert got[i] >= float(torch.softmax(logits.double(), -1)[first]) * (1 - 1e-4)


@pytest.mark.slow  # the SmolLM2 GGUF model
def test_gguf_annotation_feeds_the_metrics(
    smollm: TransformersEstimator, udcg_dir: Path, tmp_path: Path
) -> None:
    summary = annotate(
        udcg_dir / "sample_dataset.json",
        smollm,
        outputs=Outputs(out=tmp_path / "u.jsonl", udcg_out=tmp_path / "u.json"),
    )
    assert summary.pairs == 15
    rows = [json.loads(line) for line in (tmp_path / "u.jsonl").read_text().splitlines()]
    assert rows[0]["metadata"]["annotate"]["model"] == smollm.model_id
    for path in (tmp_path / "u.jsonl", tmp_path / "u.json"):
        udcg = evaluate(load_evalset(path), metrics=["udcg"], per_query=True)["udcg"]
        for row in rows:
            u = list(row["utilities"].values())
            x = (sum(v for v in u if v > 0) + sum(v for v in u if v < 0) / 3) / len(u)
            assert udcg[row["query_id"]] == pytest.approx(1 / (1 + math.exp(-x)))


@pytest.mark.slow  # the SmolLM2 GGUF model
def test_gguf_model_as_relevance_judge_runs(smollm: TransformersEstimator) -> None:
    """Plumbing only: the 135M model writes something; the parser decides what it means."""
    judge = RelevanceJudge(smollm.generator(max_new_tokens=24))
    item = ("Who wrote Hamlet?", ["Shakespeare"], "Hamlet is by Shakespeare.")
    ((i, reply),) = list(judge.judge([item]))
    assert i == 0 and (reply is None or isinstance(reply.relevant, bool))
