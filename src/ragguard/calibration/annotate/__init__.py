"""Measure passage utility with an LLM, as the UDCG paper does (the guide:
``docs/guides/annotate.md``): the LLM reads the question with one passage alone under its
abstention prompt (Figure 4), and ``u(q, p) = R(q, p) * (1 - p_LLM(NO-RESPONSE | q, p))``,
``R = +1`` if relevant, else -1 (a distractor that makes it answer anyway scores near -1).

::

    from ragguard.calibration.annotate import Outputs, TransformersEstimator, annotate

    est = TransformersEstimator("Qwen/Qwen2.5-7B-Instruct", device="cuda", dtype="bfloat16")
    annotate("eval.jsonl", est, outputs=Outputs(out="utilities.jsonl", udcg_out="utilities.json"))

Backends (each an ``AbstentionEstimator``):

* ``TransformersEstimator``: a local causal LM, one forward pass per pair, the
  first-token probability of the abstention (the ``annotate`` extra);
  ``TransformersEstimator.from_gguf`` loads GGUF files (the ``gguf`` extra);
* ``OpenAIEndpointEstimator``: an OpenAI-compatible server that returns logprobs,
  e.g. vLLM (the ``endpoint`` extra);
* ``SamplingEstimator``: any LangChain chat model, by sampling ``n`` answers
  (the ``langchain`` extra).

Relevance comes from the labels; candidates without one are judged by a
``RelevanceJudge`` (the paper's Figure 5 prompt) and marked as judged, or counted
irrelevant, or skipped. Everything is appended to a progress file as it is computed, so
an interrupted run resumes where it stopped.
"""

from ragguard.calibration.annotate._base import AbstentionEstimator, Pair, TextGenerator
from ragguard.calibration.annotate._endpoint import (
    ClientOptions,
    EndpointGenerator,
    OpenAIEndpointEstimator,
    redact,
)
from ragguard.calibration.annotate._judge import RelevanceJudge
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    RELEVANCE_PROMPT,
    AbstentionPrompt,
    JudgeReply,
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
    "parse_judge_reply",
    "redact",
    "settings_key",
]
