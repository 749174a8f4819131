"""Qrels and runs held as tables (pandas, polars, pyarrow, ranx) or as dicts, read as
docs/reference/data-formats.md ("Tables") describes; pandas, polars, pyarrow and ranx are
never imported here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from itertools import chain
from numbers import Real
from typing import Any, Literal, TypeGuard

import numpy as np
from numpy.typing import NDArray

from ragguard.calibration.data.columns import (
    Pairs,
    arrow_module,
    encode_ids,
    pyarrow,
    repeated_rows,
    string_array,
    vocab_take,
)
from ragguard.calibration.data.labels import F64
from ragguard.calibration.data.problems import ProblemKind, Reporter
from ragguard.calibration.data.records import bad_grade, domain_problem, grade_error
from ragguard.errors import ArgumentTypeError, ConfigError, EvalSetError

Table = Any
"""A pandas or polars DataFrame, a pyarrow Table, or a ranx ``Qrels`` / ``Run``."""

Role = Literal["qrels", "run"]
Dicts = Mapping[str, Mapping[str, float]]

COLUMN_NAMES: dict[str, tuple[str, ...]] = {
    "qid": ("qid", "query_id", "q_id", "query-id", "queryid"),
    "docid": ("docid", "doc_id", "docno", "doc", "corpus-id", "corpus_id"),
    "grade": ("grade", "relevance", "rel", "label"),
    "score": ("score",),
}
_WHAT = {"qid": "query id", "docid": "document id", "grade": "grade", "score": "score"}


def table_kind(obj: object) -> str | None:
    """``pandas``, ``polars``, ``arrow``, ``ranx`` (by the object's class's module), or ``None``."""
    for cls in type(obj).__mro__:
        top = cls.__module__.partition(".")[0]
        if top in ("pandas", "polars") and cls.__name__ == "DataFrame":
            return top
        if top == "pyarrow" and cls.__name__ == "Table":
            return "arrow"
        if top == "ranx" and cls.__name__ in ("Qrels", "Run"):
            return "ranx"
    return None


def read_input(
    obj: Dicts | Table,
    role: Role,
    *,
    columns: Mapping[str, str] | None,
    what: str,
    rep: Reporter,
) -> Pairs | Dicts:
    """Qrels or a run as given: dicts stay dicts, ranx objects become dicts, tables become
    ``Pairs`` (repeated rows removed and reported under the name ``what``).

    Raises:
        ArgumentTypeError: ``obj`` is none of these.
        EvalSetError: no rows; a column missing, ambiguous or mistyped, a missing id, a
            bad grade, a repeated label contradicting the first.
        ConfigError: ``columns`` has an unknown key.
    """
    kind = None if isinstance(obj, Mapping) else table_kind(obj)
    if kind is None and not isinstance(obj, Mapping):
        raise ArgumentTypeError(
            f"{role} must be a mapping {{query_id: {{doc_id: value}}}}, a pandas or polars "
            f"DataFrame, a pyarrow Table or a ranx {'Qrels' if role == 'qrels' else 'Run'}, "
            f"got {type(obj).__name__}"
        )
    if not len(obj):
        empty = "no labelled queries found" if role == "qrels" else "the run has no candidates"
        raise EvalSetError(f"{empty}{' (no rows)' if kind else ''}", path=what)
    if kind is None or kind == "ranx":
        dicts = obj if kind is None else _ranx_dicts(obj, role)
        if role == "qrels":
            _check_grades(dicts, what)
        return dicts
    names, column = _columns(obj, kind)
    qname, dname, vname = _column_names(names, role, columns, what)
    qvocab, q = encode_ids(_arrow_ids(column(qname), qname, "query id", what))
    docs, d = encode_ids(_arrow_ids(column(dname), dname, "document id", what))
    value = _arrow_values(column(vname), role, vname, what)
    return _pairs(qvocab.to_pylist(), docs, q, d, value, role, what, rep, vname)


def table_domains(
    obj: Dicts | Table, columns: Mapping[str, str] | None, what: str
) -> dict[str, str]:
    """``{query id: domain}`` from a qrels table's ``domain`` column (empty for dicts and a table
    without one; a row without a value names none).

    Raises:
        EvalSetError: a value that cannot name a domain, or two domains for one query."""
    kind = None if isinstance(obj, Mapping) else table_kind(obj)
    if kind in (None, "ranx"):
        return {}
    names, column = _columns(obj, kind)
    name = next((n for n in names if n.lower() == "domain"), None)
    if name is None:
        return {}
    qname = _column_names(names, "qrels", columns, what)[0]
    qids = _arrow_ids(column(qname), qname, "query id", what).to_pylist()
    values = column(name)
    out: dict[str, str] = {}
    for row, (qid, value) in enumerate(
        zip(qids, values if isinstance(values, list) else values.to_pylist(), strict=True)
    ):
        if _missing(value):
            continue
        problem = domain_problem(value)
        if problem is None and out.setdefault(qid, value) != value:
            problem = f"query {qid!r} is in domain {out[qid]!r} and {value!r}; give one per query"
        if problem is not None:
            raise EvalSetError(f"row {row}: {problem} (column {name!r})", path=what)
    return out


def columnar(data: Pairs | Dicts) -> TypeGuard[Pairs]:
    return isinstance(data, Pairs)


def as_dicts(data: Pairs | Dicts, role: Role) -> Dicts:
    """``data`` as ``{query_id: {doc_id: value}}`` (whole-number grades as ints)."""
    if not isinstance(data, Pairs):
        return data
    out: dict[str, dict[str, Any]] = {}
    for code, qid in enumerate(data.qids):
        rows = data.rows_of(code)
        values = data.value[rows].tolist()
        if role == "qrels":
            values = [int(v) if v.is_integer() else v for v in values]
        out[qid] = dict(zip(data.doc_ids(rows), values, strict=True))
    return out


def _ranx_dicts(obj: Table, role: Role) -> Dicts:
    name = type(obj).__name__
    if (role == "qrels") != (name == "Qrels"):
        expected = "Qrels" if role == "qrels" else "Run"
        raise ArgumentTypeError(f"{role} must be a ranx {expected}, got a ranx {name}")
    # the numba typed dict ranx keeps, read directly: its to_dict() is 15x slower
    typed = getattr(obj, "qrels" if name == "Qrels" else "run", None)
    source = obj.to_dict() if typed is None else typed
    out: dict[str, dict[str, float]] = {q: dict(d) for q, d in source.items()}
    return out


def _check_grades(qrels: Dicts, what: str) -> None:
    """Raise on the first number ``bad_grade`` rejects (asked once per distinct value)."""
    maps = [m.values() for m in qrels.values() if type(m) is dict or isinstance(m, Mapping)]
    try:
        distinct: Iterable[Any] = set(chain.from_iterable(maps))
    except TypeError:  # an unhashable value
        distinct = chain.from_iterable(maps)
    if not any(map(_bad_number, distinct)):
        return
    for qid, grades in qrels.items():
        for doc, grade in grades.items() if isinstance(grades, Mapping) else ():
            if _bad_number(grade):
                raise EvalSetError(f"the grade {grade_error(grade, qid, doc)}", path=what)


def _bad_number(value: object) -> bool:
    return isinstance(value, Real | Decimal) and bad_grade(value)


def _column_names(
    names: Sequence[str], role: Role, columns: Mapping[str, str] | None, what: str
) -> tuple[str, str, str]:
    given = dict(columns or {})
    unknown = sorted(set(given) - set(COLUMN_NAMES))
    if unknown:
        raise ConfigError(
            f"columns= keys are {', '.join(COLUMN_NAMES)}; got {', '.join(map(repr, unknown))}"
        )
    listed = ", ".join(map(repr, names))
    out: list[str] = []
    for key in ("qid", "docid", "grade" if role == "qrels" else "score"):
        if key in given:
            if given[key] not in names:
                raise EvalSetError(
                    f"column {given[key]!r} (columns[{key!r}]) is not in the table; its "
                    f"columns: {listed}",
                    path=what,
                )
            out.append(given[key])
            continue
        found = [n for n in names if n.lower() in COLUMN_NAMES[key]]
        if not found and key == "grade":
            found = [n for n in names if n.lower() == "score"]  # ranx's and BEIR's name
        if len(found) > 1:
            raise EvalSetError(
                f"several {_WHAT[key]} columns: {', '.join(map(repr, found))}; pick one "
                f"with columns={{{key!r}: ...}}",
                path=what,
            )
        if not found:
            looked = COLUMN_NAMES[key] + (("score",) if key == "grade" else ())
            raise EvalSetError(
                f"no {_WHAT[key]} column (looked for {', '.join(looked)}; its columns: "
                f"{listed}); name it with columns={{{key!r}: ...}}",
                path=what,
            )
        out.append(found[0])
    return out[0], out[1], out[2]


def _missing(value: object) -> bool:
    """None, NaN or pandas.NA."""
    if value is None or type(value).__name__ == "NAType":
        return True
    return isinstance(value, float) and math.isnan(value)


def _missing_grade(name: str, row: int, value: object, what: str) -> EvalSetError:
    if _missing(value):
        return EvalSetError(f"row {row}: no grade (column {name!r})", path=what)
    return EvalSetError(
        f"row {row}: the grade (column {name!r}) is {value!r}; grades must be finite numbers",
        path=what,
    )


def _columns(obj: Table, kind: str) -> tuple[list[str], Callable[[str], Any]]:
    """Column names and a getter of a column as pyarrow (else as a list, checked value by value)."""
    if kind != "pandas":
        table = obj.to_arrow() if kind == "polars" else obj
        return list(table.column_names), table.column
    pa = pyarrow()
    if any(n is not None for n in obj.index.names):  # named index levels are columns
        obj = obj.reset_index()
    names = [str(c) for c in obj.columns]
    by_name = dict(zip(names, obj.columns, strict=True))

    def column(name: str) -> Any:
        series = obj[by_name[name]]
        try:
            return pa.chunked_array([pa.array(series, from_pandas=True)])
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            values: list[Any] = series.tolist()
            return values

    return names, column


def _arrow_ids(column: Any, name: str, label: str, what: str) -> Any:
    pa = pyarrow()
    if isinstance(column, list):  # strings, integers as their decimal text
        for i, v in enumerate(column):
            if isinstance(v, bool) or not isinstance(v, str | int):
                why = f"{label}s must be strings or integers, column {name!r} holds {v!r}"
                why = f"no {label} (column {name!r})" if _missing(v) else why
                raise EvalSetError(f"row {i}: {why}", path=what)
        return pa.chunked_array([string_array([str(v) for v in column])])
    types = pa.types
    if column.null_count:
        pc = arrow_module("compute")
        row = pc.index(pc.is_null(column), True).as_py()
        raise EvalSetError(f"row {row}: no {label} (column {name!r})", path=what)
    t = column.type
    if types.is_dictionary(t):
        t = t.value_type
    is_view = getattr(types, "is_string_view", lambda _: False)  # pyarrow >= 16
    if not (types.is_string(t) or types.is_large_string(t) or is_view(t) or types.is_integer(t)):
        raise EvalSetError(
            f"column {name!r} holds {t}; {label}s must be strings or integers", path=what
        )
    return column.cast(pa.string())


def _arrow_values(column: Any, role: Role, name: str, what: str) -> F64:
    if isinstance(column, list):
        return np.array(
            [_number(v, role, name, i, what) for i, v in enumerate(column)], dtype=np.float64
        )
    pa = pyarrow()
    types = pa.types
    t = column.type
    numeric = types.is_integer(t) or types.is_floating(t) or types.is_decimal(t)
    if not (numeric or (role == "qrels" and types.is_boolean(t)) or types.is_null(t)):
        example = next((v for v in column.to_pylist() if v is not None), None)
        raise EvalSetError(
            f"column {name!r} must hold numbers, it holds {t} (e.g. {example!r})", path=what
        )
    values = np.asarray(column.cast(pa.float64()).to_numpy(), dtype=np.float64)  # null: NaN
    if role == "qrels" and not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise _missing_grade(name, row, column[row].as_py(), what)
    return values


def _number(value: object, role: Role, name: str, row: int, what: str) -> float:
    if isinstance(value, int | float | Decimal) and (role == "qrels" or type(value) is not bool):
        out = float(value)
    elif _missing(value):
        out = math.nan
    else:
        raise EvalSetError(
            f"column {name!r} must hold numbers, row {row} holds {value!r}", path=what
        )
    if role == "qrels" and not math.isfinite(out):
        raise _missing_grade(name, row, value, what)
    return out


def _pairs(
    qids: list[str],
    docs: Any,
    q: NDArray[np.int32],
    d: NDArray[np.int32],
    value: F64,
    role: Role,
    what: str,
    rep: Reporter,
    name: str,
) -> Pairs:
    """``Pairs`` of interned rows: a bad grade or contradicting label raises, repeats go."""
    if role == "qrels":
        bad = [v for v in np.unique(value).tolist() if bad_grade(v)]  # NaN: rejected before
        if bad:
            row = int(np.flatnonzero(np.isin(value, bad))[0])
            problem = grade_error(
                value[row], qids[int(q[row])], vocab_take(docs, d[row : row + 1])[0]
            )
            raise EvalSetError(f"row {row}: the grade (column {name!r}) {problem}", path=what)
    repeats = repeated_rows(q, d, len(docs))
    if not repeats.size:
        return Pairs(qids, docs, q, d, value, None, what)
    key = q.astype(np.int64) * max(len(docs), 1) + d
    first: dict[int, int] = {}
    for row in np.flatnonzero(np.isin(key, key[repeats])).tolist():
        first.setdefault(int(key[row]), row)
    names = vocab_take(docs, d[repeats])
    for row, doc in zip(repeats.tolist(), names, strict=True):
        qid = qids[int(q[row])]
        if role == "run":
            rep(
                ProblemKind.DUPLICATE_CANDIDATE,
                f"row {row}: document {doc!r} appears twice in query {qid!r}",
                path=what,
            )
            continue
        was = first[int(key[row])]
        if value[row] != value[was]:
            raise EvalSetError(
                f"row {row}: query {qid!r}, document {doc!r}: grade {value[row]:g} "
                f"contradicts {value[was]:g} (row {was})",
                path=what,
            )
        rep(
            ProblemKind.DUPLICATE_LABEL,
            f"row {row}: query {qid!r}, document {doc!r} is labelled twice",
            path=what,
        )
    keep = np.ones(q.size, dtype=np.bool_)
    keep[repeats] = False
    rows = np.flatnonzero(keep)
    return Pairs(qids, docs, q[keep], d[keep], value[keep], rows + 1, what)
