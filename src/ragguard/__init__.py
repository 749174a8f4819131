"""ragguard: decide which retrieved passages reach an LLM.

The public API is flat::

    from ragguard import ContextGuard, GuardConfig, Candidate

Adapters for LangChain and LlamaIndex live in ``ragguard.adapters`` and are imported on
purpose; calibration lives in ``ragguard.calibration``.
"""

from ragguard._version import __version__
from ragguard.answers import Answerer, AnswerStage
from ragguard.candidate import Candidate, Decision, RerankDetail, Selection, Verdict
from ragguard.config import (
    BeyondTopN,
    DuplicatePolicy,
    GuardConfig,
    InvalidScorePolicy,
    RerankConfig,
    RerankFailure,
)
from ragguard.conflicts import Conflict, ConflictMember
from ragguard.drift import DriftReport, ScoreReference
from ragguard.errors import (
    AnnotationError,
    AnswerWarning,
    ArgumentTypeError,
    CandidateError,
    ConfigError,
    ConfigWarning,
    CorpusError,
    DriftWarning,
    DuplicateIdError,
    EndpointError,
    EvalSetError,
    InvalidScoreError,
    MissingDependencyError,
    RagguardError,
    RagguardWarning,
    RerankError,
    RerankModelError,
    RerankWarning,
    RetrieverError,
    ScoreCacheError,
    ScoreWarning,
    SelectionLogError,
)
from ragguard.guard import ContextGuard
from ragguard.policy import ConflictDetector, ConflictMode, CutRule, Reason, UtilityCut
from ragguard.probability import ProbabilityMap
from ragguard.profiles import BUILTIN_PROFILES, Profile
from ragguard.rerank import (
    CrossEncoderReranker,
    Reranker,
    RerankOutcome,
    load_reranker,
    register_reranker,
    registered_reranker,
    unregister_reranker,
)
from ragguard.scores import ScoreKind

__all__ = [
    "BUILTIN_PROFILES",
    "AnnotationError",
    "AnswerStage",
    "AnswerWarning",
    "Answerer",
    "ArgumentTypeError",
    "BeyondTopN",
    "Candidate",
    "CandidateError",
    "ConfigError",
    "ConfigWarning",
    "Conflict",
    "ConflictDetector",
    "ConflictMember",
    "ConflictMode",
    "ContextGuard",
    "CorpusError",
    "CrossEncoderReranker",
    "CutRule",
    "Decision",
    "DriftReport",
    "DriftWarning",
    "DuplicateIdError",
    "DuplicatePolicy",
    "EndpointError",
    "EvalSetError",
    "GuardConfig",
    "InvalidScoreError",
    "InvalidScorePolicy",
    "MissingDependencyError",
    "ProbabilityMap",
    "Profile",
    "RagguardError",
    "RagguardWarning",
    "Reason",
    "RerankConfig",
    "RerankDetail",
    "RerankError",
    "RerankFailure",
    "RerankModelError",
    "RerankOutcome",
    "RerankWarning",
    "Reranker",
    "RetrieverError",
    "ScoreCacheError",
    "ScoreKind",
    "ScoreReference",
    "ScoreWarning",
    "Selection",
    "SelectionLogError",
    "UtilityCut",
    "Verdict",
    "__version__",
    "load_reranker",
    "register_reranker",
    "registered_reranker",
    "unregister_reranker",
]
