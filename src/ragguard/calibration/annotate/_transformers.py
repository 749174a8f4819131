"""Local models through Hugging Face transformers, GGUF files included: one forward pass
per pair, the first-token probability of the abstention summed over every token that
can start it (``docs/guides/annotate.md``, "How p(NO-RESPONSE) is estimated")."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragguard._optional import require
from ragguard.calibration.annotate._base import Pair
from ragguard.calibration.annotate._checks import check
from ragguard.calibration.annotate._prompts import (
    ABSTENTION_PROMPT,
    AbstentionPrompt,
    is_abstention_start,
)
from ragguard.errors import AnnotationError

logger = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "float16", "bfloat16")


def abstention_token_ids(tokenizer: Any, abstention: str = "NO-RESPONSE") -> list[int]:
    """Ids of every token whose text, without leading whitespace, is a non-empty prefix
    of ``abstention`` (special tokens excluded): the possible first tokens of the
    abstention answer.

    Raises:
        AnnotationError: the vocabulary has no such token.
    """
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    first = abstention[0]
    ids: list[int] = []
    for token, idx in tokenizer.get_vocab().items():
        # cheap filter first: the raw token holds the first character, or is a byte (<0x4E>)
        if idx in special or (first not in token and not token.startswith("<0x")):
            continue
        text = tokenizer.decode([idx], skip_special_tokens=False)
        if is_abstention_start(text, abstention):
            ids.append(int(idx))
    if not ids:
        raise AnnotationError(
            f"no token of this tokenizer can start the abstention answer {abstention!r}"
        )
    return sorted(ids)


class _Local:
    """Model, tokenizer and device shared by the estimator and the generator."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        model_id: str | None,
        device: str | None,
        dtype: str | None,
        gguf_file: str | None,
        trust_remote_code: bool,
        chat_template: bool | None,
    ) -> None:
        self._dtype_name = dtype
        torch = require("torch", "annotate")
        if isinstance(model, str | os.PathLike):
            transformers = require("transformers", "annotate")
            kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
            if gguf_file is not None:
                require("gguf", "gguf")
                require("accelerate", "gguf")
                kwargs["gguf_file"] = gguf_file
            dev = str(device)
            if device in (None, "auto"):
                mps = getattr(torch.backends, "mps", None)
                apple = mps is not None and mps.is_available()
                dev = "cuda" if torch.cuda.is_available() else "mps" if apple else "cpu"
            if dtype is None:
                dtype = "float32" if dev == "cpu" else "auto"
            if dtype not in DTYPES:
                raise AnnotationError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
            torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
            shown = str(model) if gguf_file is None else str(Path(model) / gguf_file)
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(str(model), **kwargs)
                lm = transformers.AutoModelForCausalLM.from_pretrained(
                    str(model), dtype=torch_dtype, **kwargs
                )
            except (OSError, ValueError) as exc:  # not found, not a causal LM, unreadable file
                raise AnnotationError(f"cannot load the model {shown}: {exc}") from exc
            try:
                lm.to(dev)
            except (RuntimeError, AssertionError, ValueError) as exc:  # no such device here
                raise AnnotationError(f"cannot put the model on device {dev!r}: {exc}") from exc
            lm.eval()
            self.model, self.tokenizer, self.device = lm, tokenizer, dev
            default_id = str(model) if gguf_file is None else gguf_file
        else:
            if tokenizer is None:
                raise AnnotationError("pass the tokenizer with a loaded model")
            self.model, self.tokenizer = model, tokenizer
            self.device = str(getattr(model, "device", "cpu"))
            default_id = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
            default_id = default_id or type(model).__name__
        self.model_id = model_id or default_id
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat_template and not has_template:
            raise AnnotationError(
                "chat_template=True (--chat-template), but the tokenizer has no chat template"
            )
        self.chat = has_template if chat_template is None else chat_template
        params = inspect.signature(self.model.forward).parameters
        self._accepts = {n for n in ("position_ids", "logits_to_keep") if n in params}
        self._gguf = gguf_file

    def ids(self, messages: list[dict[str, str]], plain: str) -> list[int]:
        """The token ids of ``messages`` through the chat template, else of ``plain``."""
        if not self.chat:
            return list(self.tokenizer(plain, add_special_tokens=True)["input_ids"])
        template = self.tokenizer.apply_chat_template
        try:
            ids = template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        except Exception:  # templates without a system role raise (jinja2 TemplateError)
            folded = [{"role": "user", "content": "\n\n".join(m["content"] for m in messages)}]
            ids = template(folded, add_generation_prompt=True, tokenize=True, return_dict=False)
        if isinstance(ids, Mapping):  # older/newer versions may still return a mapping
            ids = ids["input_ids"]
        return list(ids)

    def base_settings(self) -> dict[str, object]:
        return {
            "model": self.model_id,
            "chat_template": self.chat,
            "dtype": str(getattr(self.model, "dtype", self._dtype_name)),
            "gguf": self._gguf is not None,
        }


class TransformersEstimator:
    """p(NO-RESPONSE) from a local causal LM: one forward pass per pair, the next-token
    probability summed over ``abstention_token_ids``. Pairs run sorted by length,
    left-padded with explicit position ids (a padded row scores as it would alone).

    Args:
        model: a Hugging Face model id or folder (loaded with ``AutoModelForCausalLM``),
            or a loaded model (then pass ``tokenizer``).
        tokenizer: the tokenizer of a loaded model.
        model_id: the model's name in the outputs (default: the id or folder given).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"`` (default:
            a GPU when there is one).
        dtype: ``"float32"`` (default on CPU), ``"float16"``, ``"bfloat16"`` or
            ``"auto"`` (the checkpoint's; default on GPUs).
        batch_size: pairs per forward pass.
        max_length: longest prompt in tokens; longer prompts keep their last
            ``max_length`` tokens (with a warning). Default: no limit.
        chat_template: use the tokenizer's chat template (default: when it has one).
        prompt: the abstention prompt (default: the paper's Figure 4).
        gguf_file: the ``.gguf`` file inside ``model`` (a folder); see ``from_gguf``.
        trust_remote_code: passed to transformers.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        tokenizer: Any = None,
        *,
        model_id: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 8,
        max_length: int | None = None,
        chat_template: bool | None = None,
        prompt: AbstentionPrompt = ABSTENTION_PROMPT,
        gguf_file: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        check("batch_size", batch_size)
        if max_length is not None:
            check("max_length", max_length)
        self._local = _Local(
            model, tokenizer, model_id, device, dtype, gguf_file, trust_remote_code, chat_template
        )
        #: the loaded transformers model and tokenizer, and the model's name in the outputs
        self.model, self.tokenizer = self._local.model, self._local.tokenizer
        self.model_id = self._local.model_id
        self.batch_size = batch_size
        self.max_length = max_length
        self.prompt = prompt
        self.token_ids = abstention_token_ids(self.tokenizer, prompt.abstention)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], **kwargs: Any) -> TransformersEstimator:
        """Load a ``.gguf`` file, de-quantised by transformers' GGUF support; ``kwargs`` as
        for the constructor (``model_id`` defaults to the file name)."""
        p = Path(path)
        if not p.is_file():
            raise AnnotationError(f"no such GGUF file: {p}")
        return cls(p.parent, gguf_file=p.name, **kwargs)

    def settings(self) -> Mapping[str, object]:
        """Backend, model, dtype, chat template use, prompt hash and truncation."""
        backend = "gguf" if self._local._gguf is not None else "transformers"
        return {
            "backend": backend,
            **self._local.base_settings(),
            "prompt": self.prompt.fingerprint(),
            "max_length": self.max_length,
        }

    def prompt_ids(self, pair: Pair) -> list[int]:
        """The token ids the model reads for one pair."""
        q, passage = pair.question, pair.passage
        return self._local.ids(self.prompt.messages(q, passage), self.prompt.plain(q, passage))

    def estimate(self, pairs: Sequence[Pair]) -> Iterator[tuple[int, float]]:
        """``(index, p)`` per pair, one batch at a time."""
        torch = require("torch", "annotate")
        encoded = [self.prompt_ids(p) for p in pairs]
        if self.max_length is not None:
            long = sum(1 for ids in encoded if len(ids) > self.max_length)
            if long:
                logger.warning(
                    "%d prompts are longer than max_length=%d tokens and keep their last %d tokens",
                    long,
                    self.max_length,
                    self.max_length,
                )
                encoded = [ids[-self.max_length :] for ids in encoded]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        selected = torch.tensor(self.token_ids, device=self._local.device)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            logits = self._last_logits(torch, [encoded[i] for i in rows])
            log_all = torch.logsumexp(logits, dim=-1)
            log_abstain = torch.logsumexp(logits.index_select(-1, selected), dim=-1)
            probs = torch.exp(log_abstain - log_all).clamp(0.0, 1.0).tolist()
            for i, p in zip(rows, probs, strict=True):
                yield i, float(p)

    def _last_logits(self, torch: Any, batch: list[list[int]]) -> Any:
        width = max(len(ids) for ids in batch)
        input_ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, ids in enumerate(batch):
            input_ids[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[r, width - len(ids) :] = 1
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self._local.device),
            "attention_mask": mask.to(self._local.device),
        }
        if "position_ids" in self._local._accepts:
            kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0).to(self._local.device)
        if "logits_to_keep" in self._local._accepts:
            kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            out = self.model(**kwargs)
        return out.logits[:, -1, :].float()

    def generator(self, max_new_tokens: int = 256) -> TransformersGenerator:
        """A greedy text generator on the same loaded model (e.g. for the judge)."""
        return TransformersGenerator(self._local, max_new_tokens=max_new_tokens)


class TransformersGenerator:
    """Greedy generation with a local model: a ``TextGenerator`` for the judge.

    Build one with ``TransformersEstimator.generator`` (sharing the loaded model) or
    from a model id or folder, with the constructor's options.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 256,
        model_id: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        gguf_file: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        check("max_new_tokens", max_new_tokens)
        if isinstance(model, _Local):
            self._local = model
        else:
            self._local = _Local(
                model, tokenizer, model_id, device, dtype, gguf_file, trust_remote_code, None
            )
        self.model_id = self._local.model_id
        self.max_new_tokens = max_new_tokens

    def settings(self) -> Mapping[str, object]:
        """Model, dtype and the generation length."""
        return {**self._local.base_settings(), "max_new_tokens": self.max_new_tokens}

    def generate(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """Greedy replies, one prompt at a time."""
        torch = require("torch", "annotate")
        tok = self._local.tokenizer
        for i, prompt in enumerate(prompts):
            ids = self._local.ids([{"role": "user", "content": prompt}], prompt)
            x = torch.tensor([ids], dtype=torch.long, device=self._local.device)
            with torch.inference_mode():
                out = self._local.model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=tok.pad_token_id
                    if tok.pad_token_id is not None
                    else tok.eos_token_id,
                )
            yield i, str(tok.decode(out[0, len(ids) :], skip_special_tokens=True))
