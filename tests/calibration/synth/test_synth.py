"""``ragguard.calibration.synth``: corpus readers, the folder split, the queries made
without a model (deterministic, distinct, never the passage), and bad corpora."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragguard.calibration import load_evalset
from ragguard.calibration.synth import read_corpus, synthesize, write_evalset
from ragguard.calibration.synth.corpus import split_text
from ragguard.errors import ConfigError, CorpusError

TOPICS = [
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "Mount Everest on the Nepal border is the highest mountain above sea level.",
    "The Amazon river carries more water than any other river on Earth.",
    "Marie Curie won Nobel prizes in physics and chemistry for radioactivity.",
    "The Great Wall of China stretches across northern China for thousands of kilometres.",
    "Photosynthesis turns sunlight, water and carbon dioxide into glucose in plants.",
    "The Pacific Ocean is the largest and deepest of Earth's oceanic divisions.",
    "Ludwig van Beethoven composed nine symphonies, the ninth with a choral finale.",
]


def write_corpus(path: Path, texts: list[str], key: str = "_id") -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({key: f"d{i}", "text": text}) + "\n")
    return path


@pytest.mark.parametrize("key", ["_id", "id"])
def test_jsonl_corpus_read_by_the_data_wings_reader(tmp_path: Path, key: str) -> None:
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", TOPICS, key))
    assert [p.id for p in corpus.passages] == [f"d{i}" for i in range(len(TOPICS))]
    assert [p.text for p in corpus.passages] == TOPICS


def test_beir_folder_reads_its_corpus_with_titles(tmp_path: Path) -> None:
    rows = [{"_id": "a", "title": "Paris", "text": TOPICS[0]}, {"_id": "b", "text": TOPICS[1]}]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    passages = read_corpus(tmp_path).passages
    assert [(p.id, p.title, p.text) for p in passages] == [
        ("a", "Paris", TOPICS[0]),
        ("b", "", TOPICS[1]),
    ]


def test_folder_split_paragraphs_merged_and_cut_with_file_ids(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("one two\n\nthree four five\n\n  \n" + "w " * 7)
    (tmp_path / "sub" / "b.txt").write_text(TOPICS[0])
    (tmp_path / "skip.pdf").write_bytes(b"%PDF\0")
    corpus = read_corpus(tmp_path, max_words=5)
    assert [(p.id, p.text) for p in corpus.passages] == [
        ("a.md#1", "one two three four five"),
        ("a.md#2", "w w w w w"),
        ("a.md#3", "w w"),
        ("sub/b.txt#1", "The Eiffel Tower in Paris"),
        ("sub/b.txt#2", "was completed in 1889 for"),
        ("sub/b.txt#3", "the World's Fair."),
    ]
    assert "merged up to 5 words" in corpus.split
    assert split_text("a\n\nb", 1) == ["a", "b"]


@pytest.mark.parametrize("method", ["keyphrases", "cloze"])
def test_queries_deterministic_distinct_and_never_the_passage(tmp_path: Path, method: str) -> None:
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", TOPICS))
    first = synthesize(corpus, n=5, seed=3, method=method)
    assert first == synthesize(corpus, n=5, seed=3, method=method)
    assert len(first) == 5 and len({q.query for q in first}) == 5
    assert len({q.source for q in first}) == 5
    texts = {p.id: p.text for p in corpus.passages}
    for q in first:
        assert q.query and q.query.lower() != texts[q.source].lower()
        assert set(q.query.split()) - {"what"} <= set(
            texts[q.source].lower().replace(",", " ").replace(".", " ").replace("'s", " ").split()
        ) | {"world's", "earth's"}
    other = synthesize(corpus, n=5, seed=4, method=method)
    assert [q.source for q in other] != [q.source for q in first]


def test_duplicate_texts_never_sampled_and_queries_deduplicated(tmp_path: Path) -> None:
    texts = [*TOPICS[:3], TOPICS[0], "alpha beta gamma", "gamma beta alpha"]
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", texts))
    made = synthesize(corpus, n=10, seed=0, words=3)
    sources = {q.source for q in made}
    assert not sources & {"d0", "d3"}  # the text both share has two sources
    # "alpha beta gamma" and "gamma beta alpha" give one query set each, in passage order
    assert len({q.query for q in made}) == len(made)
    assert sources <= {"d1", "d2", "d4", "d5"}


def test_accents_fold_and_dashes_separate_words(tmp_path: Path) -> None:
    texts = ["Offensive of Gorlice\u2013Tarn\u00f3w in 1915", TOPICS[1]]
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", texts))
    made = {q.source: q.query for q in synthesize(corpus, n=2, words=4)}
    assert made["d0"].split() == ["offensive", "gorlice", "tarnow", "1915"]


def test_a_query_equal_to_its_passage_is_skipped(tmp_path: Path) -> None:
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", ["zebra", "yak", TOPICS[0]]))
    assert [q.source for q in synthesize(corpus, n=5)] == ["d2"]
    tiny = read_corpus(write_corpus(tmp_path / "t.jsonl", ["zebra", "yak"]))
    with pytest.raises(CorpusError, match="no passage gave a query other than its own text"):
        synthesize(tiny)


def test_written_eval_set_loads_with_silver_provenance(tmp_path: Path) -> None:
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", TOPICS))
    made = synthesize(corpus, n=4, seed=1)
    write_evalset(made, tmp_path / "e.jsonl", {"method": "keyphrases", "seed": 1})
    evalset = load_evalset(tmp_path / "e.jsonl")
    assert sorted(evalset.qids) == sorted(q.query_id for q in made)
    line = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert line["relevant"] == {made[0].source: 1}
    assert line["metadata"]["synth"] == {
        "method": "keyphrases",
        "seed": 1,
        "source": made[0].source,
        "labels": "silver",
    }


def _bad(tmp_path: Path, name: str) -> Path:
    if name == "missing":
        return tmp_path / "nope"
    if name == "empty":
        return write_corpus(tmp_path / "c.jsonl", [])
    if name == "empty folder":
        (tmp_path / "f").mkdir()
        (tmp_path / "f" / "a.md").write_text("\n\n")
        return tmp_path / "f"
    if name == "binary":
        path = tmp_path / "c.jsonl"
        path.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
        return path
    if name == "binary file in folder":
        (tmp_path / "f").mkdir()
        (tmp_path / "f" / "a.txt").write_bytes(b"text\0\1\2")
        return tmp_path / "f"
    if name == "one passage":
        return write_corpus(tmp_path / "c.jsonl", [TOPICS[0]])
    if name == "duplicated texts":
        return write_corpus(tmp_path / "c.jsonl", [TOPICS[0]] * 3)
    assert name == "1 MB passage"
    return write_corpus(tmp_path / "c.jsonl", [TOPICS[0], "word " * 200_000])


BAD = {
    "missing": "no such file or folder",
    "empty": "no passage with text",
    "empty folder": "no passage with text",
    "binary": "a binary file",
    "binary file in folder": "a binary file",
    "one passage": "the corpus has one passage",
    "duplicated texts": "every passage's text is repeated",
    "1 MB passage": "passage 'd1' has 1,000,000 characters",
}


@pytest.mark.parametrize("name", BAD)
def test_bad_corpus_is_one_corpus_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(CorpusError, match=BAD[name]) as caught:
        synthesize(read_corpus(_bad(tmp_path, name)))
    assert "\n" not in str(caught.value)


def test_bad_settings_are_config_errors(tmp_path: Path) -> None:
    corpus = read_corpus(write_corpus(tmp_path / "c.jsonl", TOPICS))
    with pytest.raises(ConfigError, match="n=0"):
        synthesize(corpus, n=0)
    with pytest.raises(ConfigError, match="unknown method 'llm'; choose one of keyphrases, cloze"):
        synthesize(corpus, method="llm")
