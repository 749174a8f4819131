"""An answerer over annotate's text generators (an OpenAI-compatible endpoint,
transformers, a GGUF file, a LangChain chat model): each passage's short answer for the
answerer stage ([`AnswerStage`][ragguard.AnswerStage]), asked with a short-answer prompt."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragguard.calibration.annotate._base import TextGenerator
from ragguard.errors import AnnotationError

ANSWER_PROMPT = (
    "Answer the question from the passage below in at most 5 words (a name, a number, a "
    "date or a short phrase), or reply 'none' if the passage does not answer it. Reply "
    "with the answer only.\n\nQuestion: {question}\n\nPassage: {passage}"
)
PASSAGE_CHARS = 4000
"""A longer passage is cut to its first ``PASSAGE_CHARS`` characters in the prompt."""
MAX_WORDS = 10
"""A longer reply keeps its first ``MAX_WORDS`` words."""
_PREFIX = re.compile(r"^[\s\"'`*_-]*(?:(?:the\s+)?answer(?:\s*:|\s+is\b:?)\s*)?", re.IGNORECASE)
_NONE = re.compile(
    r"^(?:none|no answer|no-response|n/a|unknown|not (?:stated|given|mentioned|known)"
    r"|the (?:passage|text|document) does not)\b",
    re.IGNORECASE,
)


def parse_answer(reply: str) -> str | None:
    """The short answer in a model's reply: its first line with text, a leading
    ``Answer:`` and surrounding quotes, asterisks and final stop taken off, at most
    ``MAX_WORDS`` words; ``None`` when it says there is none (``none``, ``unknown``,
    ``not mentioned``, ``the passage does not ...``) or is empty."""
    line = next((ln for ln in reply.splitlines() if ln.strip()), "")
    answer = " ".join(_PREFIX.sub("", line.strip()).split()[:MAX_WORDS])
    answer = answer.strip("\"'`*").rstrip(".").strip("\"'`* ")
    if not answer or _NONE.match(answer):
        return None
    return answer


class LLMAnswerer:
    """An [`Answerer`][ragguard.Answerer] over a text generator: one prompt per passage
    (the passage cut to ``PASSAGE_CHARS``), each reply read by ``parse_answer``.

    Args:
        generator: a ``TextGenerator``: ``EndpointGenerator`` (an OpenAI-compatible
            endpoint), ``TransformersGenerator`` (a local model, a ``.gguf`` file
            included) or ``ChatGenerator`` (a LangChain chat model); give it a short
            reply length (``max_tokens=16`` / ``max_new_tokens=16``).
        prompt: the prompt, with ``{question}`` and ``{passage}``.

    Raises:
        AnnotationError: ``generator`` is not a text generator, or ``prompt`` lacks a
            field or holds another one.
    """

    def __init__(self, generator: TextGenerator, *, prompt: str = ANSWER_PROMPT) -> None:
        if not isinstance(generator, TextGenerator):
            raise AnnotationError(
                f"generator must be a text generator (EndpointGenerator, "
                f"TransformersGenerator, ChatGenerator), got {type(generator).__name__}"
            )
        if not isinstance(prompt, str) or not {"{question}", "{passage}"} <= set(
            re.findall(r"\{\w*\}", prompt)
        ):
            raise AnnotationError(
                f"prompt must be a str with {{question}} and {{passage}}, got {prompt!r:.80}"
            )
        try:
            prompt.format(question="", passage="")
        except (KeyError, IndexError, ValueError) as exc:
            raise AnnotationError(
                f"prompt holds a field other than {{question}} and {{passage}} ({exc!r}); "
                "write a literal brace twice ({{ }})"
            ) from None
        self.generator = generator
        self.prompt = prompt
        #: the name the answerer stage's messages use
        self.model_name = generator.model_id

    def __call__(self, query: str, texts: Sequence[str], /) -> list[str | None]:
        """Each passage's short answer to ``query`` (``None``: it gives none)."""
        prompts = [self.prompt.format(question=query, passage=t[:PASSAGE_CHARS]) for t in texts]
        replies = dict(self.generator.generate(prompts))
        return [parse_answer(replies.get(i, "")) for i in range(len(texts))]

    def __repr__(self) -> str:
        return f"LLMAnswerer({self.model_name!r})"
