"""What both framework adapters share: the namespaced metadata and event payloads."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ragguard.candidate import Decision, Selection

__all__ = ["METADATA_KEY", "SELECTION_EVENT", "copy_metadata", "decision_metadata", "event_payload"]

METADATA_KEY = "ragguard"
"""Default metadata key under which kept documents / nodes carry the guard's decision."""

SELECTION_EVENT = "ragguard_selection"
"""Name of the custom callback event (LangChain) carrying every selection."""


def decision_metadata(selection: Selection, decision: Decision) -> dict[str, Any]:
    """The guard's decision about one candidate, as plain JSON-friendly values."""
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
    }


def event_payload(selection: Selection) -> dict[str, Any]:
    """A summary of a selection for callback / instrumentation channels."""
    return {
        "query": selection.query,
        "kept": [c.id for c in selection.kept],
        "dropped": [
            {"id": d.candidate.id, "reason": d.reason.value if d.reason else None,
             "message": d.message}
            for d in selection.dropped
        ],
        "warnings": list(selection.warnings),
    }  # fmt: skip


def copy_metadata(
    metadata: Mapping[str, Any], key: str, selection: Selection, decision: Decision
) -> dict[str, Any]:
    """A deep copy of ``metadata`` with the decision added under ``key``."""
    out = copy.deepcopy(dict(metadata))
    out[key] = decision_metadata(selection, decision)
    return out
