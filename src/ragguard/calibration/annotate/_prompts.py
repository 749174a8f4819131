"""The UDCG paper's two prompts (Trappolini, Cuconasu et al., "Redefining Retrieval
Evaluation in the Era of LLMs"; the texts are theirs): the abstention prompt (Figure 4)
and the relevance judge's (Figure 5), and what is read from the replies."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ragguard.calibration.annotate._base import TextGenerator


@dataclass(frozen=True, slots=True)
class AbstentionPrompt:
    """A prompt that asks for an answer from one passage, or an abstention.

    Attributes:
        instruction: the task; sent as the system message to chat models (folded into
            the user message where a chat template has no system role).
        template: the user message, with ``{document}`` and ``{question}``.
        abstention: the answer that means "I abstain" (``NO-RESPONSE``).
    """

    instruction: str
    template: str
    abstention: str = "NO-RESPONSE"

    def user(self, question: str, passage: str) -> str:
        """The user message for one (question, passage) pair."""
        return self.template.format(document=passage, question=question)

    def plain(self, question: str, passage: str) -> str:
        """The whole prompt as one text, for models without a chat template."""
        return f"{self.instruction}\n\n{self.user(question, passage)}"

    def messages(self, question: str, passage: str) -> list[dict[str, str]]:
        """Chat messages: the instruction as the system message, then the user's."""
        return [
            {"role": "system", "content": self.instruction},
            {"role": "user", "content": self.user(question, passage)},
        ]

    def fingerprint(self) -> str:
        """A short hash of the prompt's text: results under another prompt are not reused."""
        text = "\x00".join((self.instruction, self.template, self.abstention))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


ABSTENTION_PROMPT = AbstentionPrompt(
    instruction=(
        "You are given a question and you must respond based on the provided documents. "
        "Respond directly without providing any premise or explanation. If none of the "
        "documents contain the answer, please respond with NO-RESPONSE. Do not try to "
        "respond based on your own knowledge."
    ),
    template="Documents:\n{document}\n\nQuestion:\n{question}\n\nAnswer:",
)


def is_abstention_start(token_text: str, abstention: str = "NO-RESPONSE") -> bool:
    """Whether a token's text, without leading whitespace, is a non-empty prefix of
    ``abstention`` (``"NO"``, ``" NO"``, ``"NO-"``, ``"N"``); case matters: ``"No"`` is an
    answer."""
    stripped = token_text.lstrip()
    return bool(stripped) and abstention.startswith(stripped)


_ABSTAIN_RE = re.compile(r"\bNO[\s_-]?RESPONSE\b", re.IGNORECASE)


def is_abstention(answer: str) -> bool:
    """Whether a sampled answer abstains: it contains ``NO-RESPONSE`` (any case; a space,
    an underscore or nothing in place of the hyphen)."""
    return _ABSTAIN_RE.search(answer) is not None


RELEVANCE_PROMPT = """\
Determine if a document is RELEVANT or IRRELEVANT for answering a question. A document \
is RELEVANT if it contains information that directly supports at least one acceptable \
answer.

RELEVANT examples:
- Q: "where does the story the great gatsby take place" | Answers: ['Long Island of 1922']
  Doc: "The Great Gatsby...follows characters living in West Egg on Long Island in summer \
of 1922"
  → Contains the exact answer
- Q: "when did korn's follow the leader come out" | Answers: ['August 18, 1998', \
'Summer 1998']
  Doc: "Follow the Leader...was released on August 18, 1998"
  → Contains the exact release date

IRRELEVANT examples:
- Q: "where does the story the great gatsby take place" | Answers: ['Long Island of 1922']
  Doc: "While Long Island features prominently in American literature, the socioeconomic \
dynamics..."
  → Mentions Long Island but not as the story's setting
- Q: "who played bobby byrd in get on up" | Answers: ['Nelsan Ellis']
  Doc: "Critics praised the casting of Bobby Byrd and the chemistry between the main \
characters..."
  → Discusses casting but doesn't name the specific actor

Evaluation steps:
1. Find the specific information needed to match an acceptable answer. Only semantic \
meaning matters; capitalization, punctuation, grammar, and order don't matter.
2. Check if the document contains this information directly or through clear inference
3. Check for these common errors:
   - The document contains similar keywords/themes but not the actual answer
   - The document contains partial information that would need to be combined with \
external knowledge
   - The document discusses related topics but doesn't specifically answer the question

Here is a new example. Don't apologize or correct yourself if there was a mistake; we \
are just trying to evaluate the relevance of the document.
```
Question: {question}
Acceptable answers list: {answers}
Document: {document}
```

Evaluate the document for this new question as one of:
A: RELEVANT
B: IRRELEVANT

Return a JSON object with the following format:
{{
  "motivation": "Brief explanation (max 2 sentences)",
  "grade": "A" or "B"
}}"""


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """What a relevance judge said: ``relevant`` and its ``motivation`` (may be empty)."""

    relevant: bool
    motivation: str = ""


_GRADE_RE = re.compile(r"""["']?grade["']?\s*:\s*["']?\s*([AB])\b""", re.IGNORECASE)
_MOTIVATION_RE = re.compile(r'"motivation"\s*:\s*"((?:[^"\\]|\\.)*)"', re.DOTALL)


def parse_judge_reply(text: str) -> JudgeReply | None:
    """Read the grade from a judge's reply, or ``None`` when it has none.

    Takes the first JSON object with a ``grade`` of ``"A"`` or ``"B"`` (code fences and
    text around it are fine); falls back to a ``grade: A`` pattern for almost-JSON.
    """
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            grade = obj.get("grade")
            if isinstance(grade, str) and grade.strip().upper() in {"A", "B"}:
                motivation = obj.get("motivation")
                return JudgeReply(
                    grade.strip().upper() == "A",
                    motivation if isinstance(motivation, str) else "",
                )
    found = _GRADE_RE.search(text)
    if found is None:
        return None
    why = _MOTIVATION_RE.search(text)
    return JudgeReply(found.group(1).upper() == "A", why.group(1) if why else "")


class RelevanceJudge:
    """Grades a passage RELEVANT or IRRELEVANT for a question with an LLM.

    The prompt is the UDCG paper's Figure 5 (the question, its acceptable answers, the
    passage); the paper used Claude 3.7 Sonnet and found Llama-3.3-70B-Instruct a good
    open alternative: use a strong model.

    Args:
        generator: the model (``TransformersGenerator``, ``EndpointGenerator``,
            ``ChatGenerator`` or your own ``TextGenerator``).
    """

    def __init__(self, generator: TextGenerator) -> None:
        self.generator = generator

    @property
    def model_id(self) -> str:
        """The judge model's name."""
        return self.generator.model_id

    def settings(self) -> Mapping[str, object]:
        """The judge's model settings and the prompt's hash."""
        digest = hashlib.sha256(RELEVANCE_PROMPT.encode("utf-8")).hexdigest()[:12]
        return {"judge": dict(self.generator.settings()), "prompt": digest}

    def judge(
        self, items: Sequence[tuple[str, Sequence[str], str]]
    ) -> Iterator[tuple[int, JudgeReply | None]]:
        """``(index, reply)`` for each ``(question, answers, passage)``; ``None`` when
        the reply holds no grade."""
        fill = RELEVANCE_PROMPT.format  # the answers as a Python-style list
        prompts = [fill(question=q, answers=list(a), document=p) for q, a, p in items]
        for i, text in self.generator.generate(prompts):
            yield i, parse_judge_reply(text)
