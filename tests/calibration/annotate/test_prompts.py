"""The paper's prompts, the abstention-token rule and the judge's reply parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragguard.calibration.annotate import (
    ABSTENTION_PROMPT,
    RELEVANCE_PROMPT,
    is_abstention,
    is_abstention_start,
    parse_judge_reply,
)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def paper() -> str:
    """The UDCG paper's text, from the project's shared reference folder beside the
    checkout (CI has it; the paper itself is not redistributed with the repository)."""
    for base in (ROOT, *ROOT.parents):
        path = base / "shared" / "reference" / "seeds" / "udcg-paper.md"
        if path.is_file():
            return _normalise(path.read_text(encoding="utf-8"))
    pytest.skip("shared/reference/seeds/udcg-paper.md is not beside this checkout")


def test_abstention_prompt_is_the_papers_figure_4(paper: str) -> None:
    figure = paper.split("Figure 4:")[0].rsplit("Figure 3:", 1)[1]
    assert _normalise(ABSTENTION_PROMPT.instruction) in figure
    text = ABSTENTION_PROMPT.user("<question>", "<document>")
    assert _normalise(text) in figure
    assert text.endswith("Answer:")


def test_relevance_prompt_is_the_papers_figure_5(paper: str) -> None:
    figure = _normalise(paper.split("Figure 5:")[0].rsplit("Figure 4:", 1)[1].replace("```", ""))
    ours = _normalise(RELEVANCE_PROMPT.replace("{{", "{").replace("}}", "}"))
    # the paper's markdown renders list bullets, arrows and code fences its own way
    for part in re.split(r"(?:\s-\s|→|```)", ours):
        part = part.strip()
        if len(part) > 12:
            assert part in figure, part


@pytest.mark.parametrize(
    ("token", "starts"),
    [
        ("NO", True),
        (" NO", True),
        ("\nNO", True),
        ("N", True),
        ("NO-", True),
        ("NO-RESPONSE", True),
        (" NO-RES", True),
        ("No", False),
        ("NOT", False),
        ("no", False),
        ("", False),
        (" ", False),
        ("O", False),
        ("NO-RESPONSES", False),
    ],
)
def test_is_abstention_start(token: str, starts: bool) -> None:
    assert is_abstention_start(token) is starts


@pytest.mark.parametrize(
    ("answer", "abstains"),
    [
        ("NO-RESPONSE", True),
        ("  no-response.", True),
        ("NO RESPONSE", True),
        ("NO_RESPONSE", True),
        ("NORESPONSE", True),
        ("The answer is NO-RESPONSE", True),
        ("No", False),
        ("Paris", False),
        ("NO-RESPONSES are rare", False),
    ],
)
def test_is_abstention(answer: str, abstains: bool) -> None:
    assert is_abstention(answer) is abstains


def test_parse_judge_reply() -> None:
    r = parse_judge_reply('```json\n{"motivation": "Has the date.", "grade": "A"}\n```')
    assert r is not None and r.relevant and r.motivation == "Has the date."
    r = parse_judge_reply('Sure. {"grade": "b", "motivation": "Only keywords."} Done.')
    assert r is not None and not r.relevant and r.motivation == "Only keywords."
    r = parse_judge_reply("{'motivation': 'ok', 'grade': 'A'}")  # almost JSON
    assert r is not None and r.relevant
    assert parse_judge_reply('{"grade": "C"}') is None
    assert parse_judge_reply("It is relevant.") is None
