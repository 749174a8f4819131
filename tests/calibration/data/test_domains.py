"""A query's domain: the JSONL ``domain`` field, a ``domains.tsv`` beside TREC qrels or in a
BEIR folder, or a ``metadata`` key (``EvalSet.domains``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragguard.calibration import EvalSet, load_evalset
from ragguard.errors import EvalSetError


def _jsonl(path: Path, *lines: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _q(qid: str, **extra: object) -> dict[str, object]:
    return {"query_id": qid, "query": qid, "relevant": ["d1"], **extra}


def test_jsonl_domain_field_groups_queries_in_order(tmp_path: Path) -> None:
    es = load_evalset(
        _jsonl(
            tmp_path / "e.jsonl",
            _q("a", domain="legal"),
            _q("b"),
            _q("c", domain="hr"),
            _q("d", domain="legal"),
        )
    )
    assert es.queries["a"].domain == "legal" and es.queries["b"].domain is None
    assert es.domains() == {"legal": ("a", "d"), "hr": ("c",)}
    sub = es.subset(es.domains()["legal"])
    assert sub.qids == ("a", "d") and es.qids == ("a", "b", "c", "d")


@pytest.mark.parametrize("value", ["", "  ", 3])
def test_a_bad_domain_name_is_one_line_with_the_line(tmp_path: Path, value: object) -> None:
    path = _jsonl(tmp_path / "e.jsonl", _q("a"), _q("b", domain=value))
    with pytest.raises(EvalSetError, match=r"domain name must") as exc:
        load_evalset(path)
    assert ":2" in str(exc.value) and "\n" not in str(exc.value)


def test_metadata_key_names_the_domain(tmp_path: Path) -> None:
    es = load_evalset(
        _jsonl(
            tmp_path / "e.jsonl",
            _q("a", metadata={"tenant": "x"}),
            _q("b", metadata={"tenant": "y"}),
        )
    )
    assert es.domains("tenant") == {"x": ("a",), "y": ("b",)}
    with pytest.raises(EvalSetError, match="no query has a metadata key 'team'"):
        es.domains("team")
    with pytest.raises(EvalSetError, match="no query has a 'domain' field"):
        es.domains()
    bad = load_evalset(_jsonl(tmp_path / "f.jsonl", _q("a", metadata={"tenant": ""})))
    with pytest.raises(EvalSetError, match="query 'a', 'tenant': a domain name must not be empty"):
        bad.domains("tenant")


def test_domains_tsv_beside_trec_qrels(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 1\n")
    (tmp_path / "domains.tsv").write_text("# id\tdomain\nq1\tlegal\nq3\tsupport\nunlabelled\tx\n")
    es = load_evalset(qrels)
    assert es.domains() == {"legal": ("q1",), "support": ("q3",)}
    (tmp_path / "domains.tsv").write_text("q1 legal\n")
    with pytest.raises(EvalSetError, match="no tab between the query id and the domain"):
        load_evalset(qrels)
    (tmp_path / "domains.tsv").write_text("q1\t\n")
    with pytest.raises(EvalSetError, match="must not be empty"):
        load_evalset(qrels)


def test_domains_tsv_in_a_beir_folder(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n"
    )
    _jsonl(tmp_path / "corpus.jsonl", {"_id": "d1", "text": "x"}, {"_id": "d2", "text": "y"})
    (tmp_path / "domains.tsv").write_text("q1\tlegal\nq2\tlegal\n")
    assert load_evalset(tmp_path).domains() == {"legal": ("q1", "q2")}


@pytest.mark.parametrize("kind", ["pandas", "arrow"])
def test_a_domain_column_in_a_qrels_table(kind: str) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "qid": ["a", "a", "b", "c"],
            "docid": ["d1", "d2", "d1", "d3"],
            "grade": [1, 0, 1, 1],
            "domain": ["legal", "legal", None, "hr"],
        }
    )
    if kind == "arrow":
        pa = pytest.importorskip("pyarrow")
        frame = pa.Table.from_pandas(frame, preserve_index=False)
    es = EvalSet.from_dicts(frame)
    assert es.domains() == {"legal": ("a",), "hr": ("c",)}


def test_a_table_with_two_domains_for_one_query_is_one_line() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"qid": ["a", "a"], "docid": ["d1", "d2"], "grade": [1, 0],
                          "domain": ["legal", "hr"]})  # fmt: skip
    with pytest.raises(EvalSetError, match="row 1: query 'a' is in domain 'legal' and 'hr'"):
        EvalSet.from_dicts(frame)
    frame["domain"] = ["", ""]
    with pytest.raises(EvalSetError, match="row 0: a domain name must not be empty"):
        EvalSet.from_dicts(frame)
