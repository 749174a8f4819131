"""The topics and the validation share of the tiny training sets built by the tests of
train-reranker (fusion and bi-encoder) and of cross-encoder fine-tuning."""

from __future__ import annotations

SPORTS = [
    "deadlift", "squat", "bench", "press", "row", "curl", "lunge", "plank", "sprint", "swim",
    "cycle", "hike", "yoga", "rowing", "boxing", "climb", "skate", "ski", "surf", "golf",
    "tennis", "rugby", "judo", "fencing",
]  # fmt: skip
#: 96 one-word topics: the sports, then numbered variants ("deadlift2"). With the
#: default holdout 0.3 and VALIDATION 0.5 a 96-query set has 34 validation queries,
#: above the 30 usable ones train-reranker needs to write anything.
TOPICS = SPORTS + [f"{s}{k}" for k in (2, 3, 4) for s in SPORTS]
VALIDATION = 0.5
