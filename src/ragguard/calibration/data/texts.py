"""Passage texts of an eval set, held (Arrow arrays, or a file not yet read) until the
first look-up; the sources and which text wins: docs/reference/data-formats.md
("Files"). Also the one UTF-8 line reader."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from collections import ChainMap
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from ragguard.errors import EvalSetError

PathLike = str | os.PathLike[str]
K = TypeVar("K", bound=Hashable)
Pair = tuple[str, str]
_BOM = "\ufeff"


class TextSource(Generic[K]):
    """Texts and titles of one source, keyed by passage id or (query id, passage id),
    built by ``read`` once, on first use."""

    def __init__(
        self,
        read: Callable[[], tuple[Mapping[K, str], Mapping[K, str]]],
        *,
        file: Path | None = None,
    ) -> None:
        self._read: Callable[[], tuple[Mapping[K, str], Mapping[K, str]]] | None = read
        self._data: tuple[Mapping[K, str], Mapping[K, str]] | None = None
        self.file = file
        """The file it reads when first used, if any."""

    @classmethod
    def of(cls, texts: Mapping[K, str], titles: Mapping[K, str] | None = None) -> TextSource[K]:
        """A source of texts already read (kept as given)."""
        data = (texts, titles if titles is not None else {})
        return cls(lambda: data)

    def _load(self) -> tuple[Mapping[K, str], Mapping[K, str]]:
        if self._data is None:
            assert self._read is not None
            self._data = self._read()
            self._read = None  # drop what the reader held (Arrow arrays)
        return self._data

    @property
    def loaded(self) -> bool:
        return self._data is not None

    @property
    def texts(self) -> Mapping[K, str]:
        """Key -> text (a title on its own line first)."""
        return self._load()[0]

    @property
    def titles(self) -> Mapping[K, str]:
        return self._load()[1]


class Texts:
    """Passage texts per (query, passage) and per passage, their titles, and what the
    source file carried that an output keeps (JSONL metadata, UDCG examples); read-only.
    Per pair the first source that has a text wins; per passage the last."""

    def __init__(
        self,
        *,
        pairs: Sequence[TextSource[Pair]] = (),
        docs: Sequence[TextSource[str]] = (),
        metadata: Mapping[str, Mapping[str, Any]] | None = None,
        udcg_examples: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self._pairs = tuple(pairs)
        self._docs = tuple(docs)
        self._metadata: Mapping[str, Mapping[str, Any]] = dict(metadata or {})
        self._udcg_examples: Mapping[str, dict[str, Any]] | None = (
            None if udcg_examples is None else dict(udcg_examples)
        )
        self._left_out: str | None = None

    @classmethod
    def left_out(cls, source: str | None) -> Texts:
        """The texts of an eval set loaded with ``texts=False``: every look-up (also after
        ``merged``) raises ``EvalSetError``."""
        out = cls()
        out._left_out = source or "the eval set"
        return out

    def _check(self) -> None:
        if self._left_out is not None:
            raise EvalSetError(
                "this eval set was loaded without its passage texts (texts=False); load it "
                "with texts=True (the default) to use them",
                path=self._left_out,
            )

    def __repr__(self) -> str:
        if self._left_out is not None:
            return f"Texts(left out when {self._left_out} was loaded)"
        files = ", ".join(str(f) for f in self.files)
        return (
            f"Texts({len(self._pairs)} per-pair and {len(self._docs)} per-passage sources"
            f"{f'; files {files}' if files else ''})"
        )

    @property
    def metadata(self) -> Mapping[str, Mapping[str, Any]]:
        """Query id -> the ``metadata`` object of its JSONL line."""
        self._check()
        return self._metadata

    @property
    def udcg_examples(self) -> Mapping[str, dict[str, Any]] | None:
        """Query id -> its example in a UDCG file (``None``: not a UDCG eval set)."""
        self._check()
        return self._udcg_examples

    def get(self, qid: str, doc: str) -> str | None:
        """The text of passage ``doc`` for query ``qid``, or ``None``."""
        return self._first("texts", qid, doc)

    def title(self, qid: str, doc: str) -> str | None:
        """The title of passage ``doc`` for query ``qid``, or ``None``."""
        return self._first("titles", qid, doc)

    def _first(self, what: str, qid: str, doc: str) -> str | None:
        self._check()
        for s in self._pairs:
            found: str | None = getattr(s, what).get((qid, doc))
            if found is not None:
                return found
        for d in reversed(self._docs):
            found = getattr(d, what).get(doc)
            if found is not None:
                return found
        return None

    @property
    def by_pair(self) -> Mapping[Pair, str]:
        return self._view(self._pairs, "texts")

    @property
    def by_doc(self) -> Mapping[str, str]:
        return self._view(self._docs[::-1], "texts")

    @property
    def titles_by_pair(self) -> Mapping[Pair, str]:
        return self._view(self._pairs, "titles")

    @property
    def titles_by_doc(self) -> Mapping[str, str]:
        return self._view(self._docs[::-1], "titles")

    def _view(self, sources: Sequence[TextSource[Any]], what: str) -> Mapping[Any, str]:
        """One mapping over the ``what`` of ``sources``, the first that has a key winning."""
        self._check()
        maps = [getattr(s, what) for s in sources]
        if len(maps) > 1:
            return ChainMap(*maps)
        return maps[0] if maps else {}

    @property
    def loaded(self) -> bool:
        """Whether every source's mappings are built (else Arrow arrays or an unread file)."""
        return all(s.loaded for s in self._pairs) and all(d.loaded for d in self._docs)

    @property
    def files(self) -> tuple[Path, ...]:
        """The corpus files these texts read when first asked for."""
        files = [s.file for s in self._pairs] + [d.file for d in self._docs]
        return tuple(f for f in files if f is not None)

    def merged(
        self,
        *,
        docs: Sequence[TextSource[str]] = (),
        passages: Mapping[str, str] | None = None,
    ) -> Texts:
        """These texts with more: ``docs`` (read on first use) and ``passages``, winning over
        those here per passage id, in that order."""
        docs = [*self._docs, *docs]
        if passages:
            docs.append(TextSource.of({str(k): v for k, v in passages.items()}))
        out = Texts(
            pairs=self._pairs, docs=docs, metadata=self._metadata, udcg_examples=self._udcg_examples
        )
        out._left_out = self._left_out
        return out


def utf8_lines(
    path: Path, chunks: Iterable[bytes] | None = None, first: int = 1, *, numbered: bool = True
) -> Iterator[str]:
    """The one UTF-8 line reader: the lines of ``path`` (gunzipped for ``.gz``; a BOM
    skipped) or of ``chunks`` (pieces ending at line ends, the first line ``first``), ended
    as universal newlines end them, each end given back as ``\n``.

    Raises:
        EvalSetError: a line not UTF-8 (its number when ``numbered``), a file not readable."""
    line = first
    try:
        with contextlib.ExitStack() as stack:
            if chunks is None:
                gz = path.name.lower().endswith(".gz")
                opener: Callable[..., Any] = gzip.open if gz else open
                chunks = stack.enter_context(opener(path, "rb"))
            for chunk in chunks:
                for raw in chunk.splitlines(keepends=True):
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        where = line if numbered else None
                        raise EvalSetError(
                            f"not UTF-8 text ({exc.reason})", path=str(path), line=where
                        ) from None
                    if text.endswith("\r"):
                        text = text[:-1] + "\n"
                    elif text.endswith("\r\n"):
                        text = text[:-2] + "\n"
                    yield text[1:] if line == 1 and text.startswith(_BOM) else text
                    line += 1
    except (OSError, EOFError) as exc:
        where = line - 1 if numbered and line > first else None
        raise EvalSetError(f"cannot read: {exc}", path=str(path), line=where) from None


def head_bytes(path: Path, n: int) -> bytes:
    """The first ``n`` bytes of ``path`` (gunzipped for ``.gz``); none when unreadable."""
    opener: Callable[..., Any] = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data: bytes = f.read(n)
    except (OSError, EOFError):
        return b""
    return data


def json_lines(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) of each non-blank line of a JSON-lines file; a malformed line
    raises ``EvalSetError`` naming it."""
    for lineno, raw in enumerate(utf8_lines(path), 1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EvalSetError(f"malformed JSON: {exc.msg}", path=str(path), line=lineno) from None


def joined(title: object, text: str) -> str:
    """A passage's text as ragguard reads it: a non-blank title on its own line first."""
    return f"{title}\n{text}" if isinstance(title, str) and title.strip() else text


def title_of(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def corpus_text(
    obj: Mapping[str, Any], path: Path, lineno: int, *, required: bool, field: str = "text"
) -> tuple[str | None, str | None]:
    """The text (title joined) and title of one corpus line or passage (``text`` may be
    missing or ``null`` unless ``required``).

    Raises:
        EvalSetError: a text that is not a string, naming file, line and ``field``."""
    text = obj.get("text")
    if text is None and not required:
        return None, None
    if not isinstance(text, str):
        message = (
            "missing or non-string text"
            if required
            else f"a text must be a string or null, got {type(text).__name__}"
        )
        raise EvalSetError(message, path=str(path), line=lineno, field=field)
    title = obj.get("title")
    return joined(title, text), title_of(title)


class ArrowCorpus:
    """Passage ids, texts and titles as aligned pyarrow arrays; mappings built when called."""

    def __init__(self, ids: Any, texts: Any, titles: Any | None) -> None:
        self.ids = ids
        self.texts = texts
        self.titles = titles

    def __call__(self) -> tuple[dict[str, str], dict[str, str]]:
        texts: dict[str, str] = {}
        titles: dict[str, str] = {}
        ids = self.ids.to_pylist()
        title_list = [None] * len(ids) if self.titles is None else self.titles.to_pylist()
        for doc, text, title in zip(ids, self.texts.to_pylist(), title_list, strict=True):
            if text is not None:
                texts[doc] = joined(title, text)
                if (t := title_of(title)) is not None:
                    titles[doc] = t
        return texts, titles
