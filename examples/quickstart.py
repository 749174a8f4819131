"""Guard a personal-notes assistant's retrieval results before they reach an LLM.

Run: python examples/quickstart.py

Eight passages came back for a question about a deadlift PR. A plain top-5 would hand
the LLM a squat PR and a talk about 500 lb milestones: related, wrong, and read as
evidence. The guard keeps what scores within 70% of the best passage, at most 3, and
says why it dropped each of the others.

What a score threshold cannot do: "goal-2024" (a goal, not a lift) scores close to real
evidence, so it survives. Calibration (`ragguard calibrate`) measures how often that
happens on your data, and the cross-encoder rerank stage is built to catch it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ragguard import Candidate, ContextGuard, GuardConfig

QUERY = "What was my 500 lb deadlift PR?"

# (id, text, cosine similarity from the retriever), in the retriever's order
RETRIEVED = [
    ("log-2024-03-02", "Pulled 500 lb for a single today: new deadlift PR, belt, no straps.", 0.83),
    ("log-2024-02-10", "Deadlift 480x1, felt slow off the floor. 500 next month?", 0.79),
    ("goal-2024", "2024 goals: 500 lb deadlift, 315 bench, run a sub-25 5k.", 0.65),
    ("log-2024-03-16", "Squat PR: 405 lb. Deadlift accessories only, back was tight.", 0.52),
    ("talk-strength", "Notes from a talk: why 500 lb is a milestone for raw lifters.", 0.49),
    ("meeting-q1", "Q1 planning: ship the export feature by March.", 0.21),
    ("log-2024-04-01", "Deload week. Deadlift 405x3, easy.", None),  # the index lost its score
    ("recipe", "Overnight oats: oats, milk, peanut butter, banana.", 0.05),
]


def main() -> None:
    candidates = [Candidate(id=i, text=t, score=s) for i, t, s in RETRIEVED]

    guard = ContextGuard(GuardConfig(max_k=3, relative_threshold=0.7, score_kind="similarity"))
    selection = guard.select(QUERY, candidates)

    print(f"Query: {QUERY}\n")
    print("Kept (best first):")
    for d in selection.kept_decisions:
        print(f"  {d.candidate.id:<16} {d.candidate.score:.2f}  {d.candidate.text}")
    print("\nDropped:")
    for d in selection.dropped:
        print(f"  {d.candidate.id:<16} {d.reason}: {d.message}")

    # The same policy from a TOML file (as `ragguard calibrate` will write it)...
    with tempfile.TemporaryDirectory() as tmp:
        path = guard.config.save(Path(tmp) / "ragguard.toml")
        print(f"\nConfig file:\n{path.read_text()}")
        same = ContextGuard.from_file(path).select(QUERY, candidates)
        assert [c.id for c in same.kept] == [c.id for c in selection.kept]

    # ...and a stricter domain profile: medical keeps at most 3 within 80% of the top.
    medical = ContextGuard.from_profile("medical", score_kind="similarity")
    strict = medical.select(QUERY, candidates)
    print(f"medical profile keeps: {[c.id for c in strict.kept]}")


if __name__ == "__main__":
    main()
