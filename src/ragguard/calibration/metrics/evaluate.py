"""``evaluate``: metric strings in, means (or per-query values) out, as in ranx."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ragguard.calibration.data.arrays import EvalArrays, build_arrays
from ragguard.calibration.data.columns import (
    ColumnarCandidates,
    ColumnarLabels,
    arrays_from_columnar,
)
from ragguard.calibration.data.formats.tables import (
    Table,
    as_dicts,
    columnar,
    read_input,
    table_kind,
)
from ragguard.calibration.data.problems import Reporter
from ragguard.calibration.data.records import MAX_GRADE
from ragguard.calibration.data.utility import UtilityRules
from ragguard.calibration.metrics import ParsedMetric, compute, parse_metric
from ragguard.errors import ArgumentTypeError, ConfigError
from ragguard.profiles import Profile
from ragguard.scores import ScoreKind

if TYPE_CHECKING:
    from ragguard.calibration.data.evalset import EvalSet

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, float]]
RunDict = Mapping[str, Mapping[str, float]]


def arrays_from_dicts(
    qrels: Qrels,
    run: RunDict,
    *,
    score_kind: ScoreKind | str | None = ScoreKind.SIMILARITY,
    n_relevant: Mapping[str, int] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
) -> EvalArrays:
    """Dense arrays from ranx / pytrec_eval style dicts.

    Args:
        qrels: ``{query_id: {doc_id: grade}}``; its queries are the ones evaluated, in
            its order. A query with an empty mapping has no relevant document (it
            scores 0 on classic metrics and counts in the mean).
        run: ``{query_id: {doc_id: score}}``. A query of ``qrels`` missing here has an
            empty candidate list. Queries only in the run cannot be evaluated: they are
            left out and a warning is logged with their number.
        score_kind: what the run's scores are (default ``similarity``: higher is
            better, as ranx and trec_eval assume).
        n_relevant: optional stated number of relevant documents per query (see
            ``ragguard.calibration.data.arrays``).
        profile: tolerance profile for utilities (default ``support``).
        rules: which grades are relevant / partially relevant, for utilities.
    """
    if not isinstance(qrels, Mapping) or not isinstance(run, Mapping):
        raise ArgumentTypeError("qrels and run must be mappings: {query_id: {doc_id: value}}")
    qids = list(qrels)
    _warn_unlabelled(qrels, run)
    empty: Mapping[str, float] = {}
    candidates = list(map(run.get, qids, repeat(empty)))
    grades = list(qrels.values())
    for what, seq in (("run", candidates), ("qrels", grades)):
        # isinstance(x, dict) is a fast C check; other mappings take the slower path
        if not all(map(isinstance, seq, repeat(dict))):
            for qid, m in zip(qids, seq, strict=True):
                if not isinstance(m, Mapping):
                    raise ArgumentTypeError(
                        f"{what}[{qid!r}] must be a mapping {{doc_id: value}}, got "
                        f"{type(m).__name__}"
                    )
    stated = None if n_relevant is None else [n_relevant.get(q) for q in qids]
    return build_arrays(
        qids,
        candidates,
        grades,
        score_kind=score_kind,
        n_relevant=stated,
        profile=profile,
        rules=rules,
    )


def _warn_unlabelled(qrels: Mapping[str, object], run: Mapping[str, object]) -> None:
    if run.keys() <= qrels.keys():  # the usual case, without building a set
        return
    unlabelled = len(run.keys() - qrels.keys())
    if unlabelled:
        example = next(q for q in run if q not in qrels)
        logger.warning(
            "%d run queries have no qrels and are not evaluated (e.g. %r)", unlabelled, example
        )


def arrays_from_tables(
    qrels: Qrels | Table,
    run: RunDict | Table,
    *,
    columns: Mapping[str, str] | None = None,
    score_kind: ScoreKind | str | None = ScoreKind.SIMILARITY,
    n_relevant: Mapping[str, int] | None = None,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
) -> EvalArrays:
    """Dense arrays from qrels and a run held as tables or dicts: the arrays
    ``arrays_from_dicts`` gives for the tables' rows, the input checked as the file readers
    check theirs. Two pyarrow tables are joined on integer codes; two non-empty dicts are
    converted first, their grades checked by the readers' rule only when one may fail it
    (the same errors, without a second walk over every grade)."""
    to_arrays = partial(
        arrays_from_dicts,
        score_kind=score_kind,
        n_relevant=n_relevant,
        profile=profile,
        rules=rules,
    )
    if isinstance(qrels, Mapping) and isinstance(run, Mapping) and qrels and run:
        failed: Exception | None = None
        try:
            arrays = to_arrays(qrels, run)
        except Exception as exc:
            failed = exc
        else:
            if arrays.integer_grades and arrays.max_grade.max() <= MAX_GRADE:
                return arrays
        # a grade the rule may reject, or a failed conversion: the rule names the first
        # bad grade, as when it ran first
        read_input(qrels, "qrels", columns=columns, what="qrels table", rep=Reporter(strict=False))
        if failed is not None:
            raise failed
        return arrays
    rep = Reporter(strict=False)
    labels = read_input(qrels, "qrels", columns=columns, what="qrels table", rep=rep)
    cands = read_input(run, "run", columns=columns, what="run table", rep=rep)
    rep.log("the qrels and run")
    if columnar(labels) and columnar(cands) and n_relevant is None:
        lab = ColumnarLabels(labels)
        ranked = ColumnarCandidates(cands)
        _warn_unlabelled(lab, ranked)
        return arrays_from_columnar(
            list(lab), ranked, lab, score_kind=score_kind, profile=profile, rules=rules
        )
    return to_arrays(as_dicts(labels, "qrels"), as_dicts(cands, "run"))


def _mean(values: NDArray[np.float64], may_be_na: bool) -> float:
    if may_be_na:
        values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan


@overload
def evaluate(
    data: EvalSet | EvalArrays | Qrels | Table,
    run: RunDict | Table | str | None = ...,
    metrics: str | Sequence[str] = ...,
    *,
    per_query: Literal[False] = ...,
    profile: Profile | str | None = ...,
    rules: UtilityRules | None = ...,
    score_kind: ScoreKind | str | None = ...,
    n_relevant: Mapping[str, int] | None = ...,
    cut: ArrayLike | None = ...,
    columns: Mapping[str, str] | None = ...,
) -> dict[str, float]: ...


@overload
def evaluate(
    data: EvalSet | EvalArrays | Qrels | Table,
    run: RunDict | Table | str | None = ...,
    metrics: str | Sequence[str] = ...,
    *,
    per_query: Literal[True],
    profile: Profile | str | None = ...,
    rules: UtilityRules | None = ...,
    score_kind: ScoreKind | str | None = ...,
    n_relevant: Mapping[str, int] | None = ...,
    cut: ArrayLike | None = ...,
    columns: Mapping[str, str] | None = ...,
) -> dict[str, dict[str, float]]: ...


def evaluate(
    data: EvalSet | EvalArrays | Qrels | Table,
    run: RunDict | Table | str | None = None,
    metrics: str | Sequence[str] = ("ndcg@10",),
    *,
    per_query: bool = False,
    profile: Profile | str | None = None,
    rules: UtilityRules | None = None,
    score_kind: ScoreKind | str | None = ScoreKind.SIMILARITY,
    n_relevant: Mapping[str, int] | None = None,
    cut: ArrayLike | None = None,
    columns: Mapping[str, str] | None = None,
) -> dict[str, float] | dict[str, dict[str, float]]:
    """Compute metrics, as means over queries or per query.

    ::

        evaluate(evalset, metrics=["ndcg@10", "udcg"])          # {"ndcg@10": 0.71, ...}
        evaluate(evalset, metrics="ndcg@10", per_query=True)    # {"ndcg@10": {"q1": ...}}
        evaluate(evalset, "bm25", metrics=["recall@5"])         # one of several runs
        evaluate(qrels, run, metrics=["recall@5"])              # plain dicts
        evaluate(qrels_df, run_df, metrics=["recall@5"])        # DataFrames, ranx objects

    Args:
        data: an [`EvalSet`][ragguard.calibration.EvalSet], prepared
            ``EvalArrays``, or qrels: a dict
            ``{query_id: {doc_id: grade}}``, a pandas or polars DataFrame or pyarrow
            Table with one row per label (query id, document id, grade columns), or a
            ranx ``Qrels``.
        run: with qrels, the run: a dict ``{query_id: {doc_id: score}}``, a table with
            one row per candidate (query id, document id, score columns; row order
            breaks ties) or a ranx ``Run``; with an eval set, the name of the run to
            evaluate (needed when it has several).
        metrics: one metric string or several (see ``ragguard.calibration.metrics``).
        per_query: return ``{metric: {query_id: value}}`` instead of means.
        profile: tolerance profile for utilities (default ``support``); not for
            prepared arrays, which carry theirs.
        rules: which grades are relevant / partially relevant, for utilities.
        score_kind: qrels and run only: what the run's scores are (default
            ``similarity``).
        n_relevant: qrels and run only: stated number of relevant documents per query.
        cut: optional per-query number of ranked candidates kept (e.g. a policy's
            ``n_kept``); the rest count as not retrieved.
        columns: tables only: the column names when they are not the usual ones,
            ``{"qid": ..., "docid": ..., "grade": ..., "score": ...}`` (recognised
            without it: ``qid`` / ``query_id`` / ``q_id``, ``docid`` / ``doc_id`` /
            ``docno`` / ``doc`` / ``corpus-id``, ``grade`` / ``relevance`` / ``rel`` /
            ``label`` (else ``score``) in qrels, ``score`` in runs).

    Returns:
        Keys are the metric strings as given. Means are over all queries; metrics that
        can be NA (the set-based family) average over the queries where they are
        defined and are NaN when none is. Per-query values are NaN where NA.

    Raises:
        ValueError: an unknown or malformed metric string, or a bad argument.
        EvalSetError: malformed data (scores or grades that are not numbers, a grade
            the file readers reject such as 2.5 or 7, qrels or a run without any row, a
            table column missing or ambiguous, a repeated label with two grades, ...).
    """
    from ragguard.calibration.data.evalset import EvalSet

    parsed: list[ParsedMetric] = [
        parse_metric(m) for m in ([metrics] if isinstance(metrics, str) else metrics)
    ]
    if isinstance(data, EvalArrays):
        if run is not None or profile is not None or rules is not None:
            raise ConfigError(
                "prepared EvalArrays carry their run, profile and rules; use "
                "arrays.with_profile(...) or build new arrays"
            )
        arrays = data
    elif isinstance(data, EvalSet):
        if run is not None and not isinstance(run, str):
            raise ArgumentTypeError("with an EvalSet, run is the name of one of its runs")
        arrays = data.arrays(run, profile=profile, rules=rules)
    elif isinstance(data, Mapping) or table_kind(data) is not None:
        if run is None or isinstance(run, str):
            raise ArgumentTypeError(
                "with qrels, pass the run too: evaluate(qrels, run, metrics=...)"
            )
        arrays = arrays_from_tables(
            data,
            run,
            columns=columns,
            score_kind=score_kind,
            n_relevant=n_relevant,
            profile=profile,
            rules=rules,
        )
    else:
        raise ArgumentTypeError(
            "evaluate() takes an EvalSet, EvalArrays or qrels (a mapping, a pandas or polars "
            f"DataFrame, a pyarrow Table or a ranx Qrels), got {type(data).__name__}"
        )

    values = {p.text: compute(arrays, p, cut=cut) for p in parsed}
    if per_query:
        return {name: dict(zip(arrays.qids, v.tolist(), strict=True)) for name, v in values.items()}
    return {p.text: _mean(values[p.text], p.spec.may_be_na) for p in parsed}
