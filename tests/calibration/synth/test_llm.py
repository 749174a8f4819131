"""Questions written by an LLM (``ask``): every sampled passage gives a kept question or
a reported rejection (no question, a copy of the passage, a duplicate), and replies are
saved and reused from the progress file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from ragguard.calibration.synth import Corpus, Passage, ask
from ragguard.calibration.synth.llm import parse_question, rejection
from ragguard.calibration.synth.queries import folded

PASSAGES = {
    "p1": "The Eiffel Tower in Paris was completed in 1889. It is 330 metres tall.",
    "p2": "Photosynthesis turns sunlight, water and carbon dioxide into glucose and oxygen.",
    "p3": "The Great Barrier Reef off Queensland is the largest coral reef system in the world.",
    "p4": "Mount Kilimanjaro in Tanzania is the highest mountain in Africa.",
}


def corpus() -> Corpus:
    return Corpus(tuple(Passage(k, "", v) for k, v in PASSAGES.items()), "as given")


class FirstSentence:
    """A text generator that answers with the passage's first sentence, or, for a passage
    about a mountain or a reef, with one fixed question (so that two passages give the
    same one): a model that copies, and one that repeats itself."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    @property
    def model_id(self) -> str:
        return "first-sentence"

    def settings(self) -> Mapping[str, object]:
        return {"model": "first-sentence"}

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        for i, prompt in enumerate(prompts):
            self.prompts.append(prompt)
            passage = prompt.split("Passage: ", 1)[1]
            if "mountain" in passage or "Reef" in passage:
                yield i, "Question: Where is the biggest natural wonder?"
            else:
                yield i, re.split(r"(?<=\.)\s", passage)[0]


def test_parse_question_takes_the_first_line_without_its_label() -> None:
    assert parse_question('\n  Question: "When was it built?"\nmore') == "When was it built?"
    assert parse_question("1. Who designed it?") == "Who designed it?"
    assert parse_question("   ") == ""


def test_rejection_names_an_empty_reply_a_copy_and_a_duplicate() -> None:
    text = PASSAGES["p1"]
    assert rejection("", text, set()) == "no question"
    assert rejection("the eiffel tower in PARIS", text, set()) == "copies the passage"
    assert rejection(text, text, set()) == "copies the passage"
    assert rejection("How tall is the Eiffel Tower?", text, {"how tall is the eiffel tower"}) == (
        "duplicate"
    )
    assert rejection("How tall is the Eiffel Tower?", text, set()) is None


def test_copies_and_duplicates_are_rejected_and_reported(tmp_path: Path) -> None:
    asked = ask(corpus(), FirstSentence(), progress_file=tmp_path / "p.progress", n=4)
    reasons = {r.source: r.reason for r in asked.rejected}
    # p1, p2: the reply is a sentence of the passage; p3, p4: one same question
    assert reasons.get("p1") == "copies the passage"
    assert reasons.get("p2") == "copies the passage"
    assert sorted(reasons.values()).count("duplicate") == 1
    assert [q.query for q in asked.queries] == ["Where is the biggest natural wonder?"]
    kept, dup = asked.queries[0].source, next(s for s, r in reasons.items() if r == "duplicate")
    assert {kept, dup} == {"p3", "p4"}
    assert len(asked.queries) + len(asked.rejected) == 4


def test_a_rerun_reuses_the_saved_replies(tmp_path: Path) -> None:
    store = tmp_path / "p.progress"
    first = FirstSentence()
    ask(corpus(), first, progress_file=store, n=2)
    assert (len(first.prompts), len(store.read_text().splitlines())) == (2, 2)
    again = FirstSentence()
    asked = ask(corpus(), again, progress_file=store, n=4)
    assert (asked.reused, asked.computed, len(again.prompts)) == (2, 2, 2)
    saved = [json.loads(line)["doc_id"] for line in store.read_text().splitlines()]
    assert len(set(saved)) == 4
    fresh = FirstSentence()
    ask(corpus(), fresh, progress_file=store, n=4, fresh=True)
    assert len(fresh.prompts) == 4


@pytest.mark.slow
def test_smollm2_writes_or_reports_one_question_per_passage(
    tmp_path: Path, gguf_path: Path
) -> None:
    from ragguard.calibration.annotate import TransformersGenerator

    gen = TransformersGenerator(gguf_path.parent, gguf_file=gguf_path.name, max_new_tokens=24)
    asked = ask(corpus(), gen, progress_file=tmp_path / "p.progress", n=3)
    sources = [q.source for q in asked.queries] + [r.source for r in asked.rejected]
    assert len(sources) == len(set(sources)) == 3
    for q in asked.queries:  # kept: a question, not a run of the passage's words
        assert folded(q.query) and folded(q.query) not in folded(PASSAGES[q.source])
    assert len({folded(q.query) for q in asked.queries}) == len(asked.queries)
