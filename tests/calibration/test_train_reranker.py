"""``ragguard train-reranker``: pairs, splits, the never-worse rule, the written folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("sentence_transformers")
pytest.importorskip("sklearn")

from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.calibration import load_evalset, split_queries
from ragguard.calibration.rerank_scores import load_reranker
from ragguard.calibration.train import (
    pair_auc,
    split_for_training,
    train_reranker,
    training_pairs,
)
from ragguard.cli import app
from ragguard.rerank import CrossEncoderReranker
from ragguard.trained import CARD_NAME, TrainedReranker
from tests.rerank_models import build_bi_encoder

TOPICS = [
    "deadlift", "squat", "bench", "press", "row", "curl", "lunge", "plank", "sprint", "swim",
    "cycle", "hike", "yoga", "rowing", "boxing", "climb", "skate", "ski", "surf", "golf",
    "tennis", "rugby", "judo", "fencing",
]  # fmt: skip
FILLER = "note log entry about training week"
FUSION = ["fusion"]


def _write_set(folder: Path, *, relevant_is_query: bool = False) -> Path:
    """24 queries "what is my TOPIC record": the relevant passage states the record; two
    same-topic distractors (a goal, an old plan) repeat the query's common words, which
    a cosine of random embeddings follows and BM25 discounts; one unlabelled candidate
    and passages of other topics."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, t in enumerate(TOPICS):
        query = f"what is my {t} record"
        rel = query if relevant_is_query else f"{t} record {100 + i} lb"
        cands = [
            {"id": f"{t}-rel", "score": 0.7, "text": rel},
            {"id": f"{t}-goal", "score": 0.9, "text": f"what is my {t} goal what is my plan"},
            {"id": f"{t}-plan", "score": 0.8, "text": f"what is my old {t} plan is it my"},
            {"id": f"{t}-misc", "score": 0.6, "text": f"{t} misc {FILLER}"},
            {"id": f"{t}-other", "score": 0.5, "text": f"{FILLER} {TOPICS[(i + 1) % 24]}"},
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
    return train_reranker(load_evalset(path), out=out, base=str(encoder), seed=0, kinds=FUSION)


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
    held = split_for_training(ev, 0.3, 0.2, 0).held_out
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
    a = train_reranker(ev, out=tmp_path / "a", base=str(encoder), kinds=FUSION)
    b = train_reranker(load_evalset(flipped), out=tmp_path / "b", base=str(encoder), kinds=FUSION)
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
    from ragguard.calibration.train import TrainResult, ValidationQuery, validation_queries

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


def test_a_candidate_that_cannot_beat_the_base_is_never_written(tmp_path: Path) -> None:
    # each relevant passage is its query verbatim: the base cosine is 1.0 for it and
    # below 1 for every other passage, so validation AUCs of the base are 1.0 and no
    # trained candidate can be strictly better
    path = _write_set(tmp_path / "set", relevant_is_query=True)
    encoder = build_bi_encoder(tmp_path / "enc", _words(path))
    out = tmp_path / "out"
    result = train_reranker(load_evalset(path), out=out, base=str(encoder), max_steps=4)
    assert {c.name for c in result.candidates} >= {"fusion", "bi-encoder"}
    assert result.base.auc_distractor == 1.0 and result.base.auc_other == 1.0
    assert result.path is None and result.chosen is None
    assert not out.exists()
    assert not any(c.eligible for c in result.candidates)
    res = CliRunner().invoke(
        app,
        [
            "train-reranker",
            str(path),
            "--out",
            str(out),
            "--base",
            str(encoder),
            "--kind",
            "fusion",
        ],
    )
    assert res.exit_code == 1 and not out.exists()
    assert "not written" in res.stderr and "beat the base" in res.stderr


def test_reproducible_by_seed(data: tuple[Path, Path], tmp_path: Path, trained: object) -> None:
    path, encoder = data
    again = train_reranker(
        load_evalset(path), out=tmp_path / "again", base=str(encoder), seed=0, kinds=FUSION
    )
    assert again.card["fusion_head"] == trained.card["fusion_head"]  # type: ignore[attr-defined]
    assert again.card["pairs"] == trained.card["pairs"]  # type: ignore[attr-defined]
    other = split_for_training(load_evalset(path), 0.3, 0.2, seed=1)
    assert other.validation != again.split.validation or other.held_out != again.split.held_out


def test_cli_writes_and_prints_the_next_step(data: tuple[Path, Path], tmp_path: Path) -> None:
    path, encoder = data
    out = tmp_path / "cli"
    args = ["train-reranker", str(path), "--out", str(out), "--base", str(encoder)]
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
    """On this set the base ranks both distractors above the record on every query (they
    repeat the query's words; validation auc_distractor 0): a few steps at a high
    learning rate teach it otherwise, so the bi-encoder is better, chosen and written.
    (The never-written side: test_a_candidate_that_cannot_beat_the_base_is_never_written.)"""
    path, encoder = data
    ev = load_evalset(path)
    kwargs = {"base": str(encoder), "kinds": ["bi-encoder"], "max_steps": 6, "batch_size": 8,
              "learning_rate": 1e-3}  # fmt: skip
    result = train_reranker(ev, out=tmp_path / "bi", device="cpu", **kwargs)  # type: ignore[arg-type]
    (bi,) = [c for c in result.candidates if c.name == "bi-encoder"]
    assert "steps" in bi.note and bi.role == "trained"
    base = result.base
    assert base.auc_distractor == 0.0
    assert bi.auc_distractor > base.auc_distractor and bi.auc_other >= base.auc_other
    assert bi.eligible and result.chosen == "bi-encoder" and result.path is not None
    reranker = load_reranker(str(result.path))
    s = np.asarray(reranker("what is my squat record", ["squat record 101 lb", "golf"]))
    assert s.shape == (2,) and np.all(np.abs(s) <= 1.0 + 1e-6)  # cosines
    again = train_reranker(ev, out=tmp_path / "bi2", device="cpu", **kwargs)  # type: ignore[arg-type]
    (bi2,) = [c for c in again.candidates if c.name == "bi-encoder"]
    assert (bi2.auc_distractor, bi2.auc_other) == (bi.auc_distractor, bi.auc_other)  # seeded
