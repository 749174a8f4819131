"""Token counters for the context budget: ``token_counter`` is ``"chars:4"``,
``"tiktoken:<encoding>"`` or ``"hf:<tokenizer>"`` (docs/guides/budget.md), built with its
tokenizer when the guard is built, so a bad one fails at start-up."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragguard._optional import require
from ragguard.errors import ConfigError

DEFAULT_TOKEN_COUNTER = "chars:4"
KINDS = ("chars", "tiktoken", "hf")


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of passages: ``count(texts)``, built from the declaration ``spec``."""

    spec: str
    count: Callable[[Sequence[str]], list[int]]

    def __repr__(self) -> str:
        return f"TokenCounter({self.spec!r})"


def check_counter_spec(spec: str) -> str:
    """Check the syntax of a counter declaration without loading anything."""
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


def _tiktoken_cache() -> str:
    """Where tiktoken looks for cached encodings (``tiktoken.load.read_file_cached``)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var] or "nowhere: caching is off"
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _tiktoken(name: str) -> Callable[[Sequence[str]], list[int]]:
    tiktoken = require("tiktoken", "tiktoken")
    spec = f"token_counter 'tiktoken:{name}'"
    try:
        enc = tiktoken.get_encoding(name)
    except Exception as exc:  # an unknown name; or a failed download, whatever raised it
        known = list(tiktoken.list_encoding_names())
        if name not in known:
            raise ConfigError(
                f"{spec}: tiktoken has no encoding {name!r}; known: {', '.join(known)}"
            ) from exc
        raise ConfigError(
            f"{spec}: tiktoken cannot load the encoding ({type(exc).__name__}); tiktoken "
            "downloads its file once and caches it: run once with network access, or set "
            "TIKTOKEN_CACHE_DIR to a folder holding that cached file (looked in "
            f"{_tiktoken_cache()})"
        ) from exc

    def count(texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in enc.encode_ordinary_batch(list(texts))]

    return count


def _hf_file(name: str) -> Path:
    """The ``tokenizer.json`` that ``hf:<name>`` names: a file, a folder's, or a cached one."""
    spec = f"token_counter 'hf:{name}'"
    path = Path(name)
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise ConfigError(
                f"{spec}: cannot load the tokenizer: the folder {path} holds no tokenizer.json"
            )
        return path / "tokenizer.json"
    if path.is_file():
        return path
    hub = require("huggingface_hub", "tokenizers")
    cache = require("huggingface_hub.constants", "tokenizers").HF_HUB_CACHE
    try:  # a look into the cache folder: no request, not even for headers
        found = hub.try_to_load_from_cache(name, "tokenizer.json")
    except ValueError as exc:  # HFValidationError: a path, not a Hub name
        raise ConfigError(
            f"{spec}: cannot load the tokenizer: no file or folder {name}; give a "
            "tokenizer.json file, a folder holding one, or the name of a tokenizer in the "
            f"local Hugging Face cache ({cache})"
        ) from exc
    if isinstance(found, str):
        return Path(found)
    raise ConfigError(
        f"{spec}: cannot load the tokenizer: no file or folder {name}, and no tokenizer "
        f"{name!r} in the local Hugging Face cache ({cache}); ragguard downloads nothing: "
        f"fetch it once (hf download {name} tokenizer.json) or give the path of a "
        "tokenizer.json file"
    )


def _hf(name: str) -> Callable[[Sequence[str]], list[int]]:
    tokenizers = require("tokenizers", "tokenizers")
    path = _hf_file(name)
    try:
        tok = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # a malformed or unreadable file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"token_counter 'hf:{name}': cannot load the tokenizer from {path} "
            f"({type(exc).__name__}: {first}); give a tokenizer.json that the tokenizers "
            "package wrote"
        ) from exc

    def count(texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    return count


def token_counter(spec: str = DEFAULT_TOKEN_COUNTER) -> TokenCounter:
    """The counter a declaration names; a ``ConfigError`` names the fix for a bad one,
    a ``MissingDependencyError`` the extra."""
    check_counter_spec(spec)
    kind, _, arg = spec.partition(":")
    if kind == "chars":
        ratio = float(arg)
        return TokenCounter(spec, lambda texts: [math.ceil(len(t) / ratio) for t in texts])
    if kind == "tiktoken":
        return TokenCounter(spec, _tiktoken(arg.strip()))
    return TokenCounter(spec, _hf(arg.strip()))
