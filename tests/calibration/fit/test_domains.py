"""Per-domain calibration (``Domains``): one search per domain on its queries of the global
split, fallbacks to the global config, and the ``[domains.NAME]`` tables of the written TOML."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from ragguard.calibration import (
    Answerability,
    Calibrator,
    Domains,
    Guarantee,
    RerankSearch,
    Split,
    load_evalset,
)
from ragguard.calibration.fit.domains import MIN_DOMAIN_QUERIES
from ragguard.calibration.fit.statistics import split_queries
from ragguard.errors import ConfigError, EvalSetError
from tests.calibration.domain_data import write_domains

HOLDOUT, SEED = 0.5, 0


def _calibrator(**domains: object) -> Calibrator:
    return Calibrator(
        objective="utility", split=Split(holdout=HOLDOUT, seed=SEED), domains=Domains(**domains)
    )


def test_domains_get_their_own_setting_and_one_toml_holds_what_differs(tmp_path: Path) -> None:
    res = _calibrator(profiles={"precise": "legal"}).fit(load_evalset(write_domains(tmp_path)))
    # global: 36 broad queries gain 3 from top-3, 24 precise lose 2 -> top-3 (or more)
    assert res.config().max_k >= 3
    d = {x.name: x for x in res.domains.domains}
    assert d["precise"].fallback is None and d["precise"].config.max_k == 1
    c = d["precise"].against_global
    assert c.verdict("utility") == "better"  # 1.0 against -1.0 on every held-out query
    assert "beats global" in res.domains.verdict()
    path = res.save_config(tmp_path / "ragguard.toml")
    data = tomllib.loads(path.read_text())
    # the contract: global settings at the top level as without domains ...
    alone = Calibrator(objective="utility", split=Split(holdout=HOLDOUT, seed=SEED))
    plain = tomllib.loads(
        alone.fit(load_evalset(write_domains(tmp_path)))
        .save_config(tmp_path / "g.toml")
        .read_text()
    )
    top = {k: v for k, v in data.items() if k not in ("domains", "provenance")}
    assert top == {k: v for k, v in plain.items() if k != "provenance"}
    # ... one table per domain with only the keys that differ, provenance apart
    assert set(data["domains"]) == {"precise", "broad"}
    precise = dict(data["domains"]["precise"])
    assert precise.pop("reference")["kept"]["n"] == 24  # its own queries (the drift watch)
    assert precise == {"max_k": 1, "profile": "legal"}
    for name, table in data["domains"].items():
        assert "provenance" not in table
        for key, value in table.items():
            assert key in top and top[key] != value, (name, key)
    prov = data["provenance"]["domains"]
    assert prov["precise"]["fallback"] is False and prov["precise"]["profile"] == "legal"
    assert prov["precise"]["queries"] == 24


def test_small_and_held_out_only_domains_fall_back_with_a_reason(tmp_path: Path) -> None:
    calib, held = split_queries(60, HOLDOUT, SEED)
    tiny = {int(calib[0]): "tiny"}
    lonely = {int(r): "lonely" for r in held[:2]}
    res = _calibrator().fit(load_evalset(write_domains(tmp_path, {**tiny, **lonely})))
    d = {x.name: x for x in res.domains.domains}
    assert d["tiny"].queries == 1 and d["tiny"].config is None
    assert f"fewer than {MIN_DOMAIN_QUERIES}" in d["tiny"].fallback
    assert "held out: nothing to choose on" in d["lonely"].fallback
    path = res.save_config(tmp_path / "ragguard.toml")
    data = tomllib.loads(path.read_text())
    assert data["domains"]["tiny"] == {} and data["domains"]["lonely"] == {}  # still known
    assert data["provenance"]["domains"]["tiny"]["fallback"] is True
    assert "fewer than" in data["provenance"]["domains"]["tiny"]["why"]


def test_a_domain_without_held_out_queries_is_not_written_unchecked(tmp_path: Path) -> None:
    calib, _ = split_queries(60, HOLDOUT, SEED)
    only = {int(r): "unchecked" for r in calib[:MIN_DOMAIN_QUERIES]}
    res = _calibrator().fit(load_evalset(write_domains(tmp_path, only)))
    d = {x.name: x for x in res.domains.domains}["unchecked"]
    assert d.heldout == 0 and "cannot be checked" in (d.fallback or "")


def test_bad_domain_options_raise_one_line(tmp_path: Path) -> None:
    es = load_evalset(write_domains(tmp_path))
    with pytest.raises(ConfigError, match="names domain 'legal', which no query has"):
        _calibrator(profiles={"legal": "legal"}).fit(es)
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        Domains(profiles={"precise": "nope"})
    with pytest.raises(ConfigError, match="must not be empty"):
        Domains(profiles={"": "legal"})
    with pytest.raises(ConfigError, match="--by"):
        Domains(by=" ")
    with pytest.raises(EvalSetError, match="no query has a metadata key 'tenant'"):
        _calibrator(by="tenant").fit(es)
    with pytest.raises(ConfigError, match="not supported yet"):
        Calibrator(domains=Domains(), rerank=RerankSearch(scores={"q": {"d": 1.0}}))


def test_no_domains_is_the_calibration_it_was(tmp_path: Path) -> None:
    es = load_evalset(write_domains(tmp_path))
    res = Calibrator(objective="utility", split=Split(holdout=HOLDOUT, seed=SEED)).fit(es)
    assert res.domains is None
    assert "domains" not in tomllib.loads(res.save_config(tmp_path / "c.toml").read_text())
    assert np.array_equal(res.header.calibration_rows, split_queries(60, HOLDOUT, SEED)[0])


def test_the_guarantee_is_certified_per_domain(tmp_path: Path) -> None:
    es = load_evalset(write_domains(tmp_path, n=200))
    calibrator = Calibrator(
        objective="utility",
        split=Split(holdout=HOLDOUT, seed=SEED),
        guarantee=Guarantee(recall=0.9),
        domains=Domains(),
    )
    d = {x.name: x for x in calibrator.fit(es).domains.domains}
    # 13 calibration queries of one relevant passage cannot certify 0.9; 87 of three can
    assert "no setting guarantees" in (d["precise"].fallback or "")
    assert d["broad"].fallback is None
    assert d["broad"].config.provenance["guarantee"]["met"] is True
    assert d["broad"].config.provenance["queries"]["total"] == 176


def test_answerability_per_domain_falls_back_where_a_domain_has_too_few_in_scope_queries(
    tmp_path: Path,
) -> None:
    es = load_evalset(write_domains(tmp_path, n=120, unanswerable=frozenset(range(60, 120, 3))))
    calibrator = Calibrator(
        objective="utility",
        split=Split(holdout=HOLDOUT, seed=SEED),
        answerability=Answerability(max_false_abstain=0.1),
        domains=Domains(),
    )
    res = calibrator.fit(es)
    d = {x.name: x for x in res.domains.domains}
    # no unanswerable query of its own: its answerable ones are taken as in scope (the
    # one-sided conformal floor), too few of them to bound 0.1 at 95%
    assert "no unanswerable query given" in (d["precise"].fallback or "")
    assert "at least 29 answerable calibration queries" in (d["precise"].fallback or "")
    assert d["broad"].config is not None
    floor = d["broad"].config.provenance["answerability"]
    assert floor["met"] is True and floor["calibration"]["unanswerable"] > 0
    assert d["broad"].config.min_evidence == floor["min_evidence"]
