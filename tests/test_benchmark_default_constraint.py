"""The chunking that gives benchmarks/default_constraint.py several relevant chunks per
question: overlapping word windows that cover the whole passage."""

from __future__ import annotations

import pytest

from tests.doc_checks import ROOT, load_script

bench = load_script(ROOT / "benchmarks" / "default_constraint.py", "bench_default_constraint")


@pytest.mark.parametrize("n_words", [1, 39, 40, 41, 60, 61, 100, 137])
def test_windows_cover_every_word_in_order_and_overlap(n_words: int) -> None:
    words = [f"w{i}" for i in range(n_words)]
    windows = [w.split() for w in bench.chunk_words(" ".join(words), 40, 20)]
    starts = [int(w[0][1:]) for w in windows]
    assert starts == list(range(0, 20 * len(windows), 20))  # a new window every 20 words
    for w, start in zip(windows, starts, strict=True):
        assert w == words[start : start + 40]  # 40 consecutive words, fewer only at the end
    assert windows[-1][-1] == words[-1]  # the last window reaches the end
    # no window is redundant: the one before the last stops short of the end
    assert len(windows) == 1 or windows[-2][-1] != words[-1]


def test_the_questions_of_examples_nq_are_the_ones_left_out() -> None:
    """The default threshold was chosen on examples/nq: its 300 questions, named by the
    source line as the benchmark names its own, are never sampled."""
    lines = (ROOT / "examples" / "nq" / "evalset.jsonl").read_text(encoding="utf-8")
    seen = bench.example_ids()
    assert len(seen) == 300 == len(lines.splitlines())
    assert all(q.startswith("q") and len(q) == 5 and q[1:].isdigit() for q in seen)
    assert '"query_id": "q0001"' in lines and "q0001" in seen
