"""Routing per domain at runtime (issue 37): ``select(..., domain=...)``, ``aselect`` and
``for_domain`` use one guard per domain, built once; an unknown domain falls back to the
global settings and says so once."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest

from ragguard import Candidate, ConfigWarning, ContextGuard, GuardConfig, Selection
from ragguard.errors import ArgumentTypeError

CANDIDATES = [Candidate(f"d{i}", f"passage {i}", score=1.0 - 0.05 * i) for i in range(8)]
DOMAINS = {"legal": {"max_k": 2}, "support": {}}


def guard(**settings: object) -> ContextGuard:
    return ContextGuard(
        GuardConfig(score_kind="similarity", max_k=5, relative_threshold=0.5, **settings)  # type: ignore[arg-type]
    )


def kept(selection: Selection) -> list[str]:
    return [c.id for c in selection.kept]


def test_select_with_a_domain_uses_its_settings_and_records_it() -> None:
    g = guard(domains=DOMAINS)
    plain, legal, support = (
        g.select("q", CANDIDATES, domain=d) for d in (None, "legal", "support")
    )
    assert kept(plain) == kept(support) == ["d0", "d1", "d2", "d3", "d4"]
    assert kept(legal) == ["d0", "d1"]
    assert (plain.domain, legal.domain, support.domain) == (None, "legal", "support")
    legal_async = asyncio.run(g.aselect("q", CANDIDATES, domain="legal"))
    assert (kept(legal_async), legal_async.domain) == (["d0", "d1"], "legal")
    # the call's own cap still applies within the domain
    assert kept(g.select("q", CANDIDATES, domain="support", max_k=1)) == ["d0"]


def test_a_domain_guard_is_built_once_and_shares_on_selection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str | None] = []
    g = ContextGuard(
        GuardConfig(score_kind="similarity", domains=DOMAINS),
        on_selection=lambda s: seen.append(s.domain),
    )
    legal = g.for_domain("legal")
    built = 0
    init = ContextGuard.__init__

    def counted(self: ContextGuard, *args: object, **kwargs: object) -> None:
        nonlocal built
        built += 1
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ContextGuard, "__init__", counted)
    for _ in range(3):
        g.select("q", CANDIDATES, domain="legal")
    assert built == 0 and g.for_domain("legal") is legal
    assert legal.config == g.config.for_domain("legal") and legal.domain == "legal"
    assert seen == ["legal"] * 3
    assert "domain='legal'" in repr(legal)


def test_an_unknown_domain_uses_the_global_settings_and_warns_once_per_guard() -> None:
    g = guard(domains=DOMAINS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = g.select("q", CANDIDATES, domain="legl")
        g.select("q", CANDIDATES, domain="legl")
        asyncio.run(g.aselect("q", CANDIDATES, domain="legl"))
        g.select("q", CANDIDATES, domain="billing")
        guard(domains=DOMAINS).select("q", CANDIDATES, domain="legl")  # another guard
    messages = [str(w.message) for w in caught if w.category is ConfigWarning]
    assert len(messages) == 3, messages
    assert messages[0] == (
        "unknown domain 'legl': the global settings are used (known domains: legal, "
        "support); add a [domains.legl] table to the config to route it"
    )
    assert caught[0].filename == __file__  # it points at the caller of select()
    assert kept(first) == kept(g.select("q", CANDIDATES)) and first.domain is None


def test_ever_new_unknown_domains_leave_the_guard_bounded() -> None:
    g = guard(domains=DOMAINS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(1100):  # per-tenant ids with no table
            assert g.select("q", CANDIDATES, domain=f"tenant-{i}").domain is None
    assert len(caught) == 1024  # one per name while the guard remembers names
    assert len(g._routed) == 1024
    assert g.select("q", CANDIDATES, domain="legal").domain == "legal"  # still routes


def test_a_guard_without_domains_warns_for_any_domain() -> None:
    with pytest.warns(ConfigWarning, match=r"known domains: none"):
        selection = guard().select("q", CANDIDATES, domain="legal")
    assert selection.domain is None and len(selection.kept) == 5


@pytest.mark.parametrize("domain", [3, b"legal", ["legal"]])
def test_a_domain_that_is_not_a_str_is_one_clear_error(domain: object) -> None:
    g = guard(domains=DOMAINS)
    with pytest.raises(ArgumentTypeError, match=r"^domain must be a str naming a \[domains"):
        g.select("q", CANDIDATES, domain=domain)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        asyncio.run(g.aselect("q", CANDIDATES, domain=domain))  # type: ignore[arg-type]


def test_from_file_for_domain(tmp_path: Path) -> None:
    path = tmp_path / "ragguard.toml"
    path.write_text(
        'score_kind = "similarity"\nmax_k = 4\n[domains.legal]\nmax_k = 1\n', encoding="utf-8"
    )
    legal = ContextGuard.from_file(path).for_domain("legal")
    assert kept(legal.select("q", CANDIDATES)) == ["d0"]
    assert legal.select("q", CANDIDATES).domain == "legal"


class Scorer:
    """A reranker passed in code: probability by text length, calls counted."""

    score_kind = "probability"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls += 1
        return [1.0 / (1 + i) for i, _ in enumerate(texts)]


def test_a_reranker_passed_in_code_serves_every_domain() -> None:
    scorer = Scorer()
    rerank = {"enabled": True, "top_n": 6}
    domains = {"short": {"rerank": {"top_n": 2}}, "off": {"rerank": {"enabled": False}}}
    g = ContextGuard(
        GuardConfig(score_kind="similarity", rerank=rerank, domains=domains), reranker=scorer
    )
    short = g.select("q", CANDIDATES, domain="short")
    assert g.for_domain("short").reranker is scorer and scorer.calls == 1
    assert short.rerank is not None and short.rerank.top_n == 2
    assert g.for_domain("off").reranker is None
    assert g.select("q", CANDIDATES, domain="off").rerank is None and scorer.calls == 1


@pytest.mark.slow  # builds and loads a small cross-encoder
def test_the_cross_encoder_is_loaded_once_for_domains_with_its_model_settings(
    logit_model: Path,
) -> None:
    rerank = {"enabled": True, "model": str(logit_model), "device": "cpu", "top_n": 6}
    domains = {"short": {"rerank": {"top_n": 2}}, "other": {"rerank": {"batch_size": 4}}}
    g = ContextGuard(GuardConfig(score_kind="similarity", rerank=rerank, domains=domains))
    assert g.for_domain("short").reranker is g.reranker  # only top_n differs: shared
    assert g.for_domain("other").reranker is not g.reranker  # a model setting differs
