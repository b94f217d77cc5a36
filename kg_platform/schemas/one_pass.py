"""Whether a polars frame passes a pandera model, proved in one query where that is simple.

Pandera validates a frame one check at a time (a query per check, per column, and the
nullable and unique checks besides): over the seven tables of a parsed file that is about
120 queries, most of the checks' CPU. :func:`proved_valid` reads the same model (its
columns, dtypes, nullability, built-in checks, strictness and unique keys) and evaluates
every one of those conditions as one ``select`` over the frame. It is sound, not complete:
True means that every condition holds, so that pandera's validation passes; False means
only that it did not prove it, and the caller validates with pandera, whose report says
what fails. A model with anything it does not read (a check other than the comparisons
and ``str_matches``, a custom or element-wise check, coercion, a frame-level check, ...)
is never proved: pandera validates it, as before.

The conditions, as pandera's polars backend has them: a column's dtype equals the
declared one; a non-nullable column has no null; a check holds for every non-null value
(``ignore_na``, pandera's default: a null passes a check, the nullable check judges it);
``str_matches`` matches at the start of the value; strict: no column beyond the model's,
and every column of the model present; ``unique``: no two rows share the key.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import polars as pl

# built-in check name -> the polars expression it evaluates (pandera's polars builtin_checks)
_COMPARISONS = {
    "greater_than": lambda col, s: col > s["min_value"],
    "greater_than_or_equal_to": lambda col, s: col >= s["min_value"],
    "less_than": lambda col, s: col < s["max_value"],
    "less_than_or_equal_to": lambda col, s: col <= s["max_value"],
}
_PLAIN_DTYPES = (pl.Int64, pl.Int32, pl.String, pl.Boolean)


def proved_valid(model: Any, frame: pl.DataFrame) -> bool:
    """True when one query over ``frame`` proves that ``model.validate(frame)`` passes;
    False when it did not (the caller then validates with pandera)."""
    plan = _plan(model)
    if plan is None:
        return False
    columns, unique = plan
    schema = frame.schema
    if set(schema) != set(columns):
        return False
    if any(schema[name] != dtype for name, (dtype, _, _) in columns.items()):
        return False
    conditions = []
    for name, (_, nullable, checks) in columns.items():
        col = pl.col(name)
        if not nullable:
            conditions.append(col.null_count() == 0)
        # all() skips nulls: a null passes a check (ignore_na)
        conditions.extend(check(col).all() for check in checks)
    if unique:
        conditions.append(pl.struct(unique).is_duplicated().any().not_())
    if not conditions:
        return True
    row = frame.select(pl.all_horizontal(conditions).alias("proved")).item()
    return row is True


@cache
def _plan(model: Any) -> tuple[dict, list[str]] | None:
    """The model's conditions (per column: polars dtype, nullable, the checks as functions
    of the column's expression; the unique key), or None when the model has anything
    :func:`proved_valid` does not read."""
    schema = model.to_schema()
    if (
        schema.checks
        or schema.coerce
        or schema.strict is not True
        or schema.add_missing_columns
        or schema.drop_invalid_rows
        or schema.unique_column_names
    ):
        return None
    columns = {}
    for name, column in schema.columns.items():
        dtype = getattr(column.dtype, "type", None)
        if (
            column.regex
            or column.coerce
            or column.unique
            or not column.required
            or column.drop_invalid_rows
            or column.default is not None
            or not any(dtype == plain for plain in _PLAIN_DTYPES)
        ):
            return None
        checks = []
        for check in column.checks:
            made = _check(check)
            if made is None:
                return None
            checks.append(made)
        columns[name] = (dtype, column.nullable, checks)
    unique = list(schema.unique or [])
    if any(name not in columns for name in unique):
        return None
    return columns, unique


def _check(check: Any):
    """The check as a function of a column expression, or None when it is not one of the
    built-in checks read here (pandera's own function, with its defaults)."""
    from pandera.api.checks import Check

    name = check.name
    if (
        name not in (*_COMPARISONS, "str_matches")
        or not Check.is_builtin_check(name)
        # pandera's built-in function (the model's schema holds a copy of it)
        or type(check._check_fn) is not type(Check.get_builtin_check_fn(name))
        or getattr(check._check_fn, "__name__", None) != name
        or not check.ignore_na
        or check.element_wise
        or check.groupby is not None
    ):
        return None
    kwargs = dict(check._check_kwargs)
    if name in _COMPARISONS:
        compare = _COMPARISONS[name]
        return lambda col: compare(col, kwargs)
    pattern = kwargs["pattern"]
    pattern = getattr(pattern, "pattern", pattern)
    anchored = pattern if pattern.startswith("^") else f"^{pattern}"
    # on the column's distinct values: every value matches when each distinct one does
    # (a column of MeSH UIs repeats a few thousand values over 260,000 rows)
    return lambda col: col.unique().str.contains(anchored)
