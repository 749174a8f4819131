"""The token budget and near-duplicate control of ContextGuard: hand-computed cases, the
declared counters (characters, a real tiktoken encoding, a real Hugging Face tokenizer),
the config layers."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragguard import Candidate, ContextGuard, GuardConfig, Reason
from ragguard.errors import ConfigError, MissingDependencyError
from ragguard.stages import jaccard, shingles, words
from ragguard.testing import FakeReranker
from ragguard.tokens import token_counter
from tests.faults import block_network


def cands(*rows: tuple[str, str, float]) -> list[Candidate]:
    return [Candidate(i, t, s) for i, t, s in rows]


def guard(**settings: object) -> ContextGuard:
    base: dict[str, object] = {"score_kind": "similarity", "max_k": 10, "relative_threshold": 0.0}
    return ContextGuard(GuardConfig(**{**base, **settings}))


# --- the token budget --------------------------------------------------------------------


def test_budget_skips_a_passage_that_does_not_fit_and_fills_with_later_ones() -> None:
    # chars:4 -> a: 2 tokens, b: 10, c: 3, d: 1; budget 6: a (2), b does not fit (12 > 6),
    # c (5), d (6)
    sel = guard(max_tokens=6).select(
        "q",
        cands(("a", "x" * 8, 0.9), ("b", "y" * 40, 0.8), ("c", "z" * 12, 0.7), ("d", "w" * 3, 0.6)),
    )
    assert [c.id for c in sel.kept] == ["a", "c", "d"]
    (b,) = sel.dropped
    assert b.candidate.id == "b" and b.reason is Reason.OVER_TOKEN_BUDGET
    assert b.message == (
        "its 10 tokens do not fit in max_tokens=6: the passages kept before it use 2 "
        "(token_counter 'chars:4')"
    )
    assert [d.rank for d in sel.decisions] == [0, 1, 2, 3]


def test_budget_is_a_ceiling_over_min_k_and_a_long_top_passage() -> None:
    sel = guard(max_tokens=3, min_k=2).select(
        "q", cands(("long", "x" * 100, 0.9), ("s1", "ab", 0.5), ("s2", "abcdefghi", 0.4))
    )
    # the top passage alone exceeds the budget: skipped, the next ones still fit
    assert [c.id for c in sel.kept] == ["s1"]
    assert {d.candidate.id: d.reason for d in sel.dropped} == {
        "long": Reason.OVER_TOKEN_BUDGET,
        "s2": Reason.OVER_TOKEN_BUDGET,
    }


def test_budget_runs_after_the_cut_and_keeps_the_cut_reasons() -> None:
    sel = guard(max_tokens=100, max_k=2, relative_threshold=0.5).select(
        "q", cands(("a", "a", 0.9), ("b", "b", 0.8), ("c", "c", 0.85), ("d", "d", 0.1))
    )
    assert [c.id for c in sel.kept] == ["a", "c"]
    assert {d.candidate.id: d.reason for d in sel.dropped} == {
        "b": Reason.OVER_MAX_K,
        "d": Reason.BELOW_RELATIVE_THRESHOLD,
    }


def test_budget_applies_to_the_rerank_stage_selection() -> None:
    reranker = FakeReranker({"short": 2.0, "x" * 40: 3.0, "mid": 1.0}, score_kind="logit")
    g = ContextGuard(
        GuardConfig(score_kind="similarity", max_k=5, relative_threshold=0.0, max_tokens=4,
                    rerank={"enabled": True, "relative_threshold": 0.0}),
        reranker=reranker,
    )  # fmt: skip
    sel = g.select(
        "q", cands(("short", "short", 0.5), ("long", "x" * 40, 0.9), ("mid", "mid", 0.7))
    )
    # reranked order long, short, mid; long (10 tokens) does not fit, short (2) and mid (1) do
    assert [c.id for c in sel.kept] == ["short", "mid"]
    dropped = {d.candidate.id: d for d in sel.dropped}
    assert dropped["long"].reason is Reason.OVER_TOKEN_BUDGET
    assert dropped["long"].rerank_score == pytest.approx(1 / (1 + math.exp(-3.0)))


# --- near-duplicates -----------------------------------------------------------------------


def test_shingles_and_jaccard_by_hand() -> None:
    a = shingles("The cat sat on the mat")  # the cat sat, cat sat on, sat on the, on the mat
    b = shingles("the cat sat on a mat")  # the cat sat, cat sat on, sat on a, on a mat
    assert len(a) == 4 and len(b) == 4
    assert jaccard(a, b) == pytest.approx(2 / 6)
    assert shingles("Hi there") == frozenset({"hi there"})
    assert jaccard(shingles(""), shingles("")) == 0.0  # no words: never a near-duplicate


def test_each_character_of_a_script_without_spaces_is_a_shingle_word() -> None:
    # Han characters, numbers and Latin words are words of their own; punctuation is not
    assert shingles("工厂生产了3559辆EV。") == frozenset(
        {"工 厂 生", "厂 生 产", "生 产 了", "产 了 3559", "了 3559 辆", "3559 辆 ev"}
    )
    assert shingles("オースティン工場") == frozenset(
        {"オ ー ス", "ー ス テ", "ス テ ィ", "テ ィ ン", "ィ ン 工", "ン 工 場"}
    )
    # other scripts keep their words
    assert shingles("Crème brûlée à Köln") == frozenset({"crème brûlée à", "brûlée à köln"})


# ASCII punctuation, control characters Python's str.split() takes for whitespace
# (\x1c-\x1f), and non-ASCII letters, digits, marks and spaces, one of which (the Kelvin
# sign) lower-cases to ASCII
_TEXT = st.text(
    alphabet=st.sampled_from("aZ09_ -'.,!\t\n\x1c\x1f\x85\xa0\u2028éİKß٣\u0301") | st.characters(),
    max_size=60,
)


@given(_TEXT)
def test_words_are_the_lower_cased_word_runs_of_the_regular_expression(text: str) -> None:
    """The fast ASCII path of words() gives exactly what ``\\w+`` on the lower-cased
    text gives (the definition the near-duplicate stage documents)."""
    assert words(text) == re.findall(r"\w+", text.lower())


def test_near_duplicate_names_the_kept_passage_and_frees_the_budget() -> None:
    text = "refunds are issued within fourteen days of the return"
    sel = guard(near_duplicate_threshold=0.8, max_tokens=30).select(
        "q",
        cands(
            ("p1", text, 0.9),
            ("p2", text.upper() + "!", 0.85),  # the same words
            ("p3", "shipping takes three to five business days", 0.8),
            ("p4", text.replace("fourteen", "14"), 0.7),  # 6 of 10 shingles shared
        ),
    )
    dropped = {d.candidate.id: d for d in sel.dropped}
    dup = dropped["p2"]
    assert dup.reason is Reason.NEAR_DUPLICATE
    # item 12 of issue 21: duplicate_of is the id users look up; the position is apart
    assert (dup.duplicate_of, dup.duplicate_of_position) == ("p1", 0)
    assert dup.message.startswith("near-duplicate of kept id 'p1' at input position 0")
    # p1 (14 tokens) + p3 (11) = 25; p4 (13) does not fit, p2's 14 tokens were not spent
    assert [c.id for c in sel.kept] == ["p1", "p3"]
    assert dropped["p4"].reason is Reason.OVER_TOKEN_BUDGET
    assert "the passages kept before it use 25" in dropped["p4"].message


def test_near_duplicate_threshold_is_inclusive_and_off_by_default() -> None:
    rows = cands(("a", "w1 w2 w3 w4", 0.9), ("b", "w1 w2 w3 w5", 0.8))  # Jaccard 1/3
    assert len(guard().select("q", rows).kept) == 2
    assert [c.id for c in guard(near_duplicate_threshold=1 / 3).select("q", rows).kept] == ["a"]
    assert len(guard(near_duplicate_threshold=0.34).select("q", rows).kept) == 2


def test_exact_duplicate_ids_are_still_resolved_before_the_cut() -> None:
    sel = guard(near_duplicate_threshold=0.5).select(
        "q", cands(("a", "one two three", 0.9), ("a", "one two three", 0.5))
    )
    (d,) = sel.dropped
    assert d.reason is Reason.DUPLICATE_ID
    assert (d.duplicate_of, d.duplicate_of_position) == ("a", 0)  # the copy kept


# --- counters ------------------------------------------------------------------------------


def test_chars_counter_rounds_up() -> None:
    assert token_counter("chars:4").count(["", "a", "abcd", "abcde"]) == [0, 1, 1, 2]
    assert token_counter("chars:2.5").count(["abcdef"]) == [3]


@pytest.mark.parametrize("spec", ["chars", "chars:0", "chars:x", "bpe:gpt2", "hf:", "tiktoken"])
def test_malformed_counter_is_a_config_error(spec: str) -> None:
    with pytest.raises(ConfigError, match="token_counter"):
        GuardConfig(token_counter=spec)


def test_tiktoken_counter_uses_a_real_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tiktoken")
    import tiktoken
    import tiktoken.registry

    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    enc = tiktoken.Encoding(
        name="ragguard-test", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={}
    )
    monkeypatch.setitem(tiktoken.registry.ENCODINGS, "ragguard-test", enc)
    counter = token_counter("tiktoken:ragguard-test")
    # "abab" -> ab ab (2); "abc d" -> ab c, " ", d (4)
    assert counter.count(["abab", "abc d"]) == [2, 4]
    g = guard(max_tokens=3, token_counter="tiktoken:ragguard-test")
    sel = g.select("q", cands(("x", "abc d", 0.9), ("y", "abab", 0.8)))
    assert [c.id for c in sel.kept] == ["y"]
    with pytest.raises(ConfigError, match="tiktoken:no-such"):
        token_counter("tiktoken:no-such-encoding-here")


def test_hf_counter_loads_a_real_tokenizer_file_without_special_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "[CLS]": 1, "the": 2, "cat": 3}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A", special_tokens=[("[CLS]", 1)]
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    # the same file as a Hub tokenizer already in the local cache (the cache's own layout)
    constants = pytest.importorskip("huggingface_hub.constants")
    repo = tmp_path / "hub" / "models--ragguard-tests--words"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    tok.save(str(repo / "snapshots" / "0123abcd" / "tokenizer.json"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    attempts = block_network(monkeypatch)
    specs = (f"hf:{tmp_path / 'tokenizer.json'}", f"hf:{tmp_path}", "hf:ragguard-tests/words")
    for spec in specs:
        # "the cat sat." -> the, cat, [UNK], [UNK] (punctuation apart): 4, no [CLS]
        assert token_counter(spec).count(["the cat sat.", ""]) == [4, 0]
    assert attempts == []
    with pytest.raises(ConfigError, match="cannot load the tokenizer"):
        token_counter(f"hf:{tmp_path / 'missing' / 'tokenizer.json'}")


@pytest.fixture
def offline_tiktoken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No network and an empty tiktoken cache; the network attempts are recorded."""
    tiktoken_registry = pytest.importorskip("tiktoken.registry")
    monkeypatch.delitem(tiktoken_registry.ENCODINGS, "cl100k_base", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    return block_network(monkeypatch)


def test_tiktoken_encoding_not_cached_offline_fails_at_build_naming_the_cache(
    offline_tiktoken: list[str], tmp_path: Path
) -> None:
    # TB-02: the download's own error (requests' ConnectionError) escaped untyped
    with pytest.raises(ConfigError) as info:
        ContextGuard(score_kind="similarity", max_tokens=50, token_counter="tiktoken:cl100k_base")
    message = str(info.value)
    assert offline_tiktoken, "tiktoken was expected to try the download"
    assert "\n" not in message
    assert "token_counter 'tiktoken:cl100k_base'" in message
    assert "ConnectionError" in message  # the original error, by type
    assert "downloads its file once" in message and "TIKTOKEN_CACHE_DIR" in message
    assert str(tmp_path / "tiktoken-cache") in message  # where it looked


def test_unknown_tiktoken_encoding_lists_the_known_ones_on_one_line(
    offline_tiktoken: list[str],
) -> None:
    with pytest.raises(ConfigError) as info:
        token_counter("tiktoken:cl100k")
    message = str(info.value)
    assert "\n" not in message and "no encoding 'cl100k'" in message
    assert "cl100k_base" in message and "o200k_base" in message
    assert offline_tiktoken == []  # an unknown name never reaches the network


def test_hf_tokenizer_not_in_the_local_cache_is_never_downloaded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("tokenizers")
    attempts = block_network(monkeypatch)
    name = "ragguard-tests/no-such-tokenizer"
    with pytest.raises(ConfigError) as info:
        ContextGuard(max_tokens=50, token_counter=f"hf:{name}")
    message = str(info.value)
    assert attempts == []  # nothing looked up, nothing downloaded
    assert "\n" not in message
    assert f"no tokenizer {name!r} in the local Hugging Face cache" in message
    assert f"hf download {name} tokenizer.json" in message
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no tokenizer\.json"):
        token_counter(f"hf:{tmp_path / 'empty'}")


@pytest.mark.parametrize(("spec", "module", "extra"), [
    ("tiktoken:cl100k_base", "tiktoken", "tiktoken"),
    ("hf:bert-base-uncased", "tokenizers", "tokenizers"),
])  # fmt: skip
def test_missing_counter_package_names_the_extra_at_guard_construction(
    monkeypatch: pytest.MonkeyPatch, spec: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    config = GuardConfig(max_tokens=100, token_counter=spec)  # the config itself is fine
    with pytest.raises(MissingDependencyError, match=rf"ragguard-context\[{extra}\]"):
        ContextGuard(config)
    ContextGuard(GuardConfig(token_counter=spec))  # no budget: the counter is never loaded


# --- config layers ---------------------------------------------------------------------------


def test_budget_and_threshold_from_toml_env_and_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ragguard.toml"
    path.write_text('max_tokens = 500\nnear_duplicate_threshold = 0.9\ntoken_counter = "chars:3"\n')
    cfg = GuardConfig.from_file(path)
    assert (cfg.max_tokens, cfg.near_duplicate_threshold, cfg.token_counter) == (
        500,
        0.9,
        "chars:3",
    )
    monkeypatch.setenv("RAGGUARD_MAX_TOKENS", "200")
    monkeypatch.setenv("RAGGUARD_TOKEN_COUNTER", "chars:5")
    cfg = GuardConfig.from_file(path)
    assert (cfg.max_tokens, cfg.token_counter) == (200, "chars:5")
    assert cfg.source_of("max_tokens") == "environment RAGGUARD_MAX_TOKENS"
    assert GuardConfig.from_file(path, max_tokens=50).max_tokens == 50
    saved = GuardConfig.from_file(path).save(tmp_path / "out.toml")
    again = GuardConfig.from_file(saved)
    assert (again.max_tokens, again.token_counter, again.near_duplicate_threshold) == (
        200, "chars:5", 0.9,
    )  # fmt: skip
    assert again.policy_params().max_tokens == 200


@pytest.mark.parametrize(
    "bad", [{"max_tokens": 0}, {"near_duplicate_threshold": 0.0}, {"near_duplicate_threshold": 1.5}]
)
def test_out_of_range_values_are_config_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        GuardConfig(**bad)  # type: ignore[arg-type]


def test_a_near_duplicate_of_a_passage_the_budget_drops_stays_dropped_and_says_so() -> None:
    long = " ".join(f"word{i}" for i in range(30))  # 30 words, 7 chars each: 60 tokens
    sel = guard(near_duplicate_threshold=0.8, max_tokens=20).select(
        "q", cands(("a", long, 0.9), ("b", long + " extra", 0.8), ("c", "short text", 0.7))
    )
    assert [c.id for c in sel.kept] == ["c"]
    dropped = {d.candidate.id: d for d in sel.dropped}
    assert dropped["a"].reason is Reason.OVER_TOKEN_BUDGET
    assert dropped["b"].reason is Reason.NEAR_DUPLICATE and dropped["b"].duplicate_of == "a"
    assert dropped["b"].message.startswith("near-duplicate of id 'a' at input position 0")
    assert dropped["b"].message.endswith("(that passage then did not fit in max_tokens either)")
