"""``ragguard train-reranker``: pairs, splits, the never-worse rule, the written folder."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from numpy.typing import NDArray
from typer.testing import CliRunner

pytest.importorskip("sentence_transformers")
pytest.importorskip("sklearn")

from ragguard import Candidate, ConfigError, ContextGuard, GuardConfig
from ragguard.calibration import EvalSet, load_evalset
from ragguard.calibration.fit.statistics import Interval, queries_needed, split_queries
from ragguard.calibration.train import output, reranker
from ragguard.calibration.train.choice import Candidate as Scorer
from ragguard.calibration.train.choice import auc_difference, choose, pair_auc
from ragguard.calibration.train.features import Ticker
from ragguard.calibration.train.pairs import split_for_training, training_pairs
from ragguard.calibration.train.reranker import (
    Negatives,
    RerankerTrainer,
    Training,
    TrainResult,
    train_reranker,
)
from ragguard.cli import app
from ragguard.rerank import CrossEncoderReranker, load_reranker
from ragguard.trained import CARD_NAME, TrainedReranker
from tests.calibration.training_topics import TOPICS, VALIDATION
from tests.cli.checks import error_line
from tests.faults import LiveStaging, killed_staging_folder
from tests.rerank_models import build_bi_encoder

F64 = NDArray[np.float64]

FILLER = "note log entry about training week"
FUSION = ["fusion"]


def _write_set(folder: Path, *, relevant_is_query: bool = False, n: int = len(TOPICS)) -> Path:
    """``n`` queries "what is my TOPIC record": the relevant passage states the record;
    two same-topic distractors (a goal, an old plan) repeat the query's common words,
    which a cosine of random embeddings follows and BM25 discounts; one unlabelled
    candidate and passages of other topics."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    topics = TOPICS[:n]
    for i, t in enumerate(topics):
        query = f"what is my {t} record"
        rel = query if relevant_is_query else f"{t} record {100 + i} lb"
        cands = [
            {"id": f"{t}-rel", "score": 0.7, "text": rel},
            {"id": f"{t}-goal", "score": 0.9, "text": f"what is my {t} goal what is my plan"},
            {"id": f"{t}-plan", "score": 0.8, "text": f"what is my old {t} plan is it my"},
            {"id": f"{t}-misc", "score": 0.6, "text": f"{t} misc {FILLER}"},
            {"id": f"{t}-other", "score": 0.5, "text": f"{FILLER} {topics[(i + 1) % n]}"},
        ]
        lines.append(
            {
                "query_id": f"q{i:02d}",
                "query": query,
                "relevant": {f"{t}-rel": 5},
                "distractors": [f"{t}-goal", f"{t}-plan"],
                "not_relevant": [f"{t}-other"],
                "candidates": cands,
            }
        )
    path = folder / "evalset.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def _words(path: Path) -> list[str]:
    return [
        c["text"] + " " + row["query"]
        for row in map(json.loads, path.read_text().splitlines())
        for c in row["candidates"]
    ]


def _aucs(card: dict[str, object]) -> dict[str, tuple[float, float]]:
    cands = card["validation"]["candidates"]  # type: ignore[index]
    return {k: (v["auc_distractor"], v["auc_other"]) for k, v in cands.items()}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("train")
    path = _write_set(root / "set")
    encoder = build_bi_encoder(root / "encoder", _words(path))
    return path, encoder


@pytest.fixture(scope="module")
def trained(data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> object:
    path, encoder = data
    out = tmp_path_factory.mktemp("out") / "scorer"
    return train_reranker(
        load_evalset(path), out=out, base=str(encoder), seed=0, kinds=FUSION, validation=VALIDATION
    )


def test_pairs_put_distractors_first_and_never_touch_held_out_queries(
    data: tuple[Path, Path],
) -> None:
    path, _ = data
    ev = load_evalset(path)
    split = split_for_training(ev, 0.3, 0.2, seed=5)
    # calibrate's own held-out split, computed independently
    perm = np.random.default_rng(5).permutation(len(ev.qids))
    held = {ev.qids[i] for i in perm[: round(0.3 * len(ev.qids))]}
    assert set(split.held_out) == held
    assert {ev.qids[i] for i in split_queries(len(ev.qids), 0.3, 5)[1]} == held
    assert not set(split.train) & set(split.validation)
    assert set(split.train) | set(split.validation) | held == set(ev.qids)

    pairs = training_pairs(
        ev, split.train, runs=["default"], has_text=lambda q, d: True,
        same_query_negatives=1, random_negatives=2, seed=5,
    )  # fmt: skip
    assert {p.qid for p in pairs} == set(split.train)
    held_docs = {d for q in held for d in ev.runs["default"].candidates[q]}
    order = ["relevant", "distractor", "judged", "same_query", "random"]
    for qid in split.train:
        mine = [p for p in pairs if p.qid == qid]
        kinds = [p.kind for p in mine]
        assert kinds == sorted(kinds, key=order.index)  # positives, then distractors first
        t = ev.queries[qid].text.split()[3]  # type: ignore[union-attr]
        by_kind = {k: {p.doc for p in mine if p.kind == k} for k in order}
        assert by_kind["relevant"] == {f"{t}-rel"}
        assert by_kind["distractor"] == {f"{t}-goal", f"{t}-plan"}
        assert by_kind["judged"] == {f"{t}-other"}
        assert by_kind["same_query"] == {f"{t}-misc"}  # the one unlabelled candidate
        assert len(by_kind["random"]) == 2 and not by_kind["random"] & held_docs
        assert [p.target for p in mine if p.kind == "relevant"] == [1.0]  # grade 5 of 5


def test_held_out_labels_change_nothing(data: tuple[Path, Path], tmp_path: Path) -> None:
    path, encoder = data
    ev = load_evalset(path)
    held = split_for_training(ev, 0.3, VALIDATION, 0).held_out
    # flip the held-out queries' labels: relevant <-> a distractor
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for row in rows:
        if row["query_id"] in held:
            (rel,) = row["relevant"]
            goal = row["distractors"][0]
            row["relevant"], row["distractors"] = {goal: 5}, [rel, row["distractors"][1]]
    flipped = tmp_path / "flipped" / "evalset.jsonl"
    flipped.parent.mkdir()
    flipped.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    kw = {"base": str(encoder), "kinds": FUSION, "validation": VALIDATION}
    a = train_reranker(ev, out=tmp_path / "a", **kw)  # type: ignore[arg-type]
    b = train_reranker(load_evalset(flipped), out=tmp_path / "b", **kw)  # type: ignore[arg-type]
    assert a.path is not None and b.path is not None
    assert a.card["fusion_head"] == b.card["fusion_head"]
    assert _aucs(a.card) == _aucs(b.card)
    assert (a.path / "lexical.json").read_text() == (b.path / "lexical.json").read_text()


def test_pair_auc_by_hand() -> None:
    groups = [(np.array([3.0]), np.array([1.0, 3.0, 4.0])), (np.array([2.0]), np.array([0.0]))]
    assert pair_auc(groups) == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert math.isnan(pair_auc([(np.array([1.0]), np.empty(0))]))


def test_fusion_is_written_complete_and_loads_everywhere(
    trained: object, data: tuple[Path, Path]
) -> None:
    from ragguard.calibration.train.pairs import ValidationQuery, validation_queries

    assert isinstance(trained, TrainResult)
    assert trained.chosen == "fusion" and trained.path is not None
    card = json.loads((trained.path / CARD_NAME).read_text())
    for key in ("base", "kind", "data", "pairs", "validation", "training_seconds", "settings"):
        assert card[key] is not None, key
    assert card["data"]["fingerprint"] and card["settings"]["seed"] == 0
    assert set(card["validation"]["candidates"]) == {"base", "bm25", "coverage", "fusion"}
    assert card["pairs"]["total"] == sum(v for k, v in card["pairs"].items() if k != "total")
    assert "fusion" in (trained.path / "README.md").read_text()
    fusion = card["validation"]["candidates"]["fusion"]
    base = card["validation"]["candidates"]["base"]
    assert fusion["auc_distractor"] > base["auc_distractor"]
    assert fusion["auc_other"] >= base["auc_other"]

    # the loaded scorer reproduces the card's validation AUCs (runtime == training time)
    path, _ = data
    ev = load_evalset(path)
    reranker = load_reranker(str(trained.path))
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.score_kind.value == "logit"
    val: list[ValidationQuery] = validation_queries(
        ev, trained.split.validation, runs=["default"], has_text=lambda q, d: True
    )
    texts = {
        c: row for row in map(json.loads, path.read_text().splitlines()) for c in [row["query_id"]]
    }
    dis, oth = [], []
    for v in val:
        by_id = {c["id"]: c["text"] for c in texts[v.qid]["candidates"]}
        s = np.asarray(reranker(texts[v.qid]["query"], [by_id[d] for d in v.docs]))
        one = np.asarray(reranker(texts[v.qid]["query"], [by_id[v.docs[-1]]]))
        assert one[0] == pytest.approx(s[-1])  # pointwise: a text's score ignores the others
        a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
        dis.append((s[:a], s[a:b]))
        oth.append((s[:a], s[b:]))
    assert pair_auc(dis) == pytest.approx(fusion["auc_distractor"])
    assert pair_auc(oth) == pytest.approx(fusion["auc_other"])

    # [rerank] model = DIR in a guard, unchanged
    config = GuardConfig.model_validate(
        {"rerank": {"enabled": True, "model": str(trained.path), "top_n": 5}}
    )
    guard = ContextGuard(config)
    row = texts[val[0].qid]
    docs = [Candidate(c["id"], c["text"], c["score"]) for c in row["candidates"]]
    selection = guard.select(row["query"], docs)
    assert selection.rerank is not None and not selection.rerank.failed
    direct = TrainedReranker(trained.path)(row["query"], [d.text for d in docs])
    got = dict(zip(selection.rerank.positions, selection.rerank.raw_scores, strict=True))
    assert [got[i] for i in range(len(docs))] == pytest.approx(list(direct))


@pytest.mark.parametrize(
    "kinds", [FUSION, pytest.param(["fusion", "bi-encoder"], marks=pytest.mark.slow)]
)
def test_a_candidate_that_cannot_beat_the_base_is_never_written(
    kinds: list[str], tmp_path: Path
) -> None:
    # each relevant passage is its query verbatim: the base cosine is 1.0 for it and
    # below 1 for every other passage, so validation AUCs of the base are 1.0 and no
    # trained candidate can be strictly better
    path = _write_set(tmp_path / "set", relevant_is_query=True)
    encoder = build_bi_encoder(tmp_path / "enc", _words(path))
    out = tmp_path / "out"
    result = train_reranker(
        load_evalset(path), out=out, base=str(encoder), training=Training(max_steps=4),
        validation=VALIDATION, kinds=kinds,
    )  # fmt: skip
    assert [c.name for c in result.candidates if c.role == "trained"] == kinds
    assert result.base.auc_distractor == 1.0 and result.base.auc_other == 1.0
    assert result.path is None and result.chosen is None
    assert not out.exists()
    assert not any(c.eligible for c in result.candidates)
    assert result.why.startswith("no trained candidate beat the base")
    res = _invoke(path, "--out", out, "--base", encoder, "--kind", "fusion", "--validation", 0.5)
    assert res.exit_code == 1 and not out.exists()
    assert "not written" in res.stderr and "beat the base" in res.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ragguard-")]


def test_reproducible_by_seed(data: tuple[Path, Path], tmp_path: Path, trained: object) -> None:
    path, encoder = data
    again = train_reranker(
        load_evalset(path), out=tmp_path / "again", base=str(encoder), seed=0, kinds=FUSION,
        validation=VALIDATION,
    )  # fmt: skip
    assert again.card["fusion_head"] == trained.card["fusion_head"]  # type: ignore[attr-defined]
    assert again.card["pairs"] == trained.card["pairs"]  # type: ignore[attr-defined]
    other = split_for_training(load_evalset(path), 0.3, VALIDATION, seed=1)
    assert other.validation != again.split.validation or other.held_out != again.split.held_out


def test_cli_writes_and_prints_the_next_step(data: tuple[Path, Path], tmp_path: Path) -> None:
    path, encoder = data
    out = tmp_path / "cli"
    args = ["train-reranker", str(path), "--out", str(out), "--base", str(encoder),
            "--validation", str(VALIDATION)]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--kind", "fusion"])
    assert res.exit_code == 0, res.output
    assert (out / CARD_NAME).is_file()
    assert f"ragguard calibrate {path} --rerank {out}" in " ".join(res.stdout.split())
    again = CliRunner().invoke(app, [*args, "--kind", "fusion"])
    assert again.exit_code == 1 and "overwrite" in again.stderr
    helped = CliRunner().invoke(app, ["train-reranker", "--help"])
    assert "--out" in helped.stdout and "beats the base" in " ".join(helped.stdout.split())


@pytest.mark.slow  # fine-tunes the packaged MiniLM
def test_bi_encoder_fine_tuning_beats_the_base_and_is_written(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    """On this set the base ranks the distractors above the record on many queries (they
    repeat the query's words; validation auc_distractor well below 1): a few steps at a
    high learning rate teach it otherwise, so the bi-encoder is clearly better (the
    interval of its gain lies above 0), chosen and written. (The never-written side:
    test_a_candidate_that_cannot_beat_the_base_is_never_written.)"""
    path, encoder = data
    ev = load_evalset(path)
    training = Training(max_steps=6, batch_size=8, learning_rate=1e-3, device="cpu")
    kwargs = {"base": str(encoder), "kinds": ["bi-encoder"], "training": training,
              "validation": VALIDATION}  # fmt: skip
    result = train_reranker(ev, out=tmp_path / "bi", **kwargs)  # type: ignore[arg-type]
    (bi,) = [c for c in result.candidates if c.name == "bi-encoder"]
    assert "steps" in bi.note and bi.role == "trained"
    base = result.base
    assert base.auc_distractor < 0.7
    assert bi.auc_distractor > base.auc_distractor and bi.auc_other >= base.auc_other
    assert bi.gain is not None and bi.gain.low > 0
    assert bi.eligible and result.chosen == "bi-encoder" and result.path is not None
    reranker = load_reranker(str(result.path))
    s = np.asarray(reranker("what is my squat record", ["squat record 101 lb", "golf"]))
    assert s.shape == (2,) and np.all(np.abs(s) <= 1.0 + 1e-6)  # cosines
    again = train_reranker(ev, out=tmp_path / "bi2", **kwargs)  # type: ignore[arg-type]
    (bi2,) = [c for c in again.candidates if c.name == "bi-encoder"]
    assert (bi2.auc_distractor, bi2.auc_other) == (bi.auc_distractor, bi.auc_other)  # seeded


# --------------------------------------------------------------------------- a win shown


def _invoke(*args: object) -> Result:
    return CliRunner().invoke(app, ["train-reranker", *(str(a) for a in args)])


def _validation_count(n: int, holdout: float, validation: float) -> int:
    """Validation queries of an n-query set, by splitting a real one."""
    ev = EvalSet.from_dicts({f"q{i}": {"d": 1} for i in range(n)})
    return len(split_for_training(ev, holdout, validation, seed=0).validation)


def test_a_win_on_a_few_validation_queries_is_never_written(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    """Issue 21 item 10: on 24 queries the fusion head was written after beating the
    base on 3 validation queries. Now nothing is trained or written: one line says how
    many usable validation queries there are and how many more labelled ones it needs."""
    _, encoder = data
    path = _write_set(tmp_path / "small", n=24)
    out = tmp_path / "out"
    line = error_line(_invoke(path, "--out", out, "--base", encoder, "--kind", "fusion"))
    have = _validation_count(24, 0.3, 0.2)
    assert f"validation has {have} usable queries" in line
    more = int(line.split("label at least ")[1].split()[0])
    # an independent count: the fewest added queries whose split reaches 30
    assert _validation_count(24 + more, 0.3, 0.2) >= 30 > _validation_count(24 + more - 1, 0.3, 0.2)
    assert not out.exists()
    assert queries_needed(24, 30, 0.3, 0.2) == 0


@pytest.mark.parametrize("case", ["only relevant candidates", "every candidate relevant"])
def test_validation_without_a_non_relevant_candidate_says_so(
    case: str, data: tuple[Path, Path], tmp_path: Path
) -> None:
    """TT-02 / TT-03: no AUC can be computed; the message says why, not "no trained
    candidate beat the base"."""
    _, encoder = data
    rows = [json.loads(x) for x in data[0].read_text().splitlines()]
    for row in rows:
        (rel,) = row["relevant"]
        if case == "only relevant candidates":
            row["candidates"] = [c for c in row["candidates"] if c["id"] == rel]
            row["distractors"], row["not_relevant"] = [], []
        else:
            row["relevant"] = {c["id"]: 5 for c in row["candidates"]}
            row["distractors"], row["not_relevant"] = [], []
    path = tmp_path / "set" / "evalset.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    args = (path, "--out", out, "--base", encoder, "--kind", "fusion", "--validation", VALIDATION)
    line = error_line(_invoke(*args))
    assert "validation queries have no non-relevant candidate" in line
    assert "beat the base" not in line and not out.exists()


def _groups(pos: list[list[float]], neg: list[list[float]]) -> list[tuple[F64, F64]]:
    return [
        (np.array(p, dtype=float), np.array(n, dtype=float)) for p, n in zip(pos, neg, strict=True)
    ]


def test_auc_difference_is_a_paired_bootstrap_over_queries() -> None:
    # the same scores: no difference, and no spread
    same = _groups([[1.0]] * 40, [[0.0]] * 40)
    assert auc_difference(same, same) == Interval(0.0, 0.0, 0.0)
    # 40 queries with one pair each; the candidate orders 2 (base: 0) or 10 (base: 0)
    # of them right and ties elsewhere... each resample's gain is k/40 with k the
    # resampled count of those queries, k ~ Binomial(40, share)
    binom = pytest.importorskip("scipy.stats").binom
    base = _groups([[0.0]] * 40, [[1.0]] * 40)  # every pair wrong
    for fixed in (2, 10):
        cand = _groups([[2.0]] * fixed + [[0.0]] * (40 - fixed), [[1.0]] * 40)
        gain = auc_difference(base, cand, seed=3)
        assert gain.mean == pytest.approx(fixed / 40)
        share = fixed / 40
        low, high = (binom.ppf(q, 40, share) / 40 for q in (0.025, 0.975))
        assert gain.low == pytest.approx(low, abs=1 / 40)
        assert gain.high == pytest.approx(high, abs=1 / 40)
    # 2 of 40: about 13% of resamples hold neither query, so the lower bound is 0
    two = auc_difference(base, _groups([[2.0]] * 2 + [[0.0]] * 38, [[1.0]] * 40))
    assert two.mean > 0 and two.low == 0.0
    # queries with several pairs: the point estimate is the pooled AUC difference
    rng = np.random.default_rng(0)
    b = [(rng.normal(size=int(rng.integers(1, 4))), rng.normal(size=int(rng.integers(0, 5))))
         for _ in range(30)]  # fmt: skip
    c = [(p + 0.5, n) for p, n in b]
    assert auc_difference(b, c).mean == pytest.approx(pair_auc(c) - pair_auc(b))
    with pytest.raises(ValueError, match="same groups"):
        auc_difference(b, c[:-1])


def test_a_win_the_interval_does_not_show_is_never_chosen() -> None:
    """A trained candidate ahead of the base by AUC on validation, but only on 2 of 40
    queries (the interval of the gain reaches 0), is not eligible; ahead on 10 of 40
    (the interval above 0) it is."""
    base = _groups([[0.0]] * 40, [[1.0]] * 40)
    for fixed, shown in ((2, False), (10, True)):
        cand = _groups([[2.0]] * fixed + [[0.0]] * (40 - fixed), [[1.0]] * 40)
        scorers = [
            Scorer("base", "base", pair_auc(base), 1.0),
            Scorer("fusion", "trained", pair_auc(cand), 1.0, gain=auc_difference(base, cand)),
        ]
        assert scorers[1].auc_distractor > scorers[0].auc_distractor
        chosen = choose(scorers, "auc_distractor")
        assert (chosen is scorers[1]) is shown and scorers[1].eligible is shown


def test_the_card_records_the_interval(trained: object) -> None:
    assert isinstance(trained, TrainResult) and trained.path is not None
    card = json.loads((trained.path / CARD_NAME).read_text())
    v = card["validation"]
    assert v["queries"] == trained.usable_queries >= 30
    assert (v["level"], v["n_bootstrap"], v["min_queries"]) == (0.95, 2000, 30)
    gain = v["candidates"]["fusion"]["gain"]
    fusion, base = v["candidates"]["fusion"], v["candidates"]["base"]
    assert gain["mean"] == pytest.approx(fusion["auc_distractor"] - base["auc_distractor"])
    assert 0 < gain["low"] <= gain["mean"] <= gain["high"]
    assert v["candidates"]["base"]["gain"] is None
    assert f"{gain['low']:+.3f}" in (trained.path / "README.md").read_text()
    assert "interval" in trained.why and trained.why.startswith("fusion beat the base")


# --------------------------------------------------------------------------- --out


def test_overwrite_never_deletes_the_inputs_or_what_it_did_not_write(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    """TT-13: ``train-reranker d/eval.jsonl --out d --overwrite`` deleted the eval set
    and an unrelated notes.txt. --overwrite now replaces only a folder the command
    wrote, holding nothing else and none of its inputs."""
    path, encoder = data
    d = tmp_path / "d"
    d.mkdir()
    (d / "eval.jsonl").write_bytes(path.read_bytes())
    (d / "notes.txt").write_text("my notes")
    common = ("--base", encoder, "--kind", "fusion", "--validation", VALIDATION)
    line = error_line(_invoke(d / "eval.jsonl", "--out", d, "--overwrite", *common))
    assert "input" in line and "eval.jsonl" in line
    assert sorted(p.name for p in d.iterdir()) == ["eval.jsonl", "notes.txt"]
    assert (d / "eval.jsonl").read_bytes() == path.read_bytes()
    # --out naming the eval set file itself
    line = error_line(_invoke(d / "eval.jsonl", "--out", d / "eval.jsonl", "--overwrite", *common))
    assert "input" in line and (d / "eval.jsonl").read_bytes() == path.read_bytes()

    # a folder it did not write (no marker), even holding only names it writes
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("mine")
    line = error_line(_invoke(path, "--out", other, "--overwrite", *common))
    assert "ragguard-written.json" in line and (other / "README.md").read_text() == "mine"

    # a folder it wrote: the marker lists everything in it
    out = tmp_path / "scorer"
    res = _invoke(path, "--out", out, *common)
    assert res.exit_code == 0, res.output
    listed = json.loads((out / "ragguard-written.json").read_text())["files"]
    every = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert sorted([*listed, "ragguard-written.json"]) == every
    # ... then something else is put in it: refused, and nothing is lost
    (out / "encoder" / "my-notes.txt").write_text("keep me")
    line = error_line(_invoke(path, "--out", out, "--overwrite", *common))
    assert "encoder/my-notes.txt" in line
    assert (out / "encoder" / "my-notes.txt").read_text() == "keep me"
    (out / "encoder" / "my-notes.txt").unlink()
    # ... its own encoder as the base of the next run: an input inside --out
    line = error_line(
        _invoke(path, "--out", out, "--overwrite", "--base", out / "encoder", "--kind", "fusion")
    )
    assert "input" in line and (out / "encoder").is_dir()
    # ... only what it wrote: replaced
    before = (out / CARD_NAME).stat().st_mtime_ns
    res = _invoke(path, "--out", out, "--overwrite", *common)
    assert res.exit_code == 0, res.output
    assert (out / CARD_NAME).stat().st_mtime_ns != before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ragguard-")]


# --------------------------------------------------------------------------- staging


def test_a_stale_work_folder_is_removed_by_the_next_run_and_a_live_one_kept(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    path, encoder = data
    killed = killed_staging_folder(tmp_path, tag="train")
    assert killed.name.startswith(".ragguard-train-")
    with LiveStaging(tmp_path, tag="train") as live:
        result = train_reranker(
            load_evalset(path), out=tmp_path / "out", base=str(encoder), kinds=FUSION,
            validation=VALIDATION,
        )  # fmt: skip
        assert result.path is not None
        assert live.path.is_dir()
    assert not killed.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".ragguard-")] == [live.path]


@pytest.mark.parametrize("fails", [False, True])
def test_the_staging_folder_is_beside_the_output_never_in_the_working_folder(
    fails: bool, data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out models/v1/scorer`` from a working folder without ``models/``: the staging
    folder is made in ``models/v1`` (a killed run's leftover lies beside the output,
    where the next run removes it), never in the working folder; it is gone after the
    run, and so are the folders made for it when nothing was written."""
    path, encoder = data
    monkeypatch.chdir(tmp_path)
    out = Path("models", "v1", "scorer")
    made: list[Path] = []
    real = reranker.staging_folder

    @contextmanager
    def watched(folder: Path, *, tag: str = "") -> Iterator[Path]:
        with real(folder, tag=tag) as work:
            made.append(work)
            yield work

    monkeypatch.setattr(reranker, "staging_folder", watched)

    def disk_full(stage: Path) -> None:
        raise OSError("no space left on device")

    if fails:  # a failure while the new folder is being written
        monkeypatch.setattr(output, "_mark", disk_full)
    run = functools.partial(
        train_reranker, load_evalset(path), out=out, base=str(encoder), kinds=FUSION,
        validation=VALIDATION,
    )  # fmt: skip
    if fails:
        with pytest.raises(OSError, match="no space left"):
            run()
    else:
        assert run().path == out
    assert len(made) == 1 and made[0].parent.resolve() == (tmp_path / "models" / "v1").resolve()
    assert made[0].name.startswith(".ragguard-train-") and made[0].name.endswith(".tmp")
    assert not made[0].exists()
    if fails:
        assert list(tmp_path.iterdir()) == []
    else:
        assert [p.name for p in tmp_path.iterdir()] == ["models"]
        assert [p.name for p in (tmp_path / "models" / "v1").iterdir()] == ["scorer"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_training_leaves_nothing_behind(
    fault: type[BaseException], data: tuple[Path, Path], tmp_path: Path
) -> None:
    """Ctrl-C (or a failure) at the first validation of the bi-encoder, when its
    checkpoints are on disk: no work folder is left and nothing is written."""
    path, encoder = data
    seen: list[str] = []

    def progress(line: str) -> None:
        seen.append(line)
        if "validation auc" in line:
            assert [p for p in tmp_path.iterdir() if p.name.startswith(".ragguard-train-")]
            raise fault

    with pytest.raises(fault):
        train_reranker(
            load_evalset(path), out=tmp_path / "out", base=str(encoder), kinds=["bi-encoder"],
            training=Training(max_steps=6, batch_size=8, device="cpu"), validation=VALIDATION,
            progress=progress,
        )  # fmt: skip
    assert any("validation auc" in line for line in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- output


def test_progress_lines_come_at_a_steady_rate() -> None:
    now = [0.0]
    lines: list[str] = []
    ticker = Ticker("signals", 1000, "pairs", lines.append, every=30.0, clock=lambda: now[0])
    for _ in range(10):  # 100 pairs every 12 s: a line at 36 s, 72 s, 108 s
        now[0] += 12.0
        ticker.add(100)
    ticker.close()
    assert lines == [
        "  signals: 300 of 1,000 pairs (30%) in 36 s, about 1 min 24 s left",
        "  signals: 600 of 1,000 pairs (60%) in 1 min 12 s, about 48 s left",
        "  signals: 900 of 1,000 pairs (90%) in 1 min 48 s, about 12 s left",
        "  signals: 1,000 pairs in 2 min 00 s",
    ]
    quick: list[str] = []
    fast = Ticker("signals", 10, "pairs", quick.append, every=30.0, clock=lambda: now[0])
    fast.add(10)
    fast.close()
    assert quick == []  # a step that ends sooner says nothing


def test_stdout_holds_only_the_results(
    data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12: results on stdout, progress on stderr (here a progress line at every
    step of the signals, as a long run says one every PROGRESS_EVERY_S seconds)."""
    import ragguard.calibration.train.features as train

    monkeypatch.setattr(train, "PROGRESS_EVERY_S", 0.0)
    path, encoder = data
    out = tmp_path / "cli"
    res = _invoke(path, "--out", out, "--base", encoder, "--kind", "fusion", "--validation", "0.5")
    assert res.exit_code == 0, res.output
    # 401 = 33 training queries x 7 pairs (relevant, 2 distractors, judged, same-query,
    # 2 random) + 34 validation queries x 5 candidates
    assert "computing 3 signals for 401" in res.stderr and "loading" in res.stderr
    assert "  embedding: " in res.stderr and "  signals: 401 pairs in " in res.stderr
    assert "of 401 pairs" in res.stderr
    lines = [x for x in res.stdout.splitlines() if x.strip()]
    assert lines[0].startswith("validation AUCs on 34 usable queries")
    assert lines[-2].startswith("fusion beat the base") and lines[-1].startswith("wrote ")
    body = lines[1:-2]  # the table: a header, its rule, one row per candidate
    names = [row.split()[0] for row in body[2:]]
    assert names == ["base", "bm25", "coverage", "fusion"]


@pytest.mark.slow
def test_the_trainer_prints_nothing_on_stdout(data: tuple[Path, Path], tmp_path: Path) -> None:
    """The trainer's log dicts (``{'loss': ...}``) went to stdout; now the training loss
    is a progress line on stderr, and stdout holds the table and the result."""
    path, encoder = data
    res = _invoke(
        path, "--out", tmp_path / "bi", "--base", encoder, "--kind", "bi-encoder",
        "--validation", VALIDATION, "--max-steps", 6, "--batch-size", 8, "--device", "cpu",
    )  # fmt: skip
    assert res.exit_code in (0, 1), res.output
    assert "{" not in res.stdout and "loss" not in res.stdout
    assert "training loss" in res.stderr and "validation auc" in res.stderr
    assert res.stdout.splitlines()[0].startswith("validation AUCs on 34 usable queries")


def test_training_takes_texts_from_the_loaded_set_never_from_the_file_again(
    data: tuple[Path, Path], tmp_path: Path, trained: TrainResult
) -> None:
    path, encoder = data
    moved = tmp_path / "set" / "evalset.jsonl"
    moved.parent.mkdir()
    moved.write_bytes(path.read_bytes())
    es = load_evalset(moved)
    moved.unlink()
    again = train_reranker(
        es, out=tmp_path / "scorer", base=str(encoder), seed=0, kinds=FUSION, validation=VALIDATION
    )
    assert again.chosen == trained.chosen
    assert [(c.name, c.auc_distractor, c.auc_other) for c in again.candidates] == [
        (c.name, c.auc_distractor, c.auc_other) for c in trained.candidates
    ]


def test_the_trainer_fits_what_train_reranker_trains(
    data: tuple[Path, Path], trained: TrainResult, tmp_path: Path
) -> None:
    """RerankerTrainer(option objects).fit is what train_reranker(**keywords) runs: the
    same model card (but its time) for the same settings."""
    path, encoder = data
    trainer = RerankerTrainer(
        base=str(encoder), kinds=FUSION, seed=0, validation=VALIDATION,
        negatives=Negatives(), training=Training(),
    )  # fmt: skip
    fitted = trainer.fit(load_evalset(path), out=tmp_path / "scorer")
    timeless = [
        {k: v for k, v in card.items() if k != "training_seconds"}
        for card in (fitted.card, trained.card)
    ]
    for card in timeless:  # each candidate's timing is measured, not settled
        for c in card["validation"]["candidates"].values():
            c.pop("seconds")
    assert timeless[0] == timeless[1]
    assert (fitted.chosen, fitted.why) == (trained.chosen, trained.why)
    with pytest.raises(ConfigError, match=r"^same_query_negatives must be an int >= 0, got -1$"):
        Negatives(same_query=-1)
