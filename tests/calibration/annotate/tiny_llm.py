"""A tiny causal language model built on the spot (a byte-level BPE tokenizer whose merges
give the abstention several first tokens, a two-layer Llama), for the tests of the
transformers backend and of ``ragguard annotate``."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# merges that give the abstention several possible first tokens (NO, ĠNO, NO-, N, ĠN)
# and look-alikes that are not (No, NOT, ĠNOT, O)
MERGES = [
    ("N", "O"),
    ("Ġ", "NO"),
    ("Ġ", "N"),
    ("NO", "-"),
    ("NO", "T"),
    ("ĠNO", "T"),
    ("N", "o"),
    ("R", "E"),
    ("S", "P"),
    ("O", "N"),
]


def build_tiny_llm(folder: Path, chat: bool) -> None:
    """Save a tiny model and its tokenizer in ``folder``, with a ChatML template if ``chat``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    for special in ("<|im_start|>", "<|im_end|>", "<pad>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>", "<pad>"])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>"
    )
    if chat:
        fast.chat_template = CHATML
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<pad>"],
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)
