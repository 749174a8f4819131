"""Answer-bearing spans (ragguard.answer_spans): question types, normalised answers and
each passage's answer on hand-made passages, and hostile passages within a time bound."""

from __future__ import annotations

import time

import pytest

from ragguard.answer_spans import AnswerType, agree, passage_answer, question_type
from ragguard.conflicts import normalise_answer


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When was the Dallas County Courthouse built?", AnswerType.DATE),
        ("What year did the battle take place?", AnswerType.DATE),
        ("How many cars did the plant build?", AnswerType.NUMBER),
        ("What is the population of Qorveh?", AnswerType.NUMBER),
        ("Who directed the film?", AnswerType.NAME),
        ("Where is the Kate Chopin House located?", AnswerType.NAME),
        ("What political party was he a member of?", AnswerType.NAME),
        ("What sport is Justin Thomas associated with?", AnswerType.SPORT),
        ("What position did he play?", AnswerType.POSITION),
        ("What is the genre of the film?", AnswerType.GENRE),
        ("What is RSJ?", None),
        ("Why is the sky blue?", None),
        ("", None),
        ("1990 1992 42", None),
    ],
)
def test_the_question_type_says_what_answer_counts(question: str, kind: AnswerType | None) -> None:
    assert question_type(question) is kind


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("5 January 1990", "January 5, 1990", "1990-01-05"),
        ("5th Jan. 1990", "Jan 5 1990", "1990-01-05"),
        ("42,800", "42800", "42800"),
        ("about 42,800 people", "42800", "42800"),
        ("12 km 2", "12 km²", "12 km²"),
        ("12 square kilometres", "12 km2", "12 km²"),
        ("The Beatles", "beatles", "beatles"),
        ("  Golf. ", "golf", "golf"),
        ("112 BC", "112 bce", "112 BC"),
        ("in 1992", "1992", "1992"),  # a model's answer
        ("On 5 January 1990.", "January 5, 1990", "1990-01-05"),
        ("by the Beatles", "Beatles", "beatles"),
    ],
)
def test_the_same_answer_written_otherwise_normalises_to_one(a: str, b: str, same: str) -> None:
    assert normalise_answer(a) == normalise_answer(b) == same


def test_different_answers_stay_different() -> None:
    assert normalise_answer("1990") != normalise_answer("1992")
    assert normalise_answer("42,800") != normalise_answer("42,801")
    assert normalise_answer("") == normalise_answer("   ") == ""


def test_answers_agree_when_one_holds_the_other() -> None:
    assert agree("1990", "1990-01-05")
    assert agree("mahesh bhatt", "bhatt")
    assert not agree("1990", "1992-01-05")
    assert not agree("1990", "19900")
    assert not agree("raj kapoor", "mahesh bhatt")


def test_the_answer_is_in_the_sentence_sharing_the_question_words() -> None:
    text = (
        "The town has a museum opened in 1950. The Dallas County Courthouse was built in "
        "1902 and restored in 2007. It hosts a market."
    )
    # "built" is the predicate: 1902 is nearer to it than 2007
    assert passage_answer("When was the Dallas County Courthouse built?", text, overlap=0.3) == (
        "1902"
    )


def test_a_number_answer_keeps_its_unit_and_drops_a_year() -> None:
    text = "At the 2010 census the population of Qorveh was 42,800 people."
    assert passage_answer("What is the population of Qorveh?", text, overlap=0.3) == "42800"
    engine = "The V-Strom has an engine size of 996 cc, built since 2002."
    assert passage_answer("What is the engine size of the V-Strom?", engine, overlap=0.3) == (
        "996 cc"
    )


def test_a_name_answer_leaves_out_the_names_of_the_question() -> None:
    text = 'Lahu Ke Do Rang is a 1979 film directed by Mahesh Bhatt, shot in "Hong Kong".'
    question = 'Who are the directors of the film "Lahu Ke Do Rang"?'
    assert passage_answer(question, text, overlap=0.3) == "mahesh bhatt"


def test_a_lower_case_answer_comes_from_its_closed_list() -> None:
    text = "Justin Thomas is an American professional golfer on the PGA Tour."
    assert passage_answer("What sport is Justin Thomas associated with?", text, overlap=0.3) == (
        "golf"
    )


def test_no_answer_without_a_type_a_sentence_on_topic_or_a_candidate() -> None:
    on_topic = "The Dallas County Courthouse was built in 1902."
    assert (
        passage_answer("Why was the Dallas County Courthouse built?", on_topic, overlap=0.3) is None
    )
    assert (
        passage_answer("When was the Eiffel Tower built?", "Cats sleep a lot.", overlap=0.3) is None
    )
    no_year = "The Dallas County Courthouse was built of red granite."
    assert (
        passage_answer("When was the Dallas County Courthouse built?", no_year, overlap=0.3) is None
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "nan",
        float("nan"),
        None,
        "1990 " * 20_000,  # numbers only
        "the courthouse was built in 1902 " * 40_000,  # 1.3 MB, no sentence boundary
        ("Courthouse built. " * 60_000) + "The courthouse was built in 1902.",  # 1 MB
        "\u4e00\u4e8c\u4e09" * 400_000,  # no spaces at all
    ],
)
def test_hostile_passages_answer_within_a_time_bound(text: object) -> None:
    start = time.perf_counter()
    got = passage_answer("When was the courthouse built?", text, overlap=0.3)  # type: ignore[arg-type]
    assert time.perf_counter() - start < 2.0
    assert got is None or isinstance(got, str)
