"""Exceptions and warnings raised by ragguard.

Every error ragguard raises on purpose derives from [`RagguardError`][ragguard.RagguardError], so
one ``except RagguardError`` catches them all. Each also derives from the built-in class a
caller would expect (``ValueError`` for bad values, ``TypeError`` for wrong types,
``ImportError`` for a missing optional dependency)::

    RagguardError
    ├── ConfigError              (ValueError)  invalid config value, file, key or profile,
    │                                          or an invalid setting passed to a function
    ├── ArgumentTypeError        (TypeError)   an argument of the wrong type (a list where a
    │                                          mapping of query ids belongs, ...)
    ├── CandidateError           (TypeError)   input that is not a list of Candidates
    ├── InvalidScoreError        (ValueError)  missing/NaN/inf score with invalid_scores="raise"
    ├── DuplicateIdError         (ValueError)  repeated candidate id with duplicates="raise"
    ├── EvalSetError             (ValueError)  malformed evaluation data (file, line, field)
    ├── RetrieverError           (ValueError)  a retriever factory that cannot be imported,
    │                                          fails, or returns no retriever
    ├── AnnotationError          (ValueError)  annotation cannot run on this data or settings
    ├── SelectionLogError        (ValueError)  a log for ragguard drift holds no usable span
    ├── EndpointError            (RuntimeError) an LLM endpoint failed (no logprobs, HTTP)
    ├── MissingDependencyError   (ImportError) an optional extra is not installed
    ├── ScoreCacheError          (OSError)     calibration's rerank score cache (SQLite) is
    │                                          corrupt, locked or cannot be written
    └── RerankError              (RuntimeError) the rerank stage failed, on_failure="fail_closed"
        └── RerankModelError                    the cross-encoder model cannot be loaded

    RagguardWarning (UserWarning)
    ├── ConfigWarning            an unknown RAGGUARD_* variable, a config from a newer ragguard
    ├── ScoreWarning             scores contradict their declared kind, or no kind is known
    ├── RerankWarning            the rerank stage failed and the guard fell back (fail_open)
    ├── AnswerWarning            the answerer stage failed; the selection has no answers
    └── DriftWarning             the monitor found the scores no longer look like calibration's

Warnings are issued with ``warnings.warn`` (once per guard and problem), never
printed; library code logs through ``logging.getLogger(__name__)``.
"""

from __future__ import annotations

__all__ = [
    "AnnotationError",
    "AnswerWarning",
    "ArgumentTypeError",
    "CandidateError",
    "ConfigError",
    "ConfigWarning",
    "CorpusError",
    "DriftWarning",
    "DuplicateIdError",
    "EndpointError",
    "EvalSetError",
    "InvalidScoreError",
    "MissingDependencyError",
    "RagguardError",
    "RagguardWarning",
    "RerankError",
    "RerankModelError",
    "RerankWarning",
    "RetrieverError",
    "ScoreCacheError",
    "ScoreWarning",
    "SelectionLogError",
]


class RagguardError(Exception):
    """Base class of every error ragguard raises on purpose."""


class ConfigError(RagguardError, ValueError):
    """A config value, config file, config key or profile is invalid or unknown, or a
    setting passed to a function is (a metric name, a sweep grid, a constraint)."""


class ArgumentTypeError(RagguardError, TypeError):
    """An argument has the wrong type: a list where a mapping of query ids belongs, an
    EvalSet where qrels are expected, and the like. The message names what was expected."""


class CandidateError(RagguardError, TypeError):
    """The input to the guard is not a sequence of well-formed Candidates."""


class InvalidScoreError(RagguardError, ValueError):
    """A candidate's score is missing, NaN or infinite and ``invalid_scores="raise"``."""


class DuplicateIdError(RagguardError, ValueError):
    """Two candidates share an id and ``duplicates="raise"``."""


class EvalSetError(RagguardError, ValueError):
    """Evaluation data (an eval set, qrels or a run) is malformed or inconsistent.

    The message starts with where the problem is (``path:line``, then the field) when
    that is known; the same parts are available as ``path``, ``line`` and
    ``field`` (each ``None`` when unknown).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        where = path or ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        parts = [p for p in (where, f"field {field!r}" if field else "") if p]
        super().__init__(f"{', '.join(parts)}: {message}" if parts else message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_evalset_error, (self.detail, self.path, self.line, self.field))


def _rebuild_evalset_error(
    message: str, path: str | None, line: int | None, field: str | None
) -> EvalSetError:
    return EvalSetError(message, path=path, line=line, field=field)


class CorpusError(RagguardError, ValueError):
    """A corpus ``ragguard synth`` reads is missing, empty, binary, too small or has a
    passage too long to ask a question of. The message names the path or passage."""


class RetrieverError(RagguardError, ValueError):
    """A retriever factory (``module:function``) cannot be imported or called, or what it
    returns is not a LangChain or LlamaIndex retriever, or retrieval fails."""


class AnnotationError(RagguardError, ValueError):
    """Utility annotation cannot run on this data or with these settings: a passage or a
    query without text, unjudged passages with no judge, an unusable model reply."""


class EndpointError(RagguardError, RuntimeError):
    """An LLM endpoint failed: it returned no logprobs, a non-transient HTTP error, or
    transient errors until the retries ran out. The message names the URL and model."""


class MissingDependencyError(RagguardError, ImportError):
    """A feature needs an optional dependency (an extra) that is not installed."""


class ScoreCacheError(RagguardError, OSError):
    """The rerank score cache of calibration (one SQLite file per model, see
    ``ragguard.calibration.fit.rerank_scores``) cannot be used: the file is corrupt,
    truncated, unreadable or locked by another process past the wait, or its folder cannot
    be created or written. The message names the file or folder and the way out."""


class RerankError(RagguardError, RuntimeError):
    """The rerank stage failed (the reranker raised, ran past ``rerank.timeout_ms``,
    returned the wrong number of scores, or a score that is NaN or infinite) and
    ``rerank.on_failure="fail_closed"``; or, in calibration, every rerank call failed.

    The original exception, if any, is the ``__cause__``.
    """


class RerankModelError(RerankError):
    """The cross-encoder model cannot be loaded (unknown name, bad path, not a relevance
    model, outputs of unknown kind). Raised when the guard is built, whatever
    ``rerank.on_failure`` says: a model that never loads is a configuration error, not a
    transient failure."""


class SelectionLogError(RagguardError, ValueError):
    """A selection log given to ``ragguard drift`` is empty, holds no ``ragguard.select``
    span, or none of its spans records the scores the drift watch reads."""


class RagguardWarning(UserWarning):
    """Base class of ragguard's warnings."""


class ConfigWarning(RagguardWarning):
    """The config may not say what its author meant: an environment variable named
    ``RAGGUARD_*`` that is no config key (the message names the closest one), a file
    written by a newer ragguard than the one reading it, or a setting the guard could not
    apply in full (``conflict_prefer`` values that cannot be compared, more kept passages
    than the conflict stage compares, a query the answers detector cannot type)."""


class ScoreWarning(RagguardWarning):
    """Scores contradict their declared kind, or their kind is unknown.

    The message names the config field to change and what the guard did instead.
    """


class RerankWarning(RagguardWarning):
    """The rerank stage failed and ``rerank.on_failure="fail_open"``: the selection was
    made on retrieval scores instead. The message names the cause."""


class AnswerWarning(RagguardWarning):
    """The answerer stage ([`AnswerStage`][ragguard.AnswerStage]) failed: the answerer
    raised, ran past its time limit or returned something else than one answer per
    passage, and the selection went on without answers. The message names the cause."""


class DriftWarning(RagguardWarning):
    """The drift watch (``GuardConfig.monitor``) found that the guard's recent scores no
    longer look like those of the calibration queries: issued once per guard, at the
    alarm; [`ContextGuard.drift`][ragguard.ContextGuard.drift] says which quantity moved."""
