"""What both framework adapters share: copies of metadata, the decision and event
payloads, and turning bad adapter options into [`ConfigError`][ragguard.ConfigError].

Every adapter hands the caller the selection's verdict (``answerable``,
``insufficient``, ``conflict``) and its conflict groups the same way: in the decision
metadata of each kept document (``verdict``; ``conflicts``, a line per group the document
belongs to, [`describe`][ragguard.Conflict.describe]) and in the selection event
(``verdict``; ``conflicts``, one entry per group), which is sent even when nothing is
kept."""

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

__all__ = [
    "METADATA_KEY",
    "SELECTION_EVENT",
    "adapter_options",
    "call_k",
    "check_guard",
    "code_reranker",
    "conflict_lines",
    "conflicts_payload",
    "copy_metadata",
    "decision_metadata",
    "event_payload",
    "parse_score_kind",
    "restore_reranker",
]

METADATA_KEY = "ragguard"
"""Default metadata key under which kept documents / nodes carry the guard's decision."""

SELECTION_EVENT = "ragguard_selection"
"""Name of the custom callback event (LangChain) carrying every selection."""


def decision_metadata(selection: Selection, decision: Decision) -> dict[str, Any]:
    """The guard's decision about one candidate, as plain JSON-friendly values, with the
    selection's verdict and a line per conflict group the candidate belongs to."""
    return {
        "kept": decision.kept,
        "rank": decision.rank,
        "score": decision.candidate.score,
        "normalized_score": decision.normalized_score,
        "score_kind": None if selection.score_kind is None else selection.score_kind.value,
        "retrieval_score": decision.retrieval_score,
        "rerank_score": decision.rerank_score,
        "reason": None if decision.reason is None else decision.reason.value,
        "message": decision.message,
        "verdict": selection.verdict.value,
        "conflicts": conflict_lines(selection, decision.index),
    }


def conflict_lines(selection: Selection, position: int | None = None) -> list[str]:
    """One line per conflict group of ``selection``
    ([`describe`][ragguard.Conflict.describe]): every group, or only those the
    candidate at input ``position`` belongs to."""
    return [
        group.describe()
        for group in selection.conflicts
        if position is None or any(m.position == position for m in group.members)
    ]


def conflicts_payload(selection: Selection) -> list[dict[str, Any]]:
    """The conflict groups of ``selection`` as plain values: per group the member ids
    (best-ranked first), the spans of each member that differ, which members were kept,
    and the line [`describe`][ragguard.Conflict.describe] gives."""
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
    """A summary of a selection for callback / instrumentation channels: the kept ids,
    per drop its id, reason, message and the id it repeats (a duplicate) or the ids it
    conflicts with, the verdict and the conflict groups."""
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
    """A copy of ``metadata`` with the decision added under ``key``.

    Values are deep-copied, so editing the copy never changes the caller's document. A
    value that cannot be deep-copied (a ``threading.Lock``, a client object) is kept by
    reference: the copy and the original share that one object, while the dicts, lists
    and tuples around it are still copied.
    """
    out = dict(metadata)
    if not all(type(v) in _ATOMS for v in out.values()):  # atoms need no copy
        out = _copy(out)
    out[key] = decision_metadata(selection, decision)
    return out


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy(value: Any) -> Any:
    """A deep copy of ``value``; what cannot be deep-copied is kept by reference, inside
    copies of the plain containers that hold it."""
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
    """``value`` as a [`ScoreKind`][ragguard.ScoreKind] (``None`` stays ``None``).

    Raises:
        ConfigError: ``value`` names no score kind.
    """
    if value is None or isinstance(value, ScoreKind):
        return value
    if isinstance(value, str) and value in {kind.value for kind in ScoreKind}:
        return ScoreKind(value)
    choices = ", ".join(kind.value for kind in ScoreKind)
    raise ConfigError(f"{owner}: score_kind={value!r} is not one of {choices}")


def call_k(k: object, name: str = "k") -> int | None:
    """The ``k`` of one call (``invoke(query, k=3)``), checked; ``name`` is what the
    framework calls it (Haystack: ``top_k``).

    Raises:
        ConfigError: ``k`` is not a whole number >= 1 (``True`` is not a number here).
    """
    if k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        return k
    raise ConfigError(f"{name} must be a whole number >= 1 (or None), got {k!r}")


@contextmanager
def adapter_options(model: type[BaseModel]) -> Iterator[None]:
    """Turn the ``ValidationError`` of an adapter's options into one
    [`ConfigError`][ragguard.ConfigError] naming each bad option and what is allowed."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(validation_problems(model, exc, noun="option")) from exc


def check_guard(guard: object, owner: str) -> None:
    """Raise [`ConfigError`][ragguard.ConfigError] unless ``guard`` is a ContextGuard."""
    if not isinstance(guard, ContextGuard):
        raise ConfigError(f"{owner}: guard must be a ContextGuard, got {type(guard).__name__}")


def code_reranker(guard: ContextGuard) -> str | None:
    """The name a saved guard gives its reranker when it is code that a saved config
    cannot rebuild: the name it is registered under
    ([`register_reranker`][ragguard.register_reranker]), else its human name; ``None`` when the
    stage is off or runs the cross-encoder ``config.rerank`` describes."""
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
    """The reranker a saved guard names, from the registry only: nothing a saved
    pipeline names is ever imported.

    Args:
        name: the name the saved data holds.
        owner: the component, for the message.
        hand_back: the other way to restore it, for the message.

    Raises:
        ConfigError: no reranker is registered under ``name``.
    """
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
    """The guard a saved component describes: its ``guard_config`` and, when the saved
    data names one (``name``), its reranker from the registry (``restore_reranker``).

    Args:
        config: the saved ``guard_config``.
        name: the reranker's saved name, ``None`` when there is none to restore.
        owner: the component, for the messages; ``method``: the guard method that builds
            one; ``hand_back``: the other way to restore the reranker.
        reranker: the reranker handed back by the caller (then ``name`` is not read).

    Raises:
        ConfigError: there is no ``guard_config``; no reranker is registered under
            ``name``.
    """
    if not isinstance(config, dict) or not config:
        raise ConfigError(
            f"{owner} needs a guard: {owner}(guard), guard.{method}(), or from_dict() on "
            "what to_dict() wrote (with its guard_config)"
        )
    if reranker is None and name is not None:
        reranker = restore_reranker(name, owner, hand_back)
    return ContextGuard(GuardConfig(**config), reranker=reranker)
