"""Passage utility measured with an LLM, as the UDCG paper does: ``u(q, p) = R(q, p) *
(1 - p_LLM(NO-RESPONSE | q, p))``, with ``R = +1`` if relevant, else -1. The backends,
relevance and resumable runs: ``docs/guides/annotate.md``. ``LLMAnswerer`` puts the same
backends behind the runtime's answerer stage."""

from ragguard.calibration.annotate._answerer import ANSWER_PROMPT, LLMAnswerer, parse_answer
from ragguard.calibration.annotate._base import AbstentionEstimator, Pair, TextGenerator
from ragguard.calibration.annotate._endpoint import (
    ClientOptions,
    EndpointGenerator,
    OpenAIEndpointEstimator,
    redact,
)
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    RELEVANCE_PROMPT,
    AbstentionPrompt,
    JudgeReply,
    RelevanceJudge,
    is_abstention,
    is_abstention_start,
    parse_judge_reply,
)
from ragguard.calibration.annotate._run import (
    AnnotationSummary,
    Annotator,
    Outputs,
    Progress,
    Relevance,
    Unjudged,
    annotate,
)
from ragguard.calibration.annotate._sampling import ChatGenerator, SamplingEstimator
from ragguard.calibration.annotate._store import ProgressStore, pair_hash, settings_key
from ragguard.calibration.annotate._transformers import (
    TransformersEstimator,
    TransformersGenerator,
    abstention_token_ids,
)
from ragguard.errors import AnnotationError, EndpointError

__all__ = [
    "ABSTENTION_PROMPT",
    "ANSWER_PROMPT",
    "RELEVANCE_PROMPT",
    "AbstentionEstimator",
    "AbstentionPrompt",
    "AnnotationError",
    "AnnotationSummary",
    "Annotator",
    "ChatGenerator",
    "ClientOptions",
    "EndpointError",
    "EndpointGenerator",
    "JudgeReply",
    "LLMAnswerer",
    "OpenAIEndpointEstimator",
    "Outputs",
    "Pair",
    "Progress",
    "ProgressStore",
    "Relevance",
    "RelevanceJudge",
    "SamplingEstimator",
    "TextGenerator",
    "TransformersEstimator",
    "TransformersGenerator",
    "Unjudged",
    "abstention_token_ids",
    "annotate",
    "is_abstention",
    "is_abstention_start",
    "pair_hash",
    "parse_answer",
    "parse_judge_reply",
    "redact",
    "settings_key",
]
