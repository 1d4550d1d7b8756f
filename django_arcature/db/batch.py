"""One named transition's SET clause for many rows: what the batched completions share.

PostgreSQL and SQLite join a ``VALUES`` list, MySQL/MariaDB a derived table;
both split a batch's fields the same way, here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .base import CompletionRow, driver_class
from .claimed import as_uuid
from .clock import DatabaseNow, now_sql


@dataclass
class BatchParts:
    """Shared values once, varying ones per row."""

    assignments: list[str]
    shared_params: list[Any]
    row_columns: list[str]
    row_placeholders: list[str]
    row_params: list[list[Any]]

    def flat_row_params(self) -> list[Any]:
        return [value for row in self.row_params for value in row]


def batch_parts(
    connection: BaseDatabaseWrapper,
    model: Any,
    rows: Sequence[CompletionRow],
    *,
    typed_placeholders: bool = False,
    status_column: bool = False,
) -> BatchParts:
    """Split a batch's fields into those every row shares and those that vary by row.

    The varying ones (result, attempt log, retry time…) travel in a derived table
    joined on id and token; ``DatabaseNow`` values become the database's clock.
    ``typed_placeholders`` casts each placeholder to its column type (PostgreSQL
    cannot infer the types of a ``VALUES`` list's columns). ``status_column`` adds
    the fence's ``'running'`` to every row, as ``arcature_status``.
    """
    vendor = connection.vendor
    qn = connection.ops.quote_name
    meta = model._meta

    def cast(field: Any) -> str:
        return f"::{field.db_type(connection)}" if typed_placeholders else ""

    pk_field = meta.get_field("id")
    token_field = meta.get_field("claim_token")
    parts = BatchParts(
        assignments=[],
        shared_params=[],
        row_columns=["arcature_id", "arcature_token"],
        row_placeholders=[f"%s{cast(pk_field)}", f"%s{cast(token_field)}"],
        row_params=[
            [
                pk_field.get_db_prep_save(job_id, connection),
                token_field.get_db_prep_save(token, connection),
            ]
            for job_id, token, _ in rows
        ],
    )
    if status_column:
        parts.row_columns.append("arcature_status")
        parts.row_placeholders.append(f"%s{cast(meta.get_field('status'))}")
        for params in parts.row_params:
            params.append("running")
    for name in rows[0][2]:
        field = meta.get_field(name)
        first = rows[0][2][name]
        if isinstance(first, DatabaseNow) and all(_same_value(row[2][name], first) for row in rows):
            parts.assignments.append(f"{qn(field.column)} = {now_sql(vendor, first.seconds)}")
        elif isinstance(first, DatabaseNow):
            # Each row its own offset from the database's now (retries with their backoff).
            parts.row_columns.append(f"v_{name}")
            parts.row_placeholders.append("%s::double precision" if typed_placeholders else "%s")
            column = f"v.{qn('v_' + name)}"
            parts.assignments.append(
                f"{qn(field.column)} = {driver_class(vendor).now_plus_sql(column)}"
            )
            for params, (_, _, fields) in zip(parts.row_params, rows, strict=True):
                params.append(_seconds_of(fields[name]))
        elif all(_same_value(row[2][name], first) for row in rows):
            parts.assignments.append(f"{qn(field.column)} = %s{cast(field)}")
            parts.shared_params.append(field.get_db_prep_save(first, connection))
        else:
            parts.row_columns.append(f"v_{name}")
            parts.row_placeholders.append(f"%s{cast(field)}")
            parts.assignments.append(f"{qn(field.column)} = v.{qn('v_' + name)}")
            for params, (_, _, fields) in zip(parts.row_params, rows, strict=True):
                params.append(field.get_db_prep_save(fields[name], connection))
    return parts


def _seconds_of(value: Any) -> float:
    if not isinstance(value, DatabaseNow):
        raise TypeError(f"a batch mixes the database's clock with a fixed time: {value!r}")
    return value.seconds


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, DatabaseNow) or isinstance(b, DatabaseNow):
        return isinstance(a, DatabaseNow) and isinstance(b, DatabaseNow) and a.seconds == b.seconds
    return type(a) is type(b) and a == b


def update_from_values(
    connection: BaseDatabaseWrapper, model: Any, rows: Sequence[CompletionRow], *, typed: bool
) -> set[uuid.UUID]:
    """``UPDATE … FROM (VALUES …) … RETURNING id``: PostgreSQL's and SQLite's batched write.

    The fence's status travels in each row and is compared as a join condition.
    Compared with the constant ``'running'``, it let PostgreSQL reach the rows through
    a status index, walking every running row, whenever statistics taken while
    nothing ran called that cheap; joined, the rows are found by primary key. The
    list is a MATERIALIZED CTE because a one-row ``VALUES`` would otherwise be
    folded back into constants.
    """
    qn = connection.ops.quote_name
    parts = batch_parts(connection, model, rows, typed_placeholders=typed, status_column=True)
    values_sql = ", ".join([f"({', '.join(parts.row_placeholders)})"] * len(rows))
    table = qn(model._meta.db_table)
    columns = ", ".join(qn(c) for c in parts.row_columns)
    sql = (
        f"WITH v ({columns}) AS MATERIALIZED (VALUES {values_sql}) "
        f"UPDATE {table} SET {', '.join(parts.assignments)} FROM v "
        f"WHERE {table}.{qn('id')} = v.{qn('arcature_id')} "
        f"AND {table}.{qn('claim_token')} = v.{qn('arcature_token')} "
        f"AND {table}.{qn('status')} = v.{qn('arcature_status')} "
        f"RETURNING {table}.{qn('id')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*parts.flat_row_params(), *parts.shared_params])
        return {as_uuid(row[0]) for row in cursor.fetchall()}
