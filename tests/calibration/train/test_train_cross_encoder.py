"""``train-reranker`` with cross-encoders, same-title negatives and pre-training data.

Every model is tiny and built on disk (tests/rerank_models.py); the expectations come
from the data's design (which passage shares a title with which, which query is held
out), from sentence-transformers' own ``CrossEncoder`` loading the written folder, and
from re-scoring the validation queries independently.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("sentence_transformers")
pytest.importorskip("sklearn")
pytest.importorskip("datasets")

from sentence_transformers import CrossEncoder

import ragguard
from ragguard import Candidate, ContextGuard, GuardConfig
from ragguard.calibration import load_evalset
from ragguard.calibration.train.choice import pair_auc
from ragguard.calibration.train.pairs import (
    split_for_training,
    training_pairs,
    validation_queries,
)
from ragguard.calibration.train.pretrain import normalise, pretrain_pairs, read_pretrain
from ragguard.calibration.train.reranker import (
    Negatives,
    RerankerTrainer,
    Training,
    TrainResult,
    train_reranker,
)
from ragguard.cli import app
from ragguard.errors import ConfigError
from ragguard.rerank import CrossEncoderReranker
from ragguard.trained import CARD_NAME, PACKAGED_ENCODER, model_kind
from tests.calibration.training_topics import TOPICS, VALIDATION
from tests.rerank_models import IDENTITY, build_bi_encoder, build_cross_encoder

ORDER = ["relevant", "distractor", "judged", "same_query", "same_title", "random"]


def _write_titled_set(folder: Path) -> Path:
    """96 queries "what is my TOPIC record" (the topics of test_train_reranker) over a
    corpus.jsonl with titles. Per topic: the record (relevant) and a goal (labelled
    distractor) titled "TOPIC log"; an old plan, also titled "TOPIC log", that only the
    *next* query retrieves (low); a misc note (title "misc TOPIC") that the query
    retrieves unlabelled."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus, lines = [], []
    n = len(TOPICS)
    for i, t in enumerate(TOPICS):
        corpus += [
            {"id": f"{t}-rel", "title": f"{t} log", "text": f"{t} record {100 + i} lb"},
            {"id": f"{t}-goal", "title": f"{t} log", "text": f"what is my {t} goal plan"},
            {"id": f"{t}-old", "title": f"{t} log", "text": f"old {t} plan is it my"},
            {"id": f"{t}-misc", "title": f"misc {t}", "text": f"{t} misc note"},
        ]
        prev = TOPICS[(i - 1) % n]
        lines.append(
            {
                "query_id": f"q{i:02d}",
                "query": f"what is my {t} record",
                "relevant": {f"{t}-rel": 4},
                "distractors": [f"{t}-goal"],
                "candidates": [
                    {"id": f"{t}-goal", "score": 0.9},
                    {"id": f"{t}-rel", "score": 0.8},
                    {"id": f"{t}-misc", "score": 0.7},
                    {"id": f"{prev}-old", "score": 0.1},
                ],
            }
        )
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus) + "\n")
    path = folder / "evalset.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def _vocabulary(path: Path) -> list[str]:
    corpus = path.parent / "corpus.jsonl"
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    queries = [json.loads(x)["query"] for x in path.read_text().splitlines()]
    return [f"{r['title']} {r['text']}" for r in rows] + queries


@pytest.fixture(scope="module")
def titled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ce")
    path = _write_titled_set(root / "set")
    words = _vocabulary(path)
    # a cross-encoder that prefers the goal (the distractor) to the record: logits
    # designed for the first topic's query, the rest follows from the tiny encoder
    t = TOPICS[0]
    cross = build_cross_encoder(
        root / "cross", f"what is my {t} record",
        {f"{t} log\n{t} record 100 lb": -2.0, f"{t} log\nwhat is my {t} goal plan": 2.0},
        activation=IDENTITY, vocabulary=words,
    )  # fmt: skip
    encoder = build_bi_encoder(root / "encoder", words)
    return {"set": path, "cross": cross, "encoder": encoder, "root": root}


def _texts(path: Path) -> Any:
    return load_evalset(path).texts


# --------------------------------------------------------------------------- pairs


def test_negatives_come_in_the_documented_order_and_same_title_ones_only_from_training(
    titled: dict[str, Path],
) -> None:
    ev = load_evalset(titled["set"])
    texts = _texts(titled["set"])
    split = split_for_training(ev, 0.3, 0.2, seed=0)
    train = set(split.train)
    pairs = training_pairs(
        ev, split.train, runs=["default"], has_text=lambda q, d: bool(texts.get(q, d)),
        title=texts.title, same_query_negatives=1, same_title_negatives=2,
        random_negatives=1, seed=0,
    )  # fmt: skip
    index = {t: i for i, t in enumerate(TOPICS)}
    expected_same_title = 0
    for qid in split.train:
        mine = [p for p in pairs if p.qid == qid]
        kinds = [p.kind for p in mine]
        assert kinds == sorted(kinds, key=ORDER.index)
        i = int(qid[1:])
        t = TOPICS[i]
        by = {k: [p.doc for p in mine if p.kind == k] for k in ORDER}
        assert by["relevant"] == [f"{t}-rel"] and by["distractor"] == [f"{t}-goal"]
        assert by["same_query"] == [f"{t}-misc"]  # the best-ranked unlabelled candidate
        # the old plan shares the record's title; only the next query retrieves it, so
        # it is a negative exactly when that query is a training query
        nxt = f"q{(i + 1) % len(TOPICS):02d}"
        want = [f"{t}-old"] if nxt in train else []
        assert by["same_title"] == want
        expected_same_title += len(want)
        for p in mine:
            if p.kind in ("same_title", "random"):
                # it came from a training query's passages, never a held-out one's
                assert p.source in train
                topic = p.doc.rsplit("-", 1)[0]
                owners = {f"q{index[topic]:02d}", f"q{(index[topic] + 1) % len(TOPICS):02d}"}
                assert p.source in owners
        assert len(by["random"]) == 1
        assert not set(by["random"]) & {d for k in ORDER[:5] for d in by[k]}
    counts = Counter(p.kind for p in pairs)
    assert counts["same_title"] == expected_same_title > 0
    assert counts["relevant"] == counts["distractor"] == counts["same_query"] == len(train)
    # grade 4 of a highest grade 4: target 1
    assert {p.target for p in pairs if p.kind == "relevant"} == {1.0}


def test_the_card_counts_every_negative_type(titled: dict[str, Path], tmp_path: Path) -> None:
    ev = load_evalset(titled["set"])
    texts = _texts(titled["set"])
    result = train_reranker(
        ev, out=tmp_path / "fusion", base=str(titled["encoder"]), kinds=["fusion"],
        negatives=Negatives(same_query=1, same_title=2, random=1), validation=VALIDATION,
    )  # fmt: skip
    pairs = training_pairs(
        ev, result.split.train, runs=["default"], has_text=lambda q, d: bool(texts.get(q, d)),
        title=texts.title, same_query_negatives=1, same_title_negatives=2,
        random_negatives=1, seed=0,
    )  # fmt: skip
    counts = Counter(p.kind for p in pairs)
    card = json.loads((tmp_path / "fusion" / CARD_NAME).read_text())
    assert card["pairs"] == {**{k: counts[k] for k in ORDER}, "total": len(pairs)}
    assert card["pairs"]["same_title"] > 0
    assert "same_title" in (tmp_path / "fusion" / "README.md").read_text()


# --------------------------------------------------------------------------- models


def test_the_base_kind_is_read_from_the_model_files(titled: dict[str, Path]) -> None:
    assert model_kind(str(titled["cross"])) == "cross-encoder"  # transformers' save
    assert model_kind(str(titled["encoder"])) == "bi-encoder"
    assert model_kind(PACKAGED_ENCODER) == "bi-encoder"
    saved = titled["root"] / "st-saved-cross"
    CrossEncoder(str(titled["cross"]), local_files_only=True).save(str(saved))
    assert model_kind(str(saved)) == "cross-encoder"  # sentence-transformers' own save
    with pytest.raises(ragguard.errors.RerankModelError, match=r"^no folder .*no-such-model$"):
        model_kind(str(titled["root"] / "no-such-model"))  # a path: never a Hub name
    with pytest.raises(ragguard.errors.RerankModelError, match="not in the local"):
        model_kind("no-such-org/no-such-model")


def _cross_result(
    titled: dict[str, Path],
    out: Path,
    evalset: Path | None = None,
    pretrain_data: Path | None = None,
    max_steps: int = 20,
    **kw: Any,
) -> TrainResult:
    args: dict[str, Any] = {
        "base": str(titled["cross"]), "encoder": str(titled["encoder"]),
        "kinds": ["cross-encoder"], "seed": 0, "validation": VALIDATION,
    }  # fmt: skip
    training = Training(
        max_steps=max_steps, epochs=5, batch_size=8, learning_rate=3e-3, device="cpu"
    )
    trainer = RerankerTrainer(**{**args, **kw}, training=training)
    evalset_ = load_evalset(evalset or titled["set"])
    return trainer.fit(evalset_, out=out, pretrain_data=pretrain_data)


@pytest.fixture(scope="module")
def tuned(titled: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> TrainResult:
    return _cross_result(titled, tmp_path_factory.mktemp("tuned") / "scorer")


@pytest.mark.slow
def test_a_fine_tuned_cross_encoder_base_is_written_as_a_cross_encoder_folder(
    tuned: TrainResult, titled: dict[str, Path]
) -> None:
    # the base to beat is the cross-encoder's own score, which prefers the goals
    assert tuned.base_kind == "cross-encoder"
    assert "cross-encoder" in tuned.base.note
    (ce,) = [c for c in tuned.candidates if c.name == "cross-encoder"]
    assert ce.auc_distractor > tuned.base.auc_distractor
    assert tuned.chosen == "cross-encoder" and tuned.path is not None
    folder = tuned.path
    card = json.loads((folder / CARD_NAME).read_text())
    assert card["kind"] == "cross-encoder" and card["base_kind"] == "cross-encoder"
    want = {"base", "cosine", "bm25", "coverage", "cross-encoder"}
    assert set(card["validation"]["candidates"]) == want
    for c in card["validation"]["candidates"].values():
        assert c["auc_distractor"] is not None and c["auc_other"] is not None

    # independent check: sentence-transformers loads the folder as a CrossEncoder and
    # its logits are what every ragguard path returns
    direct = CrossEncoder(str(folder), local_files_only=True, device="cpu")
    query = "what is my squat record"
    # (with a text it scores below 0: logits all in [0, 1] would rightly warn that they
    # look like probabilities)
    texts = [
        "squat log\nsquat record 101 lb",
        "squat log\nwhat is my squat goal plan",
        "misc squat\nsquat misc note",
    ]
    want_scores = np.asarray(direct.predict([(query, t) for t in texts]), dtype=np.float64)
    loaded = ragguard.load_reranker(str(folder))
    assert isinstance(loaded, CrossEncoderReranker)
    assert loaded.score_kind.value == "logit"
    assert np.asarray(loaded(query, texts)) == pytest.approx(want_scores, abs=1e-5)
    config = GuardConfig.model_validate(
        {"rerank": {"enabled": True, "model": str(folder), "top_n": 3}}
    )
    docs = [Candidate(f"d{i}", t, 0.5 - i / 10) for i, t in enumerate(texts)]
    selection = ContextGuard(config).select(query, docs)
    assert selection.rerank is not None and not selection.rerank.failed
    got = dict(zip(selection.rerank.positions, selection.rerank.raw_scores, strict=True))
    assert [got[i] for i in range(3)] == pytest.approx(list(want_scores), abs=1e-5)

    # the card's validation AUCs, recomputed with the independently loaded model
    ev = load_evalset(titled["set"])
    src = _texts(titled["set"])
    val = validation_queries(
        ev, tuned.split.validation, runs=["default"], has_text=lambda q, d: bool(src.get(q, d))
    )
    dis, oth = [], []
    for v in val:
        q = ev.queries[v.qid].text or ""
        s = np.asarray(direct.predict([(q, src.get(v.qid, d)) for d in v.docs]))
        a, b = len(v.relevant), len(v.relevant) + len(v.distractors)
        dis.append((s[:a], s[a:b]))
        oth.append((s[:a], s[b:]))
    assert pair_auc(dis) == pytest.approx(ce.auc_distractor)
    assert pair_auc(oth) == pytest.approx(ce.auc_other)


ALL_KINDS = ["fusion", "bi-encoder", "cross-encoder", "new-cross-encoder"]


def _swapped_labels(evalset: Path, queries: set[str], folder: Path) -> Path:
    """A copy of the titled set (with its corpus) in ``folder`` where ``queries`` have
    their relevant passage and labelled distractor swapped."""
    rows = [json.loads(x) for x in evalset.read_text().splitlines()]
    for row in rows:
        if row["query_id"] in queries:  # relevant <-> distractor
            (rel,) = row["relevant"]
            row["relevant"], row["distractors"] = {row["distractors"][0]: 4}, [rel]
    folder.mkdir()
    shutil.copy(evalset.parent / "corpus.jsonl", folder / "corpus.jsonl")
    out = folder / "evalset.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return out


@pytest.mark.slow
def test_held_out_labels_never_reach_any_candidate(
    titled: dict[str, Path], tuned: TrainResult, tmp_path: Path
) -> None:
    flipped = _swapped_labels(titled["set"], set(tuned.split.held_out), tmp_path / "flipped")
    again = _cross_result(titled, tmp_path / "again", evalset=flipped)
    assert again.pair_counts == tuned.pair_counts
    assert [(c.name, c.auc_distractor, c.auc_other) for c in again.candidates] == [
        (c.name, c.auc_distractor, c.auc_other) for c in tuned.candidates
    ]
    assert again.path is not None and tuned.path is not None
    pairs = [("what is my ski record", "ski log\nski record 117 lb"), ("a", "b")]
    a = CrossEncoder(str(again.path), local_files_only=True).predict(pairs)
    b = CrossEncoder(str(tuned.path), local_files_only=True).predict(pairs)
    assert np.asarray(a) == pytest.approx(np.asarray(b), abs=1e-6)  # and reproducible
    # every kind at once: each candidate's validation AUCs ignore the held-out labels
    one = _cross_result(titled, tmp_path / "all", kinds=ALL_KINDS)
    two = _cross_result(titled, tmp_path / "all-flipped", evalset=flipped, kinds=ALL_KINDS)
    names = [c.name for c in one.candidates]
    assert names == ["base", "cosine", "bm25", "coverage", *ALL_KINDS]
    assert [(c.auc_distractor, c.auc_other) for c in two.candidates] == [
        (c.auc_distractor, c.auc_other) for c in one.candidates
    ]
    assert one.chosen == two.chosen is not None


@pytest.mark.slow
def test_a_cross_encoder_that_does_not_beat_its_base_is_never_written(
    titled: dict[str, Path], tmp_path: Path
) -> None:
    # zero steps: the candidate is the base itself, a tie, which is not a gain
    out = tmp_path / "zero"
    zero = _cross_result(titled, out, max_steps=0)
    (ce,) = [c for c in zero.candidates if c.name == "cross-encoder"]
    assert (ce.auc_distractor, ce.auc_other) == (zero.base.auc_distractor, zero.base.auc_other)
    assert "0 steps" in ce.note and not ce.eligible
    assert zero.path is None and not out.exists()
    # corrupted labels: a base that already puts records first, trained to prefer the
    # goals; early stopping on the (true) validation labels keeps its best checkpoint,
    # which is no better than the base, so nothing is written
    t = TOPICS[0]
    good = build_cross_encoder(
        tmp_path / "good", f"what is my {t} record",
        {f"{t} log\n{t} record 100 lb": 2.0, f"{t} log\nwhat is my {t} goal plan": -2.0},
        activation=IDENTITY, vocabulary=_vocabulary(titled["set"]),
    )  # fmt: skip
    bad = _swapped_labels(titled["set"], set(zero.split.train), tmp_path / "bad")
    out = tmp_path / "corrupted"
    worse = _cross_result(titled, out, evalset=bad, base=str(good))
    (ce,) = [c for c in worse.candidates if c.name == "cross-encoder"]
    assert worse.base.auc_distractor == 1.0
    assert ce.auc_distractor <= worse.base.auc_distractor and not ce.eligible
    assert "steps" in ce.note and "0 steps" not in ce.note
    assert worse.path is None and not out.exists()
    card = worse.card["validation"]["candidates"]
    assert set(card) == {"base", "cosine", "bm25", "coverage", "cross-encoder"}
    assert card["cross-encoder"]["auc_distractor"] == ce.auc_distractor


@pytest.mark.slow
def test_a_new_cross_encoder_from_bi_encoder_weights(
    titled: dict[str, Path], tmp_path: Path
) -> None:
    ev = load_evalset(titled["set"])
    training = Training(max_steps=20, epochs=5, batch_size=8, learning_rate=3e-3, device="cpu")
    kw: dict[str, Any] = {
        "base": str(titled["encoder"]), "kinds": ["new-cross-encoder"], "training": training,
        "validation": VALIDATION,
    }  # fmt: skip
    first = train_reranker(ev, out=tmp_path / "a", **kw)
    (new,) = [c for c in first.candidates if c.name == "new-cross-encoder"]
    assert new.role == "trained" and "steps" in new.note
    # the tiny random bi-encoder ranks the goals first; a few steps on the labels teach
    # the new head otherwise, so it beats the base and is written
    assert new.auc_distractor > first.base.auc_distractor and new.eligible
    assert first.chosen == "new-cross-encoder" and first.path is not None
    second = train_reranker(ev, out=tmp_path / "b", **kw)
    (again,) = [c for c in second.candidates if c.name == "new-cross-encoder"]
    assert (again.auc_distractor, again.auc_other) == (new.auc_distractor, new.auc_other)
    direct = CrossEncoder(str(first.path), local_files_only=True)
    query = "what is my ski record"
    pairs = [(query, "ski log\nski record 117 lb"), (query, "misc ski\nski misc note")]
    got = ragguard.load_reranker(str(first.path))(query, [t for _, t in pairs])
    want = [float(direct.predict([p])[0]) for p in pairs]
    assert np.asarray(got) == pytest.approx(want, abs=1e-5)
    b = CrossEncoder(str(second.path), local_files_only=True).predict(pairs)
    assert np.asarray(b) == pytest.approx(direct.predict(pairs), abs=1e-6)  # same seed


def test_fusion_over_a_cross_encoder_base_carries_a_copy_of_it(
    titled: dict[str, Path], tmp_path: Path
) -> None:
    base = tmp_path / "my-cross"
    shutil.copytree(titled["cross"], base)
    out = tmp_path / "fusion"
    result = train_reranker(
        load_evalset(titled["set"]), out=out, base=str(base), encoder=str(titled["encoder"]),
        kinds=["fusion"], validation=VALIDATION,
    )  # fmt: skip
    assert result.chosen == "fusion", result.candidates
    card = json.loads((out / CARD_NAME).read_text())
    assert card["fusion_head"]["features"] == ["cosine", "bm25", "coverage", "cross_encoder"]
    assert card["cross_encoder"] == "cross-encoder" and (out / "cross-encoder").is_dir()
    query, texts = "what is my ski record", ["ski log\nski record 117 lb", "ski misc note"]
    before = np.asarray(ragguard.load_reranker(str(out))(query, texts))
    shutil.rmtree(base)  # the folder needs nothing outside itself
    after = np.asarray(ragguard.load_reranker(str(out))(query, texts))
    assert after == pytest.approx(before)


# --------------------------------------------------------------------------- pretraining


def _write_pretrain(folder: Path, titled: dict[str, Path]) -> Path:
    """Six questions: one repeats an eval-set query, one has a labelled passage of the
    eval set as its gold passage; two share the title "lifting"."""
    folder.mkdir(parents=True)
    items = [
        ("what is my deadlift record", "deadlift log", "deadlift record 100 lb"),  # a query
        ("how heavy was the squat", "squat log", "squat record 101 lb"),  # labelled passage
        ("who lifts the most", "lifting", "the record lift is a deadlift"),
        ("when was the first lifting meet", "lifting", "the first meet was a squat meet"),
        ("what is a plank", "plank", "a plank is a hold"),
        ("what is a sprint", "sprint", "a sprint is a fast run"),
    ]
    lines = [
        json.dumps({"question": q, "ctxs": [{"title": t, "text": x, "isgold": True}]})
        for q, t, x in items
    ]
    with gzip.open(folder / "data.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    (folder / "LICENSE").write_text("MIT License\n\nCopyright (c) test\n")
    return folder


def test_pretrain_pairs_leave_out_the_eval_set_and_put_same_title_first(
    titled: dict[str, Path], tmp_path: Path
) -> None:
    data = read_pretrain(_write_pretrain(tmp_path / "pre", titled))
    assert len(data.questions) == 6 and [p.name for p in data.licences] == ["LICENSE"]
    pairs, counts = pretrain_pairs(
        data, exclude_queries={"what is my deadlift record"},
        exclude_passages={normalise("squat log\nsquat record 101 lb")}, negatives=2, seed=0,
    )  # fmt: skip
    assert counts["dropped_same_query"] == 1 and counts["dropped_labelled_passage"] == 1
    assert counts["questions"] == counts["relevant"] == 4
    # the two "lifting" questions have one same-title negative each, then one random
    assert counts["same_title"] == 2 and counts["random"] == 1 + 1 + 2 + 2
    first = [p for p in pairs if p.query == "who lifts the most"]
    assert [p.kind for p in first] == ["relevant", "same_title", "random"]
    assert first[1].text == "lifting\nthe first meet was a squat meet"
    assert not any("deadlift record 100" in p.text or "101 lb" in p.text for p in pairs)


@pytest.mark.slow
def test_pretrain_data_is_used_counted_and_its_licence_copied(
    titled: dict[str, Path], tuned: TrainResult, tmp_path: Path
) -> None:
    pre = _write_pretrain(tmp_path / "pre", titled)
    out = tmp_path / "with-pretrain"
    result = _cross_result(titled, out, pretrain_data=pre)
    (ce,) = [c for c in result.candidates if c.name == "cross-encoder"]
    assert "pre-training steps" in ce.note
    info = result.card["pretrain"]
    assert info["pairs"]["questions"] == 4  # one repeats a query, one a labelled passage
    assert info["pairs"]["dropped_same_query"] == 1
    assert info["pairs"]["dropped_labelled_passage"] == 1
    assert result.chosen == "cross-encoder" and result.path is not None
    assert (out / "PRETRAIN-LICENSE").read_text() == (pre / "LICENSE").read_text()
    assert info["licence_files"] == ["PRETRAIN-LICENSE"] and info["used_by"] == ["cross-encoder"]
    assert json.loads((out / CARD_NAME).read_text())["pretrain"]["pairs"] == info["pairs"]
    # the label pairs are the same as without pre-training
    assert result.pair_counts == tuned.pair_counts


# --------------------------------------------------------------------------- CLI


def test_cli_cross_encoder_base_and_kind_checks(titled: dict[str, Path], tmp_path: Path) -> None:
    path = str(titled["set"])
    res = CliRunner().invoke(
        app,
        ["train-reranker", path, "--out", str(tmp_path / "x"), "--base", str(titled["encoder"]),
         "--kind", "cross-encoder"],
    )  # fmt: skip
    assert res.exit_code == 1 and "cross-encoder" in res.stderr
    with pytest.raises(ConfigError, match="second one"):
        train_reranker(
            load_evalset(titled["set"]), out=tmp_path / "y", base=str(titled["encoder"]),
            encoder=PACKAGED_ENCODER,
        )  # fmt: skip
    res = CliRunner().invoke(
        app,
        ["train-reranker", path, "--out", str(tmp_path / "z"), "--base", str(titled["cross"]),
         "--kind", "cross-encoder", "--max-steps", "0", "--device", "cpu",
         "--validation", str(VALIDATION)],
    )  # fmt: skip
    assert res.exit_code == 1 and not (tmp_path / "z").exists()
    assert "not written" in res.stderr and "--rerank" in res.stderr
    assert "cross-encoder" in res.stdout and "base" in res.stdout
    helped = "".join(CliRunner().invoke(app, ["train-reranker", "--help"]).stdout.split())
    for text in ("new-cross-encoder", "--max-steps", "--max-length", "--pretrain-data", "128"):
        assert text in helped, text  # (whitespace removed: rich wraps at hyphens)
