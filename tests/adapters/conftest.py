"""Shared corpus and deterministic embeddings (real framework embedding classes).

``keyword_vector`` hashes lower-cased words into a fixed number of dimensions and
normalises, so cosine similarity measures word overlap: rankings are predictable, and no
model is needed in the fast unit tests. The integration tests use the packaged
all-MiniLM-L6-v2 instead.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

DIM = 256

NOTES = [
    ("pr-0302", "deadlift PR: pulled 500 lb for a single today", "lifting"),
    ("log-0210", "deadlift 480 lb single, slow off the floor", "lifting"),
    ("goal-2024", "goal for 2024: a 500 lb deadlift and a 315 bench", "goals"),
    ("squat-0316", "squat PR 405 lb, no deadlift today", "lifting"),
    ("meeting-q1", "Q1 planning meeting: ship the export feature", "work"),
    ("recipe", "overnight oats with peanut butter and banana", "food"),
]
QUERY = "what was my 500 lb deadlift PR"


def keyword_vector(text: str) -> list[float]:
    v = np.zeros(DIM)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else v).tolist()


# two passages that state different facts (3,559 vs 4,112 cars) and one beside them
PLANT = (
    "In 2019 the Austin plant of the company built {cars} electric cars and employed "
    "about two thousand people on three shifts."
)
PLANTS = [
    ("plant-a", PLANT.format(cars="3,559"), "2023-01-05"),
    ("plant-b", PLANT.format(cars="4,112"), "2024-03-01"),
    ("canteen", "Lunch in the staff canteen is served from noon until two.", None),
]
PLANT_QUERY = "did the Austin plant build 3,559 electric cars in 2019"
PLANT_CONFLICT = "sources 'plant-a' and 'plant-b' disagree: 3,559 vs 4,112"
