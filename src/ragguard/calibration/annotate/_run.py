"""``annotate()``: measure every (query, passage) pair, resumably, and write the results."""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from ragguard.calibration._output import check_not_input, check_output_path
from ragguard.calibration.annotate._base import AbstentionEstimator, Pair
from ragguard.calibration.annotate._prompts import RelevanceJudge
from ragguard.calibration.annotate._store import ProgressStore, pair_hash, settings_key
from ragguard.calibration.data.evalset import EvalSet, load_evalset
from ragguard.calibration.data.texts import PathLike, Texts
from ragguard.calibration.data.utility import UtilityRules
from ragguard.errors import AnnotationError

logger = logging.getLogger(__name__)

T = TypeVar("T")
Unjudged = Literal["judge", "irrelevant", "skip"]
#: ``progress(stage, done, total)``: stage is ``"judge"`` or ``"estimate"``.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class AnnotationSummary:
    """What ``annotate`` did.

    Attributes:
        model_id: the annotating model's name, as written in the outputs.
        pairs: (query, passage) pairs in the output.
        computed: abstention probabilities computed in this run.
        reused: abstention probabilities read back from the progress file.
        judged: pairs whose relevance came from the judge (this run or saved).
        judge_failures: judge replies with no readable grade; those pairs are left out
            of the output and judged again on the next run.
        skipped: unjudged pairs left out (``unjudged="skip"``).
        out: the ragguard JSONL written.
        udcg_out: the UDCG authors' JSON written, if any.
        progress: the progress file.
    """

    model_id: str
    pairs: int
    computed: int
    reused: int
    judged: int
    judge_failures: int
    skipped: int
    out: Path
    udcg_out: Path | None
    progress: Path


@dataclass(slots=True)
class _Item:
    qid: str
    doc: str
    passage: str
    source: str  # label / judge / unjudged
    relevant: bool | None  # None until judged
    motivation: str = ""
    p: float | None = None


@dataclass(frozen=True, kw_only=True)
class Relevance:
    """Where R(q, p) comes from: a passage's label (relevant from ``rules``' partial
    grade up), else the ``unjudged`` policy.

    Attributes:
        judge: the relevance judge for candidates without labels.
        unjudged: what to do with candidates that have no label: ``"judge"`` (ask
            ``judge``; the default when one is given), ``"irrelevant"`` (R = -1, as
            unjudged documents count in TREC; the default otherwise) or ``"skip"``.
        rules: which grades are relevant: R = +1 from the partial grade up (as
            utilities count them); default binary, grade >= 1.

    Raises:
        AnnotationError: an unknown policy, or ``"judge"`` without a judge.
    """

    judge: RelevanceJudge | None = None
    unjudged: Unjudged | None = None
    rules: UtilityRules | None = None

    def __post_init__(self) -> None:
        policy = self.policy
        if policy not in ("judge", "irrelevant", "skip"):
            raise AnnotationError(
                f"unjudged must be 'judge', 'irrelevant' or 'skip', got {policy!r}"
            )
        if policy == "judge" and self.judge is None:
            raise AnnotationError("unjudged='judge' needs a judge")

    @property
    def policy(self) -> Unjudged:
        """The policy in force for unlabelled candidates."""
        return self.unjudged or ("judge" if self.judge is not None else "irrelevant")


@dataclass(frozen=True, kw_only=True)
class Outputs:
    """What [`Annotator`][ragguard.calibration.Annotator] writes, each path checked when built.

    Attributes:
        out: the ragguard JSONL to write: the eval set with ``no_response`` and
            ``utilities`` per annotated candidate and the model under
            ``metadata.annotate``; [`load_evalset`][ragguard.calibration.load_evalset] reads it.
        udcg_out: also write the UDCG authors' JSON (``models_info.<model>.no_res_prob``).
        progress_file: where results are appended as they are computed (default: the
            output path plus ``.progress``). A re-run reads it and skips what is done.
        fresh: ignore saved results and start over.

    Raises:
        AnnotationError: a path that is a folder or lies under a file.
    """

    out: PathLike
    udcg_out: PathLike | None = None
    progress_file: PathLike | None = None
    fresh: bool = False

    def __post_init__(self) -> None:
        for path in self.paths:
            check_output_path(
                path, folder=False, what="an annotate output", error=AnnotationError, example=None
            )

    @property
    def paths(self) -> list[Path]:
        """The files written: the JSONL, the UDCG JSON (if any), the progress file."""
        return [p for p in (self.out_path, self.udcg_path, self.store_path) if p is not None]

    @property
    def out_path(self) -> Path:
        """The ragguard JSONL."""
        return Path(self.out)

    @property
    def udcg_path(self) -> Path | None:
        """The UDCG authors' JSON, or ``None``."""
        return None if self.udcg_out is None else Path(self.udcg_out)

    @property
    def store_path(self) -> Path:
        """The progress file."""
        if self.progress_file is not None:
            return Path(self.progress_file)
        return Path(f"{self.out_path}.progress")


@dataclass(frozen=True, kw_only=True)
class Annotator:
    """Annotation as an estimator-like object: the model (``estimator``), where
    relevance comes from and what is written, and [`run`][ragguard.calibration.Annotator.run] on a
    loaded eval set. ``annotate`` takes the same option objects.

    Attributes:
        estimator: the backend (``TransformersEstimator``,
            ``OpenAIEndpointEstimator``, ``SamplingEstimator``, or your own
            ``AbstentionEstimator``).
        outputs: what is written (``Outputs``).
        relevance: where R(q, p) comes from (``Relevance``).
    """

    estimator: AbstentionEstimator
    outputs: Outputs
    relevance: Relevance = Relevance()

    def run(
        self,
        es: EvalSet,
        *,
        only_runs: Sequence[str] | None = None,
        inputs: Sequence[PathLike] = (),
        progress: Progress | None = None,
    ) -> AnnotationSummary:
        """Annotate the candidates of ``es`` (its passage texts included).

        Args:
            es: the eval set, with its texts.
            only_runs: annotate the candidates of these runs only (default: every run).
            inputs: more paths read for this run (the eval set's, when it was loaded
                from one): no output may replace one.
            progress: ``progress(stage, done, total)``, called as results come in.

        Raises:
            AnnotationError: an output would replace an input; a query or passage has
                no text, or the eval set has no candidates.
            EndpointError: an endpoint backend failed (what was computed is saved).
        """
        estimator, judge = self.estimator, self.relevance.judge
        out_path, udcg_path = self.outputs.out_path, self.outputs.udcg_path
        store_path, fresh = self.outputs.store_path, self.outputs.fresh
        texts = es.texts
        read: list[PathLike | None] = [es.source, *(r.source for r in es.runs.values())]
        read += [*texts.files, *inputs]
        for path in self.outputs.paths:  # writing would replace a file it reads
            check_not_input(path, read, what="the annotate output", error=AnnotationError)
        policy = self.relevance.policy
        rules = self.relevance.rules or UtilityRules()
        bar = rules.relevant_grade if rules.partial_grade is None else rules.partial_grade

        run_names = list(es.runs) if only_runs is None else list(only_runs)
        for name in run_names:
            if name not in es.runs:
                raise AnnotationError(
                    f"no run named {name!r}; runs: {', '.join(es.runs) or 'none'}"
                )
        if not run_names:
            raise AnnotationError(
                "the eval set has no candidates to annotate: add candidates to it, or pass run "
                "files (--run)"
            )

        items: list[_Item] = []
        missing_text: list[tuple[str, str]] = []
        skipped = 0
        for qid in es.qids:
            docs: dict[str, None] = {}
            for name in run_names:
                docs.update(dict.fromkeys(es.runs[name].candidates.get(qid, {})))
            grades = es.labels[qid].grades
            for doc in docs:
                if doc in grades:
                    source, rel = "label", grades[doc] >= bar
                elif policy == "skip":
                    skipped += 1
                    continue
                elif policy == "irrelevant":
                    source, rel = "unjudged", False
                else:
                    source, rel = "judge", None
                text = texts.get(qid, doc)
                if text is None:
                    missing_text.append((qid, doc))
                    continue
                items.append(_Item(qid, doc, text, source, rel))
        if missing_text:
            q, d = missing_text[0]
            raise AnnotationError(
                f"{len(missing_text)} candidates have no passage text (e.g. {d!r} of query {q!r}); "
                "give texts in the eval set (candidates' 'text'), a corpus file (--corpus) or "
                "passages="
            )
        no_text = [q for q in es.qids if not es.queries[q].text]
        if no_text:
            raise AnnotationError(
                f"{len(no_text)} queries have no text (e.g. {no_text[0]!r}); the model needs the "
                "question"
            )

        judged = failures = computed = reused = 0
        with ProgressStore(store_path, fresh=fresh) as store:
            work = _Work(es, store, progress or (lambda stage, done, total: None))
            if policy == "judge":
                assert judge is not None
                judged, failures = work.judge(items, judge)
                items = [it for it in items if it.relevant is not None]
            computed, reused = work.estimate(items, estimator)

        by_query: dict[str, list[_Item]] = {}
        for it in items:
            by_query.setdefault(it.qid, []).append(it)
        lines = _jsonl_lines(es, texts, by_query, run_names, estimator, judge, rules)
        _atomic_write(out_path, lines)
        if udcg_path is not None:
            _atomic_write(udcg_path, [_udcg_json(es, texts, by_query, estimator.model_id)])
        summary = AnnotationSummary(
            estimator.model_id,
            len(items),
            computed,
            reused,
            judged,
            failures,
            skipped,
            out_path,
            udcg_path,
            store_path,
        )
        logger.info("annotate: %s", summary)
        return summary


def annotate(
    evalset: EvalSet | PathLike,
    estimator: AbstentionEstimator,
    *,
    outputs: Outputs,
    relevance: Relevance = Relevance(),
    runs: PathLike | Sequence[PathLike] | Mapping[str, PathLike] | None = None,
    format: str | None = None,
    corpus: PathLike | Sequence[PathLike] = (),
    passages: Mapping[str, str] | None = None,
    only_runs: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> AnnotationSummary:
    """Measure the utility ``u = R(q, p) * (1 - p(NO-RESPONSE | q, p))`` of every retrieved
    passage with an LLM, as the UDCG paper does:
    ``Annotator(estimator=estimator, outputs=outputs, relevance=relevance).run(...)``.

    Args:
        evalset: an [`EvalSet`][ragguard.calibration.EvalSet] or the path of one (any
            format [`load_evalset`][ragguard.calibration.load_evalset] reads).
        estimator: the backend (``TransformersEstimator``,
            ``OpenAIEndpointEstimator``, ``SamplingEstimator``, or your own
            ``AbstentionEstimator``).
        outputs: what is written (``Outputs``: the ragguard JSONL, the UDCG authors'
            JSON, the progress file, ``fresh``).
        relevance: where R(q, p) comes from (``Relevance``: the judge, the policy for
            unlabelled candidates, the grade rules).
        runs: run files, when ``evalset`` is a path (as in ``load_evalset``).
        format: the eval set's format, when ``evalset`` is a path (detected otherwise).
        corpus: JSONL corpus files with the passage texts, added to the eval set's own.
        passages: more passage texts, ``{doc_id: text}``.
        only_runs: annotate the candidates of these runs only (default: every run).
        progress: ``progress(stage, done, total)``, called as results come in.

    Raises:
        AnnotationError: a query or passage has no text, or the eval set has no
            candidates.
        EvalSetError: the eval set or a corpus file is malformed.
        EndpointError: an endpoint backend failed (what was computed is saved).
    """
    if isinstance(evalset, EvalSet):
        if runs is not None or format is not None:
            raise AnnotationError("runs= and format= apply when evalset is a path")
        es = evalset
    else:
        es = load_evalset(evalset, format=format, runs=runs)
    corpus_list = [corpus] if isinstance(corpus, str | os.PathLike) else list(corpus)
    es = es.with_texts(corpus=corpus_list, passages=passages)
    annotator = Annotator(estimator=estimator, outputs=outputs, relevance=relevance)
    return annotator.run(
        es,
        only_runs=only_runs,
        inputs=[] if isinstance(evalset, EvalSet) else [evalset],
        progress=progress,
    )


@contextmanager
def _closing(results: Iterator[T]) -> Iterator[Iterator[T]]:
    """``results``, closed on the way out when it can be: an interrupt or an error stops
    the backend's work at once (an endpoint's requests in flight)."""
    try:
        yield results
    finally:
        close = getattr(results, "close", None)
        if callable(close):
            close()


def _todo(todo: list[tuple[_Item, str]], i: object, who: str) -> tuple[_Item, str]:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(todo):
        raise AnnotationError(f"the {who} returned a result for index {i!r} of {len(todo)} inputs")
    return todo[i]


@dataclass(frozen=True)
class _Work:
    """Judging and estimating for one run."""

    es: EvalSet
    store: ProgressStore
    progress: Progress

    def todo(
        self, kind: str, key: str, items: list[_Item], texts: Callable[[_Item], tuple[str, ...]]
    ) -> list[tuple[_Item, str]]:
        """The items to compute, with their texts' hash; results saved under ``key`` are used."""
        relevance = kind == "relevance"
        table: Mapping[Any, Any] = self.store.relevance if relevance else self.store.no_response
        todo: list[tuple[_Item, str]] = []
        for it in items:
            h = pair_hash(*texts(it))
            saved = table.get((key, it.qid, it.doc, h))
            if saved is None:
                todo.append((it, h))
            elif relevance:
                it.relevant, it.motivation = saved
            else:
                it.p = saved
        n = self.store.saved_elsewhere(kind, key, ((it.qid, it.doc, h) for it, h in todo))
        if n:
            logger.warning(
                "%s holds %s for %d of these pairs made with other settings (another model, "
                "server, prompt or options); they are not reused, the pairs are computed again "
                "(--fresh / fresh=True starts a clean file)",
                self.store.path,
                "relevance judgements" if relevance else "p(NO-RESPONSE) results",
                n,
            )
        return todo

    def judge(self, items: list[_Item], judge: RelevanceJudge) -> tuple[int, int]:
        key = settings_key(judge.settings())
        qs = self.es.queries
        mine = [it for it in items if it.source == "judge"]
        answers = {q: json.dumps(list(qs[q].answers)) for q in {it.qid for it in mine}}
        todo = self.todo(
            "relevance", key, mine, lambda it: (qs[it.qid].text or "", answers[it.qid], it.passage)
        )
        total = len(mine)
        done = total - len(todo)
        self.progress("judge", done, total)
        failures, add = 0, self.store.add_relevance
        questions = [(qs[it.qid].text or "", qs[it.qid].answers, it.passage) for it, _ in todo]
        with _closing(judge.judge(questions)) as replies:
            for i, reply in replies:
                it, h = _todo(todo, i, "judge")
                done += 1
                if reply is None:
                    failures += 1
                    logger.warning(
                        "the judge's reply for passage %r of query %r has no grade; it is left "
                        "out and judged again on the next run",
                        it.doc,
                        it.qid,
                    )
                else:
                    it.relevant, it.motivation = reply.relevant, reply.motivation
                    add(key, it.qid, it.doc, h, reply.relevant, reply.motivation)
                self.progress("judge", done, total)
        return total - failures, failures

    def estimate(self, items: list[_Item], estimator: AbstentionEstimator) -> tuple[int, int]:
        key = settings_key(estimator.settings())
        qs = self.es.queries
        todo = self.todo("no_response", key, items, lambda it: (qs[it.qid].text or "", it.passage))
        reused = len(items) - len(todo)
        self.progress("estimate", reused, len(items))
        pairs = [Pair(qs[it.qid].text or "", it.passage) for it, _ in todo]
        done = reused
        with _closing(estimator.estimate(pairs)) as results:
            for i, p in results:
                ok = isinstance(p, float | int) and not isinstance(p, bool)
                if not (ok and math.isfinite(p) and 0.0 <= p <= 1.0):
                    raise AnnotationError(
                        f"the estimator returned {p!r}, not a probability in [0, 1]"
                    )
                it, h = _todo(todo, i, "estimator")
                it.p = float(p)
                self.store.add_no_response(key, it.qid, it.doc, h, float(p))
                done += 1
                self.progress("estimate", done, len(items))
        missing = [it for it, _ in todo if it.p is None]
        if missing:
            raise AnnotationError(
                f"the estimator returned no result for {len(missing)} pairs (e.g. passage "
                f"{missing[0].doc!r} of query {missing[0].qid!r})"
            )
        return len(todo), reused


def _atomic_write(path: Path, chunks: Iterable[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise AnnotationError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.writelines(chunks)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise AnnotationError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def _jsonl_lines(
    es: EvalSet,
    texts: Texts,
    by_query: dict[str, list[_Item]],
    run_names: list[str],
    estimator: AbstentionEstimator,
    judge: RelevanceJudge | None,
    rules: UtilityRules,
) -> Iterator[str]:
    judged_grade = rules.relevant_grade
    for qid in es.qids:
        q, lab = es.queries[qid], es.labels[qid]
        mine = by_query.get(qid, [])
        obj: dict[str, Any] = {"query_id": qid}
        if q.text is not None:
            obj["query"] = q.text
        if q.answers:
            obj["answers"] = list(q.answers)
        relevant = {d: g for d, g in lab.grades.items() if g >= 1}
        not_relevant = [d for d, g in lab.grades.items() if g < 1 and d not in lab.distractors]
        for it in mine:
            if it.source == "judge":
                if it.relevant:
                    relevant[it.doc] = judged_grade
                else:
                    not_relevant.append(it.doc)
        obj["relevant"] = relevant
        if not_relevant:
            obj["not_relevant"] = not_relevant
        if lab.distractors:
            obj["distractors"] = sorted(lab.distractors)
        if lab.n_relevant is not None:
            obj["num_relevant"] = max(lab.n_relevant, len(relevant))
        no_response = dict(lab.no_response)
        utilities = dict(lab.utilities)
        for it in mine:
            assert it.p is not None and it.relevant is not None
            no_response[it.doc] = it.p
            utilities[it.doc] = (1.0 if it.relevant else -1.0) * (1.0 - it.p)
        if no_response:
            obj["no_response"] = no_response
        if utilities:
            obj["utilities"] = utilities
        run_lists: dict[str, list[dict[str, Any]]] = {}
        for name, run in es.runs.items():
            if qid not in run.candidates:
                continue
            cands: list[dict[str, Any]] = []
            for doc, score in run.candidates[qid].items():
                c: dict[str, Any] = {"id": doc}
                if not math.isnan(score):
                    c["score"] = score
                text = texts.get(qid, doc)
                if text is not None:
                    c["text"] = text
                cands.append(c)
            run_lists[name] = cands
        if "default" in run_lists:
            obj["candidates"] = run_lists.pop("default")
        if run_lists:
            obj["runs"] = run_lists
        meta = dict(texts.metadata.get(qid, {}))
        info: dict[str, Any] = {
            "model": estimator.model_id,
            "settings": dict(estimator.settings()),
            "method": "UDCG paper: u = R * (1 - p(NO-RESPONSE | q, p)), Figure 4 prompt",
            "runs": run_names,
            "relevance": {it.doc: it.source for it in mine},
            "score_kinds": {
                n: (r.score_kind.value if r.score_kind else None) for n, r in es.runs.items()
            },
        }
        if judge is not None and any(it.source == "judge" for it in mine):
            info["judge_model"] = judge.model_id
            info["judge_motivation"] = {
                it.doc: it.motivation for it in mine if it.source == "judge"
            }
        meta["annotate"] = info
        obj["metadata"] = meta
        yield json.dumps(obj, ensure_ascii=False) + "\n"


def _udcg_json(es: EvalSet, texts: Texts, by_query: dict[str, list[_Item]], model_id: str) -> str:
    examples: list[dict[str, Any]] = []
    originals = texts.udcg_examples or {}
    for qid in es.qids:
        mine = {it.doc: it for it in by_query.get(qid, [])}
        if qid in originals:
            ex = copy.deepcopy(originals[qid])
            for p in ex.get("passages", []):
                found = mine.get(str(p.get("doc_id")))
                if found is not None:
                    p.setdefault("models_info", {})[model_id] = {"no_res_prob": found.p}
            examples.append(ex)
            continue
        q = es.queries[qid]
        ex = {"example_id": qid, "question": q.text}
        if q.answers:
            ex["answers"] = list(q.answers)
        passages = []
        for it in mine.values():
            entry: dict[str, Any] = {
                "doc_id": it.doc,
                "text": it.passage,
                "is_relevant": bool(it.relevant),
            }
            if it.source != "label":
                entry["relevance_source"] = it.source
            entry["models_info"] = {model_id: {"no_res_prob": it.p}}
            passages.append(entry)
        ex["passages"] = passages
        examples.append(ex)
    return json.dumps(examples, ensure_ascii=False, indent=2) + "\n"
