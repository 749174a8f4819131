"""Token counters for the context budget (``GuardConfig.max_tokens``).

A counter is declared in the config as one string, ``token_counter``:

* ``"chars:4"`` (the default): ``ceil(len(text) / 4)``, the common estimate of about
  four characters per token for English text with OpenAI-style BPE vocabularies
  (``"chars:3.5"`` and any other positive ratio work too). No dependency; it
  over-counts code and under-counts languages with long words, so leave headroom;
* ``"tiktoken:<encoding>"``: the number of tokens of a tiktoken encoding, e.g.
  ``"tiktoken:cl100k_base"`` or ``"tiktoken:o200k_base"`` (extra ``tiktoken``; tiktoken
  fetches the encoding file once, then caches it);
* ``"hf:<tokenizer>"``: a Hugging Face tokenizer, given as a local ``tokenizer.json``
  file, a folder that holds one, or a Hub name (extra ``tokenizers``); special tokens
  are not counted.

The counter is built (and its tokenizer loaded) when the guard is built, so a missing
package or a wrong name fails at start-up, not on the first query.

Example:
    >>> token_counter("chars:4").count(["abcdefgh", "abcde", ""])
    [2, 2, 0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragguard._optional import require
from ragguard.errors import ConfigError

__all__ = ["DEFAULT_TOKEN_COUNTER", "TokenCounter", "check_counter_spec", "token_counter"]

DEFAULT_TOKEN_COUNTER = "chars:4"
KINDS = ("chars", "tiktoken", "hf")


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of passages.

    Attributes:
        spec: the declaration it was built from (``"chars:4"``, ``"tiktoken:cl100k_base"``,
            ``"hf:./tokenizer.json"``).
        count: texts -> their token counts, in order.
    """

    spec: str
    count: Callable[[Sequence[str]], list[int]]

    def __repr__(self) -> str:
        return f"TokenCounter({self.spec!r})"


def check_counter_spec(spec: str) -> str:
    """Check the syntax of a counter declaration without loading anything.

    Raises:
        ConfigError: not ``chars:<ratio>``, ``tiktoken:<encoding>`` or ``hf:<tokenizer>``.
    """
    kind, sep, arg = spec.partition(":")
    if not sep or kind not in KINDS or not arg.strip():
        raise ConfigError(
            f"token_counter {spec!r} is not a counter; write 'chars:4' (characters per "
            "token), 'tiktoken:<encoding>' (e.g. tiktoken:cl100k_base) or 'hf:<tokenizer "
            "name or path>'"
        )
    if kind == "chars":
        try:
            ratio = float(arg)
        except ValueError:
            ratio = math.nan
        if not (math.isfinite(ratio) and ratio > 0):
            raise ConfigError(
                f"token_counter {spec!r}: the characters per token must be a number > 0"
            )
    return spec


def _chars(ratio: float) -> Callable[[Sequence[str]], list[int]]:
    def count(texts: Sequence[str]) -> list[int]:
        return [math.ceil(len(t) / ratio) for t in texts]

    return count


def _tiktoken(name: str) -> Callable[[Sequence[str]], list[int]]:
    tiktoken = require("tiktoken", "tiktoken")
    try:
        enc = tiktoken.get_encoding(name)
    except ValueError as exc:  # an unknown encoding name
        raise ConfigError(f"token_counter 'tiktoken:{name}': {exc}") from exc

    def count(texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in enc.encode_ordinary_batch(list(texts))]

    return count


def _hf(name: str) -> Callable[[Sequence[str]], list[int]]:
    tokenizers = require("tokenizers", "tokenizers")
    path = Path(name)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        if path.is_file():
            tok = tokenizers.Tokenizer.from_file(str(path))
        else:
            tok = tokenizers.Tokenizer.from_pretrained(name)
    except Exception as exc:  # no such file or Hub name, no network, a malformed file
        raise ConfigError(
            f"token_counter 'hf:{name}': cannot load the tokenizer ({type(exc).__name__}: "
            f"{exc}); give a tokenizer.json file, a folder holding one, or a Hub name"
        ) from exc

    def count(texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    return count


def token_counter(spec: str = DEFAULT_TOKEN_COUNTER) -> TokenCounter:
    """Build the counter a declaration names (see the module docstring).

    Raises:
        ConfigError: a malformed declaration, an unknown encoding, a tokenizer that
            cannot be loaded.
        MissingDependencyError: tiktoken or tokenizers is not installed (naming the extra).
    """
    check_counter_spec(spec)
    kind, _, arg = spec.partition(":")
    if kind == "chars":
        return TokenCounter(spec, _chars(float(arg)))
    if kind == "tiktoken":
        return TokenCounter(spec, _tiktoken(arg.strip()))
    return TokenCounter(spec, _hf(arg.strip()))
