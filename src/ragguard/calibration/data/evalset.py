"""Evaluation sets: labelled queries and one run per retrieval profile, loaded through
``FORMATS`` and checked as docs/reference/data-formats.md describes (malformed input
raises ``EvalSetError``; usable problems are counted in ``EvalSet.report``)."""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ragguard.calibration.data.arrays import EvalArrays
from ragguard.calibration.data.columns import (
    ColumnarCandidates,
    ColumnarLabels,
    KeyView,
    arrays_from_columnar,
    query_view,
)
from ragguard.calibration.data.formats import trec
from ragguard.calibration.data.formats.beir import BEIR, corpus_source
from ragguard.calibration.data.formats.common import Format, ReadOptions, first_content
from ragguard.calibration.data.formats.jsonl import JSONL
from ragguard.calibration.data.formats.llamaindex import LLAMAINDEX
from ragguard.calibration.data.formats.ragas import RAGAS
from ragguard.calibration.data.formats.tables import (
    Table,
    as_dicts,
    columnar,
    read_input,
    table_domains,
)
from ragguard.calibration.data.formats.udcg import UDCG
from ragguard.calibration.data.problems import LoadReport, ProblemKind, Reporter
from ragguard.calibration.data.records import Labels, Query, Run, domain_problem
from ragguard.calibration.data.texts import PathLike, Texts
from ragguard.calibration.data.utility import UtilityRules, as_profile, rules_of
from ragguard.errors import EvalSetError
from ragguard.profiles import Profile
from ragguard.scores import ScoreKind

logger = logging.getLogger(__name__)

DOMAINS_FILE = "domains.tsv"
"""The ``query-id<TAB>domain`` file read beside TREC qrels or inside a BEIR folder."""

FORMATS: dict[str, Format] = {f.name: f for f in (RAGAS, LLAMAINDEX, JSONL, trec.TREC, BEIR, UDCG)}
"""The eval-set formats by name, in the order ``detect_format`` tries them; a format
added here loads with ``load_evalset`` (and ``--format``) like the built-in ones."""


class EvalSet:
    """Labelled queries and the runs to evaluate on them.

    Build one with [`load_evalset`][ragguard.calibration.load_evalset] or
    [`from_dicts`][ragguard.calibration.EvalSet.from_dicts]. Queries are evaluated in the order of
    [`qids`][ragguard.calibration.EvalSet.qids] (the order of the labels).

    Attributes:
        queries: query id -> ``Query``.
        labels: query id -> ``Labels``.
        runs: run name -> ``Run``.
        report: problems found while loading (empty when there were none).
        source: where the labels came from.
        texts: the passage texts the source carries (empty when none);
            [`with_texts`][ragguard.calibration.EvalSet.with_texts] adds more.
        silver: whether the labels were generated, not judged (a RAGAS testset, a
            LlamaIndex dataset): each query's source passages are relevant, every other
            counts as not relevant."""

    def __init__(
        self,
        queries: Mapping[str, Query],
        labels: Mapping[str, Labels],
        runs: Mapping[str, Run],
        *,
        report: LoadReport | None = None,
        source: str | None = None,
        texts: Texts | None = None,
        silver: bool = False,
    ) -> None:
        missing = [q for q in labels if q not in queries]
        if missing:
            raise EvalSetError(f"labels for queries without a Query entry, e.g. {missing[0]!r}")
        for name, run in runs.items():
            if name != run.name:
                raise EvalSetError(f"run {run.name!r} registered under the name {name!r}")
        self.queries: Mapping[str, Query] = (  # read column-wise: read-only already
            queries if isinstance(queries, KeyView) else MappingProxyType(dict(queries))
        )
        self.labels = ColumnarLabels.of_labels(labels, source or "")
        self.runs: Mapping[str, Run] = MappingProxyType(
            {name: columnar_run(run, source) for name, run in runs.items()}
        )
        self.report = report or LoadReport()
        self.source = source
        self.texts = texts if texts is not None else Texts()
        self.silver = silver
        self._arrays: dict[tuple[str, Profile, UtilityRules], EvalArrays] = {}

    def __repr__(self) -> str:
        return (
            f"EvalSet({len(self.labels)} queries, runs={list(self.runs)}, "
            f"problems={len(self.report.problems)})"
        )

    @cached_property
    def unanswerable(self) -> tuple[str, ...]:
        """The **unanswerable** queries, in order: judged (at least one document labelled)
        and none relevant (no grade >= 1, no stated ``num_relevant`` above 0); a query with no
        label is not judged. How each format states one: docs/reference/data-formats.md."""
        return tuple(self.labels.unanswerable())

    @property
    def qids(self) -> tuple[str, ...]:
        """The labelled query ids, in order."""
        return tuple(self.labels)

    def subset(self, qids: Sequence[str]) -> EvalSet:
        """This eval set restricted to the queries ``qids`` (in this eval set's order), with
        the same runs, texts and source; this one is unchanged."""
        keep = set(qids)
        labels = {q: self.labels[q] for q in self.labels if q in keep}
        runs = {}
        for name, run in self.runs.items():
            assert isinstance(run.candidates, ColumnarCandidates)  # (an EvalSet holds columns)
            runs[name] = replace(run, candidates=run.candidates.restrict(labels)[0])
        queries = {q: self.queries[q] for q in labels}
        return EvalSet(
            queries, labels, runs, source=self.source, texts=self.texts, silver=self.silver
        )

    def domains(self, by: str = "domain") -> dict[str, tuple[str, ...]]:
        """The labelled queries grouped by domain, in order of first appearance: ``by`` is
        ``domain`` (each query's own field) or a key of its JSONL ``metadata``. Queries
        without one belong to no domain.

        Raises:
            EvalSetError: no query has ``by``, or one's value cannot name a domain (not a
                string, empty)."""
        metadata = self.texts.metadata if by != "domain" else {}
        out: dict[str, list[str]] = {}
        for qid in self.qids:
            query = self.queries.get(qid)
            value = (
                getattr(query, "domain", None) if by == "domain" else metadata.get(qid, {}).get(by)
            )
            if value is None:
                continue
            problem = domain_problem(value)
            if problem is not None:
                raise EvalSetError(f"query {qid!r}, {by!r}: {problem}", path=self.source)
            out.setdefault(value, []).append(qid)
        if not out:
            where = (
                "a 'domain' field (JSONL) or a domains.tsv file of 'query-id<TAB>domain' "
                "lines beside TREC qrels / in a BEIR folder"
                if by == "domain"
                else f"a metadata key {by!r} (JSONL 'metadata')"
            )
            raise EvalSetError(
                f"--by {by}: no query has {where}; add it, or name a metadata key with --by",
                path=self.source,
            )
        return {name: tuple(q) for name, q in out.items()}

    def with_texts(
        self,
        *,
        corpus: Sequence[PathLike] = (),
        passages: Mapping[str, str] | None = None,
    ) -> EvalSet:
        """This eval set with more passage texts: ``corpus`` files (JSONL, read when a text
        is first asked for) and ``passages`` (``{passage id: text}``), winning in that order. A
        new eval set sharing this one's data and arrays; this one is unchanged.

        Raises:
            EvalSetError: a corpus file does not exist."""
        if not corpus and not passages:
            return self
        out = copy.copy(self)
        out.texts = self.texts.merged(docs=[corpus_source(c) for c in corpus], passages=passages)
        return out

    @classmethod
    def from_dicts(
        cls,
        qrels: Mapping[str, Mapping[str, int]] | Table,
        runs: Mapping[str, Mapping[str, Mapping[str, float]] | Table] | None = None,
        *,
        score_kind: ScoreKind | str | Mapping[str, ScoreKind | str | None] | None = "similarity",
        distractors: Mapping[str, Sequence[str]] | None = None,
        utilities: Mapping[str, Mapping[str, float]] | None = None,
        no_response: Mapping[str, Mapping[str, float]] | None = None,
        n_relevant: Mapping[str, int] | None = None,
        queries: Mapping[str, str] | None = None,
        passages: Mapping[str, str] | None = None,
        strict: bool = False,
        columns: Mapping[str, str] | None = None,
    ) -> EvalSet:
        """An eval set from ranx / pytrec_eval style dicts, or from tables (copied; never
        modified).

        Qrels and each run may be a dict, a pandas or polars DataFrame, a pyarrow Table (a row
        per label or candidate; row order is the run's order) or a ranx ``Qrels`` / ``Run``. A
        table means what the dict of its rows means and stays columnar with pyarrow. Repeated
        (query, document) rows keep the first and are counted in ``report``.

        ::

            EvalSet.from_dicts(qrels_df, {"bm25": run_df})        # pandas / polars
            EvalSet.from_dicts(ranx_qrels, {"bm25": ranx_run})     # ranx objects

        Args:
            qrels: ``{query_id: {doc_id: grade}}`` or a table of (query id, document id,
                grade) rows; these are the labelled queries. A table's ``domain`` column
                gives each query's domain (``calibrate --by domain``).
            runs: ``{run_name: run}``, each ``{query_id: {doc_id: score}}`` or a table.
            score_kind: one kind for every run, or ``{run_name: kind}``.
            distractors: ``{query_id: [doc_id, ...]}`` known distractors (grade 0 unless
                graded in ``qrels``).
            utilities: ``{query_id: {doc_id: utility}}``.
            no_response: ``{query_id: {doc_id: abstention probability}}``.
            n_relevant: ``{query_id: stated number of relevant documents}``.
            queries: ``{query_id: text}``.
            passages: ``{doc_id: text}``, the passage texts.
            strict: raise on the first problem instead of counting it.
            columns: tables only: column names that are not the usual ones (``{"qid": ...,
                "docid": ..., "grade": ..., "score": ...}``; the usual ones:
                docs/reference/data-formats.md).

        Raises:
            EvalSetError: inconsistent labels, a grade the file readers reject (2.5, 7), qrels
                or a run without rows, a table column missing, ambiguous or not numeric, a
                repeated label with two grades."""
        rep = Reporter(strict)
        read = read_input(qrels, "qrels", columns=columns, what="qrels table", rep=rep)
        extras = (distractors, utilities, no_response, n_relevant)
        labels: Mapping[str, Labels]
        if columnar(read) and all(x is None for x in extras):  # grades: whole numbers
            labels = ColumnarLabels(read)
        else:
            labels = _labels_from_dicts(as_dicts(read, "qrels"), *extras)
        domains = table_domains(qrels, columns, "qrels table")  # its domain column, if any
        qs = query_view(labels, dict(queries) if queries else None, domains)  # copies
        built: dict[str, Run] = {}
        for name, run in (runs or {}).items():
            got = read_input(run, "run", columns=columns, what=f"run table {name!r}", rep=rep)
            cands: Mapping[str, Mapping[str, float]]
            if columnar(got):
                cands = ColumnarCandidates(got)
            else:
                cands = {
                    q: {d: _score(s, name, q, d) for d, s in c.items()}
                    for q, c in as_dicts(got, "run").items()
                }
            built[name] = Run(name, cands, _kind_of(score_kind, name))
        texts = Texts().merged(passages=passages)
        return assemble(qs, labels, built, rep, label_lines={}, run_lines={}, texts=texts)

    def arrays(
        self,
        run: str | None = None,
        *,
        profile: Profile | str | None = None,
        rules: UtilityRules | None = None,
    ) -> EvalArrays:
        """Dense arrays of one run against the labels, converted once and cached.

        Args:
            run: the run's name; may be omitted when the eval set has exactly one.
            profile: tolerance profile for utilities (default ``support``).
            rules: which grades are relevant / partially relevant.

        Raises:
            EvalSetError: no runs, ``run`` unknown or omitted among several, or data out of
                range."""
        name = self._run_name(run)
        prof = as_profile(profile)
        rules = rules_of(prof, rules)
        key = (name, prof, rules)
        cached = self._arrays.get(key)
        if cached is not None:
            return cached
        for (other, _, other_rules), arr in self._arrays.items():
            if other == name and other_rules == rules:
                cached = self._arrays[key] = arr.with_profile(prof)
                return cached
        r = self.runs[name]
        assert isinstance(r.candidates, ColumnarCandidates)  # (EvalSet keeps runs as columns)
        arrays = arrays_from_columnar(
            self.qids, r.candidates, self.labels, score_kind=r.score_kind, profile=prof, rules=rules
        )
        if not isinstance(self.queries, KeyView):  # (queries read column-wise state no need)
            needs = [getattr(self.queries.get(q), "needs", None) or 0 for q in arrays.qids]
            if any(needs):
                arrays = replace(arrays, n_needed=np.asarray(needs, dtype=np.intp))
        if arrays.score_issues:
            logger.warning(
                "run %r: scores contradict score_kind=%r in %s",
                name,
                r.score_kind and r.score_kind.value,
                ", ".join(f"{n} queries ({i.value})" for i, n in arrays.score_issues.items()),
            )
        self._arrays[key] = arrays
        return arrays

    def _run_name(self, run: str | None) -> str:
        if run is not None:
            if run not in self.runs:
                raise EvalSetError(f"no run named {run!r}; runs: {', '.join(self.runs) or 'none'}")
            return run
        if not self.runs:
            raise EvalSetError(
                "this eval set has no runs; load one with runs=... or add candidates",
                path=self.source,
            )
        if len(self.runs) > 1:
            raise EvalSetError(
                f"this eval set has several runs; pick one of: {', '.join(self.runs)}"
            )
        return next(iter(self.runs))

    def qrels(self) -> dict[str, dict[str, int]]:
        """The labels as ``{query_id: {doc_id: grade}}`` (a copy), for other tools."""
        return {q: dict(lab.grades) for q, lab in self.labels.items()}

    def run_dict(self, run: str | None = None) -> dict[str, dict[str, float]]:
        """A run as ``{query_id: {doc_id: score}}`` (a copy), for other tools."""
        r = self.runs[self._run_name(run)]
        return {q: dict(c) for q, c in r.candidates.items()}


def _labels_from_dicts(
    qrels: Mapping[str, Mapping[str, Any]],
    distractors: Mapping[str, Sequence[str]] | None,
    utilities: Mapping[str, Mapping[str, float]] | None,
    no_response: Mapping[str, Mapping[str, float]] | None,
    n_relevant: Mapping[str, int] | None,
) -> dict[str, Labels]:
    labels: dict[str, Labels] = {}
    for qid, grades in qrels.items():
        dis = frozenset((distractors or {}).get(qid, ()))
        g = dict(grades)
        for doc in dis:
            if g.get(doc, 0) >= 1:
                raise EvalSetError(
                    f"document {doc!r} is both relevant and a known distractor",
                    field=f"{qid}",
                )
            g.setdefault(doc, 0)
        labels[qid] = Labels(
            grades=g,
            distractors=dis,
            utilities=dict((utilities or {}).get(qid, {})),
            no_response=dict((no_response or {}).get(qid, {})),
            n_relevant=(n_relevant or {}).get(qid),
        )
    return labels


def columnar_run(run: Run, source: str | None = None) -> Run:
    if isinstance(run.candidates, ColumnarCandidates):
        return run
    cands = ColumnarCandidates.of_dicts(run.candidates, run.source or source or "")
    return Run(run.name, cands, run.score_kind, run.source)


def as_score_kind(value: ScoreKind | str | None, what: str) -> ScoreKind | None:
    """``value`` as a ``ScoreKind`` (``None`` stays ``None``).

    Raises:
        EvalSetError: not a score kind; the message lists the kinds."""
    if value is None:
        return None
    try:
        return ScoreKind(value)
    except ValueError:
        kinds = ", ".join(k.value for k in ScoreKind)
        raise EvalSetError(f"{what}: score_kind must be one of {kinds}, got {value!r}") from None


def _kind_of(
    score_kind: ScoreKind | str | Mapping[str, ScoreKind | str | None] | None, run: str
) -> ScoreKind | None:
    """The kind of ``run``'s scores: ``score_kind`` or its entry (default ``similarity``)."""
    kind = score_kind.get(run, "similarity") if isinstance(score_kind, Mapping) else score_kind
    return as_score_kind(kind, f"run {run!r}")


def _score(value: object, run: str, qid: str, doc: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvalSetError(
            f"run {run!r}: the score of document {doc!r} in query {qid!r} is not a number: "
            f"{value!r}"
        )
    return float(value)


def assemble(
    queries: Mapping[str, Query],
    labels: Mapping[str, Labels],
    runs: Mapping[str, Run],
    rep: Reporter,
    *,
    label_lines: Mapping[str, tuple[str | None, int | None]],
    run_lines: Mapping[str, Mapping[str, int]],
    source: str | None = None,
    texts: Texts | None = None,
    silver: bool = False,
) -> EvalSet:
    """Reconcile runs with labels (reporting mismatches) and build the ``EvalSet``."""
    if not labels:
        raise EvalSetError("no labelled queries found", path=source)
    labels = ColumnarLabels.of_labels(labels, source or "")
    kept: dict[str, Run] = {}
    for name, given in runs.items():
        run = columnar_run(given, source)
        assert isinstance(run.candidates, ColumnarCandidates)
        lines = run_lines.get(name, {})
        cands, dropped = run.candidates.restrict(labels)
        for qid in dropped:
            rep(
                ProblemKind.RUN_QUERY_WITHOUT_LABELS,
                f"run {name!r} has {run.candidates.size(qid)} candidates for query {qid!r}, "
                "which has no labels",
                path=run.source,
                line=lines.get(qid),
            )
        for qid in labels:
            if qid not in run.candidates:
                path, line = label_lines.get(qid, (source, None))
                rep(
                    ProblemKind.LABELS_WITHOUT_RUN,
                    f"labelled query {qid!r} has no candidates in run {name!r}",
                    path=path,
                    line=line,
                )
        kind = run.score_kind if cands.has_score() else None
        kept[name] = Run(name, cands, kind, run.source)
    es = EvalSet(
        queries, labels, kept, report=rep.report, source=source, texts=texts, silver=silver
    )
    rep.log(source or "eval set")
    return es


def detect_format(path: PathLike) -> str:
    """The name of ``path``'s format in ``FORMATS`` (a folder: ``beir``).

    Raises:
        EvalSetError: the file does not exist or matches no format."""
    p = Path(path)
    if p.is_dir():
        for f in FORMATS.values():
            if f.folder and f.detect(p, None):
                return f.name
        raise EvalSetError(
            "a folder is read as BEIR, but it has neither qrels/ nor corpus.jsonl", path=str(p)
        )
    if not p.exists():
        raise EvalSetError("no such file or folder", path=str(p))
    name = p.name.lower()
    try:
        head, line = first_content(p)
    except EvalSetError:  # an empty or unreadable file: its format's reader says so
        head, line = None, None
    for f in FORMATS.values():
        if f.suffixes and name.endswith(f.suffixes):
            return f.name
        if not f.folder and head is not None and f.detect(p, head):
            return f.name
    if head is None:
        head, line = first_content(p)  # raises why
    table = name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")) or "," in head
    raise EvalSetError(
        f"cannot detect the format from this line: {head[:80]!r}; eval sets are JSONL, "
        "TREC qrels ('query 0 doc grade' lines), a BEIR folder, UDCG JSON, a RAGAS "
        "testset or a LlamaIndex EmbeddingQAFinetuneDataset"
        + (" (a CSV table: EvalSet.from_dicts(pandas.read_csv(...)) in Python)" if table else ""),
        path=str(p),
        line=line,
    )


def load_evalset(
    path: PathLike,
    *,
    format: str | None = None,
    runs: PathLike | Sequence[PathLike] | Mapping[str, PathLike] | None = None,
    score_kind: ScoreKind | str | Mapping[str, ScoreKind | str | None] | None = "similarity",
    split: str | None = None,
    model: str | None = None,
    strict: bool = False,
    texts: bool = True,
    corpus: Sequence[PathLike] = (),
) -> EvalSet:
    """Load an eval set (and its runs), validating everything.

    Args:
        path: the labels: a ``.jsonl`` file, TREC qrels, a BEIR folder, a UDCG JSON file,
            a RAGAS testset (JSONL or CSV, matched to the ``corpus.jsonl`` beside it) or a
            LlamaIndex ``EmbeddingQAFinetuneDataset`` (these two load silver labels;
            docs/reference/data-formats.md).
        format: a name of ``FORMATS``; detected when omitted.
        runs: run files (TREC or JSON ``{query_id: {doc_id: score}}``): one path, several
            (named by file stem) or ``{name: path}``; added to a JSONL file's own runs.
        score_kind: what the runs' scores are (default ``similarity``: higher is better);
            one kind or ``{run name: kind}``. Runs without scores keep their order.
        split: BEIR only: the qrels split (default: the only one, else ``test``).
        model: UDCG only: whose ``no_res_prob`` gives the utilities (default: the only one).
        strict: raise on the first reported problem instead of counting it.
        texts: keep the passage texts the data carries (``EvalSet.texts``). ``False``
            keeps none (less memory; still checked), and whatever asks for one raises
            [`EvalSetError`][ragguard.EvalSetError].
        corpus: JSONL corpus files a RAGAS testset's contexts are matched against,
            instead of the ``corpus.jsonl`` beside it; other formats ignore them.

    Returns:
        The [`EvalSet`][ragguard.calibration.EvalSet]; its ``report`` lists every problem counted.

    Raises:
        EvalSetError: malformed or inconsistent data, with file, line and field."""
    fmt = FORMATS.get(detect_format(path) if format is None else format)
    if fmt is None:
        raise EvalSetError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    for option, value in (("split", split), ("model", model)):
        if value is not None and option not in fmt.takes:
            owners = " or ".join(f.what for f in FORMATS.values() if option in f.takes)
            raise EvalSetError(f"{option}= applies to {owners} only")
    if fmt.no_runs is not None and runs is not None:
        raise EvalSetError(fmt.no_runs)
    if not fmt.folder and not Path(path).is_file():
        raise EvalSetError("no such file", path=str(path))
    rep = Reporter(strict)
    options = ReadOptions(split, model, texts, tuple(Path(c) for c in corpus))
    data = fmt.read(Path(path), rep, options)
    if fmt.name in (trec.TREC.name, BEIR.name):
        domains = Path(path) / DOMAINS_FILE if fmt.folder else Path(path).parent / DOMAINS_FILE
        if domains.is_file():
            data = replace(data, queries=_with_domains(data.queries, domains))
    all_runs: dict[str, Run] = {}
    run_lines: dict[str, Mapping[str, int]] = {}
    cands: Mapping[str, Mapping[str, float]]
    for name, (cands, lines) in data.runs.items():
        kind = _kind_of(score_kind, name) if fmt.no_runs is None else None
        all_runs[name] = Run(name, cands, kind, str(path))
        run_lines[name] = lines
    for name, run_path in _run_paths(runs).items():
        if name in all_runs:
            raise EvalSetError(f"two runs are named {name!r}", path=str(run_path))
        cands, lines = trec.read_run(Path(run_path), rep, known_docs=data.corpus)
        all_runs[name] = Run(name, cands, _kind_of(score_kind, name), str(run_path))
        run_lines[name] = lines
    if isinstance(score_kind, Mapping):
        unknown = set(score_kind) - set(all_runs)
        if unknown:
            raise EvalSetError(f"score_kind names unknown runs: {', '.join(sorted(unknown))}")
    return assemble(
        data.queries,
        data.labels,
        all_runs,
        rep,
        label_lines=data.label_lines,
        run_lines=run_lines,
        source=str(path),
        texts=_with_corpus_beside(data.texts, Path(path)) if texts else Texts.left_out(str(path)),
        silver=data.silver,
    )


def _with_domains(queries: Mapping[str, Query], path: Path) -> dict[str, Query]:
    """``queries`` with the domains of ``path``'s ``query-id<TAB>domain`` lines (ids not among
    ``queries`` ignored: a BEIR folder lists unlabelled queries too)."""
    out = dict(queries)
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            qid, tab, domain = line.rstrip("\r\n").partition("\t")
            problem = "no tab between the query id and the domain" if not tab else None
            problem = problem or domain_problem(domain)
            if problem is not None:
                raise EvalSetError(
                    f"{problem} ('query-id<TAB>domain' lines)", path=str(path), line=lineno
                )
            if qid in out:
                out[qid] = replace(out[qid], domain=domain)
    return out


def _with_corpus_beside(texts: Texts, path: Path) -> Texts:
    """``texts`` with the ``corpus.jsonl`` beside an eval-set file, read on first use."""
    beside = path.parent / "corpus.jsonl"
    if not path.is_file() or not beside.is_file() or beside.resolve() == path.resolve():
        return texts
    return texts.merged(docs=[corpus_source(beside)])


def _run_paths(
    runs: PathLike | Sequence[PathLike] | Mapping[str, PathLike] | None,
) -> dict[str, PathLike]:
    if runs is None:
        return {}
    if isinstance(runs, Mapping):
        return dict(runs)
    items = [runs] if isinstance(runs, str | os.PathLike) else list(runs)
    out: dict[str, PathLike] = {}
    for p in items:
        stem = Path(p).name.split(".")[0]
        if stem in out:
            raise EvalSetError(
                f"two run files are named {stem!r}; pass runs={{name: path}}", path=str(p)
            )
        out[stem] = p
    return out
