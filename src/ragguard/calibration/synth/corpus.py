"""The passages ``ragguard synth`` asks questions of: a JSONL corpus or a BEIR folder
(the data wing's corpus reader), or a folder of ``.txt`` / ``.md`` files split here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ragguard.calibration.data.formats.beir import corpus_source
from ragguard.errors import CorpusError

MAX_WORDS = 200
"""A folder's paragraphs are merged up to this many words; a longer one is cut."""
MAX_CHARS = 100_000
"""The longest passage a JSONL corpus may hold (a question of a whole book is no test)."""
_SUFFIXES = (".txt", ".md")


@dataclass(frozen=True)
class Passage:
    """One passage: its id, title (``""`` when none) and text."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """The passages read and how they were made (``split``, written into the eval set)."""

    passages: tuple[Passage, ...]
    split: str


def split_text(text: str, max_words: int = MAX_WORDS) -> list[str]:
    """Paragraphs (blank-line separated) merged in order while they fit ``max_words``
    words; a paragraph longer than that is cut into ``max_words``-word pieces."""
    out: list[str] = []
    current: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        words = para.split()
        if current and len(current) + len(words) > max_words:
            out.append(" ".join(current))
            current = []
        while len(words) > max_words:
            out.append(" ".join(words[:max_words]))
            words = words[max_words:]
        current += words
    if current:
        out.append(" ".join(current))
    return out


def _read_folder(folder: Path, max_words: int) -> Corpus:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in _SUFFIXES)
    if not files:
        raise CorpusError(f"{folder}: no .txt or .md files (nor a corpus.jsonl) in the folder")
    passages = []
    for path in files:
        raw = path.read_bytes()
        if b"\0" in raw:
            raise CorpusError(f"{path}: a binary file, not text: remove it from the folder")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CorpusError(
                f"{path}: not UTF-8 text (byte {exc.start}): convert it or remove it"
            ) from None
        name = path.relative_to(folder).as_posix()
        passages += [
            Passage(f"{name}#{i}", "", chunk)
            for i, chunk in enumerate(split_text(text, max_words), start=1)
        ]
    split = (
        f"{len(files)} .txt/.md files split at blank lines into paragraphs, merged up to "
        f"{max_words} words (a longer paragraph cut every {max_words} words); ids FILE#N"
    )
    return Corpus(tuple(passages), split)


def _read_jsonl(path: Path) -> Corpus:
    with path.open("rb") as fh:
        if b"\0" in fh.read(65536):
            raise CorpusError(f"{path}: a binary file, not a JSONL corpus")
    source = corpus_source(path)
    titles = source.titles
    passages = []
    for doc, joined in source.texts.items():
        title = titles.get(doc, "")
        text = joined.partition("\n")[2] if title else joined
        if len(text) > MAX_CHARS:
            raise CorpusError(
                f"{path}: passage {doc!r} has {len(text):,} characters (at most "
                f"{MAX_CHARS:,}): split it into passages as your retriever indexes them"
            )
        passages.append(Passage(doc, title, text))
    return Corpus(tuple(passages), f"{path.name}: one passage per line, as given")


def read_corpus(path: str | Path, *, max_words: int = MAX_WORDS) -> Corpus:
    """The passages of a JSONL corpus file (``_id``, ``id`` or ``doc_id``, ``text``,
    ``title``), a BEIR folder (its ``corpus.jsonl``), or a folder of ``.txt`` / ``.md``
    files (read recursively; see [`split_text`][ragguard.calibration.synth.corpus.split_text]).

    Raises:
        CorpusError: the path is missing, a file is binary or not UTF-8, a passage is
            longer than ``MAX_CHARS``, or fewer than two passages have text.
        EvalSetError: a malformed line of a JSONL corpus (file and line named).
    """
    p = Path(path)
    if p.is_dir():
        beir = p / "corpus.jsonl"
        corpus = _read_jsonl(beir) if beir.is_file() else _read_folder(p, max_words)
    elif p.is_file():
        corpus = _read_jsonl(p)
    else:
        raise CorpusError(f"{p}: no such file or folder: give a corpus.jsonl or a folder")
    texts = [x for x in corpus.passages if x.text.strip()]
    if not texts:
        raise CorpusError(f"{p}: the corpus has no passage with text")
    if len(texts) < 2:
        raise CorpusError(
            f"{p}: the corpus has one passage; synth needs at least 2 (the others are "
            "what a retriever must rank below it)"
        )
    return Corpus(tuple(texts), corpus.split)
