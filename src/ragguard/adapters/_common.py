"""What the framework adapters share: metadata copies, the decision and event payloads
(built only for a listener), and bad adapter options as
[`ConfigError`][ragguard.ConfigError]."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ValidationError

from ragguard import ContextGuard
from ragguard._fields import validation_problems
from ragguard.candidate import Decision, Selection
from ragguard.config import GuardConfig
from ragguard.errors import ConfigError
from ragguard.rerank import (
    CrossEncoderReranker,
    Reranker,
    registered_name,
    registered_reranker,
    reranker_name,
)
from ragguard.scores import ScoreKind

METADATA_KEY = "ragguard"
"""Default metadata key under which kept documents / nodes carry the guard's decision."""

SELECTION_EVENT = "ragguard_selection"
"""Name of the custom callback event (LangChain) carrying every selection."""


def decision_metadata(selection: Selection, decision: Decision) -> dict[str, Any]:
    """The decision about one candidate as JSON values, with the verdict and its conflicts."""
    rerank = decision.rerank  # read here, not through Decision's properties: once per document
    return {
        "kept": decision.kept,
        "rank": decision.rank,
        "score": decision.candidate.score,
        "normalized_score": decision.normalized_score,
        "score_kind": None if selection.score_kind is None else selection.score_kind.value,
        "retrieval_score": decision.normalized_score if rerank is None else rerank.retrieval_score,
        "rerank_score": None if rerank is None else rerank.score,
        "reason": None if decision.reason is None else decision.reason.value,
        "message": decision.message,
        "verdict": selection.verdict.value,
        "conflicts": conflict_lines(selection, decision.index) if selection.conflicts else [],
    }


def conflict_lines(selection: Selection, position: int | None = None) -> list[str]:
    """A line per conflict group: every one, or those of the candidate at ``position``."""
    return [
        group.describe()
        for group in selection.conflicts
        if position is None or any(m.position == position for m in group.members)
    ]


def conflicts_payload(selection: Selection) -> list[dict[str, Any]]:
    """The conflict groups as JSON values: member ids, spans, kept flags and a line."""
    return [
        {
            "ids": list(group.ids),
            "spans": [list(m.spans) for m in group.members],
            "kept": [m.kept for m in group.members],
            "description": group.describe(),
        }
        for group in selection.conflicts
    ]


def event_payload(selection: Selection) -> dict[str, Any]:
    """The selection event: kept ids, each drop, warnings, verdict and conflict groups."""
    return {
        "query": selection.query,
        "kept": [c.id for c in selection.kept],
        "dropped": [
            {
                "id": d.candidate.id,
                "reason": d.reason.value if d.reason else None,
                "message": d.message,
                "duplicate_of": d.duplicate_of,
                "conflict_with": list(d.conflict_with),
            }
            for d in selection.dropped
        ],
        "warnings": list(selection.warnings),
        "verdict": selection.verdict.value,
        "conflicts": conflicts_payload(selection),
    }


def copy_metadata(
    metadata: Mapping[str, Any], key: str, selection: Selection, decision: Decision
) -> dict[str, Any]:
    """A deep copy of ``metadata`` with the decision under ``key``; a lock, a client is shared."""
    out = dict(metadata)
    if not all(type(v) in _ATOMS for v in out.values()):  # atoms need no copy
        out = _copy(out)
    out[key] = decision_metadata(selection, decision)
    return out


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy(value: Any) -> Any:
    """A deep copy of ``value``, sharing only what cannot be deep-copied."""
    try:
        return copy.deepcopy(value)
    except Exception:  # whatever a __deepcopy__ / __reduce__ raises: not copyable
        pass
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    if type(value) is tuple:
        return tuple(_copy(v) for v in value)
    return value


def parse_score_kind(value: object, owner: str) -> ScoreKind | None:
    """``value`` as a ScoreKind (``None`` stays ``None``); ConfigError when it names none."""
    if value is None or isinstance(value, ScoreKind):
        return value
    if isinstance(value, str) and value in {kind.value for kind in ScoreKind}:
        return ScoreKind(value)
    choices = ", ".join(kind.value for kind in ScoreKind)
    raise ConfigError(f"{owner}: score_kind={value!r} is not one of {choices}")


def call_k(k: object, name: str = "k") -> int | None:
    """The ``k`` of one call, a whole number >= 1 or ``None``; ``name``: the framework's."""
    if k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        return k
    raise ConfigError(f"{name} must be a whole number >= 1 (or None), got {k!r}")


def call_domain(domain: object) -> str | None:
    """The ``domain`` option or input of an adapter, a str or ``None``."""
    if domain is None or isinstance(domain, str):
        return domain
    raise ConfigError(f"domain must be a str naming a [domains.NAME] table, got {domain!r}")


@contextmanager
def adapter_options(model: type[BaseModel]) -> Iterator[None]:
    """An adapter options' ``ValidationError`` as one ConfigError naming each bad option."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(validation_problems(model, exc, noun="option")) from exc


def check_guard(guard: object, owner: str) -> None:
    """ConfigError unless ``guard`` is a ContextGuard."""
    if not isinstance(guard, ContextGuard):
        raise ConfigError(f"{owner}: guard must be a ContextGuard, got {type(guard).__name__}")


def code_reranker(guard: ContextGuard) -> str | None:
    """The saved name of a reranker a saved config cannot rebuild (``None``: it can)."""
    reranker = guard.reranker
    if reranker is None:
        return None
    if type(reranker) is CrossEncoderReranker:
        rerank = guard.config.rerank
        described = (rerank.model, rerank.device, rerank.batch_size, rerank.max_length)
        actual = (reranker.model_name, reranker.device, reranker.batch_size, reranker.max_length)
        same_kind = getattr(reranker, "_explicit_kind", None) == rerank.score_kind
        if actual == described and same_kind and not getattr(reranker, "_model_kwargs", True):
            return None
    return registered_name(reranker) or reranker_name(reranker)


def restore_reranker(name: object, owner: str, hand_back: str) -> Reranker:
    """The reranker registered under the saved ``name`` (saved data never imports code)."""
    reranker = registered_reranker(name) if isinstance(name, str) else None
    if reranker is None:
        raise ConfigError(
            f"this {owner} was saved with the reranker {name!r}, which is not registered "
            "(ragguard never imports a reranker that saved data names); register it in "
            f"your code before loading, ragguard.register_reranker(your_reranker, "
            f"name={name!r}), or {hand_back}"
        )
    return reranker


def saved_guard(
    config: object,
    name: object,
    owner: str,
    method: str,
    hand_back: str,
    reranker: Reranker | None = None,
) -> ContextGuard:
    """The guard a saved component describes; ConfigError without its ``guard_config``."""
    if not isinstance(config, dict) or not config:
        raise ConfigError(
            f"{owner} needs a guard: {owner}(guard), guard.{method}(), or from_dict() on "
            "what to_dict() wrote (with its guard_config)"
        )
    if reranker is None and name is not None:
        reranker = restore_reranker(name, owner, hand_back)
    return ContextGuard(GuardConfig(**config), reranker=reranker)
