"""Tiny BERT cross-encoders built on disk for tests: the real CrossEncoder code path, no
download.

:func:`build_cross_encoder` saves a small random BERT with a one-label head and a local
WordPiece tokenizer, then sets the head's weights so that the model returns chosen
logits for chosen (query, passage) pairs: the encoder's pooled outputs for those pairs
are computed once and the head (a linear layer) is solved for by least squares. The
scores a test expects are then known in advance, and every other pair still gets a
deterministic score.

:data:`QUERY`, :data:`PASSAGES` and :data:`LOGITS` are the scenario the rerank tests
share (tests/conftest.py builds its two models once per session).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

#: Sentence-transformers' pre-v4 config key for the activation, as ms-marco models carry it.
LEGACY_ACTIVATION_KEY = "sbert_ce_default_activation_function"
IDENTITY = "torch.nn.modules.linear.Identity"

QUERY = "what was my 500 lb deadlift pr"

# id, text, retrieval similarity, designed cross-encoder logit. Retrieval puts a goal and
# a squat PR (distractors) near the top; the cross-encoder knows better.
PASSAGES = [
    ("goal", "goals 500 lb deadlift bench run", 0.85, -0.5),
    ("pr", "pulled 500 lb for a single today new deadlift pr", 0.83, 6.0),
    ("squat", "squat pr 405 lb deadlift accessories only", 0.80, -3.0),
    ("slow", "deadlift 480 felt slow off the floor", 0.79, 1.5),
    ("talk", "notes from a talk why 500 lb is a milestone", 0.78, -1.0),
    ("deload", "deload week deadlift 405", 0.60, -2.0),
]
LOGITS = {text: logit for _, text, _, logit in PASSAGES}


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def build_cross_encoder(
    path: Path,
    query: str,
    logits: Mapping[str, float],
    *,
    activation: str | None = None,
    num_labels: int = 1,
    seed: int = 0,
    vocabulary: Sequence[str] = (),
) -> Path:
    """Save a tiny cross-encoder that scores ``(query, text)`` with ``logits[text]``.

    Args:
        path: directory to write the model and tokenizer to.
        query: the query the designed scores are for.
        logits: the raw model output wanted for each passage text.
        activation: a torch activation path stored in the config (as ms-marco models do
            with ``Identity``, which makes ``CrossEncoder.predict`` return logits); ``None``
            leaves sentence-transformers' default (``Sigmoid`` for one label).
        num_labels: outputs per pair (1 for a relevance model); the head is fitted only
            for 1.
        seed: torch seed of the random encoder weights.
        vocabulary: more texts whose words the tokenizer knows (scored by the random
            encoder and the fitted head, deterministically).
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = {w for text in [query, *logits, *vocabulary] for w in text.lower().split()}
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(words))}
    # transformers 5: BertTokenizerFast(vocab_file=...) maps every token to [UNK];
    # passing the vocabulary as a dict builds a working WordPiece tokenizer.
    tokenizer = BertTokenizerFast(vocab=vocab)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
        initializer_range=0.2,  # spread the pooled outputs so the head fit is well posed
    )
    if activation is not None:
        setattr(config, LEGACY_ACTIVATION_KEY, activation)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    if num_labels == 1 and logits:
        texts = list(logits)
        enc = tokenizer(
            [query] * len(texts), texts, padding=True, truncation=True, return_tensors="pt"
        )
        with torch.no_grad():
            pooled = model.bert(**enc).pooler_output.double().numpy()
        design = np.hstack([pooled, np.ones((len(texts), 1))])
        target = np.array([logits[t] for t in texts], dtype=np.float64)
        solution, *_ = np.linalg.lstsq(design, target, rcond=None)
        with torch.no_grad():
            model.classifier.weight.copy_(torch.tensor(solution[None, :-1], dtype=torch.float32))
            model.classifier.bias.copy_(torch.tensor(solution[-1:], dtype=torch.float32))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_bi_encoder(path: Path, texts: list[str], *, seed: int = 0, dim: int = 32) -> Path:
    """Save a tiny SentenceTransformer (a random 2-layer BERT with mean pooling and a
    WordPiece vocabulary of the words of ``texts``) to ``path``: the real
    SentenceTransformer code path, no download."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models  # type: ignore[no-redef]
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = {w for text in texts for w in text.lower().replace("?", " ").split()}
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(words))}
    tokenizer = BertTokenizerFast(vocab=vocab)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=dim,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * dim,
        max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    raw = path.parent / (path.name + "-bert")
    BertModel(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    word = models.Transformer(str(raw), max_seq_length=64)
    pooling = models.Pooling(word.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[word, pooling], device="cpu").save(str(path))
    return path
