"""The relevance judge: the paper's Figure 5 prompt, for passages without labels."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ragguard.calibration.annotate._base import TextGenerator
from ragguard.calibration.annotate._prompts import (
    RELEVANCE_PROMPT,
    JudgeReply,
    parse_judge_reply,
    relevance_prompt,
)

__all__ = ["RelevanceJudge"]


class RelevanceJudge:
    """Grades a passage RELEVANT or IRRELEVANT for a question with an LLM.

    The prompt is the UDCG paper's Figure 5: the question, its acceptable answers and
    the passage; the model returns ``{"motivation": ..., "grade": "A" | "B"}``. The
    paper used Claude 3.7 Sonnet and reports Llama-3.3-70B-Instruct as an open
    alternative (Cohen's kappa 0.85 with Claude, its Appendix B): use a strong model.
    The reference answers matter: without them the judge must guess what would answer.

    Args:
        generator: the model (``TransformersGenerator``,
            ``EndpointGenerator``, ``ChatGenerator`` or your own
            ``TextGenerator``).
    """

    def __init__(self, generator: TextGenerator) -> None:
        self.generator = generator

    @property
    def model_id(self) -> str:
        """The judge model's name."""
        return self.generator.model_id

    def settings(self) -> Mapping[str, object]:
        """The judge's model settings and the prompt's hash."""
        import hashlib

        digest = hashlib.sha256(RELEVANCE_PROMPT.encode("utf-8")).hexdigest()[:12]
        return {"judge": dict(self.generator.settings()), "prompt": digest}

    def judge(
        self, items: Sequence[tuple[str, Sequence[str], str]]
    ) -> Iterator[tuple[int, JudgeReply | None]]:
        """``(index, reply)`` for each ``(question, answers, passage)``; ``None`` when
        the reply holds no grade."""
        prompts = [relevance_prompt(q, list(a), p) for q, a, p in items]
        for i, text in self.generator.generate(prompts):
            yield i, parse_judge_reply(text)
