"""The progress file: one JSON line per result, appended and flushed as it is computed,
keyed by the settings' hash and the texts' hash, read back on a re-run (a line cut short
by an interrupt is dropped)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ragguard.errors import AnnotationError

logger = logging.getLogger(__name__)
_FIELDS = ("key", "query_id", "doc_id", "pair")


def settings_key(settings: Mapping[str, object]) -> str:
    """A short, stable hash of JSON-serialisable settings."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pair_hash(*texts: str) -> str:
    """A short hash of the texts a result depends on."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


class ProgressStore:
    """Results saved so far, and an append-only handle for new ones.

    Args:
        path: the progress file (created with its folder when missing).
        fresh: ignore (and truncate) what the file holds.

    Raises:
        AnnotationError: the file cannot be read or written, naming it.
    """

    def __init__(self, path: str | os.PathLike[str], *, fresh: bool = False) -> None:
        self.path = Path(path)
        self.no_response: dict[tuple[str, str, str, str], float] = {}
        self.relevance: dict[tuple[str, str, str, str], tuple[bool, str]] = {}
        self.questions: dict[tuple[str, str, str, str], str] = {}
        self._fh: IO[str] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if fresh and self.path.exists():
                self.path.write_bytes(b"")
            self._read()
        except OSError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: OSError) -> AnnotationError:
        return AnnotationError(f"cannot use the progress file {self.path}: {exc.strerror or exc}")

    def _read(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            logger.warning(
                "%s: dropping an incomplete last line (%d bytes) left by an interrupted run",
                self.path,
                len(data) - end,
            )
            with self.path.open("r+b") as fh:
                fh.truncate(end)
            data = data[:end]
        bad = 0
        for raw in data.decode("utf-8", errors="replace").splitlines():
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                rec = None
            bad += not self._add(rec)
        if bad:
            logger.warning("%s: ignored %d unreadable lines", self.path, bad)

    def _add(self, rec: Any) -> bool:
        """Keep one saved record; ``False`` when it is unreadable (an unknown kind is not)."""
        if not isinstance(rec, dict) or any(n not in rec for n in _FIELDS):
            return False
        k = (str(rec["key"]), str(rec["query_id"]), str(rec["doc_id"]), str(rec["pair"]))
        if rec.get("kind") == "no_response":
            p = rec.get("p")
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
                return False
            self.no_response[k] = float(p)
        elif rec.get("kind") == "relevance":
            rel = rec.get("relevant")
            if not isinstance(rel, bool):
                return False
            self.relevance[k] = (rel, str(rec.get("motivation", "")))
        elif rec.get("kind") == "question":
            reply = rec.get("reply")
            if not isinstance(reply, str):
                return False
            self.questions[k] = reply
        return True

    def _write(self, kind: str, k: tuple[str, str, str, str], **values: object) -> None:
        rec = {"kind": kind, **dict(zip(_FIELDS, k, strict=True)), **values}
        try:
            if self._fh is None:
                self._fh = self.path.open("a", encoding="utf-8")
            self._fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            self._fh.flush()
        except OSError as exc:
            raise self._error(exc) from exc

    def saved_elsewhere(self, kind: str, key: str, wanted: Iterable[tuple[str, str, str]]) -> int:
        """How many of ``wanted`` ``(query_id, doc_id, pair)`` have a saved result of
        ``kind`` under another settings key (which is not reused)."""
        table = self.no_response if kind == "no_response" else self.relevance
        others = {k[1:] for k in table if k[0] != key}
        return sum(1 for w in set(wanted) if w in others)

    def add_no_response(self, key: str, qid: str, doc: str, pair: str, p: float) -> None:
        """Save one abstention probability."""
        self.no_response[(key, qid, doc, pair)] = p
        self._write("no_response", (key, qid, doc, pair), p=p)

    def add_relevance(
        self, key: str, qid: str, doc: str, pair: str, relevant: bool, motivation: str
    ) -> None:
        """Save one relevance judgement."""
        self.relevance[(key, qid, doc, pair)] = (relevant, motivation)
        self._write("relevance", (key, qid, doc, pair), relevant=relevant, motivation=motivation)

    def add_question(self, key: str, doc: str, pair: str, reply: str) -> None:
        """Save one reply to ``ragguard synth``'s question prompt (no query exists yet)."""
        self.questions[(key, "", doc, pair)] = reply
        self._write("question", (key, "", doc, pair), reply=reply)

    def close(self) -> None:
        """Close the append handle (everything written is already flushed)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> ProgressStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
